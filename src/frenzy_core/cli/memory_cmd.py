"""``frenzy memory MODEL``: per-stage memory of one layout, and which GPU types it fits."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from frenzy_core.cli import options as opt
from frenzy_core.cli._common import console, gib, handle_errors, load_model_arg, new_table, plot_target, print_json
from frenzy_core.cli.memory_view import stage_memory_table
from frenzy_core.cli.payloads import memory_payload
from frenzy_core.config import (
    Attention,
    Framework,
    Optimizer,
    OptimizerImpl,
    ParallelConfig,
    PipelineSchedule,
    Precision,
    Recompute,
    TrainingConfig,
)
from frenzy_core.hardware.gpu import usable_bytes
from frenzy_core.memory.result import MemoryEstimate
from frenzy_core.planning.request import DEFAULT_HEADROOM

__all__ = ["gpu_fits", "memory"]


def gpu_fits(estimate: MemoryEstimate, precision: Precision, headroom: float) -> list[dict[str, Any]]:
    """Every catalogue GPU type, smallest first: its memory less ``headroom``, and whether the estimate fits.

    ``runs_recipe`` is False where the GPU lists no peak for the precision's matmul dtype (bf16 on a V100):
    the memory may fit, but the planner will not choose that type for this recipe.
    """
    from frenzy_core.hardware import load_gpu_specs
    from frenzy_core.timing.gpu_rows import peak_dtype

    dtype = peak_dtype(precision)
    out = []
    for spec in sorted(load_gpu_specs().values(), key=lambda s: (s.memory_bytes, s.id)):
        out.append(
            {
                "gpu": spec.id,
                "memory_bytes": spec.memory_bytes,
                "usable_bytes": usable_bytes(spec.memory_bytes, headroom),
                "fits": estimate.fits(spec.memory_bytes, headroom),
                "runs_recipe": dtype in spec.peak_tflops,
            }
        )
    return out


def _fits_table(rows: list[dict[str, Any]], needed_bytes: int, headroom: float, dtype: str) -> Table:
    table = new_table(
        f"GPU types ({headroom:.0%} of each kept free)",
        ["GPU type", "memory GiB", "usable GiB", "fits"],
        left=("fits",),
    )
    for r in rows:
        if r["fits"] and r["runs_recipe"]:
            verdict = "[green]yes[/]"
        elif r["fits"]:
            verdict = f"[yellow]memory only[/] (no {dtype} support)"
        else:
            verdict = f"[red]no[/] (short {gib(needed_bytes - r['usable_bytes'])} GiB)"
        table.add_row(r["gpu"], gib(r["memory_bytes"]), gib(r["usable_bytes"]), verdict)
    return table


@handle_errors
def memory(
    model: opt.Model,
    seq_len: opt.SeqLen[int | None] = None,
    micro_batch: opt.MicroBatch[int] = 1,
    global_batch: opt.GlobalBatch[int | None] = None,
    precision: opt.Precision[Precision] = Precision.BF16_MIXED,
    optimizer: opt.Optimizer[Optimizer] = Optimizer.ADAMW,
    optimizer_impl: opt.OptimizerImpl[OptimizerImpl] = OptimizerImpl.FOREACH,
    zero: opt.Zero[int] = 0,
    distributed_optimizer: opt.DistributedOptimizer = False,
    recompute: opt.Recompute[Recompute] = Recompute.NONE,
    attention: opt.Attention[Attention] = Attention.FLASH,
    sequence_parallel: opt.SequenceParallel = False,
    framework: opt.Framework[Framework] = Framework.TORCH,
    keep_outputs: opt.KeepOutputs = False,
    dp: opt.Dp[int] = 1,
    tp: opt.Tp[int] = 1,
    pp: opt.Pp[int] = 1,
    vpp: opt.Vpp[int] = 1,
    cp: opt.Cp[int] = 1,
    ep: opt.Ep[int] = 1,
    schedule: opt.Schedule[PipelineSchedule | None] = None,
    headroom: opt.Headroom[float] = DEFAULT_HEADROOM,
    json_out: opt.Json = False,
    plot: opt.Plot = None,
) -> None:
    """Estimate per-GPU training memory for MODEL under one layout, and which GPU types it fits.

    Without --seq-len: 2048, or the model's learned position table if shorter; without --global-batch:
    micro-batch x dp. --plot draws each stage's memory by category against the smallest GPU type it fits and
    the largest it does not.

    Examples:

      frenzy memory llama-3.1-8b

      frenzy memory llama-3.1-8b --seq-len 4096 --tp 2 --pp 2 --dp 2 --recompute selective --plot memory.png

      frenzy memory ./config.json --precision amp-bf16 --zero 3 --dp 8 --json
    """
    from frenzy_core.memory import estimate_memory
    from frenzy_core.timing.gpu_rows import peak_dtype

    plot = plot_target(plot)
    cfg = load_model_arg(model)
    seq_len = cfg.default_seq_len() if seq_len is None else seq_len
    training = TrainingConfig(
        seq_len=seq_len,
        micro_batch_size=micro_batch,
        global_batch_size=global_batch,
        precision=precision,
        optimizer=optimizer,
        optimizer_impl=optimizer_impl,
        zero_stage=zero,
        distributed_optimizer=distributed_optimizer,
        recompute=recompute,
        attention=attention,
        sequence_parallel=sequence_parallel,
        framework=framework,
        keep_outputs=keep_outputs,
    )
    layout: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep}
    if schedule is not None:
        layout["schedule"] = schedule
    parallel = ParallelConfig(**layout)
    estimate = estimate_memory(cfg, training, parallel)
    fitting = gpu_fits(estimate, precision, headroom)
    if plot is not None:
        from frenzy_core.plotting import plot_memory

        plot_memory(estimate, plot, gpus=_bracketing_gpus(fitting), headroom=headroom,
                    title=_title(cfg.name or model, training, parallel))
    if json_out:
        print_json(memory_payload(cfg, training, parallel, headroom, estimate, fitting, plot))
        return
    console.print(_title(cfg.name or "model", training, parallel, cfg.num_params()), style="bold", highlight=False)
    console.print(stage_memory_table(estimate, None))
    console.print(
        f"Busiest GPU (stage {estimate.busiest_stage}): {gib(estimate.device_bytes)} GiB on the device, "
        f"of which {gib(estimate.peak_bytes)} GiB live tensors at the {estimate.peak_phase} peak.\n"
    )
    console.print(_fits_table(fitting, estimate.device_bytes, headroom, peak_dtype(precision)))
    fits = [str(g["gpu"]) for g in fitting if g["fits"] and g["runs_recipe"]]
    console.print("Fits on: " + (", ".join(fits) if fits else (
        "no GPU type in the catalogue; try --recompute full, --zero 3 with more --dp, or more --tp/--pp")))
    if plot is not None:
        console.print(f"Saved the memory figure to {plot}", highlight=False)


def _title(name: str, training: TrainingConfig, parallel: ParallelConfig, params: int | None = None) -> str:
    """``llama-3.1-8b (8.03B params): seq 4096, micro-batch 1, bf16-mixed, dp=1 tp=2 pp=4, recompute ...``."""
    size = "" if params is None else f" ({params / 1e9:.2f}B params)"
    return (f"{name}{size}: seq {training.seq_len}, micro-batch {training.micro_batch_size}, "
            f"{training.precision.value}, {parallel.describe()}, recompute {training.recompute.value}, "
            f"zero {training.zero_stage}")


def _bracketing_gpus(fitting: list[dict[str, Any]]) -> list[str]:
    """The smallest GPU type the estimate fits (and whose recipe it runs) and the largest one it does not fit."""
    fits = [g["gpu"] for g in fitting if g["fits"] and g["runs_recipe"]]
    short = [g["gpu"] for g in fitting if not g["fits"]]
    return fits[:1] + short[-1:]
