"""``frenzy memory MODEL``: per-stage memory of one layout, and which GPU types it fits."""

from __future__ import annotations

import typer
from rich.table import Table

from frenzy_core.cli._common import console, gib, handle_errors, load_model_arg, print_json
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
from frenzy_core.memory.result import MEMORY_CATEGORIES, MemoryEstimate

__all__ = ["memory"]


def _fitting_gpus(estimate: MemoryEstimate) -> list[dict[str, object]]:
    from frenzy_core.hardware import load_gpu_specs

    out = []
    for spec in sorted(load_gpu_specs().values(), key=lambda s: s.memory_bytes):
        out.append({"gpu": spec.id, "memory_bytes": spec.memory_bytes, "fits": estimate.fits(spec.memory_bytes)})
    return out


@handle_errors
def memory(
    model: str = typer.Argument(..., help="Preset name (see 'frenzy models') or path to a Hugging Face config.json."),
    seq_len: int = typer.Option(2048, help="Tokens per sample."),
    micro_batch: int = typer.Option(1, help="Samples per rank per forward pass."),
    global_batch: int = typer.Option(None, help="Samples per optimizer step (default: micro-batch x dp)."),
    precision: Precision = typer.Option(Precision.BF16_MIXED.value, help="Dtype recipe."),
    optimizer: Optimizer = typer.Option(Optimizer.ADAMW.value, help="Optimizer."),
    optimizer_impl: OptimizerImpl = typer.Option(OptimizerImpl.FOREACH.value, help="torch optimizer implementation."),
    zero: int = typer.Option(0, min=0, max=3, help="ZeRO stage / FSDP sharding (0-3)."),
    distributed_optimizer: bool = typer.Option(False, help="Megatron distributed optimizer (ZeRO-1)."),
    recompute: Recompute = typer.Option(Recompute.NONE.value, help="Activation recomputation."),
    attention: Attention = typer.Option(Attention.FLASH.value, help="Attention kernel."),
    sequence_parallel: bool = typer.Option(False, "--sp", help="Sequence parallelism (with tp > 1)."),
    framework: Framework = typer.Option(Framework.TORCH.value, help="Runtime whose buffers are modelled."),
    dp: int = typer.Option(1, help="Data-parallel degree."),
    tp: int = typer.Option(1, help="Tensor-parallel degree."),
    pp: int = typer.Option(1, help="Pipeline stages."),
    vpp: int = typer.Option(1, help="Virtual stages per pipeline rank (interleaved schedule)."),
    cp: int = typer.Option(1, help="Context-parallel degree."),
    ep: int = typer.Option(1, help="Expert-parallel degree."),
    schedule: PipelineSchedule = typer.Option(None, help="Pipeline schedule (default: 1f1b, interleaved if vpp>1)."),
    json_out: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
) -> None:
    """Estimate per-GPU training memory for MODEL under one layout.

    Examples:
      frenzy memory llama-3.1-8b --seq-len 4096 --tp 2 --pp 2 --dp 2 --recompute selective
      frenzy memory ./config.json --precision amp-bf16 --json
    """
    from frenzy_core.memory import estimate_memory

    cfg = load_model_arg(model)
    training = TrainingConfig(
        seq_len=seq_len, micro_batch_size=micro_batch, global_batch_size=global_batch, precision=precision,
        optimizer=optimizer, optimizer_impl=optimizer_impl, zero_stage=zero,
        distributed_optimizer=distributed_optimizer, recompute=recompute, attention=attention,
        sequence_parallel=sequence_parallel, framework=framework,
    )
    par = dict(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep)
    if schedule is not None:
        par["schedule"] = schedule  # type: ignore[assignment]
    parallel = ParallelConfig(**par)
    estimate = estimate_memory(cfg, training, parallel)
    fitting = _fitting_gpus(estimate)
    if json_out:
        print_json({"model": cfg.name, "estimate": estimate.model_dump(mode="json"), "gpus": fitting})
        return
    title = (f"{cfg.name or 'model'}: {cfg.num_params() / 1e9:.2f}B params, seq {seq_len}, micro-batch {micro_batch},"
             f" {precision.value}, dp{dp} tp{tp} pp{pp} (GiB per GPU)")
    table = Table(title=title)
    table.add_column("stage", justify="right")
    table.add_column("layers", justify="right")
    used = [c for c in MEMORY_CATEGORIES if any(s.breakdown.get(c, 0) for s in estimate.stages)]
    for c in used:
        table.add_column(c.replace("_", " "), justify="right")
    table.add_column("peak", justify="right", style="bold")
    table.add_column("overhead", justify="right")
    table.add_column("device", justify="right", style="bold")
    for s in estimate.stages:
        table.add_row(str(s.stage), str(s.num_layers), *[gib(s.breakdown.get(c, 0)) for c in used],
                      gib(s.peak_bytes), gib(sum(s.overhead.values())), gib(s.device_bytes))
    console.print(table)
    console.print(f"Busiest stage {estimate.busiest_stage}: peak {gib(estimate.peak_bytes)} GiB of live tensors "
                  f"({estimate.peak_phase}), {gib(estimate.device_bytes)} GiB on the device with runtime overhead.")
    fits = [g["gpu"] for g in fitting if g["fits"]]
    console.print("Fits on: " + (", ".join(str(f) for f in fits) if fits else "no GPU type in the catalogue"))
