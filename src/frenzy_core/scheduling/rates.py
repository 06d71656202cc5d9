"""``RateBook``: what each GPU type and count would give a job, and the placement it actually gets on free GPUs.

The one place that turns a throughput model into what policies use:

* ``rates``/``options``: tokens/s per (type, count) on the GPUs the cluster offers (every node as free as it
  ever is), the estimate a policy ranks options by;
* ``place``: GPUs for one (type, count) on the GPUs free now, re-planned there: the job starts with the fastest
  layout that fits those very GPUs (its tensor-parallel groups inside nodes, its memory on the card, links of
  those nodes) at that layout's rate, or not at all.

With a :class:`PlannedThroughput` both come from the planner; a plain :data:`ThroughputFn` (test stubs) rates a
count the same wherever it lands and names no layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import InfeasiblePlanError
from frenzy_core.hardware.gpu import Links
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.plans import Placement, RunLayout
from frenzy_core.scheduling.state import Allocation, ClusterState
from frenzy_core.scheduling.throughput import GPUGroup, PlannedThroughput
from frenzy_core.scheduling.workload import ThroughputFn

__all__ = ["JobOptions", "RateBook", "power_of_two_counts"]


def power_of_two_counts(limit: int, extra: Sequence[int] = ()) -> list[int]:
    """1, 2, 4, ... up to ``limit``, plus the ``extra`` counts within it, sorted (the counts policies weigh:
    powers of two match Megatron's usual data-parallel degrees, extras keep a user's own request)."""
    counts = {1 << i for i in range(max(limit, 1).bit_length()) if (1 << i) <= limit}
    counts |= {c for c in extra if 0 < c <= limit}
    return sorted(counts)


@dataclass(frozen=True)
class JobOptions:
    """The allocations one job fits in memory: parallel arrays, one row per (GPU type, count)."""

    gpu: np.ndarray
    """Index into the cluster's GPU types."""
    count: np.ndarray
    tokens_per_s: np.ndarray
    run_s: np.ndarray
    """Seconds the job's remaining work takes on the option."""

    def __len__(self) -> int:
        return int(self.gpu.shape[0])


class RateBook:
    """Tokens/s per (job, GPU type, count) on the cluster's nodes, and placements re-planned on free GPUs.

    Answers are cached per distinct (model, recipe) -- :meth:`key` -- since a trace has few of them and hashing
    the configs themselves on every question would cost more than the answers."""

    def __init__(self, throughput: ThroughputFn | PlannedThroughput, state: ClusterState):
        self.throughput = throughput
        self.state = state
        self.gpu_types = state.gpu_types
        self._by_identity: dict[tuple[int, int], tuple[int, ModelConfig, TrainingConfig]] = {}
        self._by_value: dict[tuple[ModelConfig, TrainingConfig], int] = {}
        self._rates: dict[tuple[int, str, int], float] = {}
        self._curves: dict[tuple[int, str], np.ndarray] = {}
        self._tps: dict[tuple[int, str, int], list[int]] = {}
        self._options: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._on: dict[tuple[object, ...], tuple[float, RunLayout | None] | None] = {}
        self._intra = state.intra_node_bytes_per_s.tolist()
        self._inter = state.inter_node_bytes_per_s.tolist()
        self._usable = {t: self._offered(t) for t in self.gpu_types}

    @property
    def planned(self) -> PlannedThroughput | None:
        """The planner model, when the throughput is one (layouts are then named and checked)."""
        return self.throughput if isinstance(self.throughput, PlannedThroughput) else None

    def key(self, job: TrainingJob) -> int:
        """A small integer per distinct (model, recipe); the objects are kept, so their ids stay theirs."""
        ident = (id(job.model), id(job.training))
        hit = self._by_identity.get(ident)
        if hit is None:
            number = self._by_value.setdefault((job.model, job.training), len(self._by_value))
            hit = self._by_identity[ident] = (number, job.model, job.training)
        return hit[0]

    def _offered(self, gpu_type: str) -> GPUGroup:
        """What the cluster offers of a type, as :func:`plan_job` reads a cluster: every node as free as it is at
        the start, the largest node size, the slowest links."""
        s, nodes = self.state, self.state.nodes_of(gpu_type)
        return GPUGroup.of(s.initial_free[nodes].tolist(), Links(int(s.capacity[nodes].max()),
                                                                 float(s.intra_node_bytes_per_s[nodes].min()),
                                                                 float(s.inter_node_bytes_per_s[nodes].min())))

    def group_of(self, allocation: Allocation) -> GPUGroup:
        """The GPUs of an allocation as the planner sees them: one node per entry with the GPUs taken there (the
        job sees only those), the slowest links among them."""
        counts = list(allocation.values())
        return GPUGroup.of(counts, Links(max(counts), min(self._intra[n] for n in allocation),
                                         min(self._inter[n] for n in allocation)))

    # -- estimates on the GPUs the cluster offers ------------------------------------------------------------
    def rate(self, job: TrainingJob, gpu_type: str, num_gpus: int) -> float | None:
        """Tokens/s of ``num_gpus`` ``gpu_type`` GPUs for the job; None when no layout fits them."""
        value = float(self.rates(job, gpu_type, [num_gpus])[0])
        return None if math.isnan(value) else value

    def rates(self, job: TrainingJob, gpu_type: str, counts: Sequence[int]) -> np.ndarray:
        """Tokens/s per count (NaN where no layout fits the cluster's nodes of the type)."""
        if not counts:
            return np.zeros(0)
        k = self.key(job)
        planned = self.planned
        if planned is not None:
            curve = self._curves.get((k, gpu_type))
            if curve is None or curve.size <= max(counts):
                curve = planned.curve_on(job.model, job.training, gpu_type, self._usable[gpu_type], max(counts))
                self._curves[(k, gpu_type)] = curve
            return np.asarray(curve[np.asarray(counts)], dtype=np.float64)
        return np.array([self._function_rate(job, k, gpu_type, n) for n in counts], dtype=np.float64)

    def _function_rate(self, job: TrainingJob, k: int, gpu_type: str, n: int) -> float:
        key = (k, gpu_type, n)
        if key not in self._rates:
            try:
                self._rates[key] = float(self.throughput(job.model, job.training, gpu_type, n))
            except InfeasiblePlanError:
                self._rates[key] = math.nan
        return self._rates[key]

    def options(self, job: TrainingJob, counts_per_type: Sequence[Sequence[int]], work_tokens: float
                ) -> JobOptions:
        """Every (type, count) of ``counts_per_type`` (one list per GPU type) that fits the job in memory, with the
        time ``work_tokens`` take there."""
        key = (self.key(job), tuple(tuple(c) for c in counts_per_type))
        known = self._options.get(key)
        if known is None:
            gpu, count, rate = [], [], []
            for g, counts in enumerate(counts_per_type):
                r = self.rates(job, self.gpu_types[g], list(counts))
                ok = np.isfinite(r) & (r > 0)
                gpu.append(np.full(int(ok.sum()), g, dtype=np.int64))
                count.append(np.asarray(counts, dtype=np.int64)[ok])
                rate.append(r[ok])
            known = self._options[key] = (np.concatenate(gpu) if gpu else np.zeros(0, np.int64),
                                          np.concatenate(count) if count else np.zeros(0, np.int64),
                                          np.concatenate(rate) if rate else np.zeros(0))
        tokens = known[2]
        return JobOptions(gpu=known[0], count=known[1], tokens_per_s=tokens, run_s=work_tokens / tokens)

    # -- placements on the GPUs free now -------------------------------------------------------------------------
    def on_gpus(self, job: TrainingJob, gpu_type: str, allocation: Allocation) -> tuple[float, RunLayout | None] | None:
        """(tokens/s, layout) of the job on exactly these GPUs, re-planned there; None when no layout fits."""
        k = self.key(job)
        n = sum(allocation.values())
        planned = self.planned
        if planned is None:
            rate = self._function_rate(job, k, gpu_type, n)
            return None if math.isnan(rate) else (rate, None)
        # the group's identity without building it (GPUGroup.of: counts largest first, largest node, slowest links)
        key = (k, gpu_type, tuple(sorted(allocation.values(), reverse=True)),
               min(self._intra[n] for n in allocation), min(self._inter[n] for n in allocation))
        if key not in self._on:
            layout = planned.best_on(job.model, job.training, gpu_type, self.group_of(allocation), n)
            self._on[key] = None if layout is None else (layout.tokens_per_s, layout)
        return self._on[key]

    def place(self, job: TrainingJob, gpu_type: str, num_gpus: int, free: ClusterState) -> Placement | None:
        """The best placement of ``num_gpus`` ``gpu_type`` GPUs among those ``free`` now, or None when no set of
        them fits a layout. Tried: the best-fit allocation in whole tensor-parallel groups for each group size
        the fitting layouts use (best layout first); the one whose re-planned rate is highest wins (ties: the
        first tried)."""
        planned = self.planned
        blocks = [1]
        if planned is not None:
            tkey = (self.key(job), gpu_type, num_gpus)
            if tkey not in self._tps:
                self._tps[tkey] = planned.tps_on(job.model, job.training, gpu_type, self._usable[gpu_type], num_gpus)
            blocks = self._tps[tkey]
        best: tuple[float, Allocation, RunLayout | None] | None = None
        tried: list[Allocation] = []
        for block in blocks:
            allocation = free.find(gpu_type, num_gpus, block)
            if allocation is None or allocation in tried:
                continue
            tried.append(allocation)
            got = self.on_gpus(job, gpu_type, allocation)
            if got is not None and (best is None or got[0] > best[0]):
                best = (got[0], allocation, got[1])
        if best is None:
            return None
        if best[2] is not None:  # every value comes from validated objects (job, cluster, planner): not checked again
            return Placement.model_construct(job_id=job.id, gpu_type=gpu_type, nodes=best[1], tokens_per_s=best[0],
                                             layout=best[2])
        return Placement(job_id=job.id, gpu_type=gpu_type, nodes=best[1], tokens_per_s=best[0], layout=best[2])
