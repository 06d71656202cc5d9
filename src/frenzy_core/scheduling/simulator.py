"""``simulate``: a discrete-event simulation of a policy scheduling training jobs on a cluster.

Events are arrivals and completions. At each event time the simulator frees the GPUs of jobs that ended and
tells the policy (``on_finish``), hands it the jobs that arrived (``submit``), asks it for placements
(``schedule``: one scheduling round, timed), checks that they fit the free GPUs of their type and that a
layout fits in memory, and starts them: a job with throughput r tokens/s and work W tokens ends W / r seconds
later. A placement with no layout that fits (``tokens_per_s`` None) is a policy error unless ``allow_oom``,
which records it as an OOM failure that ends at once. When no event is left, every job that never started is
reported unschedulable with the policy's reason, so each job is counted exactly once.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from frenzy_core.errors import ConfigError, FrenzyError, require_instance, require_seed
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.policies import get_policy
from frenzy_core.scheduling.policy import Placement, Policy
from frenzy_core.scheduling.result import JobRecord, JobStatus, SimulationResult, Utilisation, summarise
from frenzy_core.scheduling.state import Allocation, ClusterState
from frenzy_core.scheduling.throughput import PlannedThroughput
from frenzy_core.scheduling.workload import ThroughputFn

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["JobRecord", "JobStatus", "SimulationError", "SimulationResult", "simulate"]


class SimulationError(FrenzyError):
    """A policy returned a placement the simulator cannot apply (a bug in the policy)."""


def _check_jobs(jobs: Sequence[TrainingJob]) -> None:
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
        raise ConfigError(f"jobs must be a list of TrainingJob, got {type(jobs).__name__}", field="jobs",
                          hint="build them with TrainingJob(...), synthetic_jobs or jobs_from_trace")
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        require_instance(f"jobs[{i}]", job, TrainingJob)
        if job.id in seen:
            raise ConfigError(f"job id {job.id!r} appears twice; ids must be unique", field="jobs.id",
                              value=job.id)
        seen.add(job.id)


def _progress(enabled: bool, total: int) -> tuple[Progress, TaskID]:
    """A transient progress bar over jobs accounted for, on stderr (disabled: draws nothing)."""
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(console=Console(stderr=True), disable=not enabled, transient=True)
    return progress, progress.add_task("simulating", total=total)


class _Run:
    """The mutable state of one simulation: free GPUs, running jobs, records, utilisation samples."""

    def __init__(self, jobs: Sequence[TrainingJob], state: ClusterState, policy: Policy, allow_oom: bool):
        self.by_id = {j.id: j for j in jobs}
        self.state = state
        self.policy = policy
        self.allow_oom = allow_oom
        self.records: dict[str, JobRecord] = {}
        self.running: dict[str, Allocation] = {}
        self.ends: list[tuple[float, int, str]] = []  # (time, order, job id): a heap of completions
        self.times_s: list[float] = []
        self.busy: dict[str, list[int]] = {t: [] for t in state.gpu_types}
        self.capacity = {t: state.usable_gpus(t) for t in state.gpu_types}

    def start(self, placement: Placement, now: float) -> None:
        """Check a placement against the free GPUs and memory, and start it."""
        name, job = self.policy.name, self.by_id.get(placement.job_id)
        if job is None or placement.job_id in self.records:
            raise SimulationError(f"policy {name!r} placed {placement.job_id!r}, which is unknown or already placed")
        if job.request is not None and job.request.gpu_type not in (None, placement.gpu_type):
            raise SimulationError(f"policy {name!r} placed {job.id!r} on {placement.gpu_type}; it asked for "
                                  f"{job.request.gpu_type}")
        for node, count in placement.allocation.items():
            if self.state.node_types[node] != placement.gpu_type or not 0 < count <= self.state.free[node]:
                raise SimulationError(f"policy {name!r} placed {job.id!r} on node {node} "
                                      f"({self.state.node_types[node]}, {self.state.free[node]} free) asking "
                                      f"{count} {placement.gpu_type}")
        rate = placement.tokens_per_s
        if rate is None and not self.allow_oom:
            raise SimulationError(f"policy {name!r} placed {job.id!r} on {placement.num_gpus} x "
                                  f"{placement.gpu_type}, where no layout fits in memory (an OOM placement); "
                                  "policies must place only what fits (pass allow_oom=True to count them)")
        if rate is not None and not rate > 0:
            raise SimulationError(f"policy {name!r} placed {job.id!r} at {rate} tokens/s; a rate must be > 0 "
                                  "(None marks an OOM placement)")
        self.state.take(placement.allocation)
        self.running[job.id] = placement.allocation
        end = now if rate is None else now + job.total_tokens / rate
        self.records[job.id] = JobRecord(
            id=job.id, status=JobStatus.OOM if rate is None else JobStatus.FINISHED,
            submit_time_s=job.submit_time_s, start_time_s=now, finish_time_s=end, gpu_type=placement.gpu_type,
            num_gpus=placement.num_gpus, tokens_per_s=rate, layout=placement.layout,
            reason="no layout fits the allocation's memory" if rate is None else None)
        heapq.heappush(self.ends, (end, len(self.records), job.id))

    def sample(self, now: float) -> None:
        """Record the busy GPUs per type from ``now`` on (replacing a sample taken at the same time)."""
        if self.times_s and self.times_s[-1] == now:
            self.times_s.pop()
            for series in self.busy.values():
                series.pop()
        self.times_s.append(now)
        for t in self.state.gpu_types:
            self.busy[t].append(self.capacity[t] - self.state.free_gpus(t))


def simulate(jobs: Sequence[TrainingJob], cluster: Cluster, policy: str | Policy, *, seed: int = 0,
             progress: bool = True, throughput: ThroughputFn | None = None,
             allow_oom: bool = False) -> SimulationResult:
    """Run ``policy`` (a name from ``POLICIES`` such as ``frenzy-core``, or an instance) on ``jobs`` over
    ``cluster``.

    ``throughput`` (model, training, GPU type, count) -> tokens/s is what policies use to rate allocations and
    jobs run at; the default is a :class:`PlannedThroughput` (frenzy_core's planner; pass one object to several
    calls to reuse its tables). ``progress`` shows a transient progress bar on stderr. ``allow_oom`` counts
    placements where no layout fits as failed jobs instead of raising :class:`SimulationError`.
    """
    _check_jobs(jobs)
    require_instance("cluster", cluster, Cluster, "use Cluster.preset(name) or Cluster.from_yaml(path)")
    require_seed(seed)
    if throughput is not None and not callable(throughput):
        raise ConfigError(f"throughput must be a function (model, training, gpu, count) -> tokens/s, got "
                          f"{type(throughput).__name__}", field="throughput")
    chosen = get_policy(policy)
    state = ClusterState(cluster)
    chosen.start(state, throughput or PlannedThroughput(), seed)
    run = _Run(jobs, state, chosen, allow_oom)
    arrivals = sorted(jobs, key=lambda j: j.submit_time_s)
    next_arrival = 0
    latencies: list[float] = []
    bar, task = _progress(progress, len(jobs))
    with bar:
        while next_arrival < len(arrivals) or run.ends:
            now = min(arrivals[next_arrival].submit_time_s if next_arrival < len(arrivals) else math.inf,
                      run.ends[0][0] if run.ends else math.inf)
            while run.ends and run.ends[0][0] <= now:
                _, _, job_id = heapq.heappop(run.ends)
                state.release(run.running.pop(job_id))
                chosen.on_finish(job_id, now)
                bar.advance(task)
            while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time_s <= now:
                job = arrivals[next_arrival]
                chosen.submit(job, now)
                next_arrival += 1
                if job.id in chosen.rejected:
                    bar.advance(task)
            began = time.perf_counter()
            placements = chosen.schedule(now)
            latencies.append(time.perf_counter() - began)
            for placement in placements:
                run.start(placement, now)
            run.sample(now)

    records = run.records
    for job in jobs:
        if job.id not in records:
            reason = chosen.rejected.get(job.id, "still waiting when no event was left")
            records[job.id] = JobRecord(id=job.id, status=JobStatus.UNSCHEDULABLE,
                                        submit_time_s=job.submit_time_s, reason=reason)
    ordered = [records[j.id] for j in jobs]
    # conservation: every job counted once, nothing left running, every GPU back
    assert len(ordered) == len(jobs) and not run.running, "every job is counted once and none is left running"
    assert (state.free == state.initial_free).all(), "every GPU is free again at the end"
    utilisation = Utilisation(times_s=run.times_s, busy_gpus=run.busy, capacity_gpus=run.capacity)
    return summarise(chosen.name, ordered, utilisation, latencies)
