"""``frenzy-core``: for the queued jobs, choose GPU type, count and start together to cut average JCT.

Per scheduling round (every arrival or completion):

1. Starvation bound. A job that has waited ``starvation_factor`` times its fastest run time is starving.
   Starving jobs go first, oldest first, each with its fastest option that fits now and whose run time is within
   ``stretch`` of the time to its earliest expected completion (waiting for the running jobs to end). The oldest
   starving job that cannot start reserves the type of its earliest-completing option: nothing else starts on
   that type this round, so GPUs drain towards it (EASY backfilling's reservation, without run-time estimates).
2. The other queued jobs: one option (type, count) or none each, chosen jointly by CP-SAT (:mod:`._choice`),
   maximising the sum of ``(least GPU-seconds in the queue / the job's) x (its fastest run / this run)`` over the
   jobs started now: shortest-job-first by area (which minimises average JCT), preferring faster types and
   counts. An option whose run time exceeds the job's fastest by more than ``stretch - 1`` of it and more than
   the time to drain the queue at full speed is worth 0 (the job waits for a better one).

3. With ``mixing``: jobs the round left waiting because their fastest option's type has too few free GPUs may
   start on the GPUs left free on two or more types, with the planner's replica groups of several types (issue
   12, form b), when that ends the job sooner than waiting for its best single-type option (``_mix``).
4. With ``mixing``, a job that fits in memory on no single type but whose mixed plan fits the whole idle cluster
   is queued apart (``mixed_only``), not rejected: it starts on free GPUs of two or more types where the
   planner's mix within its counts fits and its run is within the stretch of the time until it would finish by
   waiting for its whole-cluster mix. Such jobs are weighed oldest first (at most :data:`MIX_CANDIDATES` a
   round), before the others once they starve (then the oldest that does not start reserves the types of its
   whole-cluster mix, so they drain towards it, and no starving single-type job reserves or makes room there),
   else on what the round leaves free; no run grows onto the types such a job may use. Without ``mixing`` the
   rejection stays and says that ``mixing=True`` would accept the job.

Options are every type the job may use with counts from :func:`._queue.elastic_counts` (half to twice the
request), kept where the planner's candidate table finds a layout that fits in memory; the job runs at that
layout's throughput. With ``preemption``, long runs make room for starving jobs and grow onto idle GPUs.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np

from frenzy_core.errors import ConfigError, short_repr
from frenzy_core.hardware.gpu import usable_bytes
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.planning.request import DEFAULT_HEADROOM
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action, Start
from frenzy_core.scheduling.mixed import WholeMix, offers, place_mixed
from frenzy_core.scheduling.policies._choice import choose
from frenzy_core.scheduling.policies._elastic import BelowCeiling, grow, make_room
from frenzy_core.scheduling.policies._queue import QueuePolicy, QueueTable, elastic_counts
from frenzy_core.scheduling.rates import JobOptions, power_of_two_counts
from frenzy_core.scheduling.runs import RunningJob
from frenzy_core.scheduling.state import ClusterState

__all__ = ["DEFAULT_ROUND_BUDGET", "DEFAULT_STARVATION_FACTOR", "FrenzyCore"]

DEFAULT_STARVATION_FACTOR = 4.0
"""A job starves once its wait reaches this many times its fastest run time (a slowdown of 5; our choice)."""
DEFAULT_ROUND_BUDGET = 0.05
"""CP-SAT deterministic time per round (OR-Tools' work units, roughly seconds on one core; our choice, well within
the 100 ms round target; deterministic, unlike a wall-clock limit, so runs repeat exactly)."""
DEFAULT_STRETCH = 1.25
"""An option is started now only if its run time is at most this many times the time until the job's
earliest-completing option would finish (waiting for a faster type or more GPUs otherwise; our choice)."""
DEFAULT_MIN_GAIN = 0.2
"""A running job grows onto idle GPUs only if it then ends at least this share of its remaining time sooner,
restart included (our choice: a move must pay clearly, since GPUs it takes may be wanted by the next arrival)."""
DEFAULT_MIXING = False
"""Whether jobs may start on replica groups of several GPU types (``_mix``). Off by default, from the measurement
(docs/benchmarks.md, "Placements spanning GPU types"): on Philly jobs on frenzy-paper and aws-mixed and on the Sia
workload no mix ever ended a job sooner than waiting (cross-type gradient sync runs on the slowest inter-node
link), so results were identical while the planner's mixed questions cost 4.5-7x the simulation's CPU time."""
MIX_CANDIDATES = 4
"""Queued jobs weighed for a mixed placement per round, oldest first, in each of the two places that weigh them
(``_mix``: jobs with single-type options; ``_serve_mixed_only``: jobs only a mix holds, its starving and its other
jobs together): our bound on a round's cost, since each question the planner has not answered yet costs 0.03 to
6 s, measured on the shared 2-core machine, then is cached. Every weighed job counts, asked before or not, so
that decisions do not depend on what the planner has cached."""
VALUE_SCALE = 10**9
"""The fastest-finishing option of a round is worth this much; others in proportion (integer data)."""


class FrenzyCore(QueuePolicy):
    """Joint type, count and start choice per round (CP-SAT), with a starvation bound; no preemption."""

    name = "frenzy-core"

    def __init__(self, starvation_factor: float = DEFAULT_STARVATION_FACTOR,
                 round_budget: float = DEFAULT_ROUND_BUDGET, stretch: float = DEFAULT_STRETCH,
                 preemption: bool = True, min_gain: float = DEFAULT_MIN_GAIN, mixing: bool = DEFAULT_MIXING) -> None:
        super().__init__()
        self.starvation_factor = starvation_factor
        self.round_budget = round_budget
        self.stretch = stretch
        self.preemption = preemption
        self.min_gain = min_gain
        self.mixing = mixing
        self._idle_seen: list[int] = []
        """Per type, the idle GPUs (free, wanted by no queued job) after the last growth attempt."""
        self._below = BelowCeiling(self._counts)
        """The runs that could grow at all (rebuilt from the running jobs on restore)."""
        self._last: list[Action] = []
        """The last round's actions (noted in ``_below`` at the next round, once the scheduler applied them)."""
        self.mixed_only: list[TrainingJob] = []
        """Queued jobs that only a mix of GPU types holds, in arrival order (they have no single-type options)."""
        self._whole: dict[str, WholeMix] = {}
        """Each such job's mixed plan on the whole idle cluster (its fastest run, and the types it drains); saved,
        so that a restore needs no re-plan."""

    def params(self) -> dict[str, float | bool]:
        return {"starvation_factor": self.starvation_factor, "round_budget": self.round_budget,
                "stretch": self.stretch, "preemption": self.preemption, "min_gain": self.min_gain,
                "mixing": self.mixing}

    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        return self.counted_options(job, allowed, lambda t: elastic_counts(job, self.state.usable_gpus(t)))

    def _release_times(self, now: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per type: now and the expected end times of the running jobs (sorted; ties: fewer GPUs first), and
        the GPUs free by each of those times."""
        gpu, end, count, _ = self.running.columns()
        more = self.running.spans()
        if more[0].size:  # the other groups of runs spanning types free their GPUs at the same end
            gpu, end, count = (np.concatenate([a, b]) for a, b in zip((gpu, end, count), more))
        order = np.lexsort((count, end, gpu))
        bounds = np.searchsorted(gpu[order], np.arange(len(self.state.gpu_types) + 1))
        free = self.free_per_type(self.state)
        out = []
        for g in range(len(self.state.gpu_types)):
            mine = order[bounds[g]:bounds[g + 1]]
            times = np.concatenate([[now], np.maximum(now, end[mine])])
            freed = free[g] + np.concatenate([[0], np.cumsum(count[mine])])
            out.append((times, freed.astype(np.int64)))
        return out

    def _earliest_start(self, table: QueueTable, rows: np.ndarray, now: float) -> np.ndarray:
        """When each option's GPUs would be free if the running jobs end as expected (queued jobs aside): now
        where they are free now (most rounds: no release time is needed then), else at a running job's end."""
        gpu, count = table.gpu[rows], table.count[rows]
        start = np.where(count <= self.free_per_type(self.state)[gpu], now, np.inf)
        later = start > now
        if not later.any():
            return start
        for g, (times, freed) in enumerate(self._release_times(now)):
            on_g = later & (gpu == g)
            k = np.searchsorted(freed, count[on_g], side="left")
            start[on_g] = np.where(k < times.size, times[np.minimum(k, times.size - 1)], np.inf)
        return start

    def _expected_finish(self, table: QueueTable, area: np.ndarray, now: float) -> np.ndarray:
        """When each option would finish if the job waited for it: its GPUs free up as the running jobs end as
        expected, then the queued jobs with less work (GPU-seconds) whose best option is on the same type go
        first, sharing the type's GPUs; then it runs."""
        every = np.arange(table.owner.size)
        start = self._earliest_start(table, every, now)
        best = np.full(len(self.queue), -1, dtype=np.int64)
        by_area = np.lexsort((every, table.count * table.run_s, table.owner))  # each job's least-area option first
        best[table.owner[by_area[::-1]]] = by_area[::-1]
        ahead = np.zeros(len(self.queue))
        order = np.argsort(area, kind="stable")
        for g, t in enumerate(self.state.gpu_types):
            mine = order[table.gpu[best[order]] == g]
            ahead[mine] = (np.cumsum(area[mine]) - area[mine]) / max(1, self.state.usable_gpus(t))
        return start + ahead[table.owner] + table.run_s

    def _serve_starving(self, table: QueueTable, starving: np.ndarray, now: float, left: np.ndarray,
                        free: ClusterState, expected: np.ndarray, drained: set[int]
                        ) -> tuple[list[Action], set[int], int | None]:
        """Starving jobs, oldest first: each starts with its fastest option that fits now and is within the
        stretch of its earliest completion; the first that cannot reserves its best type not ``drained`` (by a
        starving job only a mix holds, which comes first). Returns the placements, the reserved type indices
        and the queue position of the job that reserved."""
        placements: list[Action] = []
        reserved: set[int] = set()
        waiting: int | None = None
        rows = np.flatnonzero(starving[table.owner])
        finish = expected[rows]
        owners = table.owner[rows]
        # a reservation on a drained type would add nothing: the job reserves its best other type where it has one
        reservable = np.where(np.isin(table.gpu[rows], list(drained)), np.inf, finish)
        best_finish = np.full(len(self.queue), np.inf)
        np.minimum.at(best_finish, owners, finish)
        within = table.run_s[rows] <= self.stretch * (best_finish[owners] - now)
        # free GPUs only shrink during the round, so each step looks at the jobs after the last one served: the
        # first that can start does, unless an older one that cannot must first make the reservation
        nq = len(self.queue)
        blocked = np.zeros(left.size, dtype=bool)
        done = 0  # queue positions below this are settled
        while True:
            ok = within & (table.count[rows] <= left[table.gpu[rows]]) & ~blocked[table.gpu[rows]] & (owners >= done)
            can = np.zeros(nq, dtype=bool)
            can[owners[ok]] = True
            good = np.flatnonzero(can)
            bad = np.flatnonzero(starving & ~can & (np.arange(nq) >= done))
            if not reserved and bad.size and (not good.size or bad[0] < good[0]):
                lo, hi = np.searchsorted(owners, [bad[0], bad[0] + 1])
                pick = reservable[lo:hi] if np.isfinite(reservable[lo:hi]).any() else finish[lo:hi]
                reserved.add(int(table.gpu[rows[lo + int(np.argmin(pick))]]))
                blocked[list(reserved)] = True
                waiting = done = int(bad[0])
                done += 1
                continue
            if not good.size:
                break
            mine = ok & (owners == good[0])
            row = int(rows[mine][np.argmin(table.run_s[rows][mine])])
            started = self.place_row(table, row, free)
            if started is not None:  # None: the type's free GPUs are too fragmented for its layouts
                placements.append(started)
                left[table.gpu[row]] -= table.count[row]
            done = int(good[0]) + 1
        return placements, reserved, waiting

    def schedule(self, now: float) -> list[Action]:
        self._below.note_actions(self.running, self._last)
        self._last = self._round(now)
        return self._last

    def _round(self, now: float) -> list[Action]:
        """Reservations in one order: a starving job only a mix holds drains its whole-cluster mix's types first;
        a starving job with single-type options then reserves, and makes room, only on the other types."""
        free = self.state.copy()
        placements, drained, budget_left = self._serve_mixed_only(free, set(), now, True, MIX_CANDIDATES)
        more, grow, reserved = self._queue_round(free, drained, now) if self.queue else ([], True, drained)
        placements += more
        placements += self._serve_mixed_only(free, reserved, now, False, budget_left)[0]
        if self.preemption and grow:
            placements += self._grow(free, now)
        return placements

    def _queue_round(self, free: ClusterState, drained: set[int], now: float
                     ) -> tuple[list[Action], bool, set[int]]:
        """The round for the jobs with single-type options (steps 1 to 3), never on the ``drained`` types
        (reserved by a starving job of ``mixed_only``); the placements (dequeued), whether runs may grow, and
        the types reserved this round (``drained`` and a starving job's)."""
        left = self.free_per_type(free)
        left[list(drained)] = 0
        table = self.table()
        # a mix may start a job whose options all fit no single type's free GPUs
        fits = bool((table.count <= left[table.gpu]).any()) or (
            self.mixing and self.rates.planned is not None and int((left > 0).sum()) >= 2)
        if not fits and not (self.preemption and self.running):
            return [], False, drained  # nothing can start, and a reservation would change nothing this round
        fast = table.per_job_min(table.run_s)
        waited = now - table.submit_s
        starving = waited >= self.starvation_factor * fast
        if not fits and not starving.any():
            return [], True, drained  # nothing starts or reserves this round: only growth can move
        area = table.per_job_min(table.count * table.run_s)
        expected = self._expected_finish(table, area, now)
        placements: list[Action] = []
        reserved: set[int] = set()
        if starving.any():
            placements, reserved, waiting = self._serve_starving(table, starving, now, left, free, expected, drained)
            if waiting is not None and self.preemption:
                moves = self._make_room(table, waiting, free, now, drained)
                if moves:
                    placements += moves
                    reserved = set()
                    left = self.free_per_type(free)
                    left[list(drained)] = 0
        reserved |= drained
        for g in reserved:
            left[g] = 0
        if left.any():
            # value: (least queued GPU-seconds / the job's) x (its fastest run / this run), within the stretch
            fast_o, area_o = fast[table.owner], area[table.owner]
            best_finish = table.per_job_min(expected)[table.owner]
            ok = (table.run_s <= self.stretch * (best_finish - now)) & ~starving[table.owner]
            worth = VALUE_SCALE * (float(area.min()) / area_o) * (fast_o / table.run_s)
            values = np.where(ok, np.maximum(1, np.rint(worth)), 0).astype(np.int64)
            choice = choose(table.owner, table.gpu, table.count, values, left, len(self.queue),
                            deterministic_time=self.round_budget, seed=self.seed)
            placements += [a for a in (self.place_row(table, int(r), free) for r in choice.picks if r >= 0)
                           if a is not None]
        if self.mixing:
            placements += self._mix(table, free, reserved, expected, {a.job_id for a in placements}, now)
        self.dequeue({a.job_id for a in placements if isinstance(a, Start)})
        return placements, True, reserved

    def _mix(self, table: QueueTable, free: ClusterState, reserved: set[int], expected: np.ndarray,
             started: set[str], now: float) -> list[Action]:
        """Placements spanning GPU types on the GPUs the round left free (never on a reserved type), for the
        oldest :data:`MIX_CANDIDATES` queued jobs not started whose fastest option cannot start now (its type
        has too few free GPUs) and for which a mix can pay: the sum of the best single-type rates on what each
        type offers (an optimistic bound on a mix's rate) would end the job before its earliest expected
        completion by waiting. Such a job gets the planner's mixed plan of at most its largest option's count
        (taken only where it beats every single-type plan of the same GPUs), started when it ends sooner than
        waiting (outright, not within the stretch: a mix holds two types' GPUs) and, where another queued job
        may use one of its types, its GPU-seconds are within the stretch of the job's least-area option (it must
        not cost the jobs that want those GPUs more GPU time; GPUs nobody else may use are idle otherwise)."""
        planned = self.rates.planned
        left = self.free_per_type(free)
        left[list(reserved)] = 0
        if planned is None or int((left > 0).sum()) < 2:
            return []
        fastest = np.lexsort((table.run_s, table.owner))[table.first]  # each job's fastest option
        out: list[Action] = []
        weighed = 0
        for j in np.flatnonzero(table.count[fastest] > left[table.gpu[fastest]]).tolist():
            job = self.queue[j]
            if job.id in started or (job.request is not None and job.request.gpu_type is not None):
                continue
            if weighed == MIX_CANDIDATES:
                break
            weighed += 1
            lo, hi = int(table.first[j]), int(table.first[j] + table.sizes[j])
            most, wait_end = int(table.count[lo:hi].max()), float(expected[lo:hi].min())
            offered = offers(free, [t for g, t in enumerate(self.state.gpu_types) if left[g] > 0], most)
            bound = sum(float(np.nanmax(self.rates.rates(job, t, power_of_two_counts(n)), initial=0.0))
                        for t, n, _ in offered)
            if len(offered) < 2 or bound <= 0 or not now + job.total_tokens / bound < wait_end:
                continue
            plan = place_mixed(planned, job, offered, most, free)
            # a mix within the job's own counts (its single-type options run from ELASTIC_FACTOR below the request)
            if plan is None or plan.num_gpus < int(table.count[lo:hi].min()) \
                    or not now + job.total_tokens / plan.tokens_per_s < wait_end:
                continue
            least_area = float((table.count[lo:hi] * table.run_s[lo:hi]).min())
            if (plan.num_gpus * job.total_tokens / plan.tokens_per_s > self.stretch * least_area
                    and self._contested(table, plan.gpu_types, started | {job.id})):
                continue
            free.take(plan.nodes)
            out.append(Start(job_id=job.id, plan=plan))
            left = self.free_per_type(free)
            left[list(reserved)] = 0
            if int((left > 0).sum()) < 2:
                break
        return out

    def _serve_mixed_only(self, free: ClusterState, drained: set[int], now: float, starving: bool, budget: int
                          ) -> tuple[list[Action], set[int], int]:
        """Start the jobs of ``mixed_only`` that are (or are not) ``starving``, oldest first, each on the
        planner's mix of the free GPUs of the types not ``drained``, within its counts, when one fits (at most
        ``budget`` jobs weighed: the round's two calls share :data:`MIX_CANDIDATES`) and is worth starting now (as
        a single-type option: its run within ``stretch`` of the time until the job would finish by waiting for
        its whole-cluster mix, :meth:`_waiting_finish`). The oldest starving job that does not start drains the
        types of its whole-cluster mix. Returns the placements (dequeued), the drained types and what is left of
        the budget."""
        planned = self.rates.planned
        if not self.mixed_only or planned is None:
            return [], drained, budget
        out: list[Action] = []
        releases: list[tuple[np.ndarray, np.ndarray]] | None = None
        for job in list(self.mixed_only):
            whole = self._whole[job.id]
            waited = now - job.submit_time_s
            if (waited >= self.starvation_factor * job.total_tokens / whole.tokens_per_s) != starving:
                continue
            left = self.free_per_type(free)
            left[list(drained)] = 0
            lo, most = self._mix_counts(job)
            types = [t for g, t in enumerate(self.state.gpu_types) if left[g] > 0]
            plan = None
            if len(types) >= 2 and int(left.sum()) >= lo and budget > 0:
                budget -= 1
                plan = place_mixed(planned, job, offers(free, types, most), most, free)
            if plan is not None and plan.num_gpus >= lo:
                releases = self._release_times(now) if releases is None else releases
                if job.total_tokens / plan.tokens_per_s > self.stretch * (self._waiting_finish(job, whole, releases)
                                                                          - now):
                    plan = None  # waiting for the whole-cluster mix ends the job sooner
            if plan is not None:
                free.take(plan.nodes)
                out.append(Start(job_id=job.id, plan=plan))
            elif starving and not drained:
                drained = {self.state.gpu_types.index(t) for t in whole.gpu_types}
        started = {a.job_id for a in out}
        self.mixed_only = [j for j in self.mixed_only if j.id not in started]
        for job_id in started:
            del self._whole[job_id]
        return out, drained, budget

    def _waiting_finish(self, job: TrainingJob, whole: WholeMix, releases: list[tuple[np.ndarray, np.ndarray]]
                        ) -> float:
        """When ``job`` would finish if it waited for its whole-cluster mix: once every type of that mix has its
        GPUs free as the running jobs end as expected (``releases``: :meth:`_release_times`; queued jobs aside,
        infinite where they never suffice, e.g. a node is down), at that mix's rate."""
        start = float(releases[0][0][0])  # now
        for gpu_type, count in whole.gpus.items():
            times, freed = releases[self.state.gpu_types.index(gpu_type)]
            k = int(np.searchsorted(freed, count, side="left"))
            start = max(start, float(times[k]) if k < times.size else math.inf)
        return start + job.total_tokens / whole.tokens_per_s

    def _mix_counts(self, job: TrainingJob) -> tuple[int, int]:
        """The fewest and most GPUs a mix of every type may give ``job`` (its counts over the whole cluster;
        (0, 0) when even the fewest exceeds the cluster)."""
        counts = elastic_counts(job, self.state.usable_gpus())
        return (counts[0], counts[-1]) if counts else (0, 0)

    def _whole_mix(self, job: TrainingJob) -> tuple[WholeMix | None, bool]:
        """The planner's mixed plan for ``job`` on the whole idle cluster, within its counts (None when none fits,
        the job is pinned to one type, or the rates are a plain function, which cannot plan a mix), and whether
        that is settled (False: the planner's search was cut short by its time limit, so nothing is known)."""
        planned = self.rates.planned
        if planned is None or (job.request is not None and job.request.gpu_type is not None):
            return None, True
        if not self._idle_cluster_holds_states(job):
            return None, True  # from capacity alone: no placement of every GPU holds the model's states once
        lo, most = self._mix_counts(job)
        offered = offers(self.state.idle(), self.state.gpu_types, most) if most else ()
        if len(offered) < 2:
            return None, True
        plan = planned.mixed_plan(job.model, job.training, offered, most)
        if plan is None or plan.num_gpus < lo:
            return None, planned.mixed_settled(job.model, job.training, offered, most)
        return WholeMix.of(plan), True

    def _idle_cluster_holds_states(self, job: TrainingJob) -> bool:
        """Whether every GPU of the cluster together could hold the job's working weights, master weights and
        optimizer states once (each is resident on some GPU during a step, offload aside): a necessary condition
        for any mix, checked before the planner is asked. True where it is no bound (a recipe that offloads or
        trains only part of the model)."""
        t = job.training
        if t.offloads or t.lora is not None or t.freeze_embeddings or t.trainable_layers is not None:
            return True
        have = sum(usable_bytes(get_gpu_spec(g).memory_bytes, DEFAULT_HEADROOM) * self.state.usable_gpus(g)
                   for g in self.state.gpu_types)
        return self.checkpoint.checkpoint_bytes(job.model, t) <= have

    def _contested(self, table: QueueTable, gpu_types: tuple[str, ...], besides: set[str]) -> bool:
        """Whether a queued job other than those in ``besides`` has an option on one of ``gpu_types``."""
        on = np.isin(table.gpu, [self.state.gpu_types.index(t) for t in gpu_types])
        return any(self.queue[int(j)].id not in besides for j in np.unique(table.owner[on])[:len(besides) + 1])

    def _counts(self, job: TrainingJob, gpu_type: str) -> list[int]:
        return elastic_counts(job, self.state.usable_gpus(gpu_type))

    def _grow(self, free: ClusterState, now: float) -> list[Action]:
        """Grow running jobs onto free GPUs that no queued job may use at all (growing where queued jobs wait
        would take the GPUs they drain towards), on the types where more such GPUs are free than at the last
        attempt: a move that did not pay then pays less later (its restart is the same, its remaining time
        shorter), so only newly idle GPUs can make one pay."""
        idle = self.free_per_type(free)
        if self.queue:
            idle[self.table().gpu] = 0
        for whole in self._whole.values():  # the types a job that only a mix holds drains towards
            idle[[self.state.gpu_types.index(t) for t in whole.gpu_types]] = 0
        seen = np.asarray(self._idle_seen or [0] * idle.size)
        types = [t for g, t in enumerate(self.state.gpu_types) if idle[g] > seen[g]]
        moves = grow(self, free, now, types, self._counts, self.min_gain) if self._below.any_on(types) else []
        after = self.free_per_type(free)
        self._idle_seen = np.where(idle > 0, after, 0).tolist()
        return moves

    def saved(self) -> dict[str, Any]:
        return {**super().saved(), "idle_seen": self._idle_seen,
                "whole": {job_id: w.model_dump(mode="json") for job_id, w in self._whole.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        super().restore(data)
        self._idle_seen = list(data["idle_seen"])
        self._below.rebuild(self.running)
        # the queued jobs only a mix holds keep their whole-cluster mix (submit finds it: no re-plan)
        self._whole = {job_id: WholeMix.model_validate(w) for job_id, w in data.get("whole", {}).items()}
        for job_id, whole in self._whole.items():  # (its job is submitted again after this)
            strange = [t for t in whole.gpus if t not in self.state.gpu_types]
            if len(whole.gpus) < 2 or strange or min(whole.gpus.values()) <= 0:
                raise ConfigError(
                    f"policy_state.whole[{short_repr(job_id)}] is not a mix of two or more of this cluster's types "
                    f"with positive counts (got {short_repr(whole.gpus)})",
                    field="policy_state.whole", value=job_id,
                    hint="restore the state as OnlineScheduler.to_json wrote it")

    def submit(self, job: TrainingJob, now: float) -> None:
        self._below.drop(job.id)  # back from a run (preempted or interrupted)
        super().submit(job, now)
        reason = self.rejected.get(job.id)
        if reason is None:
            return
        whole, settled = (self._whole[job.id], True) if job.id in self._whole else self._whole_mix(job)
        if whole is None:
            if not settled:
                self.rejected[job.id] = (f"{reason}; the planner's mixed search on the whole cluster was cut short "
                                         "by its time limit, so whether a mix holds it is not known")
            return
        words = f"{whole.num_gpus} GPUs of {' + '.join(whole.gpu_types)} together hold it"
        if not self.mixing:
            self.rejected[job.id] = f"{reason}; mixing=True would accept it ({words})"
            return
        del self.rejected[job.id]
        self._whole[job.id] = whole
        number = self._arrival.setdefault(job.id, len(self._arrival))
        at = bisect.bisect([self._arrival[j.id] for j in self.mixed_only], number)
        self.mixed_only.insert(at, job)

    def cancel(self, job_id: str) -> None:
        super().cancel(job_id)
        self.mixed_only = [j for j in self.mixed_only if j.id != job_id]
        self._whole.pop(job_id, None)

    def queued(self) -> list[TrainingJob]:
        return sorted([*self.queue, *self.mixed_only], key=lambda j: self._arrival[j.id])

    def on_finish(self, job_id: str, now: float) -> None:
        self._below.drop(job_id)
        super().on_finish(job_id, now)

    def _protected(self, run: RunningJob, now: float) -> bool:
        """A run that is itself past the starvation bound (its wait and run so far against its fastest run) is
        never preempted: the bound holds for preempted jobs too, and two long jobs cannot take turns."""
        fastest = float(np.nan_to_num(self.rates.rates(run.job, run.plan.gpu_type, [run.plan.num_gpus])[0]))
        fastest_s = run.job.total_tokens / max(fastest, run.plan.tokens_per_s)  # NaN: a mix no single type holds
        return now - run.job.submit_time_s >= self.starvation_factor * fastest_s

    def _make_room(self, table: QueueTable, waiting: int, free: ClusterState, now: float, drained: set[int]
                   ) -> list[Action]:
        """Preempt for the starving job at queue position ``waiting``: its options fastest first, never on the
        ``drained`` types (a starving job only a mix holds reserved them first: preempting there would free GPUs
        that this job may not take this round, and the two reservations would fight)."""
        lo, hi = int(table.first[waiting]), int(table.first[waiting] + table.sizes[waiting])
        rows = sorted((r for r in range(lo, hi) if int(table.gpu[r]) not in drained), key=lambda r: (table.run_s[r], r))
        options = [(self.state.gpu_types[int(table.gpu[r])], int(table.count[r]), float(table.run_s[r])) for r in rows]
        return make_room(self, self.queue[waiting], options, free, now, lambda run: self._protected(run, now))
