"""``frenzy calibrate RUNS.csv|LOG...``: fit the time model to the user's own measured runs and write the
calibrated-parameter file ``frenzy plan --time-model`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from frenzy_core.cli._common import console, handle_errors, new_table, print_json
from frenzy_core.config import Attention, Fp8Recipe, Framework, Precision, Recompute
from frenzy_core.errors import ConfigError

__all__ = ["calibrate"]


@handle_errors
def calibrate(
    runs: Annotated[list[Path], typer.Argument(metavar="RUNS.csv|RUNS.json|LOG...", help=(
        "Run tables (one run per row: model, gpu, layout, recipe and step_s / tokens_per_s / log) and training "
        "logs (torchtitan, Megatron-LM, Hugging Face Trainer; their layout from the options below)."))],
    out: Annotated[Path, typer.Option("--out", "-o", help="Calibrated-parameter file to write (.yaml or .json).")
                   ] = Path("time_model.yaml"),
    model: Annotated[str | None, typer.Option(help="Logs: preset name or config.json of the model.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Logs: GPU type (see 'frenzy gpus').")] = None,
    dp: Annotated[int, typer.Option(min=1, help="Logs: data-parallel degree.")] = 1,
    tp: Annotated[int, typer.Option(min=1, help="Logs: tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Logs: pipeline-parallel degree.")] = 1,
    vpp: Annotated[int, typer.Option(min=1, help="Logs: virtual pipeline chunks.")] = 1,
    cp: Annotated[int, typer.Option(min=1, help="Logs: context-parallel degree.")] = 1,
    seq_len: Annotated[int | None, typer.Option(min=1, help="Logs: tokens per sample.")] = None,
    micro_batch: Annotated[int, typer.Option(min=1, help="Logs: samples per rank per forward pass.")] = 1,
    global_batch: Annotated[int | None, typer.Option(min=1, help="Logs: samples per optimizer step.")] = None,
    precision: Annotated[Precision, typer.Option(help="Logs: dtype recipe.")] = Precision.BF16_MIXED,
    recompute: Annotated[Recompute, typer.Option(help="Logs: activation recompute.")] = Recompute.NONE,
    attention: Annotated[Attention, typer.Option(help="Logs: attention kernel.")] = Attention.FLASH,
    zero_stage: Annotated[int, typer.Option(min=0, max=3, help="Logs: ZeRO stage / FSDP (3).")] = 0,
    framework: Annotated[Framework, typer.Option(help="Logs: training runtime.")] = Framework.TORCH,
    sequence_parallel: Annotated[bool, typer.Option(help="Logs: Megatron sequence parallelism.")] = False,
    distributed_optimizer: Annotated[bool, typer.Option(help="Logs: Megatron's distributed optimizer.")] = False,
    compile_: Annotated[bool, typer.Option("--compile", help="Logs: the model ran under torch.compile.")] = False,
    fp8_recipe: Annotated[Fp8Recipe, typer.Option(help="Logs: fp8 scaling (precision fp8-mixed).")
                          ] = Fp8Recipe.DELAYED,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Fit the time model's efficiencies to measured runs, per GPU type, and write them to --out.

    Examples:

      frenzy calibrate runs.csv --out my-cluster.yaml

      frenzy calibrate train.log --model llama-3.1-8b --gpu h100-sxm --dp 8 --seq-len 8192 --global-batch 64

      frenzy plan llama-3.1-8b --time-model my-cluster.yaml
    """
    from frenzy_core.timing.calibrate import calibrate_by_gpu
    from frenzy_core.timing.calibration_file import write_calibration_file
    from frenzy_core.timing.runs import TABLE_SUFFIXES

    logs = [p for p in runs if p.suffix.lower() not in TABLE_SUFFIXES]
    run: dict[str, Any] | None = None
    if logs:
        missing = [name for name, v in (("--model", model), ("--gpu", gpu), ("--seq-len", seq_len),
                                         ("--global-batch", global_batch)) if v is None]
        if missing:
            raise ConfigError(f"logs ({logs[0]}) need the run's layout: give {', '.join(missing)}",
                              field=missing[0], hint="or list the logs in a runs table with a 'log' column")
        run = {"model": model, "gpu": gpu, "dp": dp, "tp": tp, "pp": pp, "vpp": vpp, "cp": cp,
               "seq_len": seq_len, "micro_batch_size": micro_batch, "global_batch_size": global_batch,
               "precision": precision.value, "recompute": recompute.value, "attention": attention.value,
               "zero_stage": zero_stage, "framework": framework.value, "compile": compile_,
               "fp8_recipe": fp8_recipe.value, "sequence_parallel": sequence_parallel,
               "distributed_optimizer": distributed_optimizer}
    results = calibrate_by_gpu([str(p) for p in runs], run=run)
    write_calibration_file(out, results)
    if json_out:
        print_json({"out": str(out), "gpus": {g: r.model_dump(mode="json") for g, r in results.items()}})
        return
    table = new_table("Calibrated time model", ["GPU type", "runs", "error before", "error after", "fitted"],
                      left=("fitted",))
    for gpu_id, r in results.items():
        fitted = ", ".join(f"{k.removesuffix('_efficiency')} {getattr(r.params, k):.3f}" for k in r.fitted)
        table.add_row(gpu_id, str(len(r.errors_after)), f"{r.median_abs_error_before:.1%}",
                      f"{r.median_abs_error_after:.1%}", fitted)
    console.print(table)
    console.print(f"Wrote {out}; use it with: frenzy plan MODEL --time-model {out}", highlight=False)
