"""``Plan``: the planner's answer (GPU type, placement, layout, recipe, estimates), with runners-up and losers."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.config.batch import DefaultBatch
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import Recompute, TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.memory.result import MemoryEstimate
from frenzy_core.planning.explain import explain_plan
from frenzy_core.planning.request import Objective, PlacementMode
from frenzy_core.timing.result import TimeEstimate

__all__ = ["Alternative", "Plan", "RejectReason", "Rejection", "StagePlan"]


class RejectReason(str, enum.Enum):
    """Why a GPU type of the cluster was not chosen, checked in this order."""

    NOT_ALLOWED = "not_allowed"
    """Excluded by ``constraints.gpu_types``."""
    DOES_NOT_FIT = "does_not_fit"
    """No layout fits its memory, even using every GPU of the type."""
    NOT_ENOUGH_FREE = "not_enough_free"
    """Layouts fit, but need more free GPUs than there are (or than max_gpus/num_gpus allow)."""
    LIMITS = "limits"
    """Layouts fit and are free, but break a price, deadline or objective requirement."""
    TP_SPLIT = "tp_split"
    """No node has enough free GPUs for a tensor-parallel group of any fitting layout."""
    OUTRANKED = "outranked"
    """Feasible, but worse on the objective than the chosen plan."""
    HOST_MEMORY = "host_memory"
    """Layouts fit and could be placed, but their offloaded states need more host memory than the nodes have."""


class Rejection(FrozenModel):
    """One GPU type that lost, and why."""

    gpu_type: str
    reason: RejectReason
    message: str = Field(description="Why, in words, with needed against available.")
    best_value: float | None = Field(default=None, description="Its best feasible objective value, if any.")


class Alternative(FrozenModel):
    """A runner-up: a feasible layout that ranked below the plan (lighter than a Plan: no placement)."""

    gpu_type: str
    num_gpus: int
    parallel: ParallelConfig
    micro_batch_size: int
    recompute: Recompute
    zero_stage: int
    distributed_optimizer: bool
    sequence_parallel: bool
    device_bytes: int
    tokens_per_s: float
    price_per_hour_usd: float | None
    objective_value: float


class StagePlan(FrozenModel):
    """One group of a plan's GPUs, all of one type: ``dp`` replicas of ``num_layers`` consecutive layers, each
    replica split into ``pp`` even pipeline stages of ``tp`` x ``cp`` GPUs. A single-type plan is one group; a
    plan of data-parallel replica groups of different types (issue 12, form b) has one group per type; a plan
    whose pipeline stages run on different types (form a) has one group per pipeline stage
    (``pipeline_stage``), each with its own type, tp and layer count."""

    gpu_type: str = Field(description="GPU type id of every GPU in the group.")
    num_gpus: int = Field(gt=0, description="dp x pp x tp x cp.")
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    cp: int = Field(default=1, gt=0)
    dp: int = Field(gt=0, description="Data-parallel replicas in this group.")
    first_layer: int = Field(default=0, ge=0, description="Index of the group's first transformer layer.")
    num_layers: int = Field(gt=0, description="Transformer layers each replica of the group runs.")
    micro_batches: int = Field(gt=0, description="Micro-batches each replica of the group runs per step.")
    samples: int = Field(gt=0, description="Sequences of the global batch the group trains per step "
                         "(dp x micro_batches x micro-batch size).")
    placement: dict[str, list[int]] = Field(description="Node name -> GPU indices the group takes on it.")
    device_bytes: int = Field(ge=0, description="Memory of the group's busiest GPU (on its own type).")
    usable_bytes: int = Field(ge=0, description="Memory a GPU of this type may use (headroom taken off).")
    iteration_s: float = Field(gt=0, description="Seconds the group takes per step, gradient sync included.")
    links: Links | None = Field(default=None, description="Node size and links the group was timed with.")
    pipeline_stage: int | None = Field(default=None, ge=0, description=(
        "Form (a): the pipeline stage this group is (plan.parallel.stage_layers gives its layers); None: the "
        "group runs whole replicas."))
    microbatch_s: float | None = Field(default=None, gt=0, description=(
        "Form (a): seconds of one micro-batch forward and backward on this stage, exposed traffic included."))


class Plan(FrozenModel):
    """Which GPUs a job gets and how it runs on them; ``explain()`` says why."""

    model: ModelConfig = Field(description="The model the plan is for (so a plan is enough to launch the job).")
    gpu_type: str = Field(description="GPU type id of every GPU in the plan.")
    gpu_spec: GPUSpec = Field(description="The spec the plan was made with: the cluster's own catalogue entry "
                              "(default when built by hand: the built-in one of gpu_type).")
    num_gpus: int = Field(gt=0)
    placement: dict[str, list[int]] = Field(description="Node name -> GPU indices the job takes on it.")
    parallel: ParallelConfig
    training: TrainingConfig = Field(description="The request's recipe with the searched fields as chosen.")
    memory: MemoryEstimate
    time: TimeEstimate
    links: Links | None = Field(default=None, description=(
        "Node size and links the time was estimated with: where its placement puts the job "
        "(estimate_iteration_time(..., cluster=plan.links) reproduces plan.time for a plan of one group; a grouped "
        "plan's groups are re-estimated with plan.stage_training(group))."))
    default_batch: DefaultBatch | None = Field(default=None, description=(
        "The default global batch when the request gave none; training.global_batch_size is it, or it moved "
        "(by at most 5 %) to split into whole, equal micro-batches per data-parallel rank."))
    placement_mode: PlacementMode = Field(default=PlacementMode.ANY, description="How the GPUs may be spread.")
    launcher: str | None = Field(default=None, description="The launcher the plan was made launchable by.")
    notes: list[str] = Field(default_factory=list, description="What the plan changed from the request, in words.")
    usable_bytes: int = Field(description="GPU memory the plan may use: usable memory less the headroom.")
    host_memory_bytes: dict[str, int | None] = Field(default_factory=dict, description=(
        "Node name -> its host memory (None: unknown), for the nodes of the placement: what the ranks on a node "
        "share for offloaded states (memory.host_bytes each)."))
    price_per_hour_usd: float | None = Field(description="All GPUs of the plan together; None without prices.")
    objective: Objective
    token_budget: int | None = Field(default=None, description="The request's token budget (cost without one is "
                                     "per token).")
    objective_value: float = Field(description="In the objective's unit (objective_unit).")
    stranded_gpus: int = Field(ge=0, description="Free GPUs left on the nodes the plan touches (fragmentation).")
    optimal: bool = Field(description="Whether the solver proved the plan optimal for the objective.")
    solver: str = Field(description="cp-sat, exhaustive, or greedy (CP-SAT found nothing in its time limit); "
                        "branch-and-bound for pipeline stages on different types.")
    solve_time_s: float = Field(ge=0, description="Seconds the solver took (estimation not included).")
    alternatives: list[Alternative] = Field(default_factory=list, description="Runners-up, best first.")
    rejected: list[Rejection] = Field(default_factory=list, description="Every other GPU type, and why it lost.")
    stages: tuple[StagePlan, ...] = Field(default=(), description=(
        "The plan's GPU groups: one per GPU type and layer range, or per micro-batch count where data-parallel "
        "ranks run one more than others (one for a plan of equal ranks on one type; filled in from the plan's own "
        "fields when not given)."))
    gpu_types: tuple[str, ...] = Field(default=(), description="GPU types the plan uses, its groups' order "
                                       "(one entry for a single-type plan).")

    @model_validator(mode="before")
    @classmethod
    def _spec_of_type(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("gpu_spec") is None and isinstance(data.get("gpu_type"), str):
            data = {**data, "gpu_spec": get_gpu_spec(data["gpu_type"])}
        return data

    @model_validator(mode="after")
    def _single_group(self) -> Plan:
        """A plan built without groups is one group of its own type (today's single-type plans)."""
        if not self.stages:
            gbs = self.training.global_batch_size or self.training.micro_batch_size * self.parallel.dp
            group = StagePlan(
                gpu_type=self.gpu_type, num_gpus=self.num_gpus, tp=self.parallel.tp, pp=self.parallel.pp,
                cp=self.parallel.cp, dp=self.parallel.dp, num_layers=self.model.num_layers,
                micro_batches=self.time.num_microbatches, samples=gbs, placement=self.placement,
                device_bytes=self.memory.device_bytes, usable_bytes=self.usable_bytes,
                iteration_s=self.time.iteration_s, links=self.links)
            object.__setattr__(self, "stages", (group,))
        if not self.gpu_types:
            object.__setattr__(self, "gpu_types", tuple(dict.fromkeys(s.gpu_type for s in self.stages)))
        if sum(s.num_gpus for s in self.stages) != self.num_gpus:
            raise ValueError(f"the groups hold {sum(s.num_gpus for s in self.stages)} GPUs, not num_gpus="
                             f"{self.num_gpus}")
        return self

    def stage_training(self, stage: StagePlan) -> TrainingConfig:
        """The recipe that reproduces ``stage``'s estimates with ``self.stage_parallel(stage)`` (form b: its own
        micro-batch count per rank: ``estimate_memory(plan.model, plan.stage_training(s), plan.parallel)``
        gives ``s.device_bytes``, and the time model on ``s.links`` gives ``s.iteration_s``; form a: sequence
        parallelism only where the stage has tp > 1, and ``estimate_memory(...).stages[s.pipeline_stage]``
        gives ``s.device_bytes``). For a single-type plan it is ``self.training``."""
        if not self.grouped:
            return self.training
        if stage.pipeline_stage is not None:
            return self.training.replace(sequence_parallel=self.training.sequence_parallel and stage.tp > 1)
        return self.training.replace(
            global_batch_size=stage.micro_batches * self.training.micro_batch_size * self.parallel.dp)

    def stage_parallel(self, stage: StagePlan) -> ParallelConfig:
        """The layout that reproduces ``stage``'s memory: ``self.parallel`` with the stage's own tp (form a);
        ``self.parallel`` otherwise."""
        return self.parallel if stage.pipeline_stage is None else self.parallel.replace(tp=stage.tp)

    @property
    def mixed(self) -> bool:
        """Whether the plan spans several GPU types."""
        return len(self.gpu_types) > 1

    @property
    def grouped(self) -> bool:
        """Whether the plan has several GPU groups: it spans GPU types, or its data-parallel ranks differ by one
        micro-batch (two groups of one type, :mod:`frenzy_core.planning.uneven`)."""
        return len(self.stages) > 1

    @property
    def objective_unit(self) -> str:
        return self.objective.unit_for(self.token_budget)

    def explain(self) -> str:
        """Why this plan: memory and time breakdown, runners-up, and why every other GPU type lost."""
        return explain_plan(self)
