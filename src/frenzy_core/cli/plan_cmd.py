"""``frenzy plan MODEL``: the best GPUs, nodes and layout for one training job, explained; optionally a launch
config for it (``--emit``) and a figure of it (``--plot``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from frenzy_core._files import output_path, write_text
from frenzy_core.cli import options as opt
from frenzy_core.cli._common import (
    console,
    handle_errors,
    load_cluster_arg,
    load_model_arg,
    parse_count,
    parse_names,
    plot_target,
    print_json,
    require_file,
    require_positive,
)
from frenzy_core.cli.emit import LaunchOutput, emit_launcher, launch_scope, launcher_options, parse_emit_options
from frenzy_core.cli.option_words import config_error_in_option_words, infeasible_in_option_words
from frenzy_core.cli.payloads import plan_payload
from frenzy_core.cli.plan_view import plan_renderables
from frenzy_core.config import Attention, Framework, Optimizer, Precision, TrainingConfig
from frenzy_core.errors import ConfigError, InfeasiblePlanError, UnknownNameError
from frenzy_core.planning.plan import Plan
from frenzy_core.planning.request import DEFAULT_HEADROOM, DEFAULT_MIXED_STAGES, Objective, PlacementMode, PlanConstraints

__all__ = ["plan"]

_NEEDS_TOKENS = (Objective.TIME_TO_TRAIN,)
EMIT_TO_HINT = "e.g. --emit kubernetes --emit-to job.yaml"
"""What --emit-to names."""


@handle_errors
def plan(
    model: opt.Model,
    cluster: opt.Cluster[str | None] = None,
    seq_len: opt.SeqLen[int | None] = None,
    global_batch: opt.GlobalBatch[int | None] = None,
    micro_batch: opt.MicroBatch[int | None] = None,
    precision: opt.Precision[Precision | None] = None,
    optimizer: opt.Optimizer[Optimizer] = Optimizer.ADAMW,
    attention: opt.Attention[Attention] = Attention.FLASH,
    framework: opt.Framework[Framework | None] = None,
    keep_outputs: opt.KeepOutputs = False,
    objective: opt.Objective[Objective] = Objective.THROUGHPUT,
    tokens: opt.Tokens[str | None] = None,
    max_gpus: opt.MaxGpus[int | None] = None,
    num_gpus: opt.NumGpus[int | None] = None,
    gpu_types: opt.GpuTypes[str | None] = None,
    max_price_per_hour: opt.MaxPricePerHour[float | None] = None,
    headroom: opt.Headroom[float] = DEFAULT_HEADROOM,
    placement: opt.Placement[PlacementMode] = PlacementMode.ANY,
    mixed_types: opt.MixedTypes = True,
    mixed_stages: opt.MixedStages = DEFAULT_MIXED_STAGES,
    tp: opt.Tp[int | None] = None,
    pp: opt.Pp[int | None] = None,
    time_limit: opt.TimeLimit[float] = 10.0,
    runners_up: opt.RunnersUp[int] = 5,
    emit: opt.Emit[str | None] = None,
    emit_option: opt.EmitOption[list[str] | None] = None,
    emit_to: opt.EmitTo[Path | None] = None,
    json_out: opt.Json = False,
    time_model: opt.TimeModel[Path | None] = None,
    plot: opt.Plot = None,
) -> None:
    """Choose GPU type, GPU count, nodes and parallel layout for training MODEL, and explain why.

    Fixed: what the options set (sequence length, global batch, precision, optimizer, framework). Searched:
    GPU type and count, dp/tp/pp, micro-batch size, recompute, ZeRO stage (--tp, --pp and --micro-batch pin
    them). Without --seq-len: 2048, or the model's learned position table if shorter; without --global-batch:
    the model's published pre-training batch, else 2^20 tokens, in whole sequences (moved by at most 5% to split
    evenly over dp); without --precision: bf16-mixed, fp16-mixed on GPUs without bf16 (V100). --emit plans within
    what that launcher can start (even placements for slurm, kubernetes, skypilot, accelerate; the megatron
    framework for megatron). --plot draws memory per stage against the GPU, the runners-up
    and one step's pipeline schedule. Exit code 1 when nothing fits (the message says what blocked it and what
    would help), 2 for bad input.

    Examples:

      frenzy plan llama-3.1-8b

      frenzy plan llama-3.1-70b --cluster aws-mixed --seq-len 4096 --global-batch 512

      frenzy plan mistral-7b --objective cost --tokens 10B --gpu-types a100-80gb,h100-sxm

      frenzy plan ./config.json --cluster my-cluster.yaml --max-gpus 16 --json

      frenzy plan llama-3.1-8b --emit slurm -o script=train.py --plot plan.png
    """
    from frenzy_core.planning import plan_job

    if objective in _NEEDS_TOKENS and tokens is None:
        raise ConfigError(f"--objective {objective.value} needs --tokens (how many tokens to train)",
                          field="--tokens", hint="e.g. --tokens 10B")
    require_positive(max_price_per_hour, "--max-price-per-hour")
    require_positive(time_limit, "--time-limit")
    require_file(time_model, "--time-model", "write one with: frenzy calibrate RUNS.csv --out FILE")
    emit_options = _emit_request(emit, parse_emit_options(emit_option or []), emit_to)
    plot = plot_target(plot)
    cfg = load_model_arg(model)
    seq_len = cfg.default_seq_len() if seq_len is None else seq_len
    if emit is not None:
        emit_options = launcher_options(emit, emit_options)
    where = load_cluster_arg(cluster)
    recipe: dict[str, Any] = {"precision": precision, "framework": framework}
    training = TrainingConfig(
        seq_len=seq_len,
        global_batch_size=global_batch,
        optimizer=optimizer,
        attention=attention,
        keep_outputs=keep_outputs,
        **{k: v for k, v in recipe.items() if v is not None},  # left out: the planner's defaults and fallbacks
    )
    constraints = PlanConstraints(
        headroom=headroom,
        gpu_types=parse_names(gpu_types, "--gpu-types"),
        max_gpus=max_gpus,
        num_gpus=num_gpus,
        max_price_per_hour_usd=max_price_per_hour,
        token_budget=parse_count(tokens, "--tokens"),
        tp=tp,
        pp=pp,
        micro_batch_sizes=None if micro_batch is None else [micro_batch],
        placement=placement,
    )
    if not json_out:
        console.print(f"Planning {cfg.name or model} ({cfg.num_params() / 1e9:.2f}B params) on {where.describe()}",
                      highlight=False, soft_wrap=True)
    try:
        result = plan_job(cfg, where.cluster, training, objective=objective, constraints=constraints,
                          time_limit_s=time_limit, top_k=runners_up, time_model=time_model,
                          launcher=None if emit is None else launch_scope(emit, emit_options),
                          mixed_types=mixed_types, mixed_stages=mixed_stages)
    except InfeasiblePlanError as exc:
        raise infeasible_in_option_words(exc) from None
    except UnknownNameError:
        raise
    except ConfigError as exc:
        raise config_error_in_option_words(exc) from None
    launch = None if emit is None else emit_launcher(result, emit, emit_options)
    _write_outputs(result, launch, emit_to, plot)
    if json_out:
        print_json(plan_payload(cfg.name or model, where, training, constraints, objective, result, launch, plot))
        return
    _print_plan(result, launch, emit_to, plot)


def _emit_request(emit: str | None, emit_options: dict[str, Any], emit_to: Path | None) -> dict[str, Any]:
    """``--emit-to`` and ``-o`` need ``--emit``: checked before any work."""
    if emit_to is not None and emit is None:
        raise ConfigError("--emit-to needs --emit (which launcher to write)", field="--emit-to",
                          hint="e.g. --emit kubernetes --emit-to job.yaml")
    if emit_to is not None:
        output_path(emit_to, "--emit-to", EMIT_TO_HINT)
    if emit_options and emit is None:
        raise ConfigError("--emit-option needs --emit (which launcher the options are for)", field="--emit-option",
                          hint="e.g. --emit torchrun -o script=train.py")
    return emit_options


def _write_outputs(result: Plan, launch: LaunchOutput | None, emit_to: Path | None, plot: Path | None) -> None:
    """The files asked for: the launcher text (``--emit-to``) and the figure (``--plot``)."""
    if launch is not None and emit_to is not None:
        write_text(emit_to, launch.text, "--emit-to", EMIT_TO_HINT)
    if plot is not None:
        from frenzy_core.plotting import plot_plan

        plot_plan(result, plot)


def _print_plan(result: Plan, launch: LaunchOutput | None, emit_to: Path | None, plot: Path | None) -> None:
    """The plan's tables, then where the files went, then the launcher text when it was not written to a file."""
    console.print(plan_renderables(result))
    if plot is not None:
        console.print(f"Saved the plan figure to {plot}", highlight=False)
    if launch is not None and emit_to is not None:
        console.print(f"Wrote the {launch.launcher} config to {emit_to}", highlight=False)
    elif launch is not None:
        console.rule(f"{launch.launcher} ({launch.summary})")
        typer.echo(launch.text, nl=not launch.text.endswith("\n"))
