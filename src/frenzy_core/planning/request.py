"""What a planning request may ask for: the objective and the constraints (which also pin searched fields)."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field, model_validator

from frenzy_core import _limits as limits
from frenzy_core._base import FrozenModel
from frenzy_core._limits import at_most
from frenzy_core.config.training import Recompute

__all__ = [
    "DEFAULT_HEADROOM",
    "DEFAULT_MICRO_BATCH_SIZES",
    "DEFAULT_MIXED_STAGES",
    "SEARCHED_TRAINING_FIELDS",
    "Objective",
    "PlacementMode",
    "PlanConstraints",
]

DEFAULT_HEADROOM = 0.05
"""Fraction of a GPU's usable memory kept free by default: a safety margin for allocator behaviour the
estimator does not model (our choice, not a published figure; set ``headroom=0`` to use every byte)."""

DEFAULT_MIXED_STAGES = False
"""Whether ``plan_job`` (and ``frenzy plan``) searches pipelines whose stages run on different GPU types (issue 12,
form a) unless told: off while its search meets the planner's latency targets in CPU time with no margin and its
wall time on a loaded machine far above them (docs/benchmarks.md)."""

DEFAULT_MICRO_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8)
"""Micro-batch sizes searched when none is pinned (powers of two, as Megatron and torchtitan recipes use)."""

SEARCHED_TRAINING_FIELDS: tuple[str, ...] = (
    "micro_batch_size", "recompute", "zero_stage", "distributed_optimizer", "sequence_parallel",
)
"""Fields of :class:`TrainingConfig` the planner chooses unless the request sets them explicitly or the matching
:class:`PlanConstraints` field pins them. Every other training field stays as given."""


class Objective(str, enum.Enum):
    """What the planner optimises; ties are broken as each member says, then by the least fragmentation."""

    THROUGHPUT = "throughput"
    """Most tokens per second; ties: fewer GPUs, then cheaper."""
    COST = "cost"
    """Fewest dollars for ``token_budget`` tokens (without a budget: per token); ties: faster, then fewer GPUs.
    Needs GPU prices."""
    TIME_TO_TRAIN = "time_to_train"
    """Least wall time for ``token_budget`` tokens; ties: cheaper, then fewer GPUs."""
    GPUS = "gpus"
    """Fewest GPUs that fit; ties: faster, then cheaper."""

    @property
    def unit(self) -> str:
        """Unit of the objective's value (``Plan.objective_value``) with a token budget: tokens/s, USD, s or
        GPUs (``cost`` without a budget: :data:`COST_PER_TOKEN_UNIT`)."""
        return _OBJECTIVE_UNITS[self]

    def unit_for(self, token_budget: int | None) -> str:
        """The unit of the objective's value for a request with this ``token_budget``."""
        return COST_PER_TOKEN_UNIT if self is Objective.COST and token_budget is None else self.unit


_OBJECTIVE_UNITS: dict[Objective, str] = {
    Objective.THROUGHPUT: "tokens/s",
    Objective.COST: "USD",
    Objective.TIME_TO_TRAIN: "s",
    Objective.GPUS: "GPUs",
}

COST_PER_TOKEN_UNIT = "USD/token"
"""Unit of the cost objective without a token budget: dollars per trained token."""


class PlacementMode(str, enum.Enum):
    """How a job's GPUs may be spread over nodes (launchers that start one process count for all nodes need
    ``even``)."""

    ANY = "any"
    """Any whole tensor-parallel groups per node."""
    EVEN = "even"
    """The same number of GPUs on every node the job uses."""
    WHOLE_NODES = "whole_nodes"
    """Every GPU of each node the job uses (the nodes entirely free), all of one size."""

    def at_least(self, other: PlacementMode) -> PlacementMode:
        """The stricter of the two (any < even < whole_nodes)."""
        order = list(PlacementMode)
        return max(self, other, key=order.index)


class PlanConstraints(FrozenModel):
    """Hard limits on a plan, and pins for the searched training fields (None: searched)."""

    headroom: float = Field(default=DEFAULT_HEADROOM, ge=0.0, lt=1.0,
                            description="Fraction of each GPU's usable memory left free.")
    gpu_types: list[str] | None = Field(default=None, min_length=1,
                                        description="Allowed GPU type ids (None: every type in the cluster).")
    max_gpus: Annotated[int | None, at_most(limits.GPUS)] = Field(
        default=None, gt=0, description="Most GPUs the job may take.")
    num_gpus: Annotated[int | None, at_most(limits.GPUS)] = Field(
        default=None, gt=0, description="Exactly this many GPUs (user-request mode).")
    max_price_per_hour_usd: float | None = Field(default=None, gt=0,
                                                 description="Most dollars per hour for all GPUs of the job.")
    token_budget: Annotated[int | None, at_most(limits.TOKENS)] = Field(default=None, gt=0, description=(
        "Tokens to train; needed by time_to_train (cost without it is per token)."))
    deadline_s: Annotated[float | None, at_most(limits.TIME_S)] = Field(
        default=None, gt=0, description="Finish token_budget tokens within this many seconds.")
    tp: Annotated[int | None, at_most(limits.DEGREE)] = Field(
        default=None, gt=0, description="Pin the tensor-parallel degree.")
    pp: Annotated[int | None, at_most(limits.DEGREE)] = Field(
        default=None, gt=0, description="Pin the pipeline-parallel degree.")
    micro_batch_sizes: list[Annotated[int, at_most(limits.MICRO_BATCH)]] | None = Field(
        default=None, min_length=1, max_length=64, description="Micro-batch sizes to search (None: 1, 2, 4, 8).")
    recompute: list[Recompute] | None = Field(default=None, min_length=1,
                                              description="Recompute modes to search (None: all three).")
    zero_stages: list[int] | None = Field(default=None, min_length=1,
                                          description="ZeRO stages to search (None: 0-3 for torch, 0 for Megatron).")
    distributed_optimizer: bool | None = Field(default=None,
                                               description="Pin Megatron's distributed optimizer (None: searched).")
    sequence_parallel: bool | None = Field(default=None,
                                           description="Pin sequence parallelism (None: searched when tp>1).")
    placement: PlacementMode = Field(default=PlacementMode.ANY, description=(
        "any: whole tensor-parallel groups per node; even: the same GPU count on every node; whole_nodes: whole "
        "free nodes of one size."))

    @model_validator(mode="after")
    def _check(self) -> PlanConstraints:
        if self.deadline_s is not None and self.token_budget is None:
            raise ValueError("deadline_s needs token_budget (the tokens that must be trained by the deadline)")
        if self.num_gpus is not None and self.max_gpus is not None and self.num_gpus > self.max_gpus:
            raise ValueError(f"num_gpus={self.num_gpus} exceeds max_gpus={self.max_gpus}; raise max_gpus")
        bad_mbs = [m for m in self.micro_batch_sizes or [] if m <= 0]
        if bad_mbs:
            raise ValueError(f"micro_batch_sizes must be positive, got {bad_mbs}")
        bad_zero = [z for z in self.zero_stages or [] if z not in (0, 1, 2, 3)]
        if bad_zero:
            raise ValueError(f"zero_stages must be among 0, 1, 2, 3, got {bad_zero}")
        return self
