"""Every option of the ``frenzy`` commands, defined once: its flags and its help, which for an option that sets a
config field is that pydantic field's own description.

An alias holds the flags and the help; the command that uses it states the type and the default, because those
differ between commands (``--tp`` pins the planner's search in ``plan``, where None means searched, and is a
degree with default 1 in ``memory``)::

    def memory(tp: Tp[int] = 1) -> None: ...
    def plan(tp: Tp[int | None] = None) -> None: ...

A new option is one alias here and one parameter in each command that takes it. ``OPTION_OF_FIELD`` maps each
config field to the flag that sets it, so library messages can be reworded in the user's vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel

from frenzy_core.adapters import LAUNCHERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.planning.request import PlanConstraints

__all__ = [
    "DESCRIBED_BY",
    "OPTION_OF_FIELD",
    "Attention",
    "Cluster",
    "Compile",
    "Cp",
    "DistributedOptimizer",
    "Dp",
    "Emit",
    "EmitOption",
    "EmitTo",
    "Ep",
    "Fp8Recipe",
    "Framework",
    "GlobalBatch",
    "GpuTypes",
    "Headroom",
    "Json",
    "KeepOutputs",
    "MaxGpus",
    "MaxPricePerHour",
    "MicroBatch",
    "MixedTypes",
    "Model",
    "NumGpus",
    "Objective",
    "Optimizer",
    "OptimizerImpl",
    "Placement",
    "Plot",
    "Pp",
    "Precision",
    "Recompute",
    "RunnersUp",
    "Scale",
    "Schedule",
    "SeqLen",
    "SequenceParallel",
    "TimeLimit",
    "TimeModel",
    "Tokens",
    "Tp",
    "Vpp",
    "Zero",
    "described",
]

T = TypeVar("T")

OPTION_OF_FIELD: dict[str, str] = {}
"""Config field name (``max_gpus``, ``seq_len``) -> the flag that sets it (``--max-gpus``), filled as the options
below are defined."""
DESCRIBED_BY: dict[str, tuple[type[BaseModel], str]] = {}
"""Flag -> the config model and field whose description is its help."""


def described(model: type[BaseModel], field: str, note: str = "") -> str:
    """The help of an option that sets ``model.field``: the field's description, then ``note``."""
    description = model.model_fields[field].description or ""
    return f"{description} {note}".strip()


def _field_option(flags: tuple[str, ...], model: type[BaseModel], field: str, note: str = "", *,
                  also: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """A typer option setting ``model.field``, its help from the field; records the flag for the field (and for
    the fields in ``also`` that the same flag sets elsewhere)."""
    flag = flags[0].split("/")[0]
    for name in (field, *also):
        OPTION_OF_FIELD.setdefault(name, flag)
    DESCRIBED_BY[flag] = (model, field)
    return typer.Option(*flags, help=described(model, field, note), **kwargs)


# ---- the model and the cluster ---------------------------------------------------------------------------------

Model = Annotated[str, typer.Argument(metavar="MODEL", help=(
    "Preset name (see 'frenzy models') or path to a Hugging Face config.json."))]
Cluster = Annotated[T, typer.Option("--cluster", "-c", help=(
    "Cluster preset name (see 'frenzy clusters') or path to a cluster YAML file; default: the 'default' preset."))]
Scale = Annotated[T, typer.Option("--scale", min=1, help="Scale the cluster's node counts to about this many GPUs.")]

# ---- the recipe (TrainingConfig) -------------------------------------------------------------------------------

SeqLen = Annotated[T, _field_option(("--seq-len",), TrainingConfig, "seq_len", min=1)]
MicroBatch = Annotated[T, _field_option(("--micro-batch",), TrainingConfig, "micro_batch_size", min=1,
                                        also=("micro_batch_sizes",))]
GlobalBatch = Annotated[T, _field_option(("--global-batch",), TrainingConfig, "global_batch_size", min=1)]
Precision = Annotated[T, _field_option(("--precision",), TrainingConfig, "precision")]
Optimizer = Annotated[T, _field_option(("--optimizer",), TrainingConfig, "optimizer")]
OptimizerImpl = Annotated[T, _field_option(("--optimizer-impl",), TrainingConfig, "optimizer_impl")]
Zero = Annotated[T, _field_option(("--zero", "--zero-stage"), TrainingConfig, "zero_stage", min=0, max=3)]
DistributedOptimizer = Annotated[bool, _field_option(
    ("--distributed-optimizer/--no-distributed-optimizer",), TrainingConfig, "distributed_optimizer")]
Recompute = Annotated[T, _field_option(("--recompute",), TrainingConfig, "recompute")]
Attention = Annotated[T, _field_option(("--attention",), TrainingConfig, "attention", (
    "Eager keeps the score matrix: what GPUs without FlashAttention (V100) run."))]
SequenceParallel = Annotated[bool, _field_option(
    ("--sp", "--sequence-parallel/--no-sequence-parallel"), TrainingConfig, "sequence_parallel")]
Framework = Annotated[T, _field_option(("--framework",), TrainingConfig, "framework", (
    "torch: ZeRO/FSDP; megatron: distributed optimizer and sequence parallelism."))]
Compile = Annotated[bool, _field_option(("--compile",), TrainingConfig, "compile")]
KeepOutputs = Annotated[bool, _field_option(("--keep-outputs",), TrainingConfig, "keep_outputs")]
Fp8Recipe = Annotated[T, _field_option(("--fp8-recipe",), TrainingConfig, "fp8_recipe")]

# ---- the layout (ParallelConfig) -------------------------------------------------------------------------------

Dp = Annotated[T, _field_option(("--dp",), ParallelConfig, "dp", min=1)]
Tp = Annotated[T, _field_option(("--tp",), ParallelConfig, "tp", min=1)]
Pp = Annotated[T, _field_option(("--pp",), ParallelConfig, "pp", min=1)]
Vpp = Annotated[T, _field_option(("--vpp",), ParallelConfig, "vpp", min=1)]
Cp = Annotated[T, _field_option(("--cp",), ParallelConfig, "cp", min=1)]
Ep = Annotated[T, _field_option(("--ep",), ParallelConfig, "ep", min=1)]
Schedule = Annotated[T, _field_option(("--schedule",), ParallelConfig, "schedule", (
    "Default: 1f1b, interleaved when vpp > 1."))]

# ---- the planner's request (PlanConstraints, plan_job) ---------------------------------------------------------

Headroom = Annotated[T, _field_option(("--headroom",), PlanConstraints, "headroom", min=0.0, max=0.99)]
GpuTypes = Annotated[T, _field_option(("--gpu-types",), PlanConstraints, "gpu_types", (
    "Comma-separated, e.g. a100-80gb,h100-sxm (ids or aliases, see 'frenzy gpus')."))]
MaxGpus = Annotated[T, _field_option(("--max-gpus",), PlanConstraints, "max_gpus", min=1)]
NumGpus = Annotated[T, _field_option(("--num-gpus",), PlanConstraints, "num_gpus", min=1)]
MaxPricePerHour = Annotated[T, _field_option(("--max-price-per-hour",), PlanConstraints, "max_price_per_hour_usd",
                                             "In USD.")]
Tokens = Annotated[T, _field_option(("--tokens",), PlanConstraints, "token_budget", "E.g. 1e9, 300M, 10B, 2T.")]
Placement = Annotated[T, _field_option(("--placement",), PlanConstraints, "placement", (
    "--emit raises it to what the launcher needs."))]
MixedTypes = Annotated[bool, typer.Option("--mixed-types/--single-type", help=(
    "Let one job span several GPU types as data-parallel replica groups, taken only when it beats every "
    "single-type plan; --single-type plans on one type."))]
MixedStages = Annotated[bool, typer.Option("--mixed-stages/--no-mixed-stages", help=(
    "With --mixed-types, also plan pipelines whose stages run on different GPU types with uneven layer counts, "
    "taken only when they beat every single-type plan and replica mix; with --emit, only for launchers that "
    "start such pipelines."))]
Objective = Annotated[T, typer.Option("--objective", help=(
    "What to optimise: tokens/s, dollars or wall time for --tokens, or the fewest GPUs that fit."))]
TimeLimit = Annotated[T, typer.Option("--time-limit", help="Solver time limit in seconds.")]
RunnersUp = Annotated[T, typer.Option("--runners-up", min=0, help="How many runners-up to list.")]
TimeModel = Annotated[T, typer.Option("--time-model", help="Calibrated time-model file from 'frenzy calibrate'.")]

# ---- launchers -------------------------------------------------------------------------------------------------

Emit = Annotated[T, typer.Option("--emit", help=(
    f"Plan within what this launcher can start, then print its launch config: {', '.join(LAUNCHERS[:-1])} or "
    f"{LAUNCHERS[-1]} (with --json: in the JSON, under 'launch')."))]
EmitOption = Annotated[T, typer.Option("--emit-option", "-o", help=(
    "KEY=VALUE option of the --emit launcher (repeatable), e.g. -o script=train.py."))]
EmitTo = Annotated[T, typer.Option("--emit-to", help="Write the --emit launcher text to this file instead of stdout.")]

# ---- output ----------------------------------------------------------------------------------------------------

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables (nothing else on stdout).")]
Plot = Annotated[Path | None, typer.Option("--plot", help=(
    "Also save a figure of the result to this file: .png, .svg or .pdf by the suffix (needs matplotlib)."))]
