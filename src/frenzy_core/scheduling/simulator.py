"""``simulate``: a discrete-event simulation of a policy scheduling training jobs on a cluster.

Events are arrivals and completions. At each event time the simulator frees the GPUs of jobs that ended and
tells the policy (``on_finish``), hands it the jobs that arrived (``submit``), asks it for placements
(``schedule``), checks that they fit the free GPUs and starts them: a job with throughput r tokens/s and work
W tokens ends W / r seconds later; an OOM placement (no layout fits) ends at once, as a failed job. When no
event is left, every job that never started is reported unschedulable, so each job is counted exactly once.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.errors import ConfigError, FrenzyError
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.policies import get_policy
from frenzy_core.scheduling.policy import Placement, Policy
from frenzy_core.scheduling.state import Allocation, ClusterState
from frenzy_core.scheduling.workload import ThroughputFn, default_throughput

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["JobRecord", "JobStatus", "SimulationError", "SimulationResult", "simulate"]


class SimulationError(FrenzyError):
    """A policy returned a placement the simulator cannot apply (a bug in the policy)."""


class JobStatus(str, enum.Enum):
    """How a job's simulation ended."""

    FINISHED = "finished"
    """Ran to completion."""
    OOM = "oom"
    """Placed on an allocation where no layout fits in memory: failed at once."""
    UNSCHEDULABLE = "unschedulable"
    """Never placed (the policy rejected it, or it still waited when no event was left)."""


class JobRecord(FrozenModel):
    """What happened to one job."""

    id: str
    status: JobStatus
    submit_time_s: float = Field(ge=0)
    start_time_s: float | None = Field(default=None, description="When it was placed.")
    finish_time_s: float | None = Field(default=None, description="When it ended (finished or failed).")
    gpu_type: str | None = None
    num_gpus: int | None = None
    tokens_per_s: float | None = Field(default=None, description="Throughput of the layout it ran with.")
    reason: str | None = Field(default=None, description="Why it failed or was never placed.")

    @property
    def jct_s(self) -> float | None:
        """Job completion time (finish minus submit) of a finished job."""
        if self.status is not JobStatus.FINISHED or self.finish_time_s is None:
            return None
        return self.finish_time_s - self.submit_time_s


class SimulationResult(FrozenModel):
    """Per-job records and the summary figures of one simulation."""

    policy: str
    avg_jct_s: float | None = Field(description="Mean job completion time of finished jobs; None if none.")
    p99_jct_s: float | None = Field(description="99th percentile (linear interpolation) of the same.")
    makespan_s: float = Field(ge=0, description="First arrival to last completion (0 without completions).")
    oom_placements: int = Field(ge=0, description="Placements where no layout fit in memory.")
    unschedulable: list[str] = Field(description="Ids of jobs never placed.")
    jobs: list[JobRecord] = Field(description="One record per job, in submission order.")

    @property
    def finished(self) -> int:
        """Jobs that ran to completion."""
        return sum(r.status is JobStatus.FINISHED for r in self.jobs)


def _check_jobs(jobs: Sequence[TrainingJob]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.id in seen:
            raise ConfigError(f"job id {job.id!r} appears twice; ids must be unique", field="jobs.id",
                              value=job.id)
        seen.add(job.id)


def _progress(enabled: bool, total: int) -> tuple[Progress, TaskID]:
    """A transient progress bar over completions, on stderr (disabled: draws nothing)."""
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(console=Console(stderr=True), disable=not enabled, transient=True)
    return progress, progress.add_task("simulating", total=total)


def simulate(jobs: Sequence[TrainingJob], cluster: Cluster, policy: str | Policy, *, seed: int = 0,
             progress: bool = True, throughput: ThroughputFn | None = None) -> SimulationResult:
    """Run ``policy`` (a name such as ``fifo-requested``, or an instance) on ``jobs`` over ``cluster``.

    ``throughput`` (model, training, GPU type, count) -> tokens/s is what policies use to rate allocations;
    the default is frenzy_core's planner. ``progress`` shows a transient progress bar on the terminal.
    """
    _check_jobs(jobs)
    chosen = get_policy(policy)
    state = ClusterState(cluster)
    chosen.start(state, throughput or default_throughput, seed)
    arrivals = sorted(jobs, key=lambda j: j.submit_time_s)
    by_id = {j.id: j for j in jobs}
    records: dict[str, JobRecord] = {}
    running: dict[str, Allocation] = {}
    ends: list[tuple[float, int, str]] = []  # (time, order, job id): a heap of completions
    next_arrival = 0
    bar, task = _progress(progress, len(jobs))

    def start(placement: Placement, now: float) -> None:
        job = by_id.get(placement.job_id)
        if job is None or placement.job_id in records or placement.job_id in running:
            raise SimulationError(f"policy {chosen.name!r} placed {placement.job_id!r}, which is unknown or "
                                  "already placed")
        for node, count in placement.allocation.items():
            if state.node_types[node] != placement.gpu_type or count > state.free[node]:
                raise SimulationError(f"policy {chosen.name!r} placed {placement.job_id!r} on node {node} "
                                      f"({state.node_types[node]}, {state.free[node]} free) asking {count} "
                                      f"{placement.gpu_type}")
        state.take(placement.allocation)
        running[job.id] = placement.allocation
        rate = placement.tokens_per_s
        if rate is not None and not rate > 0:
            raise SimulationError(f"policy {chosen.name!r} placed {job.id!r} at {rate} tokens/s; a rate must "
                                  "be > 0 (None marks an OOM placement)")
        end = now if rate is None else now + job.total_tokens / rate
        records[job.id] = JobRecord(
            id=job.id, status=JobStatus.OOM if rate is None else JobStatus.FINISHED,
            submit_time_s=job.submit_time_s, start_time_s=now, finish_time_s=end, gpu_type=placement.gpu_type,
            num_gpus=placement.num_gpus, tokens_per_s=rate,
            reason="no layout fits the allocation's memory" if rate is None else None)
        heapq.heappush(ends, (end, len(records), job.id))

    with bar:
        while next_arrival < len(arrivals) or ends:
            now = min(arrivals[next_arrival].submit_time_s if next_arrival < len(arrivals) else math.inf,
                      ends[0][0] if ends else math.inf)
            while ends and ends[0][0] <= now:
                _, _, job_id = heapq.heappop(ends)
                state.release(running.pop(job_id))
                chosen.on_finish(job_id, now)
                bar.advance(task)
            while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time_s <= now:
                chosen.submit(arrivals[next_arrival], now)
                next_arrival += 1
            for placement in chosen.schedule(now):
                start(placement, now)

    for job in jobs:
        if job.id not in records:
            reason = chosen.rejected.get(job.id, "still waiting when no event was left")
            records[job.id] = JobRecord(id=job.id, status=JobStatus.UNSCHEDULABLE,
                                        submit_time_s=job.submit_time_s, reason=reason)
    ordered = [records[j.id] for j in jobs]
    assert len(ordered) == len(jobs) and not running, "every job is counted once and none is left running"
    return _summarise(chosen.name, ordered)


def _summarise(policy: str, records: list[JobRecord]) -> SimulationResult:
    jct = np.array([r.jct_s for r in records if r.jct_s is not None], dtype=np.float64)
    ended = [r.finish_time_s for r in records if r.finish_time_s is not None]
    first = min((r.submit_time_s for r in records), default=0.0)
    return SimulationResult(
        policy=policy,
        avg_jct_s=float(jct.mean()) if jct.size else None,
        p99_jct_s=float(np.percentile(jct, 99)) if jct.size else None,
        makespan_s=max(ended) - first if ended else 0.0,
        oom_placements=sum(r.status is JobStatus.OOM for r in records),
        unschedulable=[r.id for r in records if r.status is JobStatus.UNSCHEDULABLE],
        jobs=records,
    )
