"""``PlacementCheck``: whether a placement's layout fits its GPUs, judged independently of the policy.

With the planner's rate model a placement must name a layout such that: its world size is the placement's GPU
count; every node holds whole tensor-parallel groups (a group never spans nodes); the memory model's estimate of
the layout (:func:`frenzy_core.memory.estimate_memory`, not the planner's vectorised table) fits the GPU with the
planner's headroom; and the placement claims exactly what the time model
(:func:`frenzy_core.timing.estimate_iteration_time`) gives that layout on those GPUs: with the links of where
its groups land on them (the planner's placement rule, :func:`frenzy_core.planning.candidates.placed_links`: a
data-parallel ring over nodes giving 3 + 1 GPUs crosses at one GPU per node's share of the NICs), not those of
the largest node. With a plain throughput function the rate must be what the function gives that count.

A placement spanning GPU types (replica groups, :mod:`frenzy_core.scheduling.mixed`) must be whole
(:meth:`Placement.group_problem`, the rules its validator applies: one group per type, disjoint, together the
placement's nodes), each group on nodes of its type, whole tensor-parallel groups per node, the
groups' replicas adding up to the layout's dp and their micro-batches to its global batch; each group's memory
(the layout at that dp with the group's micro-batches, ``estimate_memory``) must fit its own type and be what
the group claims (the layout's, the busiest group's); each group's step must be what it claims
(``estimate_iteration_time`` on its type with the links of where it lands,
:func:`~frenzy_core.planning.mixed_plan.group_links`, the planner's rule); and the rate claimed must be the global batch over the
slowest group's step.
"""

from __future__ import annotations

import math

import numpy as np

from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec, Links, usable_bytes
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.planning.candidates import placed_links
from frenzy_core.planning.mixed_plan import group_links
from frenzy_core.planning.request import DEFAULT_HEADROOM, SEARCHED_TRAINING_FIELDS, PlacementMode
from frenzy_core.planning.search import precision_on
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.plans import Placement, RunLayout
from frenzy_core.scheduling.rates import RateBook
from frenzy_core.scheduling.throughput import GPUGroup
from frenzy_core.timing import estimate_iteration_time

__all__ = ["RATE_TOLERANCE", "PlacementCheck"]

RATE_TOLERANCE = 1e-9
"""Relative slack between a claimed rate and the time model's, either way (floating-point differences between the
batch and scalar forms of the same formulas)."""


class PlacementCheck:
    """Checks placements against the memory and time models; results are cached per distinct question."""

    def __init__(self, rates: RateBook):
        self.rates = rates
        self._memory: dict[tuple[object, ...], int] = {}
        self._time: dict[tuple[object, ...], float] = {}
        self._verdicts: dict[tuple[object, ...], tuple[str | None, RunLayout | None]] = {}

    def __call__(self, job: TrainingJob, plan: Placement) -> str | None:
        """Why ``plan`` does not fit ``job`` on its GPUs, or None when it does."""
        if plan.groups:
            if self.rates.planned is None:
                return "spans GPU types, which a plain throughput function cannot rate"
            return self._check_mixed(job, plan)
        group = self.rates.group_of(plan.nodes)
        key = (self.rates.key(job), plan.gpu_type, group, id(plan.layout), plan.tokens_per_s)
        known = self._verdicts.get(key)
        if known is None:
            known = self._verdicts[key] = (self._check(job, plan, group), plan.layout)  # the layout keeps its id
        return known[0]

    def _check(self, job: TrainingJob, plan: Placement, group: GPUGroup) -> str | None:
        if self.rates.planned is None:
            got = self.rates.on_gpus(job, plan.gpu_type, plan.nodes)
            if got is None or plan.tokens_per_s > got[0] * (1 + RATE_TOLERANCE):
                return f"claims {plan.tokens_per_s:.6g} tokens/s; the throughput function gives {got and got[0]}"
            return None
        layout = plan.layout
        if layout is None:
            return "names no layout"
        if layout.world_size != plan.num_gpus:
            return f"layout {layout.describe()} uses {layout.world_size} GPUs, the placement {plan.num_gpus}"
        tp = layout.parallel.tp
        if any(c % tp for c in plan.nodes.values()):
            return f"a tensor-parallel group of {tp} would span nodes (GPUs per node: {sorted(plan.nodes.values())})"
        spec = get_gpu_spec(plan.gpu_type)
        if not _same_recipe(job.training, layout.training, spec):
            return "layout changes the job's recipe beyond the searched fields"
        device = self._device_bytes(job, layout)
        usable = usable_bytes(spec.memory_bytes, DEFAULT_HEADROOM)
        if device > usable:
            return f"layout {layout.describe()} needs {device / 2**30:.2f} GiB per GPU; {plan.gpu_type} has {usable / 2**30:.2f}"
        rate = self._tokens_per_s(job, layout, plan.gpu_type, group)
        if not math.isfinite(rate) or abs(plan.tokens_per_s - rate) > rate * RATE_TOLERANCE:
            return (f"claims {plan.tokens_per_s:.6g} tokens/s; layout {layout.describe()} gets {rate:.6g} on these "
                    "GPUs")
        return None

    def _check_mixed(self, job: TrainingJob, plan: Placement) -> str | None:
        layout = plan.layout
        if layout is None:
            return "names no layout"
        par, training, state = layout.parallel, layout.training, self.rates.state
        problem = plan.group_problem()  # a copy made without validation may be malformed
        if problem is not None:
            return problem
        for node, gpu_type in plan.node_types().items():
            if not 0 <= node < len(state.node_types) or state.node_types[node] != gpu_type:
                return f"the {gpu_type} group's node {node} is not a {gpu_type} node"
        for g in plan.groups:
            for node, count in g.nodes.items():
                if count % par.tp:
                    return f"a tensor-parallel group of {par.tp} would span nodes ({g.gpu_type}: {count} on node {node})"
            if g.num_gpus != g.replicas * par.tp * par.pp * par.cp:
                return f"the {g.gpu_type} group has {g.num_gpus} GPUs for {g.replicas} replicas of {par.describe()}"
        if sum(g.replicas for g in plan.groups) != par.dp:
            return f"the groups' replicas do not add up to dp {par.dp}"
        gbs, mbs = training.global_batch_size, training.micro_batch_size
        if gbs is None or sum(g.replicas * g.micro_batches for g in plan.groups) * mbs != gbs:
            return f"the groups' micro-batches do not make the global batch {gbs}"
        for t in plan.gpu_types:  # one recipe for every group: it must be what the planner runs on each type
            spec = get_gpu_spec(t)
            if not _same_recipe(job.training, training, spec):
                runs = precision_on(job.training, spec)
                if training.precision is not runs:
                    return f"the {t} group runs {training.precision.value}; {t} runs the job's recipe in {runs.value}"
                return "layout changes the job's recipe beyond the searched fields"
        step = 0.0
        for g in plan.groups:
            recipe = training.replace(global_batch_size=g.micro_batches * mbs * par.dp)
            spec = get_gpu_spec(g.gpu_type)
            device = self._memory_of(job, recipe, par)
            usable = usable_bytes(spec.memory_bytes, DEFAULT_HEADROOM)
            if device > usable:
                return (f"the {g.gpu_type} group of {layout.describe()} needs {device / 2**30:.2f} GiB per GPU; "
                        f"{g.gpu_type} has {usable / 2**30:.2f}")
            if g.device_bytes != device:
                return (f"the {g.gpu_type} group claims {g.device_bytes} bytes per GPU; the memory model gives "
                        f"{device} for its {g.micro_batches} micro-batches")
            links = group_links(par.tp, state.intra_node_bytes_per_s[list(g.nodes)],
                                state.inter_node_bytes_per_s[list(plan.nodes)])
            key = (job.model, recipe, par, g.gpu_type, links)
            if key not in self._time:
                self._time[key] = estimate_iteration_time(job.model, recipe, par, spec, cluster=links).iteration_s
            if abs(g.iteration_s - self._time[key]) > self._time[key] * RATE_TOLERANCE:
                return (f"the {g.gpu_type} group claims {g.iteration_s:.6g} s per step; the time model gives "
                        f"{self._time[key]:.6g} s where it lands")
            step = max(step, self._time[key])
        if layout.device_bytes != max(g.device_bytes for g in plan.groups):
            return f"the layout claims {layout.device_bytes} bytes per GPU, not its busiest group's"
        rate = gbs * training.seq_len / step
        if abs(plan.tokens_per_s - rate) > rate * RATE_TOLERANCE:
            return f"claims {plan.tokens_per_s:.6g} tokens/s; its groups' slowest step gives {rate:.6g} there"
        return None

    def _device_bytes(self, job: TrainingJob, layout: RunLayout) -> int:
        return self._memory_of(job, layout.training, layout.parallel)

    def _memory_of(self, job: TrainingJob, training: TrainingConfig, parallel: ParallelConfig) -> int:
        key = (job.model, training, parallel)
        if key not in self._memory:
            self._memory[key] = estimate_memory(job.model, training, parallel).device_bytes
        return self._memory[key]

    def _tokens_per_s(self, job: TrainingJob, layout: RunLayout, gpu_type: str, group: GPUGroup) -> float:
        """The scalar time model's rate of ``layout`` placed on ``group`` (NaN: it cannot be placed there)."""
        key = (job.model, layout.training, layout.parallel, gpu_type, group)
        if key not in self._time:
            level, _, at = placed_links(group.pool(gpu_type), gpu_type, group.links,
                                        np.array([layout.parallel.tp]), np.array([layout.world_size]),
                                        PlacementMode.ANY)
            gpn, intra, inter = (np.asarray(a)[0] for a in at)  # one row: per-row arrays of length one
            links = Links(int(gpn), float(intra), float(inter))
            est = estimate_iteration_time(job.model, layout.training, layout.parallel, get_gpu_spec(gpu_type),
                                          cluster=links)
            self._time[key] = float(est.tokens_per_s) if level[0] >= 0 else math.nan
        return self._time[key]


_SEARCHED = {*SEARCHED_TRAINING_FIELDS, "global_batch_size"}
"""Training fields the planner may set (and the global batch a recipe that leaves it open gets)."""


def _same_recipe(asked: TrainingConfig, run: TrainingConfig, spec: GPUSpec) -> bool:
    """``run`` is ``asked`` but for the searched fields and the precision the planner runs it in on ``spec``
    (a defaulted bf16 recipe runs in fp16 on a GPU without bf16: :func:`precision_on`, the one home)."""
    ran = run.model_dump(exclude=_SEARCHED)
    wanted = asked.model_dump(exclude=_SEARCHED)
    return ran == {**wanted, "precision": ran["precision"]} and ran["precision"] == precision_on(asked, spec)
