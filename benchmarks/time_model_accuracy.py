"""Accuracy of the iteration-time model against 68 published measured runs, with the shipped defaults and
leave-one-source-out, per source and per regime, and on measured fp8/bf16 and async-TP pairs.

Usage: python benchmarks/time_model_accuracy.py [--reference DIR] [--write docs/benchmarks.md]

Reads ``throughput_megatron.csv`` and ``throughput_public.json`` from ``../shared/reference`` (skips cleanly when
absent) and torchtitan's async-TP pairs from ``tests/fixtures/timing/``. Prints a markdown section and, with
--write, replaces the "Time model vs published throughput" section of the file.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml

from frenzy_core import ModelConfig, ParallelConfig, TrainingConfig, get_gpu_spec
from frenzy_core.timing import default_time_model_params, estimate_iteration_time
from frenzy_core.timing.calibrate import Measurement
from frenzy_core.timing.public_runs import PUBLIC_ASSUMPTIONS
from frenzy_core.timing.published import ASSUMPTIONS
from frenzy_core.timing.validation import (
    ReferenceRow,
    default_errors,
    leave_one_source_out,
    median_abs,
    reference_rows,
    regimes,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference"
ASYNC_TP = ROOT / "tests" / "fixtures" / "timing" / "torchtitan_async_tp.yaml"
HEADING = "## Time model vs published throughput"
SOURCES = {
    "sc21": "Narayanan et al. SC21 Table 1 (Megatron-LM, A100, 2021)",
    "megatron-readme": "Megatron-LM README model table (H100, 2025)",
    "llmfoundry": "MosaicML llm-foundry benchmarks (Composer/FSDP, A100 40/80 GB, H100, bf16 and fp8)",
    "dgxc": "NVIDIA DGX Cloud NeMo benchmarks (H100, bf16 and fp8)",
    "mbridge25.11": "NVIDIA Megatron-Bridge 25.11 performance summary (B200, H100, fp8)",
}


def _predict(m: Measurement) -> float:
    return estimate_iteration_time(m.model, m.training, m.parallel, m.gpu,
                                   params=default_time_model_params(m.gpu).replace(**m.run_settings)).iteration_s


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _group_table(title: str, keys: list[str], rows: list[ReferenceRow], default: list[float],
                 held: dict[int, float], key_of) -> list[str]:  # type: ignore[no-untyped-def]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        for k in key_of(r):
            groups[k].append(i)
    lines = [f"| {title} | runs | median abs. error, defaults | worst too fast | median abs. error, "
             "leave-one-source-out |", "|---|---|---|---|---|"]
    for k in keys + sorted(set(groups) - set(keys)):
        idx = groups.get(k)
        if not idx:
            continue
        errs = [default[i] for i in idx]
        lines.append(f"| {k} | {len(idx)} | {_pct(median_abs(errs))} | {_pct(min(min(errs), 0.0))} | "
                     f"{_pct(median_abs([held[i] for i in idx]))} |")
    return lines


def _fp8_pairs(rows: list[ReferenceRow]) -> list[str]:
    by = {r.measurement.label: r.measurement for r in rows}
    pairs = [(k, k.replace("bf16-mixed", "fp8-mixed")) for k in by if k.startswith("dgxc") and "bf16" in k]
    pairs.append(("llmfoundry|h100-sxm|H100|bf16|mpt-3b|s2048|g16", "llmfoundry|h100-sxm|H100|fp8|mpt-3b|s2048|g8"))
    lines = ["| pair (bf16 -> fp8) | measured speed-up | predicted | error |", "|---|---|---|---|"]
    for b, f in pairs:
        mb, mf = by[b], by[f]

        def per_gpu(m: Measurement, seconds: float) -> float:
            return (m.training.global_batch_size or 1) * m.training.seq_len / (seconds * m.parallel.world_size)

        measured = per_gpu(mf, mf.measured_iteration_s()) / per_gpu(mb, mb.measured_iteration_s())
        predicted = per_gpu(mf, _predict(mf)) / per_gpu(mb, _predict(mb))
        lines.append(f"| {b.split('|')[0]} {b.split('|')[2] if b.startswith('dgxc') else 'MPT-3B (per GPU)'} | "
                     f"{measured:.3f} | {predicted:.3f} | {100 * (predicted / measured - 1):+.1f}% |")
    return lines


def _async_tp_pairs() -> list[str]:
    data = yaml.safe_load(ASYNC_TP.read_text(encoding="utf-8"))
    gpu = get_gpu_spec(data["gpu"]["base"]).replace(
        memory_bandwidth_bytes_per_s=data["gpu"]["memory_bandwidth_bytes_per_s"])
    params = default_time_model_params(gpu)
    recipes = {"bf16": ("bf16-mixed", "delayed"), "float8-tensorwise": ("fp8-mixed", "current"),
               "float8-rowwise": ("fp8-mixed", "rowwise")}
    lines = ["| torchtitan run | quantization | measured async-TP speed-up | predicted | error |", "|---|---|---|---|---|"]
    for run in data["runs"]:
        model = ModelConfig.preset(run["model"])
        lay = dict(run["layout"])
        parallel = ParallelConfig(dp=lay.pop("dp"), tp=lay.pop("tp"))
        for quant, tps in run["quantization"].items():
            precision, recipe = recipes[quant]
            training = TrainingConfig(**lay, global_batch_size=lay["micro_batch_size"] * parallel.dp,
                                      precision=precision, fp8_recipe=recipe, zero_stage=3, sequence_parallel=True,
                                      compile=True)
            vanilla, overlapped = (estimate_iteration_time(model, training, parallel, gpu, params=params.replace(
                tensor_parallel_overlap=o)).iteration_s for o in (0.0, 1.0))
            measured, predicted = tps["async"] / tps["vanilla"], vanilla / overlapped
            lines.append(f"| {run['model']} on {parallel.world_size} GPUs | {quant} | {measured:.3f} | "
                         f"{predicted:.3f} | {100 * (predicted / measured - 1):+.1f}% |")
    return lines


def report(reference: Path) -> str:
    """The markdown section."""
    started = time.perf_counter()
    rows = reference_rows(reference)
    default = default_errors(rows)
    held = leave_one_source_out(rows)
    regime_keys = ["fsdp", "megatron-tp-pp", "fp8", "long-context"]
    lines = [
        HEADING, "",
        (f"Command: `python benchmarks/time_model_accuracy.py --write docs/benchmarks.md`; machine: "
         f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}); "
         f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Data: `../shared/reference/` "
         f"({len(rows)} runs: `throughput_megatron.csv` and `throughput_public.json`). Error = (modelled - measured) "
         "/ measured seconds per step (negative: the model is too fast). Defaults: `data/time_model.yaml`, with "
         "each run's stated overlaps (`run_settings`); no parameter was fitted to these rows. Leave-one-source-out: "
         "each GPU type's efficiencies calibrated (`calibrate`, the default five) on the other sources' runs of "
         "that type, the held-out source predicted with them (defaults for a GPU type no other source has)."), "",
        f"**All {len(rows)} runs: median |error| {_pct(median_abs(default))} with the shipped defaults (worst too "
        f"fast {_pct(min(default))}, {sum(e < -0.3 for e in default)} runs more than 30% too fast); "
        f"leave-one-source-out {_pct(median_abs(list(held.values())))}.**", "",
    ]
    lines += _group_table("source", list(SOURCES), rows, default, held, lambda r: [r.source]) + [""]
    lines += _group_table("regime", regime_keys, rows, default, held, lambda r: regimes(r.measurement)) + [""]
    lines += ["Sources: " + "; ".join(f"`{k}`: {v}" for k, v in SOURCES.items()) + ".", ""]
    lines += ["Measured pairs (same layout, one setting changed):", ""] + _fp8_pairs(rows) + [""]
    lines += _async_tp_pairs() + [
        "", ("torchtitan's pairs: `tests/fixtures/timing/torchtitan_async_tp.yaml` (docs/async_tp.md, H100 96 GB at "
             "500 W). Rowwise fp8 gains least because torch's async-TP pass fuses only its GEMM -> reduce-scatter "
             "pairs, not all-gather -> GEMM (pytorch/pytorch#149990), as the model does."), "",
        "| run | GPU | layout | measured s/step | defaults | leave-one-source-out |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        m = r.measurement
        p = m.parallel
        layout = f"dp{p.dp} tp{p.tp} pp{p.pp}" + (f" vpp{p.vpp}" if p.vpp > 1 else "") + (
            f" cp{p.cp}" if p.cp > 1 else "") + f" z{m.training.effective_zero_stage} mb{m.training.micro_batch_size}"
        lines.append(f"| {m.label} | {m.gpu.id} | {layout} | {m.measured_iteration_s():.3f} | "
                     f"{100 * default[i]:+.1f}% | {100 * held[i]:+.1f}% |")
    lines += ["", "Assumptions where the sources are silent (`frenzy_core.timing.published.ASSUMPTIONS`, "
                  "`frenzy_core.timing.public_runs.PUBLIC_ASSUMPTIONS`):", ""]
    lines += [f"- {a}" for a in (*ASSUMPTIONS, *PUBLIC_ASSUMPTIONS)]
    lines += ["", f"(Report computed in {time.perf_counter() - started:.0f} s.)", ""]
    return "\n".join(lines)


def write_section(path: Path, section: str, heading: str = HEADING) -> None:
    """Replace (or append) the section starting at ``heading`` in ``path``, leaving the other sections alone."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument("--write", type=Path, default=None, help="markdown file whose section to replace")
    args = parser.parse_args()
    if not (args.reference / "throughput_public.json").exists():
        print(f"skipped: {args.reference} has no throughput_public.json (reference data lives in ../shared)",
              file=sys.stderr)
        return 0
    section = report(args.reference)
    print(section)
    if args.write is not None:
        write_section(args.write, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
