"""``frenzy plan MODEL``: the best GPUs, nodes and layout for one training job, explained; optionally a launch
config for it (``--emit``)."""

from __future__ import annotations

from typing import Any

import typer

from frenzy_core.cli._common import (
    console,
    handle_errors,
    load_cluster_arg,
    load_model_arg,
    parse_count,
    parse_names,
    print_json,
)
from frenzy_core.cli.emit import emit_launcher, parse_emit_options
from frenzy_core.cli.plan_view import plan_renderables
from frenzy_core.config import Framework, Optimizer, Precision, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning.request import DEFAULT_HEADROOM, Objective, PlanConstraints

__all__ = ["plan"]

_NEEDS_TOKENS = (Objective.COST, Objective.TIME_TO_TRAIN)


@handle_errors
def plan(
    model: str = typer.Argument(..., help="Preset name (see 'frenzy models') or path to a Hugging Face config.json."),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help=(
        "Cluster preset name (see 'frenzy clusters') or path to a cluster YAML file; default: the 'default' "
        "preset.")),
    seq_len: int = typer.Option(2048, min=1, help="Tokens per sample."),
    global_batch: int | None = typer.Option(None, min=1, help=(
        "Samples per optimizer step, all ranks (default: micro-batch x dp, no gradient accumulation).")),
    micro_batch: int | None = typer.Option(None, min=1, help="Pin the micro-batch size (default: search 1, 2, 4, 8)."),
    precision: Precision = typer.Option(Precision.BF16_MIXED.value, help="Dtype recipe."),
    optimizer: Optimizer = typer.Option(Optimizer.ADAMW.value, help="Optimizer."),
    framework: Framework = typer.Option(Framework.TORCH.value, help="Training runtime (searches ZeRO for torch; "
                                        "distributed optimizer and sequence parallelism for megatron)."),
    objective: Objective = typer.Option(Objective.THROUGHPUT.value, help=(
        "What to optimise; cost and time_to_train need --tokens.")),
    tokens: str | None = typer.Option(None, help="Tokens to train, e.g. 1e9, 300M, 2T (cost and time_to_train)."),
    max_gpus: int | None = typer.Option(None, min=1, help="Most GPUs the job may take."),
    num_gpus: int | None = typer.Option(None, min=1, help="Exactly this many GPUs."),
    gpu_types: str | None = typer.Option(None, help="Comma-separated GPU types allowed, e.g. a100-80gb,h100."),
    max_price_per_hour: float | None = typer.Option(None,
                                                    help="Most USD per hour for all GPUs of the job."),
    headroom: float = typer.Option(DEFAULT_HEADROOM, min=0.0, max=0.99,
                                   help="Fraction of each GPU's memory kept free."),
    tp: int | None = typer.Option(None, min=1, help="Pin the tensor-parallel degree."),
    pp: int | None = typer.Option(None, min=1, help="Pin the pipeline-parallel degree."),
    time_limit: float = typer.Option(10.0, help="Solver time limit in seconds."),
    runners_up: int = typer.Option(5, min=0, help="How many runners-up to list."),
    emit: str | None = typer.Option(None, help=(
        "After the plan, print a launch config for it: torchrun, megatron, deepspeed, accelerate, slurm, "
        "kubernetes, ray or skypilot (with --json: in the JSON, under 'launch').")),
    emit_option: list[str] = typer.Option([], "--emit-option", "-o", help=(
        "KEY=VALUE option of the --emit launcher (repeatable), e.g. -o script=train.py.")),
    json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON (nothing else on stdout)."),
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

    if objective in _NEEDS_TOKENS and tokens is None:
        raise ConfigError(f"--objective {objective.value} needs --tokens (how many tokens to train)",
                          field="--tokens", hint="e.g. --tokens 10B")
    emit_options = parse_emit_options(emit_option)
    if emit_options and emit is None:
        raise ConfigError("--emit-option needs --emit (which launcher the options are for)", field="--emit-option",
                          hint="e.g. --emit torchrun -o script=train.py")
    cfg = load_model_arg(model)
    where = load_cluster_arg(cluster)
    training = TrainingConfig(seq_len=seq_len, global_batch_size=global_batch, precision=precision,
                              optimizer=optimizer, framework=framework)
    constraints = PlanConstraints(
        headroom=headroom, gpu_types=parse_names(gpu_types, "--gpu-types"), max_gpus=max_gpus, num_gpus=num_gpus,
        max_price_per_hour_usd=max_price_per_hour, token_budget=parse_count(tokens, "--tokens"), tp=tp, pp=pp,
        micro_batch_sizes=None if micro_batch is None else [micro_batch])
    if not json_out:
        console.print(f"Planning {cfg.name or model} ({cfg.num_params() / 1e9:.2f}B params) on "
                      f"{where.describe()}", highlight=False, soft_wrap=True)
    result = plan_job(cfg, where.cluster, training, objective=objective, constraints=constraints,
                      time_limit_s=time_limit, top_k=runners_up)
    launch = None if emit is None else emit_launcher(result, emit, emit_options)
    if json_out:
        out: dict[str, Any] = {
            "model": cfg.name or model, "cluster": where.to_json(),
            "request": {"training": training.model_dump(mode="json"),
                        "constraints": constraints.model_dump(mode="json", exclude_none=True),
                        "objective": objective.value},
            "plan": result.model_dump(mode="json"), "explanation": result.explain(),
        }
        if launch is not None:
            out["launch"] = launch.to_json()
        print_json(out)
        return
    console.print(plan_renderables(result))
    if launch is not None:
        console.rule(f"{launch.launcher} ({launch.summary})")
        typer.echo(launch.text, nl=not launch.text.endswith("\n"))
