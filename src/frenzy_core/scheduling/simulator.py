"""``simulate``: a discrete-event simulation of a cluster manager driving an :class:`OnlineScheduler`.

Events are arrivals, completions, and (with ``failures``) node failures and repairs. At each event time the
simulator tells the scheduler what happened (``job_finished``, ``node_down``, ``node_up``, ``submit``), calls
``advance(now)`` (one scheduling round, timed) and carries out its actions: a started or resized job ends when
its work is done at its layout's rate (after restoring its checkpoint), a preempted one stops. Every placement
is checked against the memory and time models (:class:`PlacementCheck`): a violation is a policy error unless
``allow_violations``, which counts it. When no event is left, every job that never finished is reported
unschedulable with the reason, so each job is counted exactly once.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from frenzy_core.errors import ConfigError, require_instance
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.scheduling.check import PlacementCheck
from frenzy_core.scheduling.checkpoint import CheckpointModel
from frenzy_core.scheduling.failures import FailureModel
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action, Event, Preempt
from frenzy_core.scheduling.online import OnlineScheduler, SchedulerError
from frenzy_core.scheduling.plans import Placement
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.result import JobRecord, JobStatus, SimulationResult, Utilisation, summarise
from frenzy_core.scheduling.throughput import PlannedThroughput
from frenzy_core.scheduling.workload import ThroughputFn

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["JobRecord", "JobStatus", "SimulationResult", "simulate"]


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


class _World:
    """What the simulated cluster does: arrivals, completions of the runs the scheduler started, node failures
    and repairs; each delivered to the scheduler as the manager's call (and recorded when ``events`` is a list)."""

    def __init__(self, jobs: Sequence[TrainingJob], sched: OnlineScheduler, failures: FailureModel | None,
                 events: list[Event] | None):
        self.sched, self.events = sched, events
        self.arrivals = sorted(jobs, key=lambda j: j.submit_time_s)
        self.next_arrival = 0
        self.ends: list[tuple[float, int, str, int]] = []  # (time, order, job id, run number): completions
        self.run_of: dict[str, int] = {}
        self.order = itertools.count()
        self.nodes: list[tuple[float, int, str, int]] = []  # (time, order, "down"/"up", node)
        self.histories: list[Iterator[tuple[float, float]]] = []
        self.back_at: dict[int, float] = {}  # node -> when its current or next outage ends
        self.down: set[int] = set()
        self.node_failures = 0
        if failures is not None:
            for node, gpus in enumerate(sched.state.capacity.tolist()):
                self.histories.append(failures.history(node, int(gpus)))
                self._next_failure(node)

    def _next_failure(self, node: int) -> None:
        for fail_s, up_s in itertools.islice(self.histories[node], 1):
            heapq.heappush(self.nodes, (fail_s, next(self.order), "down", node))
            self.back_at[node] = up_s

    def record(self, kind: str, now: float, **fields: object) -> None:
        if self.events is not None:
            self.events.append(Event(kind=kind, time_s=now, **fields))  # type: ignore[arg-type]

    def next_time(self) -> float | None:
        """The next event's time; None when nothing runs, nothing arrives and every node is up (the queue can
        never move again)."""
        while self.ends and self.run_of.get(self.ends[0][2]) != self.ends[0][3]:
            heapq.heappop(self.ends)  # a run that was preempted or resized
        pending = self.next_arrival < len(self.arrivals)
        if not pending and not self.ends and not self.down:
            return None
        return min(self.arrivals[self.next_arrival].submit_time_s if pending else math.inf,
                   self.ends[0][0] if self.ends else math.inf, self.nodes[0][0] if self.nodes else math.inf)

    def deliver(self, now: float) -> int:
        """Tell the scheduler everything that happens at ``now``; the number of jobs that finished."""
        sched, finished = self.sched, 0
        while self.ends and self.ends[0][0] <= now:
            _, _, job_id, run = heapq.heappop(self.ends)
            if self.run_of.get(job_id) == run:
                del self.run_of[job_id]
                self.record("job_finished", now, job_id=job_id)
                sched.job_finished(job_id)
                finished += 1
        while self.nodes and self.nodes[0][0] <= now:
            _, _, kind, node = heapq.heappop(self.nodes)
            if kind == "down":
                self.node_failures += 1
                self.down.add(node)
                self.record("node_down", now, node=sched.node_names[node])
                sched.node_down(node)
                heapq.heappush(self.nodes, (self.back_at[node], next(self.order), "up", node))
            else:
                self.down.discard(node)
                self.record("node_up", now, node=sched.node_names[node])
                sched.node_up(node)
                self._next_failure(node)
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].submit_time_s <= now:
            job = self.arrivals[self.next_arrival]
            self.record("submit", now, job=job)
            sched.submit(job)
            self.next_arrival += 1
        return finished

    def carry_out(self, actions: Sequence[Action]) -> list[tuple[str, Placement]]:
        """Follow the round's actions (a started or resized run ends when its work is done); the placements."""
        out = []
        for action in actions:
            if isinstance(action, Preempt):
                self.run_of.pop(action.job_id, None)
                continue
            out.append((action.job_id, action.plan))
            self.run_of[action.job_id] = n = next(self.order)
            heapq.heappush(self.ends, (self.sched.expected_end_s(action.job_id), n, action.job_id, n))
        return out


def simulate(jobs: Sequence[TrainingJob], cluster: Cluster, policy: str | Policy, *, seed: int = 0,
             progress: bool = True, throughput: ThroughputFn | PlannedThroughput | None = None,
             allow_violations: bool = False, checkpoint: CheckpointModel | None = None,
             failures: FailureModel | bool | None = None, events: list[Event] | None = None) -> SimulationResult:
    """Run ``policy`` (a name from ``POLICIES`` such as ``frenzy-core``, or an instance) on ``jobs`` over
    ``cluster``.

    ``throughput`` is the rate model policies rank options by and jobs run at: the default, a
    :class:`PlannedThroughput`, re-plans every placement on its GPUs (pass one object to several calls to reuse its
    tables); a plain function (model, training, GPU type, count) -> tokens/s rates a count the same wherever it
    lands. ``checkpoint`` prices preemption and restarts; ``failures`` (True: the default
    :class:`FailureModel`, seeded with ``seed``) makes nodes fail and come back. ``events``, a list, receives
    every call made on the scheduler (replay it with :func:`frenzy_core.scheduling.online.replay`).
    ``allow_violations`` counts placements that do not fit their layout instead of raising
    :class:`SchedulerError`. ``progress`` shows a transient progress bar on stderr.
    """
    _check_jobs(jobs)
    sched = OnlineScheduler(cluster, policy, seed=seed, throughput=throughput, checkpoint=checkpoint)
    world = _World(jobs, sched, FailureModel(seed=seed) if failures is True else (failures or None), events)
    check = PlacementCheck(sched.rates)
    violations: dict[str, str] = {}
    latencies: list[float] = []
    times_s: list[float] = []
    busy: dict[str, list[int]] = {t: [] for t in sched.state.gpu_types}
    bar, task = _progress(progress, len(jobs))
    with bar:
        while (now := world.next_time()) is not None:
            done = world.deliver(now)
            if progress:
                bar.advance(task, done)
            began = time.perf_counter()
            actions = sched.advance(now)
            latencies.append(time.perf_counter() - began)
            world.record("advance", now, actions=actions)
            for job_id, plan in world.carry_out(actions):
                problem = check(sched.jobs[job_id], plan)
                if problem is not None:
                    if not allow_violations:
                        raise SchedulerError(f"policy {sched.policy.name!r} placed {job_id!r} on {plan.num_gpus} x "
                                             f"{plan.gpu_type}: {problem}")
                    violations.setdefault(job_id, problem)
            _sample(sched, now, times_s, busy)
    by_id = {r.id: r for r in sched.records()}
    ordered = [by_id[j.id] for j in jobs]
    ordered = [r.model_copy(update={"violation": violations[r.id]}) if r.id in violations else r for r in ordered]
    assert len(ordered) == len(jobs) and not sched.running, "every job is counted once and none is left running"
    utilisation = Utilisation(times_s=times_s, busy_gpus=busy,
                              capacity_gpus={t: sched.state.usable_gpus(t) for t in sched.state.gpu_types})
    return summarise(sched.policy.name, ordered, utilisation, latencies, world.node_failures)


def _sample(sched: OnlineScheduler, now: float, times_s: list[float], busy: dict[str, list[int]]) -> None:
    """Record the busy GPUs per type from ``now`` on (replacing a sample taken at the same time)."""
    if times_s and times_s[-1] == now:
        times_s.pop()
        for series in busy.values():
            series.pop()
    times_s.append(now)
    for t, n in zip(sched.state.gpu_types, sched.state.busy_per_type().tolist()):
        busy[t].append(n)
