"""``frenzy memory MODEL``: per-stage memory of one layout, and which GPU types it fits."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from frenzy_core.cli._common import console, gib, handle_errors, load_model_arg, new_table, print_json
from frenzy_core.cli.memory_view import stage_memory_table
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
from frenzy_core.memory.result import MemoryEstimate
from frenzy_core.planning.request import DEFAULT_HEADROOM

__all__ = ["gpu_fits", "memory"]


def gpu_fits(estimate: MemoryEstimate, precision: Precision, headroom: float) -> list[dict[str, Any]]:
    """Every catalogue GPU type, smallest first: its memory less ``headroom``, and whether the estimate fits.

    ``runs_recipe`` is False where the GPU lists no peak for the precision's matmul dtype (bf16 on a V100):
    the memory may fit, but the planner will not choose that type for this recipe.
    """
    from frenzy_core.hardware import load_gpu_specs
    from frenzy_core.timing.estimator import peak_dtype

    dtype = peak_dtype(precision)
    out = []
    for spec in sorted(load_gpu_specs().values(), key=lambda s: (s.memory_bytes, s.id)):
        out.append(
            {
                "gpu": spec.id,
                "memory_bytes": spec.memory_bytes,
                "usable_bytes": int(spec.memory_bytes * (1.0 - headroom)),
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
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL", help="Preset name (see 'frenzy models') or path to a Hugging Face config.json."
        ),
    ],
    seq_len: Annotated[
        int | None, typer.Option(min=1, help="Tokens per sample (default 2048, capped by a learned position table).")
    ] = None,
    micro_batch: Annotated[int, typer.Option(min=1, help="Samples per rank per forward pass.")] = 1,
    global_batch: Annotated[
        int | None, typer.Option(min=1, help="Samples per optimizer step (default: micro-batch x dp).")
    ] = None,
    precision: Annotated[Precision, typer.Option(help="Dtype recipe.")] = Precision.BF16_MIXED,
    optimizer: Annotated[Optimizer, typer.Option(help="Optimizer.")] = Optimizer.ADAMW,
    optimizer_impl: Annotated[
        OptimizerImpl, typer.Option(help="torch optimizer implementation.")
    ] = OptimizerImpl.FOREACH,
    zero: Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage / FSDP sharding (0-3).")] = 0,
    distributed_optimizer: Annotated[
        bool, typer.Option(help="Megatron distributed optimizer (ZeRO-1).")
    ] = False,
    recompute: Annotated[Recompute, typer.Option(help="Activation recomputation.")] = Recompute.NONE,
    attention: Annotated[Attention, typer.Option(help="Attention kernel.")] = Attention.FLASH,
    sequence_parallel: Annotated[
        bool, typer.Option("--sp", help="Sequence parallelism (with tp > 1).")
    ] = False,
    framework: Annotated[
        Framework, typer.Option(help="Runtime whose buffers are modelled.")
    ] = Framework.TORCH,
    keep_outputs: Annotated[bool, typer.Option(
        "--keep-outputs", help=("The training loop keeps the model output (logits, KV cache) through backward and "
                                "the optimizer step, as out = model(**batch); out.loss.backward() does."))
    ] = False,
    dp: Annotated[int, typer.Option(min=1, help="Data-parallel degree.")] = 1,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Pipeline stages.")] = 1,
    vpp: Annotated[
        int, typer.Option(min=1, help="Virtual stages per pipeline rank (interleaved schedule).")
    ] = 1,
    cp: Annotated[int, typer.Option(min=1, help="Context-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(min=1, help="Expert-parallel degree.")] = 1,
    schedule: Annotated[
        PipelineSchedule | None, typer.Option(help="Pipeline schedule (default: 1f1b, interleaved if vpp>1).")
    ] = None,
    headroom: Annotated[
        float,
        typer.Option(min=0.0, max=0.99, help="Fraction of each GPU's memory kept free when judging fit."),
    ] = DEFAULT_HEADROOM,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the estimate as JSON (nothing else on stdout).")
    ] = False,
) -> None:
    """Estimate per-GPU training memory for MODEL under one layout, and which GPU types it fits.

    Examples:

      frenzy memory llama-3.1-8b

      frenzy memory llama-3.1-8b --seq-len 4096 --tp 2 --pp 2 --dp 2 --recompute selective

      frenzy memory ./config.json --precision amp-bf16 --zero 3 --dp 8 --json
    """
    from frenzy_core.memory import estimate_memory

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
    par: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep}
    if schedule is not None:
        par["schedule"] = schedule
    parallel = ParallelConfig(**par)
    estimate = estimate_memory(cfg, training, parallel)
    fitting = gpu_fits(estimate, precision, headroom)
    if json_out:
        print_json(
            {
                "model": cfg.name,
                "training": training.model_dump(mode="json"),
                "parallel": parallel.model_dump(mode="json"),
                "headroom": headroom,
                "estimate": estimate.model_dump(mode="json"),
                "gpus": fitting,
            }
        )
        return
    layout = " ".join(
        f"{k}={v}" for k, v in par.items() if k != "schedule" and (v != 1 or k in ("dp", "tp", "pp"))
    )
    title = (
        f"{cfg.name or 'model'} ({cfg.num_params() / 1e9:.2f}B params): seq {seq_len}, micro-batch "
        f"{micro_batch}, {precision.value}, {layout}, recompute {recompute.value}, zero {zero}"
    )
    console.print(title, style="bold", highlight=False)
    console.print(stage_memory_table(estimate, None))
    console.print(
        f"Busiest GPU (stage {estimate.busiest_stage}): {gib(estimate.device_bytes)} GiB on the device, "
        f"of which {gib(estimate.peak_bytes)} GiB live tensors at the {estimate.peak_phase} peak.\n"
    )
    from frenzy_core.timing.estimator import peak_dtype

    console.print(_fits_table(fitting, estimate.device_bytes, headroom, peak_dtype(precision)))
    fits = [str(g["gpu"]) for g in fitting if g["fits"] and g["runs_recipe"]]
    console.print(
        "Fits on: "
        + (
            ", ".join(fits)
            if fits
            else "no GPU type in the catalogue; try --recompute full, "
            "--zero 3 with more --dp, or more --tp/--pp"
        )
    )
