"""One mixed-type instance (a replica layout on a set of GPU types: per type its replica capacity and its (D, m)
step-time table) and its exact solvers: the choice of replicas r_t and micro-batches m_t per type with
sum_t r_t m_t = N that is best under the objective's key (:func:`score`).

Two types, the common case, are enumerated exactly in numpy (:func:`solve_two_types`: every (r_1, r_2, m_1), m_2
following, O(R_1 R_2 N) small integer operations, bounded and fast); three or more go to CP-SAT
(:func:`solve_tables_cp_sat`), whose cost-objective product of price and step can take far longer than its time
limit on large tables (measured: 26 s on a 193 x 257 table under a 0.1 s limit, while enumeration takes 0.1 s).
:func:`solve_tables_exhaustive` is the plain Python enumeration the tests compare both with.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from frenzy_core.planning.request import Objective

__all__ = ["PRICE_STEPS_PER_USD_HOUR", "TIME_STEPS_PER_S", "Limits", "MixedChoice", "MixedTables", "promising",
           "score", "solve_tables_cp_sat", "solve_tables_exhaustive", "solve_two_types"]

TIME_STEPS_PER_S = 1_000_000
"""Step times enter CP-SAT as whole microseconds (ties below a microsecond go to the next key)."""

PRICE_STEPS_PER_USD_HOUR = 10_000
"""Prices enter CP-SAT in 1/10,000 dollar per hour."""

@dataclass(frozen=True)
class MixedTables:
    """One (replica layout, type set) instance: per type its replica capacity and step-time table."""

    layout: int
    """Row of the replica layouts (dp and batch not yet set)."""
    types: tuple[str, ...]
    capacity: tuple[int, ...]
    """Replicas each type's free GPUs hold (whole TP groups per node)."""
    gpus_per_replica: int
    micro_batches: int
    """N: micro-batches of the global batch (B / micro-batch size)."""
    time_us: tuple[np.ndarray, ...]
    """Per type, [D, m] -> whole microseconds of a step of that group (-1: does not fit or not a valid layout)."""
    price_units: tuple[int | None, ...]
    """Per type, price of one replica in 1/10,000 USD per hour (None: no price)."""


@dataclass(frozen=True)
class MixedChoice:
    """A solution of one instance: replicas and micro-batches per type (0 replicas: type unused)."""

    tables: MixedTables
    replicas: tuple[int, ...]
    micro_batches: tuple[int, ...]
    step_us: int
    optimal: bool

    @property
    def num_gpus(self) -> int:
        return sum(self.replicas) * self.tables.gpus_per_replica

    @property
    def price_units(self) -> int | None:
        if any(p is None for r, p in zip(self.replicas, self.tables.price_units) if r):
            return None
        return sum(r * (p or 0) for r, p in zip(self.replicas, self.tables.price_units))


def score(objective: Objective, step_us: int, gpus: int, price_units: int | None) -> tuple[int, ...]:
    """The lexicographic key of a mixed solution (smaller is better), as the single-type keys order them:
    throughput and time to train by step time (equal batch: tokens/s), then GPUs; gpus by GPUs, then time;
    cost by price x time."""
    if objective is Objective.GPUS:
        return (gpus, step_us)
    if objective is Objective.COST:
        return (price_units * step_us if price_units is not None else 1 << 62, step_us, gpus)
    return (step_us, gpus)


def _rate_floor(t: MixedTables, d: np.ndarray) -> np.ndarray | None:
    """Per D, the least price of D replicas with one of each type at least (None: a type has no price)."""
    if any(p is None for p in t.price_units):
        return None
    prices = [p or 0 for p in t.price_units]
    return sum(prices) + np.maximum(d - len(prices), 0) * min(prices)


def promising(t: MixedTables, objective: Objective, upper: tuple[int, ...] | None) -> np.ndarray:
    """Per D (index): whether a solution with D replicas might reach ``upper``'s first key (None: might exist
    at all), by a relaxation that drops the integrality of the split. Within step tau a replica of type t
    runs at most cap_t = max{m : T_t(D, m) <= tau} micro-batches; one replica per type and the other D - k
    on the largest caps (up to each type's capacity) must reach N."""
    n, k = t.micro_batches, len(t.types)
    d = np.arange(t.time_us[0].shape[0])
    tau = np.full(d.shape, np.iinfo(np.int64).max, dtype=np.int64)
    if upper is not None:
        if objective is Objective.GPUS:
            tau = np.where(d * t.gpus_per_replica <= upper[0], tau, -1)
        elif objective is Objective.COST:
            rate = _rate_floor(t, d)
            if rate is None:
                return np.zeros(d.shape, dtype=bool)
            tau = upper[0] // np.maximum(rate, 1)
        else:
            tau = np.full(d.shape, upper[0], dtype=np.int64)
    m = np.arange(n + 1)
    caps = np.stack([np.where((tab >= 0) & (tab <= tau[:, None]), m, 0).max(axis=1) for tab in t.time_us])
    base = np.where((caps > 0).all(axis=0), caps.sum(axis=0), -1)
    order = np.argsort(-caps, axis=0, kind="stable")
    spare = np.maximum(d - k, 0)
    extra = np.zeros(d.shape, dtype=np.int64)
    room = np.array([c - 1 for c in t.capacity], dtype=np.int64)
    cols = np.arange(d.size)
    for rank in range(k):
        j = order[rank]
        take = np.minimum(room[j], spare)
        extra += take * caps[j, cols]
        spare = spare - take
    return np.asarray((d >= k) & (base >= 0) & (spare == 0) & (base + extra >= n))


@dataclass(frozen=True)
class Limits:
    """The request's limits a mixed plan must meet, in the tables' units."""

    max_gpus: int | None = None
    num_gpus: int | None = None
    max_price_units: int | None = None
    max_step_us: int | None = None


def _feasible(t: MixedTables, r: tuple[int, ...], m: tuple[int, ...], lim: Limits) -> int | None:
    """The step time of (r, m), or None where it breaks a constraint."""
    d = sum(r)
    if sum(ri * mi for ri, mi in zip(r, m)) != t.micro_batches or d >= t.time_us[0].shape[0]:
        return None
    gpus = d * t.gpus_per_replica
    if (lim.max_gpus is not None and gpus > lim.max_gpus) or (lim.num_gpus is not None and gpus != lim.num_gpus):
        return None
    step = 0
    for k, (ri, mi) in enumerate(zip(r, m)):
        if ri == 0:
            continue
        us = int(t.time_us[k][d, mi])
        if us < 0:
            return None
        step = max(step, us)
    if lim.max_step_us is not None and step > lim.max_step_us:
        return None
    if lim.max_price_units is not None:
        if any(p is None for p in t.price_units):
            return None
        if sum(ri * (p or 0) for ri, p in zip(r, t.price_units)) > lim.max_price_units:
            return None
    return step


def solve_tables_exhaustive(t: MixedTables, objective: Objective, lim: Limits) -> MixedChoice | None:
    """Every (r_t >= 1, m_t >= 1) with sum r_t m_t = N: the best by :func:`score` (ties: the first in
    enumeration order). Exponential: a reference for small instances."""
    best: tuple[tuple[int, ...], MixedChoice] | None = None
    n = t.micro_batches
    if objective is Objective.COST and any(p is None for p in t.price_units):
        return None  # as for a single type: the cost objective needs every price
    for r in itertools.product(*(range(1, c + 1) for c in t.capacity)):
        if sum(r) > n:
            continue
        for m in itertools.product(*(range(1, n // ri + 1) for ri in r)):
            step = _feasible(t, r, m, lim)
            if step is None:
                continue
            choice = MixedChoice(t, r, m, step, optimal=True)
            key = score(objective, step, choice.num_gpus, choice.price_units)
            if best is None or key < best[0]:
                best = (key, choice)
    return None if best is None else best[1]


@dataclass(frozen=True)
class _Model:
    """One instance's CP-SAT model and the variables the objective and the answer read."""

    model: cp_model.CpModel
    r: list[cp_model.IntVar]
    m: list[cp_model.IntVar]
    d: cp_model.IntVar
    step: cp_model.IntVar
    rate: cp_model.LinearExprT
    worst: int


def _cp_model(t: MixedTables, objective: Objective, lim: Limits, allowed_d: np.ndarray | None,
              upper: tuple[int, ...] | None) -> _Model | None:
    """Variables and constraints of one instance (None: nothing can satisfy them)."""
    n, k = t.micro_batches, len(t.types)
    d_max = t.time_us[0].shape[0] - 1
    worst = max(int(tab.max()) for tab in t.time_us)
    ds = [int(x) for x in np.flatnonzero(allowed_d)] if allowed_d is not None else list(range(k, d_max + 1))
    ds = [x for x in ds if x >= k]
    priced = all(pr is not None for pr in t.price_units)
    if d_max < k or worst < 0 or not ds or not all((tab >= 0).any() for tab in t.time_us) or (
            not priced and (lim.max_price_units is not None or objective is Objective.COST)):
        return None
    model = cp_model.CpModel()
    r = [model.new_int_var(1, min(c, d_max), f"r{j}") for j, c in enumerate(t.capacity)]
    m = [model.new_int_var(1, n, f"m{j}") for j in range(k)]
    p = [model.new_int_var(1, n, f"p{j}") for j in range(k)]
    d = model.new_int_var_from_domain(cp_model.Domain.from_values(ds), "d")
    for j in range(k):
        model.add_multiplication_equality(p[j], [r[j], m[j]])
    model.add(sum(p) == n)
    model.add(sum(r) == d)
    step = model.new_int_var(0, worst, "step")
    for j, tab in enumerate(t.time_us):
        tj = model.new_int_var(0, worst + 1, f"t{j}")
        idx = model.new_int_var(0, tab.size - 1, f"i{j}")
        model.add(idx == d * (n + 1) + m[j])
        model.add_element(idx, [int(v) if v >= 0 else worst + 1 for v in tab.ravel()], tj)  # worst + 1: not allowed
        model.add(step >= tj)
    gpus = d * t.gpus_per_replica
    rate = sum(rj * (pr or 0) for rj, pr in zip(r, t.price_units))
    for bound, ok in ((lim.max_gpus, gpus <= (lim.max_gpus or 0)), (lim.num_gpus, gpus == (lim.num_gpus or 0)),
                      (lim.max_step_us, step <= (lim.max_step_us or 0)),
                      (lim.max_price_units, rate <= (lim.max_price_units or 0))):
        if bound is not None:
            model.add(ok)
    if upper is not None and objective in (Objective.THROUGHPUT, Objective.TIME_TO_TRAIN):
        model.add(step <= upper[0])
    if upper is not None and objective is Objective.GPUS:
        model.add(gpus <= upper[0])
    return _Model(model, r, m, d, step, rate, worst)


def solve_tables_cp_sat(t: MixedTables, objective: Objective, lim: Limits, time_limit_s: float,
                        allowed_d: np.ndarray | None = None, upper: tuple[int, ...] | None = None
                        ) -> MixedChoice | None:
    """The same instance as a CP-SAT model (docs/planner.md, "Mixed GPU types"): r_t in [1, R_t], m_t in
    [1, N], p_t = r_t m_t, sum_t p_t = N, D = sum_t r_t; each group's time an element of its (D, m) table;
    the step at least every group's time; the key of :func:`score` folded into one integer objective.
    ``allowed_d`` (:func:`promising`) and ``upper`` (a key to reach: its first entry bounds the first key)
    only cut what cannot win."""
    built = _cp_model(t, objective, lim, allowed_d, upper)
    if built is None:
        return None
    model, step, d, worst = built.model, built.step, built.d, built.worst
    gpus = d * t.gpus_per_replica
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit_s, 0.01)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    if objective is Objective.COST:
        # two phases (one folded key would overflow int64): least price x time, then time and GPUs at it
        top_rate = sum(cap * (pr or 0) for cap, pr in zip(t.capacity, t.price_units))
        rate_var = model.new_int_var(0, top_rate, "rate")
        model.add(rate_var == built.rate)
        cost = model.new_int_var(0, top_rate * worst, "cost")
        model.add_multiplication_equality(cost, [rate_var, step])
        if upper is not None:
            model.add(cost <= upper[0])
        model.minimize(cost)
        if solver.solve(model) != cp_model.OPTIMAL:
            return None
        model.add(cost == int(solver.value(cost)))
    if objective is Objective.GPUS:
        model.minimize(gpus * (worst + 1) + step)
    else:
        model.minimize(step * ((t.time_us[0].shape[0] - 1) * t.gpus_per_replica + 1) + gpus)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    rv = tuple(int(solver.value(x)) for x in built.r)
    mv = tuple(int(solver.value(x)) for x in built.m)
    us = _feasible(t, rv, mv, lim)
    assert us is not None, "CP-SAT's solution breaks the instance's constraints"
    return MixedChoice(t, rv, mv, us, optimal=status == cp_model.OPTIMAL)


def solve_two_types(t: MixedTables, objective: Objective, lim: Limits,
                    allowed_d: np.ndarray | None = None) -> MixedChoice | None:
    """The exact best of a two-type instance, as :func:`solve_tables_exhaustive` finds it (the same choice:
    the same enumeration order, r_1 then r_2 then m_1, breaks ties), in numpy: per r_1, every (r_2, m_1) with
    m_2 = (N - r_1 m_1) / r_2 whole. ``allowed_d`` (:func:`promising`) skips totals D that cannot win."""
    if len(t.types) != 2:
        raise ValueError(f"solve_two_types takes two types, not {len(t.types)}")
    priced = all(p is not None for p in t.price_units)
    if not priced and (objective is Objective.COST or lim.max_price_units is not None):
        return None  # as the exhaustive enumeration: the cost objective and a price limit need every price
    n, rows = t.micro_batches, t.time_us[0].shape[0]
    (cap1, cap2), (tab1, tab2) = t.capacity, t.time_us
    p1, p2 = (int(p or 0) for p in t.price_units)
    allow = np.zeros(cap1 + cap2 + 1, dtype=bool)  # per D = r_1 + r_2: D <= N, a table row, and promising
    allow[:min(rows, n + 1)] = True
    if allowed_d is not None:
        allow[:len(allowed_d)] &= np.asarray(allowed_d, dtype=bool)[:allow.size]
        allow[len(allowed_d):] = False
    # price x step of the dearest choice from 2^62 on: exact Python integers instead of int64
    wide = (cap1 * p1 + cap2 * p2) * max(int(tab1.max()), int(tab2.max()), 0) >= 1 << 62
    r2 = np.arange(1, cap2 + 1)[:, None]
    best: tuple[tuple[int, ...], MixedChoice] | None = None
    for r1 in range(1, cap1 + 1):
        m1 = np.arange(1, n // r1 + 1)[None, :]
        rest = n - r1 * m1
        ok = (rest >= r2) & (rest % r2 == 0) & allow[r1 + r2]
        rr2, mm1 = (np.broadcast_to(a, ok.shape)[ok] for a in (r2, m1))  # in order: r_2 outer, m_1 inner
        if rr2.size == 0:
            continue
        d, mm2 = r1 + rr2, (n - r1 * mm1) // rr2
        t1, t2 = tab1[d, mm1], tab2[d, mm2]
        step, gpus, price = np.maximum(t1, t2), d * t.gpus_per_replica, r1 * p1 + rr2 * p2
        keep = (t1 >= 0) & (t2 >= 0)
        for bound, value, within in ((lim.max_gpus, gpus, np.less_equal), (lim.num_gpus, gpus, np.equal),
                                     (lim.max_step_us, step, np.less_equal),
                                     (lim.max_price_units, price, np.less_equal)):
            if bound is not None:
                keep &= within(value, bound)
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            continue
        s, g = step[idx], gpus[idx]
        if objective is Objective.COST and wide:  # exact products: Python integers, the first least key
            first = min(idx, key=lambda i: (int(price[i]) * int(step[i]), int(step[i]), int(gpus[i]), i))
        else:
            keys = (g, s) if objective is Objective.GPUS else (price[idx] * s, s, g) \
                if objective is Objective.COST else (s, g)
            first = idx[np.lexsort((idx, *reversed(keys)))[0]]  # the least key, the first enumerated among equals
        choice = MixedChoice(t, (r1, int(rr2[first])), (int(mm1[first]), int(mm2[first])), int(step[first]),
                             optimal=True)
        key = score(objective, choice.step_us, choice.num_gpus, choice.price_units)
        if best is None or key < best[0]:
            best = (key, choice)
    return None if best is None else best[1]
