"""Default throughput of an allocation: the planner's fastest layout on that many GPUs of one type.

:class:`PlannedThroughput` answers the same question for every GPU count at once: one vectorised candidate
table per (model, recipe, GPU type), reduced to the best tokens/s per world size. Policies that weigh many
counts per job use :meth:`PlannedThroughput.curve`; a plain call is one entry of that curve.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import InfeasiblePlanError
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpus import get_gpu_spec

__all__ = ["PlannedThroughput", "ThroughputCurve", "homogeneous_cluster", "planned_tokens_per_s"]

_MIN_CURVE_GPUS = 64
"""Smallest curve computed (counts are rounded up to a power of two at least this): one table serves most jobs."""


def homogeneous_cluster(gpu_type: str, num_gpus: int) -> Cluster:
    """The smallest cluster of the type's typical nodes (``gpus_per_node`` each) holding ``num_gpus``."""
    spec = get_gpu_spec(gpu_type)
    nodes = math.ceil(num_gpus / spec.gpus_per_node)
    shape = {"gpu": spec.id, "gpus_per_node": spec.gpus_per_node, "count": nodes}
    return Cluster.from_dict({"name": f"{nodes} x {spec.gpus_per_node} {spec.id}", "nodes": [shape]})


def planned_tokens_per_s(model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
    """Tokens per second of the fastest layout on exactly ``num_gpus`` GPUs of ``gpu_type`` that fits in
    memory (frenzy_core's planner with its analytic estimators); raises InfeasiblePlanError when none fits."""
    from frenzy_core.planning import plan_job

    plan = plan_job(model, homogeneous_cluster(gpu_type, num_gpus), training, objective="throughput",
                    constraints={"num_gpus": num_gpus, "gpu_types": [get_gpu_spec(gpu_type).id]}, top_k=0)
    return float(plan.time.tokens_per_s)


@runtime_checkable
class ThroughputCurve(Protocol):
    """A throughput function that also rates every GPU count of one type at once and names the layouts."""

    def __call__(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
        """Tokens/s of ``num_gpus`` GPUs; raises InfeasiblePlanError when no layout fits."""

    def curve(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, max_gpus: int) -> np.ndarray:
        """Tokens/s for 0..``max_gpus`` GPUs (index = count); NaN where no layout fits."""

    def layout(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> str | None:
        """The layout the rate of ``num_gpus`` GPUs comes from, in words; None when none fits."""


def _placeable(tp: np.ndarray, world: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """Whether the smallest cluster of typical nodes holding ``world`` GPUs has room for its TP groups (a TP
    group stays in one node): the check :func:`planned_tokens_per_s`'s placement makes on that cluster."""
    nodes = -(-world // gpus_per_node)
    return world // tp <= nodes * (gpus_per_node // tp)


class PlannedThroughput:
    """:func:`planned_tokens_per_s` for all counts at once, computed once per (model, recipe, GPU type) and
    kept for the life of the object (share one object between simulations of the same workload)."""

    def __init__(self) -> None:
        self._curves: dict[tuple[ModelConfig, TrainingConfig, str], np.ndarray] = {}
        self._layouts: dict[tuple[ModelConfig, TrainingConfig, str], list[str | None]] = {}

    def __call__(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
        rate = float(self.curve(model, training, gpu_type, num_gpus)[num_gpus])
        if math.isnan(rate):
            raise InfeasiblePlanError(f"no layout of {model.name or 'the model'} fits {num_gpus} x {gpu_type}")
        return rate

    def curve(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, max_gpus: int) -> np.ndarray:
        gpu_id = get_gpu_spec(gpu_type).id
        key = (model, training, gpu_id)
        known = self._curves.get(key)
        if known is None or known.size <= max_gpus:
            size = max(_MIN_CURVE_GPUS, 1 << max(max_gpus - 1, 1).bit_length())
            known, self._layouts[key] = self._compute(model, training, gpu_id, size)
            self._curves[key] = known
        return known[: max_gpus + 1]

    def layout(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> str | None:
        """The layout behind ``curve``'s rate for ``num_gpus`` GPUs, in words (``dp4 tp2 pp1 mbs2 selective``);
        None when none fits."""
        self.curve(model, training, gpu_type, num_gpus)
        return self._layouts[(model, training, get_gpu_spec(gpu_type).id)][num_gpus]

    @staticmethod
    def _compute(model: ModelConfig, training: TrainingConfig, gpu_id: str, max_gpus: int
                 ) -> tuple[np.ndarray, list[str | None]]:
        """Best tokens/s per world size 0..max_gpus from one candidate table (NaN: nothing fits), and the layout
        of each."""
        from frenzy_core.planning.search import make_search

        search = make_search(model, homogeneous_cluster(gpu_id, max_gpus), training, "throughput",
                             {"max_gpus": max_gpus, "gpu_types": [gpu_id]})
        table = search.table()
        out = np.full(max_gpus + 1, np.nan)
        names: list[str | None] = [None] * (max_gpus + 1)
        ok = np.flatnonzero(_placeable(table.tp, table.world, search.pool.max_node_size(gpu_id))
                            & np.isfinite(table.tokens_per_s))
        # fastest first (ties: the planner's canonical order); the first row of each world size is its best
        ranked = ok[np.lexsort((table.order[ok], -table.tokens_per_s[ok]))]
        worlds, first = np.unique(table.world[ranked], return_index=True)
        for world, row in zip(worlds, ranked[first]):
            out[world] = table.tokens_per_s[row]
            names[int(world)] = table.layouts.describe(int(table.layout[row]), compact=True)
        return out, names

