"""``frenzy-has``: a replica of Frenzy's Heterogeneity-Aware Scheduling (Chang et al., arXiv:2412.14479, 2024).

For each job MARP lists resource configurations, fewest GPUs first (:func:`frenzy_core.planning.marp_configs`,
the replica of the authors' predictor); HAS walks the list and takes the first configuration for which enough
free GPUs have at least the predicted memory, matching the smallest sufficient memory size first, and places
it best fit (the fullest nodes that hold it). There is no layout search and no choice of count by speed.

Adaptations, ours: MARP has no gradient accumulation (a rank runs ``global_batch / dp`` samples at once), which
with our jobs' batches (512 to 2,048 sequences) would ask for hundreds of GPUs; we evaluate MARP with one micro-batch
per rank, as the jobs run (so its list is tensor-parallel sizes 1..64). A configuration is placed on GPUs of one
type (the simulator's allocations do not mix types; HAS may mix types of equal memory). The job runs at the
throughput of the fastest layout of that allocation, like under every policy, and a configuration whose
allocation fits no layout by frenzy_core's memory model is skipped (zero OOM). The queue is walked in arrival
order; a job that cannot be placed now does not block the ones behind it.
"""

from __future__ import annotations

import numpy as np

from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.planning import marp_configs
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action
from frenzy_core.scheduling.policies._queue import QueuePolicy
from frenzy_core.scheduling.rates import JobOptions

__all__ = ["FrenzyHAS"]


class FrenzyHAS(QueuePolicy):
    """MARP's configurations in priority order, the smallest sufficient memory size first, best fit."""

    name = "frenzy-has"

    def __init__(self) -> None:
        super().__init__()
        self._lists: dict[tuple[int, tuple[str, ...]], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        """(model and recipe, allowed types) -> the option arrays (MARP's list depends on nothing else)."""

    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        """(type, count) pairs in HAS's priority order: MARP's list, then memory size ascending."""
        key = (self.rates.key(job), tuple(allowed))
        if key not in self._lists:
            self._lists[key] = self._priority_list(job, allowed)
        gpu, count, tokens = self._lists[key]
        return JobOptions(gpu=gpu, count=count, tokens_per_s=tokens,
                          run_s=job.total_tokens / tokens if tokens.size else tokens)

    def _priority_list(self, job: TrainingJob, allowed: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        training = job.training.replace(global_batch_size=job.training.micro_batch_size)
        configs = marp_configs(job.model, training)  # the batch is set, so MARP accepts it
        memory = {t: get_gpu_spec(t).nominal_memory_bytes for t in allowed}
        by_size = sorted(allowed, key=lambda t: (memory[t], self.state.gpu_types.index(t)))
        gpu, count, rate = [], [], []
        seen: set[tuple[str, int]] = set()
        for cfg in configs:
            for t in by_size:
                if memory[t] < cfg.bytes_per_gpu or cfg.num_gpus > self.state.usable_gpus(t):
                    continue
                if (t, cfg.num_gpus) in seen:
                    continue
                seen.add((t, cfg.num_gpus))
                r = self.rates.rate(job, t, cfg.num_gpus)  # None: no layout fits the type's nodes
                if r is not None:
                    gpu.append(self.state.gpu_types.index(t))
                    count.append(cfg.num_gpus)
                    rate.append(r)
        return (np.asarray(gpu, dtype=np.int64), np.asarray(count, dtype=np.int64),
                np.asarray(rate, dtype=np.float64))

    def schedule(self, now: float) -> list[Action]:
        starts: list[Action] = []
        free = self.state.copy()
        left = self.free_per_type(free)
        table = self.table()
        first = table.first
        ends = np.append(first[1:], table.owner.size).astype(np.int64)
        # only jobs with a configuration that fits the free GPUs before any placement can start
        for j in np.unique(table.owner[table.count <= left[table.gpu]]):
            rows = np.arange(first[j], ends[j])
            for row in rows[table.count[rows] <= left[table.gpu[rows]]]:  # first in priority order that has room
                started = self.place_row(table, int(row), free)
                if started is not None:
                    starts.append(started)
                    left[table.gpu[row]] -= table.count[row]
                    break
        self.dequeue({a.job_id for a in starts})
        return starts
