"""Real training steps on a CUDA device against the estimator and the CPU probe, for grid cases (``memory_grid``).

Each case builds its Hugging Face class from the config on ``cuda`` (real tensors, no weights loaded), runs the
case's loop for two optimizer steps exactly as the probe does (``frenzy_core.memory.probe_loops``), and reads
``torch.cuda.max_memory_allocated()`` after ``torch.cuda.reset_peak_memory_stats()`` (less what was allocated
before the model was built). That is compared with ``estimate_memory(...).peak_bytes`` (which counts cuBLAS
workspaces, as the GPU counter does) and with the CPU probe plus the estimator's workspace term.

Run: ``python benchmarks/gpu_memory_check.py [--cases N] [--only TEXT] [--output FILE] [--cpu-probe-only]``.
Without a CUDA device it says so and stops (exit status 2); ``--cpu-probe-only`` then runs the probe and the
estimator alone, so the table can be checked on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_accuracy import estimate, measure  # noqa: E402
from memory_grid import CASES, QUICK, Case  # noqa: E402

GIB = 2**30
NO_CUDA = "No CUDA device found (torch.cuda.is_available() is False): the GPU side of this check cannot run."

GPU_CASES: tuple[str, ...] = (
    *QUICK,
    "qwen3-30b-a3b L2 bf16 sdpa s4096 b1 framework",
    "gemma-2-2b L2 bf16 eager s4096 b1 framework",
    "deepseek-v2-lite L2 bf16 sdpa s4096 b1 framework",
)
"""Grid cases that fit one 80 GB GPU: dense and MoE, both loops, fp32 / bf16 / amp, eager / sdpa, MLA."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=len(GPU_CASES), help="run the first N GPU cases")
    parser.add_argument("--only", default="", help="only cases whose name contains this text")
    parser.add_argument("--output", type=Path, help="also write the Markdown table to this file")
    parser.add_argument("--cpu-probe-only", action="store_true",
                        help="without a CUDA device, run the CPU probe and the estimator alone")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases must be at least 1, got {args.cases}")
    return args


def selected_cases(args: argparse.Namespace) -> list[Case]:
    """The GPU cases ``--cases`` and ``--only`` leave, in order."""
    by_key = {c.key: c for c in CASES}
    return [by_key[k] for k in GPU_CASES[: args.cases] if args.only in k]


def measure_gpu(case: Case, steps: int = 2) -> dict[str, Any]:
    """Peak ``max_memory_allocated`` of ``steps`` real optimizer steps of ``case`` on the current CUDA device."""
    import torch

    from frenzy_core.config.layout import num_microbatches
    from frenzy_core.config.parallel import ParallelConfig
    from frenzy_core.memory.hf_models import hf_training_setup
    from frenzy_core.memory.probe_loops import StepContext, resolve_loop

    setup = hf_training_setup(case.hf_config(), case.training)
    step_fn, _ = resolve_loop(case.loop)
    microbatches = num_microbatches(case.training, ParallelConfig())
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.device("cuda"):
        module = setup.module_factory()
    module.train()
    optimizer = setup.optimizer_factory(module.parameters())
    dtype = setup.autocast_dtype
    state: dict[str, Any] = {}
    for step in range(steps):
        for mb in range(microbatches):
            with torch.device("cuda"):
                batch = setup.batch_factory()
            ctx = StepContext(step=step, microbatch=mb, microbatches=microbatches,
                              loss=setup.loss_fn or (lambda output: output.loss),
                              autocast=(lambda: torch.autocast("cuda", dtype=dtype)) if dtype else contextlib.nullcontext,
                              mark=lambda phase: None, state=state)
            step_fn(module, batch, optimizer, ctx)
            del batch
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del module, optimizer, state
    gc.collect()
    torch.cuda.empty_cache()
    return {"peak_bytes": peak, "device": torch.cuda.get_device_name()}


def _pct(value: float | None, reference: float | None) -> str:
    return "-" if value is None or not reference else f"{100 * (value - reference) / reference:+.1f}"


def row(case: Case, gpu: dict[str, Any] | None, cache: dict[str, dict[str, Any]]) -> list[str]:
    """One table row: GPU, estimate (with workspaces) and probe (plus the estimator's workspaces)."""
    probe = measure(case, cache)["peak_bytes"]
    try:
        est = estimate(case)
        full, workspaces, note = est["tensor_bytes"] + est["workspace_bytes"], est["workspace_bytes"], ""
    except Exception as exc:  # noqa: BLE001 - the table shows what failed
        full, workspaces, note = None, 0, f"estimator failed: {type(exc).__name__}"
    measured = None if gpu is None else gpu["peak_bytes"]
    gib = lambda b: "-" if b is None else f"{b / GIB:.2f}"  # noqa: E731
    return [case.key, gib(measured), gib(full), _pct(full, measured), gib(probe + workspaces),
            _pct(probe + workspaces, measured), note]


_HEADER = ["case", "GPU GiB", "estimate GiB", "estimate vs GPU %", "probe + workspaces GiB", "probe vs GPU %", "note"]


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "|".join("---" for _ in _HEADER) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    has_cuda = torch.cuda.is_available()
    if not has_cuda:
        print(NO_CUDA)
        if not args.cpu_probe_only:
            print("Pass --cpu-probe-only to run the CPU probe and the estimator alone.")
            return 2
    cache: dict[str, dict[str, Any]] = {}
    rows, device = [], "none (CPU probe only)"
    for case in selected_cases(args):
        gpu = measure_gpu(case) if has_cuda else None
        device = gpu["device"] if gpu else device
        rows.append(row(case, gpu, cache))
        print(f"done {case.key}", flush=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = (f"GPU: {device}; {when}; torch {torch.__version__}; {platform.machine()}; "
             f"{len(rows)} cases, two optimizer steps each")
    text = f"{title}\n\n{markdown(rows)}"
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
