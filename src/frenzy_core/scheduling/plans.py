"""What a scheduler hands a launcher: the GPUs a job gets (``Placement``) and the layout it runs there
(``RunLayout``), both plain data that round-trips through JSON. A placement spanning GPU types (issue 12,
form b: data-parallel replica groups of different types) lists its groups (``PlacementGroup``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig

__all__ = ["Placement", "PlacementGroup", "RunLayout"]


class RunLayout(FrozenModel):
    """A layout the planner chose for one set of GPUs: degrees, the recipe with its searched fields set, and
    what the memory and time models give it there."""

    parallel: ParallelConfig
    training: TrainingConfig = Field(description="The job's recipe with micro-batch, recompute, ZeRO, ... set.")
    tokens_per_s: float = Field(gt=0, description="Throughput of this layout on these GPUs (time model).")
    device_bytes: int = Field(ge=0, description="Memory the busiest rank needs (memory model).")

    @property
    def world_size(self) -> int:
        return self.parallel.world_size

    description: str = Field(description="The layout in words, as the planner writes it (``dp2 tp4 pp1 mbs2 sp``).")

    def describe(self) -> str:
        """The layout in words (only what departs from the defaults)."""
        return self.description


class PlacementGroup(FrozenModel):
    """One GPU type's replica group of a placement that spans types: ``replicas`` copies of the layout (its tp,
    pp, cp) on ``nodes``, each running ``micro_batches`` micro-batches per step."""

    gpu_type: str
    nodes: dict[int, int] = Field(description="Node index -> GPUs the group takes there (all of gpu_type).")
    replicas: int = Field(gt=0)
    micro_batches: int = Field(gt=0, description="Micro-batches each replica of the group runs per step.")
    device_bytes: int = Field(ge=0, description="Memory the group's busiest rank needs (memory model).")
    iteration_s: float = Field(gt=0, description="Seconds the group takes per step (time model, where it lands).")

    @property
    def num_gpus(self) -> int:
        return sum(self.nodes.values())


class Placement(FrozenModel):
    """Run ``job_id`` on ``nodes`` (node index -> GPUs taken there) at ``tokens_per_s``.

    ``layout`` is the planner's layout for exactly these GPUs (None when the throughput function is a plain
    callable that names no layout, as test stubs are). A single-type placement has no ``groups`` and every GPU
    is of ``gpu_type``; one spanning types lists a group per type (``gpu_type`` is then the first group's type,
    ``layout.parallel.dp`` the replicas of all groups and ``layout.training`` the job's whole global batch)."""

    job_id: str
    gpu_type: str
    nodes: dict[int, int] = Field(description="Node index (cluster order, shapes expanded) -> GPUs on it.")
    tokens_per_s: float = Field(gt=0)
    layout: RunLayout | None = None
    groups: tuple[PlacementGroup, ...] = Field(default=(), description="Replica groups, one per GPU type, when "
                                               "the placement spans types (empty otherwise).")

    @model_validator(mode="after")
    def _check_groups(self) -> Placement:
        """A saved placement is whole when loaded (:meth:`group_problem`)."""
        problem = self.group_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def group_problem(self) -> str | None:
        """Why the groups do not make a placement spanning types, or None: two or more groups of distinct
        types, the first of ``gpu_type``, whose GPUs are disjoint and together exactly ``nodes``. The one home
        of these rules: the validator and :class:`~frenzy_core.scheduling.check.PlacementCheck` (which also
        sees copies made without validation) both ask it."""
        if not self.groups:
            return None
        types = [g.gpu_type for g in self.groups]
        if len(types) < 2 or len(set(types)) != len(types) or types[0] != self.gpu_type:
            return (f"groups on {types} with gpu_type {self.gpu_type!r}: a placement spanning types has one group "
                    "per type, two at least, the first of gpu_type")
        seen: dict[int, int] = {}
        for g in self.groups:
            for node, count in g.nodes.items():
                if node in seen or count <= 0:
                    return (f"node {node} is in two groups or given {count} GPUs; each group takes GPUs of its own "
                            "nodes")
                seen[node] = count
        if seen != self.nodes:
            return f"the groups take {seen}, the placement {self.nodes}: they must be the same GPUs"
        return None

    def node_types(self) -> dict[int, str]:
        """Node index -> the GPU type the placement needs there (its group's, or ``gpu_type``)."""
        if self.groups:
            return {n: g.gpu_type for g in self.groups for n in g.nodes}
        return dict.fromkeys(self.nodes, self.gpu_type)

    @property
    def num_gpus(self) -> int:
        """GPUs the placement takes."""
        return sum(self.nodes.values())

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types the placement uses (one for a single-type placement)."""
        return tuple(g.gpu_type for g in self.groups) or (self.gpu_type,)

    def describe(self) -> str | None:
        """The layout in words, when there is one."""
        return None if self.layout is None else self.layout.describe()
