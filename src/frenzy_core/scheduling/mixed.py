"""Placements that span GPU types (issue 12, form b): data-parallel replica groups of different types, each on
free GPUs of its type, as :func:`~frenzy_core.planning.plan_job` plans them.

The planner answers for *offers* (GPUs per type, in nodes of the type's size, with the slowest links of the
nodes they are on), so that one answer serves every free-GPU pattern with the same offers
(:meth:`PlannedThroughput.mixed_plan` caches it). Each group then takes whole tensor-parallel groups of free
GPUs of its type (``ClusterState.find``, best fit) and is re-timed where those links differ from the plan's:
the step is the slowest group's (each timed on its own type with the planner's mixed-plan links: one
tensor-parallel group per node, its nodes' slowest NVLink, the slowest inter-node link of the whole job:
:func:`frenzy_core.planning.mixed_plan.group_links`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.hardware.gpu import Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.planning.mixed_plan import group_links
from frenzy_core.planning.plan import Plan
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.plans import Placement, PlacementGroup, RunLayout
from frenzy_core.scheduling.state import Allocation, ClusterState
from frenzy_core.scheduling.throughput import Offer, PlannedThroughput
from frenzy_core.timing import estimate_iteration_time

__all__ = ["WholeMix", "mixed_placement", "offers", "place_mixed"]


class WholeMix(FrozenModel):
    """What frenzy-core keeps of the planner's mixed plan for a job on the whole idle cluster: its rate (the
    job's fastest run, for the starvation bound) and its GPUs per type (the types it drains towards, and how many
    of each it waits for). Saved with the queue, so that a restored scheduler needs no re-plan (one cut short by
    the planner's time limit would otherwise lose the job)."""

    tokens_per_s: float = Field(gt=0)
    gpus: dict[str, int] = Field(description="GPU type -> GPUs of it the plan uses, in the plan's order.")

    @staticmethod
    def of(plan: Plan) -> WholeMix:
        gpus: dict[str, int] = {}
        for stage in plan.stages:
            gpus[stage.gpu_type] = gpus.get(stage.gpu_type, 0) + stage.num_gpus
        return WholeMix(tokens_per_s=plan.time.tokens_per_s, gpus=gpus)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.gpus)

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus.values())


def _power_floor(n: int) -> int:
    """The largest power of two at most ``n`` (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def offers(free: ClusterState, gpu_types: Sequence[str], max_gpus: int) -> tuple[Offer, ...]:
    """What a job may have of each type for a mixed plan: the free GPUs, at most ``max_gpus``, rounded down to a
    power of two (few distinct questions, so that the planner's answers are reused), with the node size and the
    slowest links of the nodes holding them."""
    out: list[Offer] = []
    for t in gpu_types:
        nodes = free.nodes_of(t)
        on = nodes[free.free[nodes] > 0]
        count = int(free.free[on].sum())
        if count:
            out.append((t, _power_floor(min(count, max_gpus)),
                        Links(int(free.capacity[nodes].max()), float(free.intra_node_bytes_per_s[on].min()),
                              float(free.inter_node_bytes_per_s[on].min()))))
    return tuple(out)


def mixed_placement(job: TrainingJob, plan: Plan, free: ClusterState) -> Placement | None:
    """``plan``'s replica groups on GPUs free in ``free`` (not taken), each in whole tensor-parallel groups of
    its type; None when a group's type is too fragmented for it."""
    scratch = free.copy()
    taken: list[Allocation] = []
    for stage in plan.stages:
        allocation = scratch.find(stage.gpu_type, stage.num_gpus, stage.tp)
        if allocation is None:
            return None
        scratch.take(allocation)
        taken.append(allocation)
    every = [n for a in taken for n in a]
    par, training = plan.parallel, plan.training
    gbs = training.global_batch_size
    assert gbs is not None, "a mixed plan sets its global batch"
    groups = []
    for stage, allocation in zip(plan.stages, taken):
        links = group_links(par.tp, free.intra_node_bytes_per_s[list(allocation)],
                            free.inter_node_bytes_per_s[every])
        seconds = stage.iteration_s
        if links != stage.links:  # other links than the offers': re-timed as the planner times the group
            recipe = training.replace(global_batch_size=stage.micro_batches * training.micro_batch_size * par.dp)
            seconds = estimate_iteration_time(job.model, recipe, par, get_gpu_spec(stage.gpu_type),
                                              cluster=links).iteration_s
        groups.append(PlacementGroup(gpu_type=stage.gpu_type, nodes=allocation, replicas=stage.dp,
                                     micro_batches=stage.micro_batches, device_bytes=stage.device_bytes,
                                     iteration_s=seconds))
    rate = gbs * training.seq_len / max(g.iteration_s for g in groups)
    words = " + ".join(f"{g.replicas} x {g.gpu_type} m{g.micro_batches}" for g in groups)
    layout = RunLayout(parallel=par, training=training, tokens_per_s=rate,
                       device_bytes=max(g.device_bytes for g in groups),
                       description=f"{LayoutArrays.from_configs(training, par).describe(0, compact=True)} ({words})")
    return Placement(job_id=job.id, gpu_type=groups[0].gpu_type, nodes={n: c for a in taken for n, c in a.items()},
                     tokens_per_s=rate, layout=layout, groups=tuple(groups))


def place_mixed(planned: PlannedThroughput, job: TrainingJob, offered: tuple[Offer, ...], max_gpus: int,
                free: ClusterState) -> Placement | None:
    """The planner's mixed plan of at most ``max_gpus`` GPUs of the ``offered`` ones (:func:`offers`) on the GPUs
    ``free`` now (not taken), or None when no mix beats a single type there or its groups cannot be placed."""
    if len(offered) < 2:
        return None
    plan = planned.mixed_plan(job.model, job.training, offered, max_gpus)
    return None if plan is None else mixed_placement(job, plan, free)
