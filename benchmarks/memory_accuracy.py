"""The analytic estimator against the fake-tensor probe on real-size models (1B-47B parameters).

Every case is probed on the CPU with fake tensors (``frenzy_core.memory.probe.probe_memory``: Hugging Face
model, single process, data-parallel degree 1, two optimizer steps) and estimated with
``frenzy_core.memory.estimate_memory`` (its peak less the ``workspaces`` term: cuBLAS workspaces are not
tensors in a CPU run). About a minute of CPU; no GPU, no model weights in memory.

Run: ``python benchmarks/memory_accuracy.py [--quick] [--markdown] [--probe-cache FILE]`` (``--quick``: the
first three cases; ``--probe-cache``: reuse measurements saved in FILE by an earlier run, and save new ones,
so that only the estimator is re-run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frenzy_core.config import ModelConfig, ParallelConfig, TrainingConfig

GIB = 2**30


@dataclass(frozen=True)
class Case:
    """One real-size model and recipe."""

    preset: str
    training: TrainingConfig

    @property
    def label(self) -> str:
        t = self.training
        parts = [t.precision.value, t.attention.value, f"s{t.seq_len}", f"b{t.micro_batch_size}"]
        if t.recompute.value != "none":
            parts.append(f"rc-{t.recompute.value}")
        if t.optimizer_impl.value != "foreach":
            parts.append(t.optimizer_impl.value)
        return " ".join(parts)


def _t(**changes: object) -> TrainingConfig:
    base = {"micro_batch_size": 1, "optimizer": "adamw", "optimizer_impl": "foreach", "attention": "sdpa"}
    return TrainingConfig.model_validate({**base, **changes})


CASES: tuple[Case, ...] = (
    Case("qwen2.5-1.5b", _t(seq_len=2048, precision="bf16")),
    Case("qwen2.5-1.5b", _t(seq_len=2048, precision="amp-bf16")),
    Case("gemma-2b", _t(seq_len=2048, precision="bf16", micro_batch_size=2)),
    Case(
        "gemma-2b",
        _t(seq_len=2048, precision="amp-bf16", micro_batch_size=4, recompute="full", optimizer_impl="fused"),
    ),
    Case("pythia-1.4b", _t(seq_len=2048, precision="amp-bf16", micro_batch_size=4)),
    Case("opt-1.3b", _t(seq_len=2048, precision="bf16", attention="eager")),
    Case("gpt2-xl", _t(seq_len=1024, precision="amp-bf16", micro_batch_size=4, attention="eager")),
    Case("phi-3-mini-4k", _t(seq_len=4096, precision="bf16", micro_batch_size=4, recompute="full")),
    Case("llama-3.1-8b", _t(seq_len=4096, precision="bf16")),
    Case("llama-3.1-8b", _t(seq_len=4096, precision="bf16", recompute="full", optimizer_impl="fused")),
    Case(
        "llama-3.1-8b",
        _t(seq_len=4096, precision="amp-bf16", micro_batch_size=4, recompute="full", optimizer_impl="fused"),
    ),
    Case("mistral-7b", _t(seq_len=4096, precision="bf16", micro_batch_size=4, recompute="full")),
    Case("qwen2.5-7b", _t(seq_len=4096, precision="amp-bf16", micro_batch_size=2, optimizer_impl="fused")),
    Case(
        "mixtral-8x7b",
        _t(seq_len=4096, precision="bf16", micro_batch_size=4, recompute="full", optimizer_impl="fused"),
    ),
)
"""Real-size cases: 1-2B at 1024-2048 tokens, 4-47B at 4096, pure bf16 and amp-bf16, with and without recompute."""


@dataclass(frozen=True)
class Row:
    case: Case
    probe_bytes: int
    estimate_bytes: int | None
    probe_s: float
    note: str

    @property
    def error(self) -> float | None:
        if self.estimate_bytes is None:
            return None
        return (self.estimate_bytes - self.probe_bytes) / self.probe_bytes


def measure(case: Case, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The probe's peak, phase and run time for ``case`` (from ``cache`` when there)."""
    from frenzy_core.memory.probe import probe_memory

    key = f"{case.preset} {case.label}"
    if key not in cache:
        start = time.perf_counter()
        result = probe_memory(ModelConfig.preset(case.preset), case.training)
        cache[key] = {
            "peak_bytes": result.peak_bytes,
            "peak_phase": result.peak_phase.value,
            "peak_step": result.peak_step,
            "probe_s": time.perf_counter() - start,
        }
    return cache[key]


def run_case(case: Case, cache: dict[str, dict[str, Any]]) -> Row:
    """Probe and estimate one case; an estimator failure is reported, not raised."""
    from frenzy_core.memory import estimate_memory

    measured = measure(case, cache)
    note = f"peak in {measured['peak_phase']} (step {measured['peak_step']})"
    try:
        result = estimate_memory(ModelConfig.preset(case.preset), case.training, ParallelConfig())
        # The probe sees tensors only; cuBLAS workspaces exist on a GPU, not in a CPU run.
        estimate: int | None = result.peak_bytes - result.breakdown.get("workspaces", 0)
    except Exception as exc:  # noqa: BLE001 - the table shows what failed
        estimate, note = None, f"estimator failed: {type(exc).__name__}: {exc}"[:120]
    return Row(case, int(measured["peak_bytes"]), estimate, float(measured["probe_s"]), note)


def format_table(rows: list[Row], markdown: bool) -> str:
    header = ["model", "config", "probe GiB", "estimate GiB", "error %", "probe s", "note"]
    lines = []
    for r in rows:
        est = "-" if r.estimate_bytes is None else f"{r.estimate_bytes / GIB:.2f}"
        err = "-" if r.error is None else f"{100 * r.error:+.1f}"
        lines.append(
            [r.case.preset, r.case.label, f"{r.probe_bytes / GIB:.2f}", est, err, f"{r.probe_s:.0f}", r.note]
        )
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def summary(rows: list[Row]) -> str:
    errors = [r.error for r in rows if r.error is not None]
    if not errors:
        return "no estimates"
    worst = max(rows, key=lambda r: abs(r.error) if r.error is not None else -1.0)
    return (
        f"{len(errors)}/{len(rows)} cases estimated; mean |error| "
        f"{100 * statistics.fmean(abs(e) for e in errors):.1f} %, worst {worst.case.preset} "
        f"{worst.case.label}: {100 * (worst.error or 0.0):+.1f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the first three cases")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--probe-cache", type=Path, help="JSON file of saved probe measurements to reuse and extend"
    )
    args = parser.parse_args()
    cases = CASES[:3] if args.quick else CASES
    cache: dict[str, dict[str, Any]] = {}
    if args.probe_cache is not None and args.probe_cache.exists():
        cache = json.loads(args.probe_cache.read_text(encoding="utf-8"))
    rows = []
    for case in cases:
        rows.append(run_case(case, cache))
        print(f"done {case.preset} {case.label} (probe {rows[-1].probe_s:.0f} s)", flush=True)
        if args.probe_cache is not None:
            args.probe_cache.write_text(json.dumps(cache, indent=1), encoding="utf-8")
    print(format_table(rows, args.markdown))
    print(summary(rows))


if __name__ == "__main__":
    main()
