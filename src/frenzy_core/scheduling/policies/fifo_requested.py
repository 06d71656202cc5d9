"""``fifo-requested``: jobs get the GPU type and count they asked for, strictly in arrival order.

The baseline of request-based cluster schedulers (Philly, Slurm without backfill): the queue's head waits
until its request is free, and nothing behind it may pass. A request without a GPU type takes the first type,
in cluster order, whose free GPUs hold a layout of the job that fits in memory. The job runs with the fastest
layout of those GPUs (re-planned on them). A request that fits in memory on no type it allows is rejected on arrival.
"""

from __future__ import annotations

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action
from frenzy_core.scheduling.policies._queue import QueuePolicy
from frenzy_core.scheduling.rates import JobOptions

__all__ = ["FifoRequested"]


class FifoRequested(QueuePolicy):
    """First come, first served on the requested allocation; no backfilling, no preemption."""

    name = "fifo-requested"

    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        assert job.request is not None  # submit rejects jobs without one first
        n = job.request.num_gpus
        return self.counted_options(job, allowed, lambda t: [n] if n <= self.state.usable_gpus(t) else [])

    def submit(self, job: TrainingJob, now: float) -> None:
        request = job.request
        if request is None:
            self.rejected[job.id] = "no GPU request (fifo-requested only places what a job asked for)"
            return
        allowed = self.allowed_types(job)
        usable = max((self.state.usable_gpus(t) for t in allowed), default=0)
        if allowed and request.num_gpus > usable:
            kind = request.gpu_type or "GPUs of one type"
            self.rejected[job.id] = f"asks for {request.num_gpus} {kind}; the cluster has {usable}"
            return
        super().submit(job, now)

    def schedule(self, now: float) -> list[Action]:
        starts: list[Action] = []
        free = self.state.copy()  # what is left after the placements made so far in this call
        left = self.free_per_type(free)
        for job in self.queue:
            opts = self.options[job.id]  # one option per type that fits, in cluster order of types
            started = None
            for o in np.flatnonzero(opts.count <= left[opts.gpu]):  # the first type whose free GPUs fit a layout
                started = self.place(job, int(o), free)
                if started is not None:
                    left[opts.gpu[o]] -= opts.count[o]
                    break
            if started is None:
                break  # the head waits; nothing behind it passes
            starts.append(started)
        self.dequeue({a.job_id for a in starts})
        return starts
