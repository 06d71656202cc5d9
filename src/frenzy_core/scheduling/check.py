"""``PlacementCheck``: whether a placement's layout fits its GPUs, judged independently of the policy.

With the planner's rate model a placement must name a layout such that: its world size is the placement's GPU
count; every node holds whole tensor-parallel groups (a group never spans nodes); the memory model's estimate of
the layout (:func:`frenzy_core.memory.estimate_memory`, not the planner's vectorised table) fits the GPU with the
planner's headroom; and the placement claims exactly what the time model
(:func:`frenzy_core.timing.estimate_iteration_time`) gives that layout on those GPUs: with the links of where
its groups land on them (the planner's placement rule, :func:`frenzy_core.planning.candidates.placed_links`: a
data-parallel ring over nodes giving 3 + 1 GPUs crosses at one GPU per node's share of the NICs), not those of
the largest node. With a plain throughput function the rate must be what the function gives that count.
"""

from __future__ import annotations

import math

import numpy as np

from frenzy_core.hardware.gpu import Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.planning.candidates import placed_links
from frenzy_core.planning.request import DEFAULT_HEADROOM, SEARCHED_TRAINING_FIELDS, PlacementMode
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
        if layout.training.model_dump(exclude=_SEARCHED) != job.training.model_dump(exclude=_SEARCHED):
            return "layout changes the job's recipe beyond the searched fields"
        spec = get_gpu_spec(plan.gpu_type)
        device = self._device_bytes(job, layout)
        usable = int(spec.memory_bytes * (1.0 - DEFAULT_HEADROOM))
        if device > usable:
            return f"layout {layout.describe()} needs {device / 2**30:.2f} GiB per GPU; {plan.gpu_type} has {usable / 2**30:.2f}"
        rate = self._tokens_per_s(job, layout, plan.gpu_type, group)
        if not math.isfinite(rate) or abs(plan.tokens_per_s - rate) > rate * RATE_TOLERANCE:
            return (f"claims {plan.tokens_per_s:.6g} tokens/s; layout {layout.describe()} gets {rate:.6g} on these "
                    "GPUs")
        return None

    def _device_bytes(self, job: TrainingJob, layout: RunLayout) -> int:
        key = (job.model, layout.training, layout.parallel)
        if key not in self._memory:
            self._memory[key] = estimate_memory(job.model, layout.training, layout.parallel).device_bytes
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
