"""One allocation per job for a scheduling round: a multiple-choice knapsack over GPU types, solved with CP-SAT.

Formulation (``choose``):

Sets
    J  jobs of the round; O_j  options of job j, each a GPU type g(o) and a count n(o) (only options with
       n(o) <= F_g, the free GPUs of the type, and a positive value are kept).
Data
    v_{j,o} >= 0  integer value of starting job j with option o now (the policy's objective, scaled; 0: not now).
Variables
    x_{j,o} in {0, 1}  job j starts now with option o.
Constraints
    sum_o x_{j,o} <= 1 for every job;  sum_{j,o: g(o)=g} n(o) x_{j,o} <= F_g for every type g.
Objective
    maximise sum v_{j,o} x_{j,o}.

When every job's most valuable option fits together, that is optimal and no solver runs. Otherwise a greedy
pass (options by value per GPU, then value) gives a feasible hint; when it already starts every job with its
best option it is optimal and CP-SAT is skipped. CP-SAT runs on one worker with a fixed seed and a
deterministic time limit, so the same round always gets the same answer; the better of the two is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Choice", "choose"]


def _prune(items: np.ndarray, gpu: np.ndarray, count: np.ndarray, value: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The options some optimal choice may use: of each (type g, count c), the best floor(F_g / c) + S by value
    (ties: option order), S = sum_g floor(F_g / least count on g) the most jobs any choice starts. Exact: an
    optimum using a worse option o of (g, c) leaves, among those kept, one of a job it does not start (at most S
    kept options belong to started jobs, fewer than floor(F_g / c) are (g, c) options it uses), worth at least
    v_o, and swapping them keeps every constraint."""
    if not items.size:
        return items
    g, c, v = gpu[items], count[items], value[items]
    least = np.full(free.size, np.iinfo(np.int64).max)
    np.minimum.at(least, g, c)
    on = least < np.iinfo(np.int64).max
    most_jobs = int((free[on] // least[on]).sum())
    if items.size <= most_jobs + 1:  # every (g, c) keeps at least 1 + S >= its size: nothing to prune
        return items
    order = np.lexsort((items, -v, c, g))
    g, c = g[order], c[order]
    start = np.concatenate([[0], np.flatnonzero((g[1:] != g[:-1]) | (c[1:] != c[:-1])) + 1])
    rank = np.arange(order.size) - np.repeat(start, np.diff(np.append(start, order.size)))
    keep = rank < free[g] // c + most_jobs
    return np.sort(items[order[keep]])


@dataclass(frozen=True)
class Choice:
    """The option chosen per job (index into the flat option arrays; -1: not started now), and how."""

    picks: np.ndarray
    value: int
    solver: str
    """``greedy`` (proved optimal, or CP-SAT did no better), ``cp-sat``, or ``none`` (nothing fits)."""


def choose(owner: np.ndarray, gpu: np.ndarray, count: np.ndarray, value: np.ndarray, free: np.ndarray,
           num_jobs: int, *, deterministic_time: float, seed: int = 0) -> Choice:
    """Pick at most one option per job within ``free`` GPUs per type, maximising the summed integer values.
    Options are flat arrays: ``owner`` (job index), ``gpu`` (type index), ``count``, ``value``."""
    picks = np.full(num_jobs, -1, dtype=np.int64)
    # -- data: options that fit now and are worth something, pruned exactly ----------------------------------
    items = _prune(np.flatnonzero((count <= free[gpu]) & (value > 0)), gpu, count, value, free)
    if not items.size:
        return Choice(picks, 0, "none")
    # -- every job its best option, when those fit together: optimal -----------------------------------------
    top = items[np.lexsort((items, -value[items], owner[items]))]
    top = top[np.concatenate([[True], owner[top][1:] != owner[top][:-1]])]  # each job's most valuable option (ties: first)
    if (np.bincount(gpu[top], weights=count[top], minlength=free.size) <= free).all():
        picks[owner[top]] = top
        return Choice(picks, int(value[top].sum()), "greedy")
    # -- greedy: value per GPU, then value, then option order -------------------------------------------
    order = items[np.lexsort((items, -value[items], -value[items] / count[items]))]
    left = free.astype(np.int64).copy()
    smallest = int(count[items].min())
    for i in order:
        g, n, j = int(gpu[i]), int(count[i]), int(owner[i])
        if picks[j] < 0 and n <= left[g]:
            picks[j] = i
            left[g] -= n
            if left.max() < smallest:
                break
    greedy_value = int(value[picks[picks >= 0]].sum())
    best = np.zeros(num_jobs, dtype=np.int64)
    np.maximum.at(best, owner[items], value[items])
    if greedy_value == int(best.sum()):
        return Choice(picks, greedy_value, "greedy")

    from ortools.sat.python import cp_model

    # -- model and variables -----------------------------------------------------------------------------
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x[{int(owner[i])},{int(i)}]") for i in items]
    # -- constraints: one option per job; the free GPUs of every type --------------------------------------
    by_job: dict[int, list[int]] = {}
    for k, i in enumerate(items):
        by_job.setdefault(int(owner[i]), []).append(k)
    for mine in by_job.values():
        if len(mine) > 1:
            model.add_at_most_one(x[k] for k in mine)
    for g in np.unique(gpu[items]):
        on_g = np.flatnonzero(gpu[items] == g)
        model.add(cp_model.LinearExpr.weighted_sum([x[k] for k in on_g], [int(c) for c in count[items[on_g]]])
                  <= int(free[g]))
    # -- objective -----------------------------------------------------------------------------------------
    model.maximize(cp_model.LinearExpr.weighted_sum(x, [int(v) for v in value[items]]))
    # -- greedy hint, solve, read ------------------------------------------------------------------------
    chosen = {int(i) for i in picks[picks >= 0]}
    for k, i in enumerate(items):
        model.add_hint(x[k], int(i) in chosen)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed % 2**31  # CP-SAT's seed is an int32; the simulation's go up to 2^63
    solver.parameters.max_deterministic_time = deterministic_time
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and round(solver.objective_value) > greedy_value:
        out = np.full(num_jobs, -1, dtype=np.int64)
        for k, i in enumerate(items):
            if solver.value(x[k]):
                out[int(owner[i])] = i
        return Choice(out, round(solver.objective_value), "cp-sat")
    return Choice(picks, greedy_value, "greedy")
