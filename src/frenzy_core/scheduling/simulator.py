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
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from frenzy_core.errors import ConfigError
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.scheduling.check import PlacementCheck
from frenzy_core.scheduling.checkpoint import CheckpointModel
from frenzy_core.scheduling.failures import FailureModel
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Event, Preempt, Resize, Start
from frenzy_core.scheduling.online import OnlineScheduler, SchedulerError
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.result import JobRecord, JobStatus, SimulationResult, Utilisation, summarise
from frenzy_core.scheduling.throughput import PlannedThroughput
from frenzy_core.scheduling.workload import ThroughputFn

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["JobRecord", "JobStatus", "SimulationResult", "simulate"]


def _check_jobs(jobs: Sequence[TrainingJob]) -> None:
    seen: set[str] = set()
    for job in jobs:
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
    model = FailureModel(seed=seed) if failures is True else (failures or None)
    check = PlacementCheck(sched.rates)
    violations: dict[str, str] = {}
    arrivals = sorted(jobs, key=lambda j: j.submit_time_s)
    next_arrival = 0
    ends: list[tuple[float, int, str, int]] = []  # (time, order, job id, run number): a heap of completions
    run_of: dict[str, int] = {}
    order = itertools.count()
    nodes: list[tuple[float, int, str, int]] = []  # (time, order, "down"/"up", node): failures and repairs
    histories: list[Iterator[tuple[float, float]]] = []
    back_at: dict[int, float] = {}  # node -> when its current or next outage ends
    down: set[int] = set()

    def next_failure(node: int) -> None:
        for fail_s, up_s in itertools.islice(histories[node], 1):
            heapq.heappush(nodes, (fail_s, next(order), "down", node))
            back_at[node] = up_s

    if model is not None:
        for node, gpus in enumerate(sched.state.capacity.tolist()):
            histories.append(model.history(node, int(gpus)))
            next_failure(node)
    node_failures = 0
    latencies: list[float] = []
    times_s: list[float] = []
    busy: dict[str, list[int]] = {t: [] for t in sched.state.gpu_types}
    capacity = {t: sched.state.usable_gpus(t) for t in sched.state.gpu_types}

    def record(kind: str, **fields: object) -> None:
        if events is not None:
            events.append(Event(kind=kind, time_s=now, **fields))  # type: ignore[arg-type]

    now = 0.0
    bar, task = _progress(progress, len(jobs))
    with bar:
        while True:
            while ends and run_of.get(ends[0][2]) != ends[0][3]:
                heapq.heappop(ends)  # a run that was preempted or resized
            if next_arrival >= len(arrivals) and not ends and not down:
                break  # nothing runs, nothing arrives, every node is up: the queue can never move
            now = min(arrivals[next_arrival].submit_time_s if next_arrival < len(arrivals) else math.inf,
                      ends[0][0] if ends else math.inf, nodes[0][0] if nodes else math.inf)
            while ends and ends[0][0] <= now:
                _, _, job_id, run = heapq.heappop(ends)
                if run_of.get(job_id) == run:
                    del run_of[job_id]
                    record("job_finished", job_id=job_id)
                    sched.job_finished(job_id)
                    bar.advance(task)
            while nodes and nodes[0][0] <= now:
                _, _, kind, node = heapq.heappop(nodes)
                name = sched.node_names[node]
                if kind == "down":
                    node_failures += 1
                    down.add(node)
                    record("node_down", node=name)
                    sched.node_down(node)
                    heapq.heappush(nodes, (back_at[node], next(order), "up", node))
                else:
                    down.discard(node)
                    record("node_up", node=name)
                    sched.node_up(node)
                    next_failure(node)
            while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time_s <= now:
                job = arrivals[next_arrival]
                record("submit", job=job)
                sched.submit(job)
                next_arrival += 1
            began = time.perf_counter()
            actions = sched.advance(now)
            latencies.append(time.perf_counter() - began)
            record("advance", actions=actions)
            for action in actions:
                if isinstance(action, Preempt):
                    run_of.pop(action.job_id, None)
                    continue
                assert isinstance(action, (Start, Resize))
                job = sched.jobs[action.job_id]
                problem = check(job, action.plan)
                if problem is not None:
                    if not allow_violations:
                        raise SchedulerError(f"policy {sched.policy.name!r} placed {job.id!r} on "
                                             f"{action.plan.num_gpus} x {action.plan.gpu_type}: {problem}")
                    violations.setdefault(job.id, problem)
                run_of[job.id] = n = next(order)
                heapq.heappush(ends, (sched.expected_end_s(job.id), n, job.id, n))
            _sample(sched, now, times_s, busy)

    records = sched.records()
    by_id = {r.id: r for r in records}
    ordered = [by_id[j.id] for j in jobs]
    ordered = [r.model_copy(update={"violation": violations[r.id]}) if r.id in violations else r for r in ordered]
    assert len(ordered) == len(jobs) and not sched.running, "every job is counted once and none is left running"
    utilisation = Utilisation(times_s=times_s, busy_gpus=busy, capacity_gpus=capacity)
    return summarise(sched.policy.name, ordered, utilisation, latencies, node_failures)


def _sample(sched: OnlineScheduler, now: float, times_s: list[float], busy: dict[str, list[int]]) -> None:
    """Record the busy GPUs per type from ``now`` on (replacing a sample taken at the same time)."""
    if times_s and times_s[-1] == now:
        times_s.pop()
        for series in busy.values():
            series.pop()
    times_s.append(now)
    for t, n in zip(sched.state.gpu_types, sched.state.busy_per_type().tolist()):
        busy[t].append(n)
