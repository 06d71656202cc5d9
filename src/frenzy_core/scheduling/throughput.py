"""Throughput of an allocation by the planner: what a job gets on a set of GPUs, and on the GPUs a cluster offers.

The one module of ``scheduling`` that reads planner internals (candidate tables). Two questions:

* :meth:`PlannedThroughput.best_on`: the fastest layout that fits a :class:`GPUGroup` (given GPUs on given nodes
  with their links) -- what :func:`plan_job` returns on a cluster of exactly those GPUs (tested): the rows of one
  vectorised candidate table per (model, recipe, GPU type, node size, links), shared by every group, each timed
  with the links of its placement on the group (the planner's rule, :func:`placed_links`).
* :meth:`PlannedThroughput.curve` (and ``__call__``): the best rate per GPU count on the smallest cluster of the
  type's typical nodes, for converting trace durations to work (:func:`jobs_from_trace`).

And :meth:`PlannedThroughput.mixed_plan`: :func:`plan_job`'s replica groups of several types (issue 12, form b) on
offers of GPUs per type, kept only where mixing beats every single-type plan of those GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import InfeasiblePlanError
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.planning.candidates import log_key, placed_links, row_links
from frenzy_core.planning.estimators import LayoutEstimator
from frenzy_core.planning.nodes import NodePool
from frenzy_core.planning.plan import Plan
from frenzy_core.planning.request import PlacementMode
from frenzy_core.scheduling.plans import RunLayout

__all__ = ["GPUGroup", "PlannedThroughput", "homogeneous_cluster", "planned_tokens_per_s"]

_MIN_CURVE_GPUS = 64
"""Smallest table computed (counts are rounded up to a power of two at least this): one table serves most jobs."""

MIXED_TIME_LIMIT_S = 30.0
"""plan_job's limit for a scheduler's mixed question (our choice: far above what these small instances take, 0.03
to 6 s measured on the shared 2-core machine, so that it never binds and answers repeat exactly; a plan it cut
short is not used)."""

Offer = tuple[str, int, Links]
"""GPUs of one type a job may have: (type, count, node size and slowest links of the nodes they are on)."""


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
                    constraints={"num_gpus": num_gpus, "gpu_types": [get_gpu_spec(gpu_type).id]}, top_k=0,
                    uneven_dp=False, offload_fallback=False)
    return float(plan.time.tokens_per_s)


@dataclass(frozen=True)
class GPUGroup:
    """GPUs of one type spread over nodes, as the planner sees them: what each node offers, and the node size
    and links the time model reads (the largest node and slowest links, as :meth:`Cluster.links` reads a
    cluster)."""

    free: tuple[int, ...]
    """GPUs the job may use on each node (sorted, largest first, to share cache entries)."""
    links: Links

    @staticmethod
    def of(free: Sequence[int], links: Links) -> GPUGroup:
        return GPUGroup(tuple(sorted((int(f) for f in free if f > 0), reverse=True)),
                        Links(int(links.gpus_per_node), float(links.intra_node_bytes_per_s),
                              float(links.inter_node_bytes_per_s)))

    def cluster(self, gpu_type: str) -> Cluster:
        """The cluster :func:`plan_job` would be given for exactly these GPUs: one node per entry of ``free``
        with that many GPUs, all free, with these links."""
        nodes = [{"gpu": gpu_type, "gpus_per_node": f, "intra_node_bytes_per_s": self.links.intra_node_bytes_per_s,
                  "inter_node_bytes_per_s": self.links.inter_node_bytes_per_s} for f in self.free]
        return Cluster.from_dict({"name": "allocation", "nodes": nodes})

    def pool(self, gpu_type: str) -> NodePool:
        """The planner's view of :meth:`cluster`: the nodes it places on."""
        return NodePool.from_cluster(self.cluster(gpu_type))


@dataclass(frozen=True)
class _Table:
    """One candidate table of a (model, recipe, GPU type, node size, links): the rows that fit in memory, sorted
    by world size, then the planner's ranking on the table's own cluster (objective key, then canonical order),
    with what re-timing them on other GPUs needs."""

    world: np.ndarray
    tp: np.ndarray
    tokens_per_s: np.ndarray
    """Timed on the table's own cluster (nodes of its size) with ``links``."""
    links: Links
    """Per row (arrays): the links of its placement on the table's own cluster."""
    placement: PlacementMode
    order: np.ndarray
    """Canonical position (the planner's last tie-break)."""
    layout: np.ndarray
    """Index into ``layouts``."""
    layouts: LayoutArrays
    device_bytes: np.ndarray
    """Per layout."""
    training: TrainingConfig
    """The recipe the GPU type runs (the planner's precision fallback applied)."""
    model: ModelConfig
    gpu_type: str
    spec: GPUSpec
    estimator: LayoutEstimator

    def rows(self, world: int) -> slice:
        lo, hi = np.searchsorted(self.world, [world, world + 1])
        return slice(int(lo), int(hi))

    def on(self, group: GPUGroup, rows: np.ndarray) -> np.ndarray:
        """Tokens/s of ``rows`` placed on ``group``'s GPUs as :func:`plan_job` places them there, timed with the
        links of that placement (re-timed where those differ from the table's); NaN where they cannot be placed."""
        level, _, links = placed_links(group.pool(self.gpu_type), self.gpu_type, group.links, self.tp[rows],
                                       self.world[rows], self.placement)
        moved = np.flatnonzero(np.any([np.asarray(a) != np.asarray(b)[rows] for a, b in zip(links, self.links)],
                                      axis=0))
        tokens = self.tokens_per_s[rows].copy()
        if moved.size:
            layouts = self.layouts.take(self.layout[rows[moved]])
            at = Links._make(np.asarray(a)[moved] for a in links)
            seconds = self.estimator.iteration_s(self.model, self.training, layouts, self.spec, at)
            tokens[moved] = layouts.global_batch_size.astype(np.float64) * self.training.seq_len / seconds
        return np.where(level >= 0, tokens, np.nan)

    def ranked(self, rows: np.ndarray, tokens_per_s: np.ndarray) -> np.ndarray:
        """Positions into ``rows`` of the placeable ones, by world size, then the planner's ranking."""
        ok = np.flatnonzero(np.isfinite(tokens_per_s) & (tokens_per_s > 0))
        return ok[np.lexsort((self.order[rows[ok]], -log_key(tokens_per_s[ok]), self.world[rows[ok]]))]

    def run_layout(self, row: int, tokens_per_s: float | None = None) -> RunLayout:
        i = int(self.layout[row])
        rate = float(self.tokens_per_s[row]) if tokens_per_s is None else float(tokens_per_s)
        return RunLayout(parallel=self.layouts.parallel(i), training=self.layouts.training(i, self.training),
                         tokens_per_s=rate, device_bytes=int(self.device_bytes[i]),
                         description=self.layouts.describe(i, compact=True))


class PlannedThroughput:
    """The planner's answers for scheduling, each computed once and kept for the life of the object (share one
    object between simulations of the same workload). Also a plain throughput function (``__call__``)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[object, ...], tuple[int, _Table]] = {}
        self._best: dict[tuple[object, ...], RunLayout | None] = {}
        self._curves: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, _Table]] = {}
        self._curves_on: dict[tuple[object, ...], tuple[np.ndarray, list[np.ndarray]]] = {}
        self._mixed: dict[tuple[object, ...], Plan | None] = {}

    # -- on given GPUs -----------------------------------------------------------------------------------------
    def best_on(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, group: GPUGroup,
                num_gpus: int) -> RunLayout | None:
        """The fastest layout of exactly ``num_gpus`` GPUs that fits in memory and can be placed on ``group``
        (its tensor-parallel groups whole inside nodes), timed with the links of that placement (None: none).
        With ``num_gpus`` = all of the group's GPUs this is :func:`plan_job` on ``group.cluster(gpu_type)``
        (the test suite checks it)."""
        if sum(group.free) < num_gpus:
            return None
        key = (model, training, gpu_type, group, num_gpus)
        if key not in self._best:
            table = self._table(model, training, gpu_type, group, num_gpus)
            span = table.rows(num_gpus)
            rows = np.arange(span.start, span.stop)
            tokens = table.on(group, rows)
            best = table.ranked(rows, tokens)
            self._best[key] = table.run_layout(int(rows[best[0]]), tokens[best[0]]) if best.size else None
        return self._best[key]

    def curve_on(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, group: GPUGroup,
                 max_gpus: int) -> np.ndarray:
        """Tokens/s of the best layout per GPU count 0..``max_gpus`` placeable on ``group`` (NaN: none), each
        timed with the links of its placement there."""
        return self._curve_on(model, training, gpu_type, group, max_gpus)[0][: max_gpus + 1]

    def tps_on(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, group: GPUGroup,
               num_gpus: int) -> list[int]:
        """Tensor-parallel sizes of the layouts of ``num_gpus`` GPUs placeable on ``group``, best layout first
        (each size once): the granularities worth asking the free GPUs for."""
        tp = self._curve_on(model, training, gpu_type, group, num_gpus)[1][num_gpus]
        return [int(t) for t in dict.fromkeys(tp.tolist())]

    def _curve_on(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, group: GPUGroup,
                  max_gpus: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """Best rate per GPU count on ``group``, and per count the tensor-parallel sizes of its placeable layouts
        in ranking order."""
        key = (model, training, gpu_type, group)
        known = self._curves_on.get(key)
        if known is None or known[0].size <= max_gpus:
            table = self._table(model, training, gpu_type, group, max_gpus)
            rows = np.arange(table.world.size)
            tokens = table.on(group, rows)
            ranked = table.ranked(rows, tokens)
            worlds = table.world[rows[ranked]]
            size = int(table.world.max(initial=max_gpus))
            rates = np.full(size + 1, np.nan)
            first_worlds, first = np.unique(worlds, return_index=True)  # ranked within each world
            rates[first_worlds] = tokens[ranked[first]]
            bounds = np.searchsorted(worlds, np.arange(size + 2))
            tps = [table.tp[rows[ranked[bounds[w]:bounds[w + 1]]]] for w in range(size + 1)]
            known = self._curves_on[key] = (rates, tps)
        return known

    def _table(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, group: GPUGroup,
               max_gpus: int) -> _Table:
        """The table of nodes of ``group.gpus_per_node`` GPUs with its links, holding ``max_gpus`` GPUs or more (a
        power of two, at least 64): its rows of a world size do not depend on the table's size, since the batch is
        fixed (the recipe's, or the planner's default when it sets none), so one table serves every count."""
        key: tuple[object, ...] = (model, training, gpu_type, group.links)
        known = self._tables.get(key)
        if known is None or known[0] < max_gpus:
            size = max(_MIN_CURVE_GPUS, 1 << max(max_gpus - 1, 1).bit_length())
            known = self._tables[key] = (size, _build(model, training, gpu_type, group, size))
        return known[1]

    # -- across GPU types ------------------------------------------------------------------------------------------
    def mixed_plan(self, model: ModelConfig, training: TrainingConfig, offers: tuple[Offer, ...], max_gpus: int
                   ) -> Plan | None:
        """:func:`plan_job` (throughput, at most ``max_gpus`` GPUs) on the offers, each a type's GPUs on nodes of
        its size (the last holding the rest) with its links, when its answer spans types (None: a single type
        does as well, nothing fits, or the search was cut short). Computed once per question: an answer cut short
        by the time limit is not kept (it says nothing about the question; :meth:`mixed_settled`), so the question
        is asked again."""
        key = (model, training, offers, max_gpus)
        if key not in self._mixed:
            plan, settled = _mixed_plan(model, training, offers, max_gpus)
            if not settled:
                return None
            self._mixed[key] = plan
        return self._mixed[key]

    def mixed_settled(self, model: ModelConfig, training: TrainingConfig, offers: tuple[Offer, ...],
                      max_gpus: int) -> bool:
        """Whether :meth:`mixed_plan` has answered this question in full (False: not asked yet, or its search was
        cut short by the time limit)."""
        return (model, training, offers, max_gpus) in self._mixed

    # -- on typical nodes (trace conversion) ---------------------------------------------------------------------
    def __call__(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
        rate = float(self.curve(model, training, gpu_type, num_gpus)[num_gpus])
        if math.isnan(rate):
            raise InfeasiblePlanError(f"no layout of {model.name or 'the model'} fits {num_gpus} x {gpu_type}")
        return rate

    def curve(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, max_gpus: int) -> np.ndarray:
        """:func:`planned_tokens_per_s` for 0..``max_gpus`` GPUs at once (index = count; NaN: nothing fits), each
        on the smallest cluster of the type's typical nodes that holds it."""
        return self._typical(model, training, gpu_type, max_gpus)[0][: max_gpus + 1]

    def layout(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> RunLayout | None:
        """The layout behind ``curve``'s rate for ``num_gpus`` GPUs; None when none fits."""
        rates, best, table = self._typical(model, training, gpu_type, num_gpus)
        return None if best[num_gpus] < 0 else table.run_layout(int(best[num_gpus]), float(rates[num_gpus]))

    def _typical(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, max_gpus: int
                 ) -> tuple[np.ndarray, np.ndarray, _Table]:
        spec = get_gpu_spec(gpu_type)
        key = (model, training, spec.id, "typical")
        known = self._curves.get(key)
        if known is None or known[0].size <= max_gpus:
            gpn = spec.gpus_per_node
            table = self._table(model, training, spec.id, GPUGroup.of((), spec.links), max_gpus)
            size = int(table.world.max(initial=max_gpus))
            rates, best = np.full(size + 1, np.nan), np.full(size + 1, -1, dtype=np.int64)
            nodes = -(-table.world // gpn)
            for k in np.unique(nodes):  # each world on the smallest cluster of typical nodes holding it
                rows = np.flatnonzero(nodes == k)
                tokens = table.on(GPUGroup.of([gpn] * int(k), spec.links), rows)
                ranked = table.ranked(rows, tokens)
                worlds, first = np.unique(table.world[rows[ranked]], return_index=True)
                rates[worlds], best[worlds] = tokens[ranked[first]], rows[ranked[first]]
            known = self._curves[key] = (rates, best, table)
        return known


def _mixed_plan(model: ModelConfig, training: TrainingConfig, offers: tuple[Offer, ...], max_gpus: int
                ) -> tuple[Plan | None, bool]:
    """The planner's mixed plan on the offers (None: no mix beats a single type, or nothing fits), and whether its
    search finished (False: cut short by the time limit, so None says nothing)."""
    from frenzy_core.planning import plan_job

    nodes = []
    for gpu_type, count, links in offers:
        full, rest = divmod(count, links.gpus_per_node)
        shape = {"gpu": gpu_type, "intra_node_bytes_per_s": links.intra_node_bytes_per_s,
                 "inter_node_bytes_per_s": links.inter_node_bytes_per_s}
        nodes += ([{**shape, "gpus_per_node": links.gpus_per_node, "count": full}] if full else []) + (
            [{**shape, "gpus_per_node": rest}] if rest else [])
    cluster = Cluster.from_dict({"name": "offers", "nodes": nodes})
    try:
        # equal micro-batch counts per replica group's ranks, as every run the scheduler holds (uneven_dp=False):
        # the single-type plans a mix must beat are ones a run can use
        # replica groups only (form b: mixed_stages=False), which is what the scheduler's placements hold
        plan = plan_job(model, cluster, training, objective="throughput", constraints={"max_gpus": max_gpus},
                        top_k=0, time_limit_s=MIXED_TIME_LIMIT_S, mixed_types=True, mixed_stages=False,
                        uneven_dp=False, offload_fallback=False)
    except InfeasiblePlanError as err:
        return None, not any("time limit" in reason for reason in err.reasons)  # the planner says it was cut short
    cut_short = not plan.optimal or any("time limit" in note for note in plan.notes)
    return (plan if len(plan.gpu_types) > 1 else None), not cut_short


def _build(model: ModelConfig, training: TrainingConfig, gpu_type: str, group: GPUGroup, total: int) -> _Table:
    """The planner's candidate table on ``total`` GPUs in nodes of ``group.links.gpus_per_node`` (the last node
    holds the rest) with ``group``'s links, every GPU free; rows that fit, ranked within each world size."""
    from frenzy_core.planning.search import make_search

    gpn = group.links.gpus_per_node
    full, rest = divmod(total, gpn)
    links = {"gpu": gpu_type, "intra_node_bytes_per_s": group.links.intra_node_bytes_per_s,
             "inter_node_bytes_per_s": group.links.inter_node_bytes_per_s}
    nodes = ([{**links, "gpus_per_node": gpn, "count": full}] if full else []) + (
        [{**links, "gpus_per_node": rest}] if rest else [])
    cluster = Cluster.from_dict({"name": f"{total} x {gpu_type}", "nodes": nodes})
    search = make_search(model, cluster, training, "throughput", {"max_gpus": total, "gpu_types": [gpu_type]},
                         uneven=False)  # a run's layout is one recipe: equal micro-batch counts
    table = search.table()
    ok = np.flatnonzero(np.isfinite(table.tokens_per_s) & (table.tokens_per_s > 0))
    ranked = ok[np.lexsort((table.order[ok], -log_key(table.tokens_per_s[ok]), table.world[ok]))]
    timed = row_links(search.pool, gpu_type, search.links[gpu_type], table.level[ranked], table.per_node[ranked])
    return _Table(world=table.world[ranked], tp=table.tp[ranked], tokens_per_s=table.tokens_per_s[ranked],
                  links=timed, placement=table.placement,
                  order=table.order[ranked], layout=table.layout[ranked], layouts=table.layouts,
                  device_bytes=table.device_bytes, training=search.recipe(gpu_type), model=model,
                  gpu_type=gpu_type, spec=search.specs[gpu_type], estimator=search.estimator)
