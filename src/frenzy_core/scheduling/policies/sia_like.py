"""``sia-like``: Sia's per-round ILP over job x GPU type x count (Jayaram Subramanya et al., SOSP'23).

Sia rates every (job, type, count) by goodput normalised to the job's least configuration, and solves

    minimise  sum_{j,o} x_{j,o} G_{j,o}^p  +  lambda (1 - sum_o x_{j,o})   (p < 0: fairness, lambda: a
    penalty per job left without GPUs),

with at most one configuration per job and each type's GPUs as capacity. Here goodput is throughput (our time
model has no statistical efficiency) and the ILP, rewritten as maximising ``sum x (lambda - G^p)``, is solved
by CP-SAT (:mod:`._choice`). Sia also re-solves for running jobs with a restart penalty; this variant does not
preempt, so only queued jobs are allocated. Counts: :func:`._queue.elastic_counts`.
"""

from __future__ import annotations

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action
from frenzy_core.scheduling.policies._choice import choose
from frenzy_core.scheduling.policies._queue import QueuePolicy, elastic_counts
from frenzy_core.scheduling.rates import JobOptions

__all__ = ["SIA_LAMBDA", "SIA_P", "SiaLike"]

SIA_P = -0.5
"""Sia's fairness exponent on normalised goodput (negative: diminishing returns); Sia's default, as we read it."""
SIA_LAMBDA = 1.1
"""Cost of leaving a job unallocated, above the worst allocated cost of 1 (our choice: every job that fits
is worth starting)."""
_SCALE = 10**6
"""Integer scaling of the objective."""


class SiaLike(QueuePolicy):
    """Goodput-normalised ILP per round over type and count; no preemption."""

    name = "sia-like"

    def __init__(self, round_budget: float = 0.05) -> None:
        super().__init__()
        self.round_budget = round_budget

    def job_options(self, job: TrainingJob, allowed: list[str]) -> JobOptions:
        return self.counted_options(job, allowed, lambda t: elastic_counts(job, self.state.usable_gpus(t)))

    def params(self) -> dict[str, float]:
        return {"round_budget": self.round_budget}

    def schedule(self, now: float) -> list[Action]:
        free = self.state.copy()
        left = self.free_per_type(free)
        if not self.queue or not left.any():
            return []
        table = self.table()
        least = table.per_job_min(table.tokens_per_s)[table.owner]
        values = np.rint(_SCALE * (SIA_LAMBDA - (table.tokens_per_s / least) ** SIA_P)).astype(np.int64)
        choice = choose(table.owner, table.gpu, table.count, values, left, len(self.queue),
                        deterministic_time=self.round_budget, seed=self.seed)
        starts: list[Action] = [a for a in (self.place_row(table, int(row), free) for row in choice.picks if row >= 0)
                  if a is not None]
        self.dequeue({a.job_id for a in starts})
        return starts
