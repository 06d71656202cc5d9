"""The analytic estimator against the fake-tensor probe on real Hugging Face classes (``memory_grid.CASES``).

Every case builds the class its published config names (``transformers.<Family>Config(...)``, real widths and
vocabularies, fewer layers), probes two optimizer steps on the CPU with fake tensors
(``frenzy_core.memory.probe.probe_memory``: CUDA kernels' saved tensors, CUDA autocast's op lists, the case's
training loop) and estimates it with ``estimate_memory(ModelConfig.from_hf_config(config), ...)`` (its peak less
the ``workspaces`` term: cuBLAS workspaces are not tensors in a CPU run). For every case off by more than 1 % the
probe runs again to list the tensors alive at its peak, and the table says which categories differ.

Run: ``python benchmarks/memory_accuracy.py [--quick] [--markdown] [--probe-cache FILE] [--only TEXT]``
(``--quick``: the CI subset; ``--probe-cache``: reuse measurements saved in FILE by an earlier run and save new
ones, so that only the estimator is re-run; ``--only``: cases whose name contains TEXT).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_grid import CASES, QUICK, Case  # noqa: E402

from frenzy_core.config import ModelConfig, ParallelConfig, TrainingConfig  # noqa: E402

GIB = 2**30
MIB = 2**20
ATTRIBUTE_ABOVE = 0.01  # cases off by more than 1 % get their peak's tensors listed
_MODEL_STATES = ("Parameter", "Buffer", "Gradient", "Optstate")


@dataclass(frozen=True)
class Row:
    case: Case
    measured: dict[str, Any]
    estimate: dict[str, Any] | None
    note: str

    @property
    def error(self) -> float | None:
        if self.estimate is None:
            return None
        return (self.estimate["tensor_bytes"] - self.measured["peak_bytes"]) / self.measured["peak_bytes"]


def estimate_training(case: Case) -> TrainingConfig:
    """The case's training config, with the loop as ``keep_outputs`` once TrainingConfig has that field."""
    if "keep_outputs" in TrainingConfig.model_fields:
        return case.training.model_copy(update={"keep_outputs": case.loop == "plain"})
    return case.training


def measure(case: Case, cache: dict[str, dict[str, Any]], attribute: bool = False) -> dict[str, Any]:
    """The probe's peak, phase, breakdown and run time for ``case`` (from ``cache`` when there)."""
    from frenzy_core.memory.probe import probe_memory

    entry = cache.get(case.key)
    if entry is None or (attribute and "peak_tensors" not in entry):
        start = time.perf_counter()
        result = probe_memory(case.hf_config(), case.training, loop=case.loop, attribute_peak=attribute)
        entry = {
            "peak_bytes": result.peak_bytes,
            "peak_phase": result.peak_phase.value,
            "peak_step": result.peak_step,
            "breakdown": result.breakdown,
            "notes": result.notes,
            "probe_s": time.perf_counter() - start,
        }
        if attribute:
            entry["peak_tensors"] = [t.model_dump(mode="json") for t in result.peak_tensors]
        cache[case.key] = entry
    return entry


def estimate(case: Case) -> dict[str, Any]:
    """The estimator's tensor bytes (peak less workspaces), phase and breakdown for ``case``."""
    from frenzy_core.memory import estimate_memory

    result = estimate_memory(ModelConfig.from_hf_config(case.hf_config()), estimate_training(case), ParallelConfig())
    breakdown = {k: v for k, v in result.breakdown.items() if v and k != "workspaces"}
    workspaces = result.breakdown.get("workspaces", 0)
    return {"tensor_bytes": result.peak_bytes - workspaces, "workspace_bytes": workspaces,
            "peak_phase": str(getattr(result, "peak_phase", "")), "breakdown": breakdown}


def run_case(case: Case, cache: dict[str, dict[str, Any]], attribute: bool = True) -> Row:
    """Probe and estimate one case; an estimator failure is reported, not raised."""
    measured = measure(case, cache)
    note = f"peak in {measured['peak_phase']} (step {measured['peak_step']})"
    try:
        est: dict[str, Any] | None = estimate(case)
    except Exception as exc:  # noqa: BLE001 - the table shows what failed
        est, note = None, f"estimator failed: {type(exc).__name__}: {exc}"[:160]
    row = Row(case, measured, est, note)
    if attribute and row.error is not None and abs(row.error) > ATTRIBUTE_ABOVE:
        row = Row(case, measure(case, cache, attribute=True), est, note)
    return row


def attribution(row: Row, top: int = 10) -> str:
    """Where the estimate differs at the measured peak: category deltas, then the largest live tensors."""
    assert row.estimate is not None
    probe, est = row.measured["breakdown"], row.estimate["breakdown"]
    deltas = {k: est.get(k, 0) - probe.get(k, 0) for k in sorted(probe.keys() | est.keys())}
    shown = ", ".join(f"{k} {v / MIB:+.0f} MiB" for k, v in deltas.items() if abs(v) >= MIB)
    lines = [f"estimate - probe by category: {shown or 'all within 1 MiB'}; probe peak in {row.measured['peak_phase']}"
             f" (step {row.measured['peak_step']}), estimate peak in {row.estimate['peak_phase'] or '?'}"]
    tensors = [t for t in row.measured.get("peak_tensors", []) if t["category"] not in _MODEL_STATES][:top]
    for t in tensors:
        lines.append(f"{t['bytes'] / MIB:.0f} MiB: {t['count']} x {t['dtype']} {tuple(t['shape'])} from {t['op']} "
                     f"in {t['module'] or '(no module)'} ({t['category']}, made in {t['made_in']})")
    return "\n".join(lines)


def format_table(rows: list[Row], markdown: bool) -> str:
    header = ["model", "layers", "config", "loop", "probe GiB", "estimate GiB", "error %", "probe s", "note"]
    lines = []
    for r in rows:
        est = "-" if r.estimate is None else f"{r.estimate['tensor_bytes'] / GIB:.2f}"
        err = "-" if r.error is None else f"{100 * r.error:+.1f}"
        lines.append([r.case.model, str(r.case.layers), r.case.label, r.case.loop,
                      f"{r.measured['peak_bytes'] / GIB:.2f}", est, err, f"{r.measured['probe_s']:.0f}", r.note])
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def _stats(errors: list[float]) -> str:
    if not errors:
        return "no estimates"
    worst = max(errors, key=abs)
    return f"mean |error| {100 * statistics.fmean(abs(e) for e in errors):.1f} %, worst {100 * worst:+.1f} %"


def family_table(rows: list[Row], markdown: bool) -> str:
    """Per family: cases, then the error over framework-loop and plain-loop cases separately."""
    families: dict[str, list[Row]] = {}
    for r in rows:
        families.setdefault(r.case.hf_config()["model_type"], []).append(r)
    header = ["family", "cases", "estimated", "framework loop", "plain loop"]
    lines = []
    for family, members in sorted(families.items()):
        by_loop = {loop: [r.error for r in members if r.case.loop == loop and r.error is not None]
                   for loop in ("framework", "plain")}
        estimated = sum(r.error is not None for r in members)
        lines.append([family, str(len(members)), str(estimated), _stats(by_loop["framework"]), _stats(by_loop["plain"])])
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
                         + ["| " + " | ".join(line) + " |" for line in lines])
    return "\n".join("  ".join(c.ljust(18) for c in line) for line in [header, *lines])


def summary(rows: list[Row]) -> str:
    parts = []
    for loop in ("framework", "plain"):
        errors = [r.error for r in rows if r.case.loop == loop and r.error is not None]
        under = sum(e < -0.02 for e in errors)
        parts.append(f"{loop} loop: {len(errors)} estimated, {_stats(errors)}, {under} more than 2 % under")
    families = {r.case.hf_config()["model_type"] for r in rows}
    return f"{len(rows)} cases over {len(families)} families; " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the CI subset (memory_grid.QUICK)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--probe-cache", type=Path, help="JSON file of saved probe measurements to reuse and extend")
    parser.add_argument("--only", default="", help="only cases whose name contains this text")
    args = parser.parse_args()
    cases = [c for c in CASES if (not args.quick or c.key in QUICK) and args.only in c.key]
    cache: dict[str, dict[str, Any]] = {}
    if args.probe_cache is not None and args.probe_cache.exists():
        cache = json.loads(args.probe_cache.read_text(encoding="utf-8"))
    rows = []
    for case in cases:
        rows.append(run_case(case, cache))
        print(f"done {case.key} (probe {rows[-1].measured['probe_s']:.0f} s)", flush=True)
        if args.probe_cache is not None:
            args.probe_cache.write_text(json.dumps(cache, indent=1), encoding="utf-8")
    print(format_table(rows, args.markdown))
    print()
    print(family_table(rows, args.markdown))
    print()
    print(summary(rows))
    for r in rows:
        if r.error is not None and abs(r.error) > ATTRIBUTE_ABOVE:
            print(f"\n{r.case.key}: {100 * r.error:+.1f} %\n{attribution(r)}")


if __name__ == "__main__":
    main()
