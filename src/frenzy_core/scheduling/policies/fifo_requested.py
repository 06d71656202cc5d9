"""``fifo-requested``: jobs get the GPU type and count they asked for, strictly in arrival order.

The baseline of request-based cluster schedulers (Philly, Slurm without backfill): the queue's head waits
until its request is free, and nothing behind it may pass. A request without a GPU type takes the first type,
in cluster order, with enough free GPUs. The job runs with the fastest layout of that allocation that fits in
memory; when none fits it is placed anyway and fails (an OOM placement), as a user's job would.
"""

from __future__ import annotations

from collections import deque

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import InfeasiblePlanError
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.policy import Placement, Policy

__all__ = ["FifoRequested"]


class FifoRequested(Policy):
    """First come, first served on the requested allocation; no backfilling, no preemption."""

    name = "fifo-requested"

    def __init__(self) -> None:
        super().__init__()
        self.queue: deque[TrainingJob] = deque()
        self._rates: dict[tuple[ModelConfig, TrainingConfig, str, int], float | None] = {}

    def submit(self, job: TrainingJob, now: float) -> None:
        request = job.request
        if request is None:
            self.rejected[job.id] = "no GPU request (fifo-requested only places what a job asked for)"
            return
        if request.gpu_type is not None and request.gpu_type not in self.state.gpu_types:
            self.rejected[job.id] = (f"asks for {request.gpu_type}, which the cluster lacks "
                                     f"(it has {', '.join(self.state.gpu_types)})")
            return
        if request.gpu_type is not None:
            usable, kind = self.state.usable_gpus(request.gpu_type), request.gpu_type
        else:  # any type, but all GPUs of one type
            usable, kind = max(self.state.usable_gpus(t) for t in self.state.gpu_types), "GPUs of one type"
        if request.num_gpus > usable:
            self.rejected[job.id] = f"asks for {request.num_gpus} {kind}; the cluster has {usable}"
            return
        self.queue.append(job)

    def on_finish(self, job_id: str, now: float) -> None:
        """Nothing to update: the freed GPUs are visible in the cluster state."""

    def _tokens_per_s(self, job: TrainingJob, gpu_type: str, num_gpus: int) -> float | None:
        key = (job.model, job.training, gpu_type, num_gpus)
        if key not in self._rates:
            try:
                self._rates[key] = self.throughput(job.model, job.training, gpu_type, num_gpus)
            except InfeasiblePlanError:
                self._rates[key] = None
        return self._rates[key]

    def schedule(self, now: float) -> list[Placement]:
        placements: list[Placement] = []
        free = self.state.copy()  # what is left after the placements made so far in this call
        while self.queue:
            job = self.queue[0]
            assert job.request is not None  # submit keeps only jobs with a request
            types = [job.request.gpu_type] if job.request.gpu_type else list(self.state.gpu_types)
            for gpu_type in types:
                allocation = free.find(gpu_type, job.request.num_gpus)
                if allocation is not None:
                    break
            else:
                return placements  # the head waits; nothing behind it passes
            self.queue.popleft()
            placement = Placement(job.id, gpu_type, allocation,
                                  self._tokens_per_s(job, gpu_type, job.request.num_gpus))
            free.take(allocation)
            placements.append(placement)
        return placements
