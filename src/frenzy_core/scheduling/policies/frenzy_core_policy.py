"""``frenzy-core``: for the queued jobs, choose GPU type, count and start together to cut average JCT.

Per scheduling round (every arrival or completion):

1. Starvation bound. A job that has waited at least ``starvation_factor`` times its fastest run time is
   starving. Starving jobs are served first, oldest first, each with its fastest option that fits now. The
   oldest starving job that does not fit reserves its type: nothing else starts on that type this round, so
   GPUs drain towards it (EASY-backfilling's reservation, without run-time estimates of the running jobs).
2. The other queued jobs: one option (type, count) or none each, chosen jointly with CP-SAT
   (:mod:`._choice`), maximising the summed completion rates ``sum 1 / run_s`` of the jobs started now. On a
   full cluster this starts the jobs that finish soonest per GPU (shortest-job-first generalised to
   heterogeneous, resizable jobs); on an idle one it gives jobs the faster types and more GPUs.

Options are every type the job may use with counts from :func:`._queue.elastic_counts` (powers of two up to
twice the request, and the request), kept where the planner's candidate table finds a layout that fits in
memory; the job runs at that layout's throughput. No preemption: a started job keeps its allocation.
"""

from __future__ import annotations

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.policies._choice import choose
from frenzy_core.scheduling.policies._queue import QueuePolicy, elastic_counts
from frenzy_core.scheduling.policy import Placement
from frenzy_core.scheduling.rates import JobOptions
from frenzy_core.scheduling.state import ClusterState
from frenzy_core.scheduling.workload import ThroughputFn

__all__ = ["DEFAULT_ROUND_BUDGET", "DEFAULT_STARVATION_FACTOR", "FrenzyCore"]

DEFAULT_STARVATION_FACTOR = 4.0
"""A job starves once its wait reaches this many times its fastest run time (a slowdown of 5; our choice)."""
DEFAULT_ROUND_BUDGET = 0.05
"""CP-SAT deterministic time per round (about seconds on one core; our choice, within the 100 ms target)."""
DEFAULT_STRETCH = 1.25
"""An option is started now only if its run time is at most this many times the time until the job's
earliest-completing option would finish (waiting for a faster type or more GPUs otherwise; our choice)."""
VALUE_SCALE = 10**9
"""The fastest-finishing option of a round is worth this much; others in proportion (integer data)."""


class FrenzyCore(QueuePolicy):
    """Joint type, count and start choice per round (CP-SAT), with a starvation bound; no preemption."""

    name = "frenzy-core"

    def __init__(self, starvation_factor: float = DEFAULT_STARVATION_FACTOR,
                 round_budget: float = DEFAULT_ROUND_BUDGET, stretch: float = DEFAULT_STRETCH) -> None:
        super().__init__()
        self.starvation_factor = starvation_factor
        self.round_budget = round_budget
        self.stretch = stretch
        self.running: dict[str, tuple[float, int, int]] = {}
        self.capacity: dict[str, int] = {}
        """Job id -> (expected end, GPU type index, GPUs) of the jobs this policy started."""

    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        return self.counted_options(job, allowed, lambda t: elastic_counts(job, self.state.usable_gpus(t)))

    def start(self, state: ClusterState, throughput: ThroughputFn, seed: int) -> None:
        super().start(state, throughput, seed)
        self.capacity = {t: state.usable_gpus(t) for t in state.gpu_types}

    def on_finish(self, job_id: str, now: float) -> None:
        self.running.pop(job_id, None)

    def _release_times(self, now: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per type: expected end times of the running jobs (sorted) and the GPUs free after each, from now."""
        out = []
        for g, t in enumerate(self.state.gpu_types):
            ends = sorted((end, n) for end, gg, n in self.running.values() if gg == g)
            times = np.array([now] + [max(now, e) for e, _ in ends])
            freed = self.state.free_gpus(t) + np.concatenate([[0], np.cumsum([n for _, n in ends])])
            out.append((times, freed.astype(np.int64)))
        return out

    def _eligible(self, job: TrainingJob, now: float, release: list[tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[np.ndarray, int]:
        """Which options are worth starting now rather than waiting for a better one, and the option with the
        earliest expected completion (waiting for its GPUs to be released, other queued jobs aside)."""
        opts = self.options[job.id]
        start = np.empty(len(opts))
        for o in range(len(opts)):
            times, freed = release[int(opts.gpu[o])]
            k = int(np.searchsorted(freed, opts.count[o], side="left"))
            start[o] = times[k] if k < times.size else np.inf
        finish = start + opts.run_s
        best = int(np.argmin(finish))
        return opts.run_s <= self.stretch * (finish[best] - now), best

    def _starving(self, job: TrainingJob, now: float) -> bool:
        return now - job.submit_time_s >= self.starvation_factor * float(self.options[job.id].run_s.min())

    def schedule(self, now: float) -> list[Placement]:
        free = self.state.copy()
        placements: list[Placement] = []
        left = self.free_per_type(free)
        if not self.queue or not left.any():
            return []
        release = self._release_times(now)
        reserved: set[int] = set()
        rest: list[tuple[TrainingJob, np.ndarray]] = []
        for job in self.queue:
            eligible, best = self._eligible(job, now, release)
            if not self._starving(job, now):
                rest.append((job, eligible))
                continue
            opts = self.options[job.id]
            fits = np.flatnonzero(eligible & (opts.count <= left[opts.gpu]) & ~np.isin(opts.gpu, list(reserved)))
            if fits.size:
                pick = int(fits[np.argmin(opts.run_s[fits])])
                placements.append(self.place(job, pick, free))
                left[opts.gpu[pick]] -= opts.count[pick]
            elif not reserved:
                reserved.add(int(opts.gpu[best]))
        for g in reserved:
            left[g] = 0
        if rest and left.any():
            capacity = sum(self.capacity.values())
            runs = [self.options[j.id].run_s for j, _ in rest]
            areas = [float((self.options[j.id].count * r).min()) for (j, _), r in zip(rest, runs)]
            horizon = sum(areas) / capacity  # draining the queue at full speed
            smallest = min(areas)
            values = []
            for run, area in zip(runs, areas):
                fast = float(run.min())
                ok = run - fast <= max((self.stretch - 1.0) * fast, horizon)
                worth = VALUE_SCALE * (smallest / area) * (fast / run)
                values.append(np.where(ok, np.maximum(1, np.rint(worth)), 0).astype(np.int64))
            choice = choose([self.options[j.id].gpu for j, _ in rest], [self.options[j.id].count for j, _ in rest],
                            values, left, deterministic_time=self.round_budget, seed=self.seed)
            for (job, _), pick in zip(rest, choice.picks):
                if pick >= 0:
                    placements.append(self.place(job, int(pick), free))
        for p in placements:
            job = next(j for j in self.queue if j.id == p.job_id)
            assert p.tokens_per_s is not None
            self.running[p.job_id] = (now + job.total_tokens / p.tokens_per_s,
                                      self.state.gpu_types.index(p.gpu_type), p.num_gpus)
        self.dequeue({p.job_id for p in placements})
        return placements
