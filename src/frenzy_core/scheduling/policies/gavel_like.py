"""``gavel-like``: Gavel's heterogeneity-aware allocation LP per round (Narayanan et al., OSDI'20).

Gavel keeps each job's requested GPU count and chooses the GPU type by an allocation matrix X (job x type)
from an LP over a throughput table. We use its "maximise total normalised throughput" policy:

    maximise  sum_{j,g} X_{j,g} T_{j,g} / max_g T_{j,g}
    subject to  sum_g X_{j,g} <= 1 (per job),  sum_j n_j X_{j,g} <= F_g (free GPUs per type),  X >= 0,

with T_{j,g} the job's tokens/s on n_j GPUs of type g (0 where it does not fit in memory), n_j its request
(the fewest power-of-two GPUs that fit, without one). Gavel time-shares jobs in rounds to realise fractional
X; this variant does not preempt, so the LP (GLOP) is rounded: (job, type) pairs by X descending, then arrival
order, start when the type has room.
"""

from __future__ import annotations

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action
from frenzy_core.scheduling.policies._queue import QueuePolicy
from frenzy_core.scheduling.rates import JobOptions, power_of_two_counts

__all__ = ["GavelLike"]


class GavelLike(QueuePolicy):
    """The requested count on the type an LP over normalised throughput prefers; no preemption."""

    name = "gavel-like"

    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        if job.request is not None:
            n = job.request.num_gpus
            return self.counted_options(job, allowed, lambda t: [n] if n <= self.state.usable_gpus(t) else [])
        every = self.counted_options(job, allowed, lambda t: power_of_two_counts(self.state.usable_gpus(t)))
        if not len(every):
            return every
        least = int(every.count.min())  # one count for every type, as a request would be
        keep = every.count == least
        return JobOptions(gpu=every.gpu[keep], count=every.count[keep], tokens_per_s=every.tokens_per_s[keep],
                          run_s=every.run_s[keep])

    def _allocation(self, free: np.ndarray) -> list[tuple[float, int, int]]:
        """(X, queue position, option) for every option, from the LP."""
        from ortools.linear_solver import pywraplp

        solver = pywraplp.Solver.CreateSolver("GLOP")
        assert solver is not None, "GLOP ships with ortools"
        x: dict[tuple[int, int], object] = {}
        per_type: list[list[tuple[int, int]]] = [[] for _ in free]
        objective = solver.Objective()
        for j, job in enumerate(self.queue):
            opts = self.options[job.id]
            norm = opts.tokens_per_s / opts.tokens_per_s.max()
            one = solver.Constraint(0.0, 1.0, f"job[{j}]")
            for o in range(len(opts)):
                if opts.count[o] > free[opts.gpu[o]]:
                    continue
                var = solver.NumVar(0.0, 1.0, f"X[{j},{o}]")
                x[j, o] = var
                one.SetCoefficient(var, 1.0)
                objective.SetCoefficient(var, float(norm[o]))
                per_type[int(opts.gpu[o])].append((j, o))
        objective.SetMaximization()
        for g, members in enumerate(per_type):
            cap = solver.Constraint(0.0, float(free[g]), f"free[{g}]")
            for j, o in members:
                cap.SetCoefficient(x[j, o], float(self.options[self.queue[j].id].count[o]))
        status = solver.Solve()
        assert status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE), "the LP is always feasible (X = 0)"
        return [(round(var.solution_value(), 9), j, o) for (j, o), var in x.items()]  # type: ignore[attr-defined]

    def schedule(self, now: float) -> list[Action]:
        free = self.state.copy()
        left = self.free_per_type(free)
        if not self.queue or not left.any():
            return []
        starts: list[Action] = []
        started: set[int] = set()
        for _x, j, o in sorted(self._allocation(left), key=lambda t: (-t[0], t[1], t[2])):
            opts = self.options[self.queue[j].id]
            g, n = int(opts.gpu[o]), int(opts.count[o])
            if j in started or n > left[g]:
                continue
            action = self.place(self.queue[j], o, free)
            if action is None:
                continue  # the type's free GPUs are too fragmented for this job's layouts
            starts.append(action)
            left[g] -= n
            started.add(j)
        self.dequeue({a.job_id for a in starts})
        return starts
