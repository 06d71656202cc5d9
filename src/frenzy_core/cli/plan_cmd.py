"""``frenzy plan MODEL``: the best GPUs, nodes and layout for one training job, explained; optionally a launch
config for it (``--emit``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from frenzy_core.cli._common import (
    console,
    handle_errors,
    load_cluster_arg,
    load_model_arg,
    parse_count,
    parse_names,
    print_json,
    require_positive,
)
from frenzy_core.cli.emit import emit_launcher, launcher_options, parse_emit_options
from frenzy_core.cli.plan_view import plan_renderables
from frenzy_core.config import Attention, Framework, Optimizer, Precision, TrainingConfig
from frenzy_core.errors import ConfigError, InfeasiblePlanError, UnknownNameError
from frenzy_core.planning.request import (
    DEFAULT_HEADROOM,
    SEARCHED_TRAINING_FIELDS,
    Objective,
    PlacementMode,
    PlanConstraints,
)

__all__ = ["plan"]

_NEEDS_TOKENS = (Objective.TIME_TO_TRAIN,)

_OPTION_OF_FIELD = {
    "max_price_per_hour_usd": "--max-price-per-hour",
    "max_gpus": "--max-gpus",
    "num_gpus": "--num-gpus",
    "gpu_types": "--gpu-types",
    "token_budget": "--tokens",
    "micro_batch_sizes": "--micro-batch",
    "micro_batch_size": "--micro-batch",
    "headroom": "--headroom",
    "seq_len": "--seq-len",
    "tp": "--tp",
    "pp": "--pp",
}
"""Planner fields and the options that set them, so messages name what the user can type."""
_NAMES = "|".join(sorted(_OPTION_OF_FIELD, key=len, reverse=True))
_SETTING_RE = re.compile(r"\b(?:constraints\.|PlanConstraints\.)?(" + _NAMES + r")\s*(>=|=)\s*([^\s,;)]+)")
_FIELD_RE = re.compile(r"\b(?:constraints\.|PlanConstraints\.)?(" + _NAMES + r")\b")
_CONSTRAINT_SETTING_RE = re.compile(r"\b(max_price_per_hour_usd|max_gpus|num_gpus|token_budget|headroom)=(\S+?)(?=[\s,;)]|$)")


def _in_option_words(text: str) -> str:
    """``headroom=0`` as ``--headroom 0``, ``max_gpus >= 16`` as ``--max-gpus 16 (or more)``: the planner's
    settings as this command's options (a layout such as ``dp=8 tp=2`` inside a message is left alone)."""
    def setting(m: re.Match[str]) -> str:
        more = " (or more)" if m.group(2) == ">=" else ""
        return f"{_OPTION_OF_FIELD[m.group(1)]} {m.group(3)}{more}"

    return _SETTING_RE.sub(setting, text)


def _suggestions_in_option_words(suggestions: list[str]) -> list[str]:
    return [_in_option_words(s) for s in suggestions]


@handle_errors
def plan(
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL", help="Preset name (see 'frenzy models') or path to a Hugging Face config.json."
        ),
    ],
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            "-c",
            help=(
                "Cluster preset name (see 'frenzy clusters') or path to a cluster YAML file; default: the "
                "'default' "
                "preset."
            ),
        ),
    ] = None,
    seq_len: Annotated[
        int | None, typer.Option(min=1, help="Tokens per sample (default 2048, capped by a learned position table).")
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=(
                "Samples per optimizer step, all ranks (default: the model's published pre-training batch, else "
                "2^20 tokens, in whole sequences; moved by at most 5% to split evenly over dp)."
            ),
        ),
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option(min=1, help="Pin the micro-batch size (default: search 1, 2, 4, 8).")
    ] = None,
    precision: Annotated[
        Precision | None,
        typer.Option(help="Dtype recipe (default bf16-mixed; fp16-mixed on GPUs without bf16, such as the V100)."),
    ] = None,
    optimizer: Annotated[Optimizer, typer.Option(help="Optimizer.")] = Optimizer.ADAMW,
    attention: Annotated[Attention, typer.Option(help=(
        "Attention kernel (eager keeps the score matrix: what GPUs without FlashAttention, e.g. V100, run)."))
    ] = Attention.FLASH,
    framework: Annotated[
        Framework | None,
        typer.Option(
            help="Training runtime (default torch, megatron with --emit megatron; searches ZeRO for torch, "
            "distributed optimizer and sequence parallelism for megatron)."
        ),
    ] = None,
    objective: Annotated[
        Objective, typer.Option(help=("What to optimise; time_to_train needs --tokens (cost without it is per token)."))
    ] = Objective.THROUGHPUT,
    tokens: Annotated[
        str | None, typer.Option(help="Tokens to train, e.g. 1e9, 300M, 2T (cost and time_to_train).")
    ] = None,
    max_gpus: Annotated[int | None, typer.Option(min=1, help="Most GPUs the job may take.")] = None,
    num_gpus: Annotated[int | None, typer.Option(min=1, help="Exactly this many GPUs.")] = None,
    gpu_types: Annotated[
        str | None, typer.Option(help="Comma-separated GPU types allowed, e.g. a100-80gb,h100.")
    ] = None,
    max_price_per_hour: Annotated[
        float | None, typer.Option(help="Most USD per hour for all GPUs of the job.")
    ] = None,
    headroom: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="Fraction of each GPU's memory kept free.")
    ] = DEFAULT_HEADROOM,
    placement: Annotated[
        PlacementMode,
        typer.Option(help="any, even (same GPU count per node) or whole_nodes; --emit raises it to what the launcher "
                     "needs."),
    ] = PlacementMode.ANY,
    tp: Annotated[int | None, typer.Option(min=1, help="Pin the tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option(min=1, help="Pin the pipeline-parallel degree.")] = None,
    time_limit: Annotated[float, typer.Option(help="Solver time limit in seconds.")] = 10.0,
    runners_up: Annotated[int, typer.Option(min=0, help="How many runners-up to list.")] = 5,
    emit: Annotated[
        str | None,
        typer.Option(
            help=(
                "Plan within what this launcher can start, then print its launch config: torchrun, megatron, "
                "deepspeed, accelerate, slurm, kubernetes, ray or skypilot (with --json: under 'launch')."
            )
        ),
    ] = None,
    emit_option: Annotated[
        list[str] | None,
        typer.Option(
            "--emit-option",
            "-o",
            help=("KEY=VALUE option of the --emit launcher (repeatable), e.g. -o script=train.py."),
        ),
    ] = None,
    emit_to: Annotated[
        Path | None,
        typer.Option("--emit-to", help="Write the --emit launcher text to this file instead of stdout."),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON (nothing else on stdout).")
    ] = False,
    time_model: Annotated[
        Path | None,
        typer.Option("--time-model", help="Calibrated time-model file from 'frenzy calibrate'."),
    ] = None,
) -> None:
    """Choose GPU type, GPU count, nodes and parallel layout for training MODEL, and explain why.

    Fixed: what the options set (sequence length, global batch, precision, optimizer, framework). Searched:
    GPU type and count, dp/tp/pp, micro-batch size, recompute, ZeRO stage. Exit code 1 when nothing fits
    (the message says what blocked it and what would help), 2 for bad input.

    Examples:

      frenzy plan llama-3.1-8b

      frenzy plan llama-3.1-70b --cluster aws-mixed --seq-len 4096 --global-batch 512

      frenzy plan mistral-7b --objective cost --tokens 10B --gpu-types a100-80gb,h100-sxm

      frenzy plan ./config.json --cluster my-cluster.yaml --max-gpus 16 --json

      frenzy plan llama-3.1-8b --emit slurm -o script=train.py
    """
    from frenzy_core.planning import plan_job

    if emit_option is None:
        emit_option = []
    if objective in _NEEDS_TOKENS and tokens is None:
        raise ConfigError(
            f"--objective {objective.value} needs --tokens (how many tokens to train)",
            field="--tokens",
            hint="e.g. --tokens 10B",
        )
    require_positive(max_price_per_hour, "--max-price-per-hour")
    require_positive(time_limit, "--time-limit")
    emit_options = parse_emit_options(emit_option)
    if emit_to is not None and emit is None:
        raise ConfigError("--emit-to needs --emit (which launcher to write)", field="--emit-to",
                          hint="e.g. --emit kubernetes --emit-to job.yaml")
    if emit_options and emit is None:
        raise ConfigError(
            "--emit-option needs --emit (which launcher the options are for)",
            field="--emit-option",
            hint="e.g. --emit torchrun -o script=train.py",
        )
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
        console.print(
            f"Planning {cfg.name or model} ({cfg.num_params() / 1e9:.2f}B params) on {where.describe()}",
            highlight=False,
            soft_wrap=True,
        )
    try:
        result = plan_job(
            cfg,
            where.cluster,
            training,
            objective=objective,
            constraints=constraints,
            time_limit_s=time_limit,
            top_k=runners_up,
            launcher=emit,
            time_model=time_model,
        )
    except InfeasiblePlanError as exc:
        text = str(exc)
        for raw in exc.suggestions:
            text = text.replace(raw, _in_option_words(raw))
        text = _CONSTRAINT_SETTING_RE.sub(lambda m: f"{_OPTION_OF_FIELD[m.group(1)]} {m.group(2)}", text)
        text = re.sub(r"\b(max_price_per_hour_usd|max_gpus|num_gpus|token_budget)\b",
                      lambda m: _OPTION_OF_FIELD[m.group(1)], text)
        raise InfeasiblePlanError(text, reasons=exc.reasons,
                                  suggestions=_suggestions_in_option_words(exc.suggestions)) from None
    except UnknownNameError:
        raise
    except ConfigError as exc:
        raise ConfigError(_FIELD_RE.sub(lambda m: _OPTION_OF_FIELD[m.group(1)], str(exc)), field=exc.field,
                          value=exc.value) from None
    launch = None if emit is None else emit_launcher(result, emit, emit_options)
    if launch is not None and emit_to is not None:
        try:
            emit_to.write_text(launch.text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write --emit-to {str(emit_to)!r}: {exc.strerror}", field="--emit-to",
                              value=str(emit_to)) from None
    if json_out:
        out: dict[str, Any] = {
            "model": cfg.name or model,
            "cluster": where.to_json(),
            "request": {
                "training": training.model_dump(mode="json", exclude=set(SEARCHED_TRAINING_FIELDS)),
                "constraints": constraints.model_dump(mode="json", exclude_none=True),
                "objective": objective.value,
            },
            "plan": result.model_dump(mode="json"),
            "global_batch": {"samples": result.training.global_batch_size, "default": result.default_batch is not None},
            "explanation": result.explain(),
        }
        if launch is not None:
            out["launch"] = launch.to_json()
        print_json(out)
        return
    console.print(plan_renderables(result))
    if launch is not None and emit_to is not None:
        console.print(f"Wrote the {launch.launcher} config to {emit_to}", highlight=False)
    elif launch is not None:
        console.rule(f"{launch.launcher} ({launch.summary})")
        typer.echo(launch.text, nl=not launch.text.endswith("\n"))
