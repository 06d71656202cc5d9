"""``QueuePolicy``: the arrival-ordered queue and submit-time checks that the built-in policies share."""

from __future__ import annotations

import abc
import bisect
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Start
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.rates import JobOptions, power_of_two_counts
from frenzy_core.scheduling.state import ClusterState

__all__ = ["ELASTIC_FACTOR", "QueuePolicy", "QueueTable", "elastic_counts"]

ELASTIC_FACTOR = 2
"""Policies that choose a job's GPU count keep it within this factor of its request (our choice: Sia and Pollux
bound a job's scale by its batch-size limits; a factor of two keeps a job near the size its user tested, uses
idle GPUs, and never stretches a job to many times its expected run time, which without preemption it would
keep to the end)."""


def elastic_counts(job: TrainingJob, usable: int) -> list[int]:
    """Counts a resizing policy weighs for ``job`` on a type with ``usable`` GPUs: the request, and powers of two
    from the request over ``ELASTIC_FACTOR`` to ``ELASTIC_FACTOR`` times it (every power of two up to the usable
    GPUs without a request)."""
    return _elastic_counts(None if job.request is None else job.request.num_gpus, usable)


@functools.lru_cache(maxsize=4096)
def _elastic_counts(requested: int | None, usable: int) -> list[int]:
    if requested is None:
        return power_of_two_counts(usable)
    low = -(-requested // ELASTIC_FACTOR)
    return [c for c in power_of_two_counts(min(usable, ELASTIC_FACTOR * requested), [requested]) if c >= low]


@dataclass(frozen=True)
class QueueTable:
    """The options of every queued job in one set of arrays (queue order, each job's options together)."""

    owner: np.ndarray
    """Queue position of the option's job."""
    gpu: np.ndarray
    count: np.ndarray
    tokens_per_s: np.ndarray
    run_s: np.ndarray
    sizes: np.ndarray
    """Options per job (queue order)."""
    submit_s: np.ndarray
    """Submit time per job (queue order)."""

    @functools.cached_property
    def first(self) -> np.ndarray:
        """Index of each job's first option (for ``np.minimum.reduceat`` and friends)."""
        return np.cumsum(self.sizes) - self.sizes

    def per_job_min(self, values: np.ndarray) -> np.ndarray:
        """The least of ``values`` (one per option) over each job's options."""
        return np.minimum.reduceat(values, self.first) if self.sizes.size else np.zeros(0)

    @staticmethod
    def of(options: Sequence[JobOptions], submit_s: Sequence[float]) -> QueueTable:
        """The table of jobs with these options and submit times, in this order."""
        sizes = np.array([len(o) for o in options], dtype=np.int64)
        if not options:
            i, f = np.zeros(0, np.int64), np.zeros(0)
            return QueueTable(owner=i, gpu=i, count=i, tokens_per_s=f, run_s=f, sizes=i, submit_s=f)
        return QueueTable(owner=np.repeat(np.arange(sizes.size), sizes),
                          gpu=np.concatenate([o.gpu for o in options]).astype(np.int64),
                          count=np.concatenate([o.count for o in options]).astype(np.int64),
                          tokens_per_s=np.concatenate([o.tokens_per_s for o in options]),
                          run_s=np.concatenate([o.run_s for o in options]), sizes=sizes,
                          submit_s=np.asarray(submit_s, dtype=np.float64))

    def extended(self, other: QueueTable) -> QueueTable:
        """This table followed by ``other``'s jobs."""
        return QueueTable(owner=np.concatenate([self.owner, other.owner + self.sizes.size]),
                          gpu=np.concatenate([self.gpu, other.gpu]), count=np.concatenate([self.count, other.count]),
                          tokens_per_s=np.concatenate([self.tokens_per_s, other.tokens_per_s]),
                          run_s=np.concatenate([self.run_s, other.run_s]),
                          sizes=np.concatenate([self.sizes, other.sizes]),
                          submit_s=np.concatenate([self.submit_s, other.submit_s]))

    def kept(self, keep: np.ndarray) -> QueueTable:
        """This table with only the jobs where ``keep`` (one bool per job) is true."""
        rows = np.repeat(keep, self.sizes)
        sizes = self.sizes[keep]
        return QueueTable(owner=np.repeat(np.arange(sizes.size), sizes), gpu=self.gpu[rows], count=self.count[rows],
                          tokens_per_s=self.tokens_per_s[rows], run_s=self.run_s[rows], sizes=sizes,
                          submit_s=self.submit_s[keep])


class QueuePolicy(Policy):
    """Jobs wait in arrival order; on arrival each gets its options (the allocations it fits in memory),
    and a job with none is rejected at once with the reason."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[TrainingJob] = []
        self.options: dict[str, JobOptions] = {}
        self._table: QueueTable | None = None
        """The options of the queue's first ``len(queue) - len(_pending)`` jobs; None until first asked for."""
        self._pending: list[TrainingJob] = []
        """Jobs queued since the table was last brought up to date."""
        self._arrival: dict[str, int] = {}
        """Job id -> arrival number: a job that comes back (preempted, interrupted) regains its place."""

    def table(self) -> QueueTable:
        """The queued jobs' options as flat arrays (built on first use, then kept in step with the queue)."""
        if self._table is None:
            self._table = QueueTable.of([self.options[j.id] for j in self.queue], [j.submit_time_s for j in self.queue])
        elif self._pending:
            more = QueueTable.of([self.options[j.id] for j in self._pending], [j.submit_time_s for j in self._pending])
            self._table = self._table.extended(more)
        self._pending = []
        return self._table

    @abc.abstractmethod
    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        """The allocations the policy may give ``job`` on the ``allowed`` types that fit it in memory."""

    def counted_options(self, job: TrainingJob, allowed: list[str],
                        counts: Callable[[str], Sequence[int]]) -> JobOptions:
        """Every count ``counts(type)`` of every allowed type, kept where the job fits in memory."""
        return self.rates.options(job, [counts(t) if t in allowed else [] for t in self.state.gpu_types],
                                  job.total_tokens)

    def allowed_types(self, job: TrainingJob) -> list[str]:
        """GPU types the job may run on: the one it asked for, else every type of the cluster."""
        if job.request is not None and job.request.gpu_type is not None:
            return [job.request.gpu_type] if job.request.gpu_type in self.state.gpu_types else []
        return list(self.state.gpu_types)

    def submit(self, job: TrainingJob, now: float) -> None:
        allowed = self.allowed_types(job)
        if not allowed:
            assert job.request is not None and job.request.gpu_type is not None
            self.rejected[job.id] = (f"asks for {job.request.gpu_type}, which the cluster lacks "
                                     f"(it has {', '.join(self.state.gpu_types)})")
            return
        options = self.job_options(job, allowed)
        if not len(options):
            self.rejected[job.id] = (f"{job.model.name or 'the model'} fits in memory on none of the allocations "
                                     f"{self.name} may give it on {', '.join(allowed)}")
            return
        self.options[job.id] = options
        number = self._arrival.setdefault(job.id, len(self._arrival))
        if not self.queue or self._arrival[self.queue[-1].id] < number:
            self.queue.append(job)
            if self._table is not None:
                self._pending.append(job)
            return
        at = bisect.bisect([self._arrival[j.id] for j in self.queue], number)
        self.queue.insert(at, job)
        self._table, self._pending = None, []

    def cancel(self, job_id: str) -> None:
        self.dequeue({job_id})

    def queued(self) -> list[TrainingJob]:
        return list(self.queue)

    def saved(self) -> dict[str, Any]:
        return {"arrival": list(self._arrival)}

    def restore(self, data: dict[str, Any]) -> None:
        self._arrival = {job_id: i for i, job_id in enumerate(data["arrival"])}

    def on_finish(self, job_id: str, now: float) -> None:
        """Nothing to update: the freed GPUs are visible in the cluster state."""

    def dequeue(self, started: set[str]) -> None:
        """Drop the jobs just placed from the queue."""
        if not started:
            return
        table = None if self._table is None else self.table()  # up to date with the queue before it changes
        k = len(started)
        if all(j.id in started for j in self.queue[:k]):  # the head of the queue (always, for FIFO)
            keep = np.arange(len(self.queue)) >= k
            self.queue = self.queue[k:]
        else:
            keep = np.array([j.id not in started for j in self.queue], dtype=bool)
            self.queue = [j for j, kept in zip(self.queue, keep) if kept]
        for job_id in started:
            self.options.pop(job_id, None)
        if table is not None:
            self._table = table.kept(keep)

    def place_row(self, table: QueueTable, row: int, free: ClusterState) -> Start | None:
        """:meth:`place` for row ``row`` of the queue table."""
        j = int(table.owner[row])
        return self.place(self.queue[j], row - int(table.first[j]), free)

    def place(self, job: TrainingJob, option: int, free: ClusterState) -> Start | None:
        """Start ``job`` with its option ``option`` on GPUs of ``free`` (taken there), re-planned on them; None
        when no free GPUs of that type and count fit a layout of the job (fragmented nodes)."""
        opts = self.options[job.id]
        gpu_type = self.state.gpu_types[int(opts.gpu[option])]
        plan = self.rates.place(job, gpu_type, int(opts.count[option]), free)
        if plan is None:
            return None
        free.take(plan.nodes)
        return Start(job_id=job.id, plan=plan)

    def free_per_type(self, free: ClusterState) -> np.ndarray:
        """Free GPUs of each type, in cluster order of types."""
        return free.free_per_type()
