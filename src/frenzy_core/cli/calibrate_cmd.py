"""``frenzy calibrate RUNS.csv|LOG...``: fit the time model to the user's own measured runs and write the
calibrated-parameter file ``frenzy plan --time-model`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from frenzy_core._files import output_path
from frenzy_core.cli import options as opt
from frenzy_core.cli._common import console, handle_errors, new_table, print_json
from frenzy_core.cli.payloads import calibrate_payload
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
    dp: opt.Dp[int] = 1,
    tp: opt.Tp[int] = 1,
    pp: opt.Pp[int] = 1,
    vpp: opt.Vpp[int] = 1,
    cp: opt.Cp[int] = 1,
    seq_len: opt.SeqLen[int | None] = None,
    micro_batch: opt.MicroBatch[int] = 1,
    global_batch: opt.GlobalBatch[int | None] = None,
    precision: opt.Precision[Precision] = Precision.BF16_MIXED,
    recompute: opt.Recompute[Recompute] = Recompute.NONE,
    attention: opt.Attention[Attention] = Attention.FLASH,
    zero_stage: opt.Zero[int] = 0,
    framework: opt.Framework[Framework] = Framework.TORCH,
    sequence_parallel: opt.SequenceParallel = False,
    distributed_optimizer: opt.DistributedOptimizer = False,
    compile_: opt.Compile = False,
    fp8_recipe: opt.Fp8Recipe[Fp8Recipe] = Fp8Recipe.DELAYED,
    json_out: opt.Json = False,
) -> None:
    """Fit the time model's efficiencies to measured runs, per GPU type, and write them to --out.

    Run tables carry each run's layout and recipe; for training logs the options give them (--model, --gpu,
    --seq-len and --global-batch are required with logs, the others default as shown).

    Examples:

      frenzy calibrate runs.csv --out my-cluster.yaml

      frenzy calibrate train.log --model llama-3.1-8b --gpu h100-sxm --dp 8 --seq-len 8192 --global-batch 64

      frenzy plan llama-3.1-8b --time-model my-cluster.yaml
    """
    from frenzy_core.timing.calibrate import calibrate_by_gpu
    from frenzy_core.timing.calibration_file import OUT_HINT, write_calibration_file
    from frenzy_core.timing.runs import TABLE_SUFFIXES

    output_path(out, "--out", OUT_HINT)  # before the fit, which reads every run
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
        print_json(calibrate_payload(out, results))
        return
    table = new_table("Calibrated time model", ["GPU type", "runs", "error before", "error after", "fitted"],
                      left=("fitted",))
    for gpu_id, r in results.items():
        fitted = ", ".join(f"{k.removesuffix('_efficiency')} {getattr(r.params, k):.3f}" for k in r.fitted)
        table.add_row(gpu_id, str(len(r.errors_after)), f"{r.median_abs_error_before:.1%}",
                      f"{r.median_abs_error_after:.1%}", fitted)
    console.print(table)
    console.print(f"Wrote {out}; use it with: frenzy plan MODEL --time-model {out}", highlight=False)
