"""Preemption and elastic resizing for policies: what a move costs, and the moves that pay.

A move stops a running job at a checkpoint (``save_s`` on its GPUs) and restarts it (``restore_s`` on the new
ones), as :class:`~frenzy_core.scheduling.checkpoint.CheckpointModel` prices it; the scheduler charges the same.

* :func:`grow`: a running job moves onto more GPUs of its type that nobody else can use now, when it then ends
  sooner by at least ``min_gain`` of its remaining time, restart included;
* :func:`make_room`: running jobs with more work left than a waiting job's whole run are preempted, longest
  first, until the waiting job's GPUs can be had, when each victim's remaining time exceeds the waiting job's run
  plus its own restart (the waiting job's gain exceeds the victim's loss).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action, Preempt, Resize, Start
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.runs import RunningJob, RunTable
from frenzy_core.scheduling.state import ClusterState

__all__ = ["GROW_CANDIDATES", "BelowCeiling", "grow", "longest_runs", "make_room", "restart_s"]

GROW_CANDIDATES = 16
"""Running jobs weighed for growth per round: those with the latest expected ends (they gain the most from more
GPUs; our bound on a round's cost)."""


def restart_s(policy: Policy, run: RunningJob, num_gpus: int) -> float:
    """Seconds a move of ``run`` onto ``num_gpus`` GPUs costs: save on its GPUs, restore on the new ones."""
    job = run.job
    return (policy.checkpoint.save_s(job.model, job.training, run.plan.num_gpus)
            + policy.checkpoint.restore_s(job.model, job.training, num_gpus))


def _settled(run: RunningJob, now: float) -> bool:
    """Past its restore (a job that has just restarted is not moved again at once)."""
    return now >= run.started_s + run.stall_s


def longest_runs(policy: Policy, types: Collection[str]) -> list[RunningJob]:
    """The :data:`GROW_CANDIDATES` runs on ``types`` that end last, latest first (ties: running order, which
    replays identically)."""
    gpu, end, _, rank = policy.running.columns()
    wanted = np.zeros(len(policy.state.gpu_types), dtype=bool)
    wanted[[policy.state.gpu_types.index(t) for t in types]] = True
    on = np.flatnonzero(wanted[gpu])
    longest = on[np.lexsort((rank[on], -end[on]))[:GROW_CANDIDATES]]
    return [policy.running.run_at(row) for row in longest.tolist()]


class BelowCeiling:
    """The runs that hold fewer GPUs than the largest count they may have, per GPU type: only they can grow, so a
    growth attempt on types where there are none has nothing to weigh (after most completions on a lightly
    loaded cluster, every run is at its largest count). Kept from the policy's own actions: a Start or Resize
    records its run (at the next round, once applied), a Preempt or ``drop`` (the job finished, was cancelled or
    came back to the queue) forgets it."""

    def __init__(self, counts: Callable[[TrainingJob, str], Sequence[int]]):
        self.counts = counts
        self._type_of: dict[str, str] = {}
        """Job id -> the GPU type of its run, for runs below their largest count."""
        self._per_type: dict[str, int] = {}

    def note(self, job: TrainingJob, gpu_type: str, num_gpus: int) -> None:
        """``job`` now runs on ``num_gpus`` GPUs of ``gpu_type``."""
        self.drop(job.id)
        if num_gpus < max(self.counts(job, gpu_type), default=0):
            self._type_of[job.id] = gpu_type
            self._per_type[gpu_type] = self._per_type.get(gpu_type, 0) + 1

    def note_actions(self, running: RunTable, actions: Sequence[Action]) -> None:
        """Follow a past round's actions, once the scheduler has applied them: the runs they began that still run
        (one that ended or was interrupted since was dropped then)."""
        for action in actions:
            if isinstance(action, Preempt):
                self.drop(action.job_id)
                continue
            run = running.get(action.job_id)
            if run is not None and run.plan is action.plan:
                self.note(run.job, action.plan.gpu_type, action.plan.num_gpus)

    def rebuild(self, running: RunTable) -> None:
        """Every run of ``running`` (a restored scheduler's)."""
        self._type_of, self._per_type = {}, {}
        for run in running.values():
            self.note(run.job, run.plan.gpu_type, run.plan.num_gpus)

    def drop(self, job_id: str) -> None:
        gpu_type = self._type_of.pop(job_id, None)
        if gpu_type is not None:
            self._per_type[gpu_type] -= 1

    def any_on(self, types: Collection[str]) -> bool:
        """Whether some run on one of ``types`` is below its largest count."""
        return any(self._per_type.get(t, 0) for t in types)


def grow(policy: Policy, free: ClusterState, now: float, types: Sequence[str],
         counts: Callable[[TrainingJob, str], Sequence[int]], min_gain: float) -> list[Action]:
    """Resize running jobs on ``types`` onto more of their type's free GPUs (taken in ``free``) where it pays;
    of the :data:`GROW_CANDIDATES` jobs with the most time left, longest first. ``counts(job, type)``: the counts
    the job may have."""
    out: list[Action] = []
    spare = {t: free.free_gpus(t) for t in types}
    spare = {t: n for t, n in spare.items() if n}
    if not spare:
        return out
    for run in longest_runs(policy, spare):
        g, n = run.plan.gpu_type, run.plan.num_gpus
        if not spare.get(g) or not _settled(run, now):
            continue
        allowed = counts(run.job, g)
        if max(allowed, default=0) <= n:  # most candidates: already at their largest count
            continue
        larger = sorted((c for c in allowed if n < c <= n + spare[g]), reverse=True)
        if not larger:  # too few spare GPUs
            continue
        left_tokens = run.job.total_tokens - run.tokens_at(now)
        remaining = run.remaining_s(now)
        for c in larger:
            rate = policy.rates.rate(run.job, g, c)
            if rate is None or remaining - (restart_s(policy, run, c) + left_tokens / rate) < min_gain * remaining:
                continue
            scratch = free.copy()
            scratch.release(run.plan.nodes)
            plan = policy.rates.place(run.job, g, c, scratch)
            if plan is None or remaining - (restart_s(policy, run, c) + left_tokens / plan.tokens_per_s) < (
                    min_gain * remaining):
                continue
            scratch.take(plan.nodes)
            free.assign(scratch)
            spare[g] = free.free_gpus(g)
            out.append(Resize(job_id=run.job.id, plan=plan))
            break
    return out


def make_room(policy: Policy, job: TrainingJob, options: Sequence[tuple[str, int, float]], free: ClusterState,
              now: float, protected: Callable[[RunningJob], bool]) -> list[Action]:
    """Preempt running jobs so that ``job`` can start now with one of ``options`` ((type, count, run seconds),
    best first); the moves (Preempts, then the Start) or [] when none pays. ``protected`` runs are never
    preempted."""
    for gpu_type, count, run_s in options:
        victims = sorted((r for r in policy.running.values()
                          if r.plan.gpu_type == gpu_type and _settled(r, now) and not protected(r)
                          and r.remaining_s(now) > run_s + restart_s(policy, r, r.plan.num_gpus)),
                         key=lambda r: (-r.remaining_s(now), r.job.id))
        scratch = free.copy()
        chosen: list[RunningJob] = []
        for run in victims:
            scratch.release(run.plan.nodes)
            chosen.append(run)
            plan = policy.rates.place(job, gpu_type, count, scratch)
            if plan is not None:
                scratch.take(plan.nodes)
                free.assign(scratch)
                reason = f"making room for {job.id!r}, waiting since {job.submit_time_s:.0f} s"
                return [*(Preempt(job_id=r.job.id, reason=reason) for r in chosen), Start(job_id=job.id, plan=plan)]
    return []
