"""The small base every launcher adapter builds on: its options model, its output kind, and what a plan says.

An adapter is a pure function ``(Plan, options) -> str | dict``: it reads the plan and writes what one launcher
needs to run it. It never talks to the launcher.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Generic, TypeVar

import yaml
from pydantic import JsonValue, ValidationInfo, field_validator

from frenzy_core._base import FrozenModel
from frenzy_core._data import data_text
from frenzy_core._files import load_yaml
from frenzy_core.config.layout import global_batch_size, num_microbatches
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.planning.launchers import LaunchScope, get_launch_scope, launchers_where
from frenzy_core.planning.plan import Plan, StagePlan

__all__ = [
    "GROUP_ENV",
    "MULTILINE",
    "OFFLOAD_ENV",
    "RECIPE_ENV",
    "STAGE_ENV",
    "Adapter",
    "AdapterOptions",
    "NodeSlot",
    "OutputFormat",
    "gpu_vendor",
    "launcher_gpu_name",
    "node_runs",
    "node_slots",
    "per_stage_tp_launchers",
    "recipe_env",
    "site_name",
    "stage_spec",
    "uniform_gpus_per_node",
]


class OutputFormat(str, enum.Enum):
    """How :meth:`Adapter.emit` writes an adapter's result as text."""

    YAML = "yaml"
    """A mapping written as YAML (safe dumper)."""
    JSON = "json"
    """A mapping written as indented JSON."""
    TEXT = "text"
    """The adapter renders its own text (shell script, Python snippet, command lines)."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Control characters: a newline in an option would start a new line of a script (a shell injection)."""

MULTILINE: dict[str, JsonValue] = {"multiline": True}
"""``json_schema_extra`` of the few string options that are whole scripts (SkyPilot's ``setup``): newlines allowed."""


class AdapterOptions(FrozenModel):
    """Options of one adapter; unknown option names raise ConfigError naming them, and so does a control
    character in any string option (a script's line break or escape sequence smuggled in through a value)."""

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or "option"
        allowed = "\n" if cls.model_fields[name].json_schema_extra == MULTILINE else ""
        for where, text in _strings(value, name):
            bad = sorted({c for c in _CONTROL.findall(text) if c not in allowed})
            if bad:
                raise ValueError(f"{where} holds control character(s) {', '.join(map(repr, bad))}; use printable "
                                 "characters only")
        return value


def _strings(value: Any, where: str) -> list[tuple[str, str]]:
    """Every string in an option value (lists and mappings included, keys too), with where it sits."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, (list, tuple)):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [*_strings(k, f"{where} key"), *_strings(v, f"{where}[{k!r}]")]]
    return []


OptionsT = TypeVar("OptionsT", bound=AdapterOptions)


@dataclass(frozen=True)
class Adapter(Generic[OptionsT]):
    """One launcher: ``build`` turns a plan into its config; ``render`` (TEXT adapters) into text."""

    name: str
    summary: str
    output: OutputFormat
    options: type[OptionsT]
    build: Callable[[Plan, OptionsT], dict[str, Any]]
    render: Callable[[dict[str, Any]], str] | None = None
    narrower: Callable[[OptionsT], LaunchScope | None] | None = None
    """The narrower scope some options write within (torchrun's ``torchtitan=True``: ``TORCHTITAN``)."""

    @property
    def scope(self) -> LaunchScope:
        """What this launcher can run (``plan_job(..., launcher=name)`` plans within it): its row of
        :data:`frenzy_core.planning.LAUNCH_SCOPES`."""
        return get_launch_scope(self.name)

    def scope_for(self, **options: Any) -> LaunchScope:
        """What this launcher can run with ``options`` (``frenzy plan --emit X -o ...`` plans within it): its
        row, or the narrower scope the options ask for."""
        narrower = None if self.narrower is None else self.narrower(self.options.model_validate(options))
        return narrower or self.scope

    def __call__(self, plan: Plan, **options: Any) -> dict[str, Any]:
        """The launcher's config for ``plan`` as plain data (``options`` are this adapter's keyword options)."""
        if not isinstance(plan, Plan):
            raise ConfigError(f"{self.name}: expected a Plan, got {type(plan).__name__}", field="plan",
                              hint="pass the result of plan_job(...)")
        if plan.grouped:
            _check_groups(plan, self.scope)
        return self.build(plan, self.options.model_validate(options))

    def emit(self, plan: Plan, **options: Any) -> str:
        """The launcher's config for ``plan`` as the text the launcher reads."""
        data = self(plan, **options)
        if self.output is OutputFormat.YAML:
            return str(yaml.dump(data, Dumper=_BlockDumper, sort_keys=False))
        if self.output is OutputFormat.JSON:
            return json.dumps(data, indent=2) + "\n"
        assert self.render is not None, f"TEXT adapter {self.name} has no render"
        return self.render(data)


def _check_groups(plan: Plan, scope: LaunchScope) -> None:
    """ConfigError when ``scope``'s launcher cannot start a plan of several groups (pipeline stages on different
    types; replica groups spanning GPU types, or ranks that differ by one micro-batch), or no launcher can (one
    process group over NVIDIA and AMD GPUs: NCCL and RCCL do not talk to each other)."""
    if plan.stages[0].pipeline_stage is not None and not scope.stages:
        can = launchers_where(lambda s: s.stages)
        raise ConfigError(
            f"{scope.name} cannot launch a plan spanning GPU types ({', '.join(plan.gpu_types)}): its pipeline "
            "stages run on different types with their own tp and layer counts, which it has no way to express",
            field="plan.stages", value=[s.gpu_type for s in plan.stages],
            hint=f"launch it with {', '.join(can)}, or plan with plan_job(..., launcher={scope.name!r}) (frenzy plan "
                 f"--emit {scope.name}), which keeps a pipeline on one type for it, or mixed_stages=False")
    can = launchers_where(lambda s: s.mixed)
    if plan.stages[0].pipeline_stage is None and not scope.mixed and not plan.mixed:
        raise ConfigError(
            f"{scope.name} cannot launch a plan whose data-parallel ranks run different micro-batch counts ("
            + " and ".join(f"{s.dp} x {s.micro_batches}" for s in plan.stages) + f": the global batch "
            f"{plan.training.global_batch_size} does not split evenly), which it has no way to express",
            field="plan.stages", value=[s.micro_batches for s in plan.stages],
            hint=f"launch it with {', '.join(can)}, or plan with plan_job(..., launcher={scope.name!r}) (frenzy "
                 f"plan --emit {scope.name}), uneven_dp=False, or a global batch that micro-batch x dp divides")
    if plan.stages[0].pipeline_stage is None and not scope.mixed:
        raise ConfigError(
            f"{scope.name} cannot launch a plan spanning GPU types ({', '.join(plan.gpu_types)}): its replica "
            "groups run different micro-batch counts, which it has no way to express",
            field="plan.gpu_types", value=list(plan.gpu_types),
            hint=f"launch it with {', '.join(can)}, or plan with plan_job(..., launcher={scope.name!r}) (frenzy "
                 f"plan --emit {scope.name}) or mixed_types=False to keep the plan on one GPU type")
    vendors = {stage.gpu_type: stage_spec(plan, stage).vendor for stage in plan.stages}
    if len(set(vendors.values())) > 1:
        raise ConfigError(
            "the plan's GPU groups span GPU vendors (" + ", ".join(f"{t}: {v}" for t, v in vendors.items())
            + "): one process group cannot join NVIDIA and AMD GPUs (NCCL and RCCL do not interoperate)",
            field="plan.gpu_types", value=list(plan.gpu_types),
            hint="plan with constraints={'gpu_types': [...]} naming one vendor's types")


def per_stage_tp_launchers() -> list[str]:
    """The launchers that run pipeline stages of different tp (each stage's ranks with its own environment):
    ``LaunchScope.stages`` and ``stage_tp``."""
    return launchers_where(lambda s: s.stages and s.stage_tp)


class _BlockDumper(yaml.SafeDumper):
    """The safe dumper, writing multi-line strings (scripts) as ``|`` blocks so they read as written."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


# ---- what a plan says, in the shapes launchers want ----------------------------------------------------------


@dataclass(frozen=True)
class NodeSlot:
    """One node of a plan: its name, rank among the plan's nodes, the GPU indices the job takes on it, the
    replica group (index into ``plan.stages``) it belongs to and the global rank of its first process."""

    name: str
    rank: int
    gpus: tuple[int, ...]
    group: int = 0
    first_rank: int = 0

    @property
    def host(self) -> str:
        """The name as a hostname (``node:3`` -> ``node-3``): a placeholder where no real host is given."""
        return re.sub(r"[^A-Za-z0-9.-]", "-", self.name)


def node_slots(plan: Plan) -> list[NodeSlot]:
    """The plan's nodes, group by group in placement order (node rank 0 hosts the rendezvous); with torchrun's
    static rendezvous node k's processes are the global ranks after those of nodes 0..k-1 (torch elastic's
    rank assignment), so each replica group holds consecutive ranks."""
    slots: list[NodeSlot] = []
    first = 0
    for group, stage in enumerate(plan.stages):
        for name, gpus in stage.placement.items():
            slots.append(NodeSlot(name=name, rank=len(slots), gpus=tuple(gpus), group=group, first_rank=first))
            first += len(gpus)
    return slots


def node_runs(plan: Plan) -> list[list[NodeSlot]]:
    """Consecutive nodes of one replica group (or stage) and one GPU count, in rank order: what a heterogeneous
    Slurm job's component or a JobSet's replicated job launches alike."""
    return [list(run) for _, run in groupby(node_slots(plan), key=lambda slot: (slot.group, len(slot.gpus)))]


def uniform_gpus_per_node(plan: Plan, launcher: str) -> int:
    """GPUs per node when every node of the plan gets the same number; ConfigError for launchers that need it."""
    counts = {slot.name: len(slot.gpus) for slot in node_slots(plan)}
    sizes = set(counts.values())
    if len(sizes) != 1:
        raise ConfigError(
            f"{launcher} starts the same number of processes on every node, but the plan's placement is uneven: "
            + ", ".join(f"{n}: {c}" for n, c in counts.items()),
            field="plan.placement", value=counts,
            hint="use the torchrun or ray adapter, or plan with num_gpus a multiple of the node size")
    return sizes.pop()


def stage_spec(plan: Plan, stage: StagePlan) -> GPUSpec:
    """The spec of a group's GPU type: the plan's own for its type, the built-in one for the others."""
    return plan.gpu_spec if stage.gpu_type == plan.gpu_type else get_gpu_spec(stage.gpu_type)


def gpu_vendor(plan: Plan) -> str:
    """``nvidia`` or ``amd``: decides device-visibility variables and Kubernetes resource names (one vendor per
    plan: :meth:`Adapter.__call__` refuses mixed plans that span vendors)."""
    return plan.gpu_spec.vendor


RECIPE_ENV: dict[str, str] = {
    "FRENZY_GPU_TYPE": "GPU type id of the plan",
    "FRENZY_WORLD_SIZE": "GPUs (ranks) of the job",
    "FRENZY_DP": "data-parallel degree",
    "FRENZY_TP": "tensor-parallel degree",
    "FRENZY_PP": "pipeline-parallel degree",
    "FRENZY_VPP": "virtual pipeline chunks per rank",
    "FRENZY_CP": "context-parallel degree",
    "FRENZY_EP": "expert-parallel degree",
    "FRENZY_SEQ_LEN": "tokens per sample",
    "FRENZY_MICRO_BATCH_SIZE": "samples per rank per forward pass",
    "FRENZY_GRAD_ACCUM_STEPS": "micro-batches per rank per optimizer step",
    "FRENZY_GLOBAL_BATCH_SIZE": "samples per optimizer step, all ranks",
    "FRENZY_ZERO_STAGE": "ZeRO stage / FSDP sharding (Megatron's distributed optimizer counts as 1)",
    "FRENZY_RECOMPUTE": "activation recomputation: none, selective or full",
    "FRENZY_PRECISION": "dtype recipe (TrainingConfig.precision)",
    "FRENZY_SEQUENCE_PARALLEL": "1: the tp group shards the norms and residual stream over the sequence "
                                "(Megatron's, or torchtitan's TP plan); 0: plain tensor parallelism",
}
"""Environment variables the launching adapters set on every rank, so a training script can read the plan's
recipe without parsing it (torchrun itself sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""


GROUP_ENV: dict[str, str] = {
    "FRENZY_GROUP": "index of the rank's replica group (plan.stages)",
    "FRENZY_GROUPS": "replica groups of the job",
    "FRENZY_GROUP_DP": "data-parallel replicas in the rank's group",
    "FRENZY_GROUP_FIRST_RANK": "global rank of the group's first process (its ranks are consecutive)",
    "FRENZY_GROUP_FIRST_REPLICA": "data-parallel index of the group's first replica",
    "FRENZY_GROUP_FIRST_SAMPLE": "offset of the group's first sample in each global batch",
}
"""Set besides :data:`RECIPE_ENV` on the ranks of a plan of several replica groups (spanning GPU types, or ranks
that differ by one micro-batch; where FRENZY_GPU_TYPE and FRENZY_GRAD_ACCUM_STEPS are the rank's group's):
docs/adapters.md, "Mixed-type plans", says how a script uses them."""


STAGE_ENV: dict[str, str] = {
    "FRENZY_STAGE": "pipeline stage of the rank (0 runs the embedding, FRENZY_PP - 1 the head)",
    "FRENZY_STAGE_FIRST_LAYER": "index of the stage's first transformer layer",
    "FRENZY_STAGE_NUM_LAYERS": "transformer layers of the stage (consecutive)",
    "FRENZY_STAGE_FIRST_RANK": "global rank of the stage's first process: its FRENZY_DP x FRENZY_TP ranks are "
                               "consecutive, replica d's tp group the FRENZY_TP from FIRST_RANK + d x FRENZY_TP",
    "FRENZY_STAGE_LAYERS": "every stage's layer count, comma-separated, in pipeline order",
    "FRENZY_STAGE_TPS": "every stage's tensor-parallel degree, comma-separated, in pipeline order",
    "FRENZY_STAGE_GPU_TYPES": "every stage's GPU type id, comma-separated, in pipeline order",
}
"""Set besides :data:`RECIPE_ENV`, instead of :data:`GROUP_ENV`, on the ranks of a pipeline whose stages run on
different GPU types (issue 12, form a), where FRENZY_GPU_TYPE and FRENZY_TP are the rank's stage's and
FRENZY_PP the number of stages: docs/adapters.md, "Pipeline stages on different types", says how a script
builds its stage and process groups from them."""


OFFLOAD_ENV: dict[str, str] = {
    "FRENZY_OFFLOAD_OPTIMIZER": "where master weights, optimizer states and the step live: none, cpu or nvme "
                                "(TrainingConfig.offload_optimizer; DeepSpeed offload_optimizer, FSDP CPUOffload)",
    "FRENZY_OFFLOAD_PARAMS": "where the (sharded) parameters and gradients live between uses: none, cpu or nvme "
                             "(TrainingConfig.offload_params; DeepSpeed offload_param, FSDP CPUOffload)",
    "FRENZY_ACTIVATION_OFFLOAD_LAYERS": "layers per stage whose saved activations wait in host memory (torch "
                                        "save_on_cpu; 0: none)",
}
"""Set besides the others on every rank of a plan that offloads (the planner's memory and time for it assume the
script offloads as they say; docs/adapters.md, "Offload")."""


def recipe_env(plan: Plan, group: int = 0) -> dict[str, str]:
    """The values of :data:`RECIPE_ENV` for the ranks of ``plan``'s group ``group`` (the only one of a
    single-type plan), plus :data:`GROUP_ENV` when the plan has several replica groups or :data:`STAGE_ENV` for
    pipeline stages of different types, and :data:`OFFLOAD_ENV` when it offloads; as strings."""
    stage = plan.stages[group]
    t, p = plan.stage_training(stage), plan.stage_parallel(stage)
    values: dict[str, object] = {
        "FRENZY_GPU_TYPE": stage.gpu_type, "FRENZY_WORLD_SIZE": plan.num_gpus, "FRENZY_DP": p.dp,
        "FRENZY_TP": p.tp, "FRENZY_PP": p.pp, "FRENZY_VPP": p.vpp, "FRENZY_CP": p.cp, "FRENZY_EP": p.ep,
        "FRENZY_SEQ_LEN": t.seq_len, "FRENZY_MICRO_BATCH_SIZE": t.micro_batch_size,
        "FRENZY_GRAD_ACCUM_STEPS": num_microbatches(t, p),
        "FRENZY_GLOBAL_BATCH_SIZE": global_batch_size(plan.training, p),
        "FRENZY_ZERO_STAGE": t.effective_zero_stage, "FRENZY_RECOMPUTE": t.recompute.value,
        "FRENZY_PRECISION": t.precision.value, "FRENZY_SEQUENCE_PARALLEL": int(t.sequence_parallel and p.tp > 1),
    }
    assert list(values) == list(RECIPE_ENV), "recipe_env and RECIPE_ENV disagree"
    if stage.pipeline_stage is not None:
        values.update(_stage_values(plan, group))
        assert list(values)[len(RECIPE_ENV):] == list(STAGE_ENV), "recipe_env and STAGE_ENV disagree"
    elif plan.grouped:
        before = plan.stages[:group]
        values.update({
            "FRENZY_GROUP": group, "FRENZY_GROUPS": len(plan.stages), "FRENZY_GROUP_DP": stage.dp,
            "FRENZY_GROUP_FIRST_RANK": sum(s.num_gpus for s in before),
            "FRENZY_GROUP_FIRST_REPLICA": sum(s.dp for s in before),
            "FRENZY_GROUP_FIRST_SAMPLE": sum(s.samples for s in before)})
        assert list(values)[len(RECIPE_ENV):] == list(GROUP_ENV), "recipe_env and GROUP_ENV disagree"
    if t.offloads:
        values.update({"FRENZY_OFFLOAD_OPTIMIZER": t.offload_optimizer.value,
                       "FRENZY_OFFLOAD_PARAMS": t.offload_params.value,
                       "FRENZY_ACTIVATION_OFFLOAD_LAYERS": t.activation_offload_layers})
    return {k: str(v) for k, v in values.items()}


def _stage_values(plan: Plan, group: int) -> dict[str, object]:
    """:data:`STAGE_ENV` of pipeline stage ``group`` of a form (a) plan (each stage is one group of plan.stages,
    in pipeline order, so its ranks follow the earlier stages')."""
    stage, stages = plan.stages[group], plan.stages
    assert [s.pipeline_stage for s in stages] == list(range(len(stages))), "stages out of pipeline order"
    return {"FRENZY_STAGE": group, "FRENZY_STAGE_FIRST_LAYER": stage.first_layer,
            "FRENZY_STAGE_NUM_LAYERS": stage.num_layers,
            "FRENZY_STAGE_FIRST_RANK": sum(s.num_gpus for s in stages[:group]),
            "FRENZY_STAGE_LAYERS": ",".join(str(s.num_layers) for s in stages),
            "FRENZY_STAGE_TPS": ",".join(str(s.tp) for s in stages),
            "FRENZY_STAGE_GPU_TYPES": ",".join(s.gpu_type for s in stages)}


def site_name(plan: Plan, value: str | dict[str, str] | None, gpu_type: str, option: str) -> str | None:
    """An option that names GPU types the site's way, for ``gpu_type``: one name (single-type plans) or a
    mapping GPU type id -> name (None: the adapter's default for the type)."""
    if isinstance(value, dict):
        return value.get(gpu_type)
    if value is not None and plan.mixed:
        raise ConfigError(
            f"{option} is one name, but the plan spans GPU types ({', '.join(plan.gpu_types)})", field=option,
            value=value, hint=f"give {option} as a mapping from GPU type id to name, e.g. "
                              f"{{{', '.join(repr(t) + ': ...' for t in plan.gpu_types)}}}")
    return value


class _LauncherNames(FrozenModel):
    """``data/launcher_gpu_names.yaml``."""

    sources: dict[str, str]
    gpus: dict[str, dict[str, str | None]]


@functools.lru_cache(maxsize=1)
def _launcher_names() -> _LauncherNames:
    text = data_text("launcher_gpu_names.yaml")
    names: _LauncherNames = _LauncherNames.model_validate(load_yaml(text, "launcher_gpu_names.yaml"))
    return names


def launcher_gpu_name(gpu_type: str, launcher: str, option: str, override: str | None) -> str:
    """What ``launcher`` calls ``gpu_type``: ``override`` if given, else the table's name.

    Raises ConfigError naming ``option`` when the launcher has no name for the type (the adapter would otherwise
    lose the GPU-type constraint the plan's memory estimate depends on).
    """
    if override is not None:
        return override
    table = _launcher_names()
    name = table.gpus.get(gpu_type, {}).get(launcher)
    if name is None:
        raise ConfigError(
            f"{launcher} has no known name for GPU type {gpu_type!r}", field=option, value=None,
            hint=f"pass {option}=... with the name your {launcher} setup uses")
    return name
