"""What a scheduler hands a launcher: the GPUs a job gets (``Placement``) and the layout it runs there
(``RunLayout``), both plain data that round-trips through JSON."""

from __future__ import annotations

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig

__all__ = ["Placement", "RunLayout"]


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


class Placement(FrozenModel):
    """Run ``job_id`` on ``nodes`` (node index -> GPUs taken there, all of ``gpu_type``) at ``tokens_per_s``.

    ``layout`` is the planner's layout for exactly these GPUs (None when the throughput function is a plain
    callable that names no layout, as test stubs are)."""

    job_id: str
    gpu_type: str
    nodes: dict[int, int] = Field(description="Node index (cluster order, shapes expanded) -> GPUs on it.")
    tokens_per_s: float = Field(gt=0)
    layout: RunLayout | None = None

    @property
    def num_gpus(self) -> int:
        """GPUs the placement takes."""
        return sum(self.nodes.values())

    def describe(self) -> str | None:
        """The layout in words, when there is one."""
        return None if self.layout is None else self.layout.describe()
