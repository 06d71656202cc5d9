"""Data-parallel replica groups of different GPU types in one job (issue 12, form b), and their search.

Every replica runs the same layout (tp, pp, cp, vpp, micro-batch, recompute, ZeRO, ...) over all layers; the
replicas of type t form one group of r_t replicas, each running m_t micro-batches per step, so the global batch
B = mbs x sum_t r_t m_t splits in whole micro-batches and in proportion to speed. The step is the slowest group's:
each group is timed on its own type with the total data-parallel degree D = sum_t r_t (its ZeRO shards and its
gradient all-reduce span all D replicas) at the slowest inter-node link of the types used (types share no fast
fabric), with one tensor-parallel group per node (what every placement of whole TP groups gives at least).
Memory of a group: the layout at dp = D with m_t micro-batches per rank, on its own type.

The decomposition (docs/planner.md, "Mixed GPU types"): per replica layout and set S of types, a small integer
program over (r_t, m_t) is solved by CP-SAT (:func:`solve_tables_cp_sat`); :func:`solve_tables_exhaustive` is
the plain enumeration the tests compare it with.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.layout import layout_mask
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import Links
from frenzy_core.planning.candidates import enumerate_layouts
from frenzy_core.planning.request import Objective
from frenzy_core.planning.search import Search

__all__ = ["MAX_MIXED_ROWS", "MixedChoice", "MixedTables", "mixable_types", "mixed_search", "promising", "score",
           "solve_tables_cp_sat", "solve_tables_exhaustive"]

MAX_MIXED_ROWS = 400_000
"""Most (layout, type, D, m) rows the mixed search estimates per call (our bound: about a second of the
vectorised estimators); layouts beyond it are left out and the plan says so."""

TIME_STEPS_PER_S = 1_000_000
"""Step times enter CP-SAT as whole microseconds (ties below a microsecond go to the next key)."""

PRICE_STEPS_PER_USD_HOUR = 10_000
"""Prices enter CP-SAT in 1/10,000 dollar per hour."""

_RECIPE = ("tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "seq_len", "zero_stage", "distributed_optimizer",
           "recompute", "recompute_num_layers", "sequence_parallel", "schedule")
"""The columns a replica layout fixes (all but dp and the global batch)."""


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


def _capacity(search: Search, gpu_type: str, tp: int, per_replica_groups: int) -> int:
    classes = search.pool.classes(gpu_type)
    return int(classes.free_blocks(tp)) // per_replica_groups


def _replica_layouts(search: Search) -> LayoutArrays:
    """Distinct layouts of one replica among those the single-type search enumerates (experts: not mixed)."""
    c = search.constraints
    allowed = [t for t in search.pool.gpu_types if c.gpu_types is None or t in c.gpu_types]
    total = sum(search.pool.free_gpus(t) for t in allowed)
    max_tp = max([search.pool.max_node_size(t) for t in allowed], default=1)
    lay = enumerate_layouts(search.model, search.training, c.replace(num_gpus=None), max_world=max(total, 1),
                            max_tp=max_tp)
    cols = np.stack([getattr(lay, k) for k in _RECIPE], axis=1) if len(lay) else np.zeros((0, len(_RECIPE)))
    _, first = np.unique(cols, axis=0, return_index=True)
    keep = np.sort(first)
    keep = keep[lay.ep[keep] == 1]
    return lay.take(keep)


def _fits_at_best(search: Search, lay: LayoutArrays, gpu_type: str, d: np.ndarray) -> np.ndarray:
    """Per replica layout: whether it fits ``gpu_type`` at dp = ``d`` with one micro-batch per rank."""
    recipe = search.recipe(gpu_type)
    rows = LayoutArrays.from_columns({**{k: getattr(lay, k) for k in _RECIPE}, "dp": d, "num_microbatches": 1},
                                     recipe)
    valid = layout_mask(search.model, rows)
    dev = np.full(d.shape, -1, dtype=np.int64)
    if valid.any():
        dev[valid] = search.estimator.device_bytes(search.model, recipe, rows.take(np.flatnonzero(valid)))
    usable = int(search.specs[gpu_type].memory_bytes * (1.0 - search.constraints.headroom))
    return np.asarray((dev >= 0) & (dev <= usable))


def _row_times(search: Search, lay: LayoutArrays, allowed: tuple[str, ...], caps: dict[str, np.ndarray],
               row_l: np.ndarray, row_d: np.ndarray, row_m: np.ndarray) -> dict[tuple[str, float], np.ndarray]:
    """Per (type, inter-node link): whole microseconds of each (layout, D, m) row on that type (-1: does not
    fit, the layout rules refuse it, or the type cannot run the recipe); memory once per precision."""
    cols = {k: getattr(lay, k)[row_l] for k in _RECIPE}
    tp = lay.tp.astype(np.int64)
    times: dict[tuple[str, float], np.ndarray] = {}
    inters = {t: search.links[t].inter_node_bytes_per_s for t in allowed}
    devices: dict[object, np.ndarray] = {}
    for t in allowed:
        recipe = search.recipe(t)
        rows = LayoutArrays.from_columns({**cols, "dp": row_d, "num_microbatches": row_m}, recipe)
        if recipe.precision not in devices:
            valid = layout_mask(search.model, rows)
            dev = np.full(row_l.shape, -1, dtype=np.int64)
            if valid.any():
                dev[valid] = search.estimator.device_bytes(search.model, recipe, rows.take(np.flatnonzero(valid)))
            devices[recipe.precision] = dev
        dev = devices[recipe.precision]
        usable = int(search.specs[t].memory_bytes * (1.0 - search.constraints.headroom))
        fits = np.flatnonzero((dev >= 0) & (dev <= usable) & (caps[t][row_l] > 0))
        for v in sorted({min(inters[t], w) for w in inters.values()}):
            us = np.full(row_l.shape, -1, dtype=np.int64)
            if fits.size:
                links = Links(tp[row_l[fits]], search.links[t].intra_node_bytes_per_s, v)  # type: ignore[arg-type]
                try:
                    sec = search.estimator.iteration_s(search.model, recipe, rows.take(fits), search.specs[t], links)
                except ConfigError:  # the recipe's dtype has no peak on this type: it holds no replica
                    sec = np.full(fits.size, np.inf)
                us[fits] = np.where(np.isfinite(sec), np.ceil(sec * TIME_STEPS_PER_S), -1).astype(np.int64)
            times[(t, v)] = us
    return times


def _all_tables(search: Search, lay: LayoutArrays, allowed: tuple[str, ...]) -> tuple[list[MixedTables], bool]:
    """Every (replica layout, set of two or more types) instance, estimated in one batch per type and link:
    the rows are (layout, D, m) with 2 <= D <= min(replicas the types hold, N) and 1 <= m <= N - D + 1 (the
    other D - 1 replicas run one micro-batch at least). Also whether the row budget left layouts out."""
    gbs = search.training.global_batch_size
    assert gbs is not None
    tp = lay.tp.astype(np.int64)
    groups = (lay.pp * lay.cp).astype(np.int64)
    caps = {t: np.array([_capacity(search, t, int(tp[i]), int(groups[i])) if tp[i] <= search.pool.max_node_size(t)
                         else 0 for i in range(len(lay))], dtype=np.int64) for t in allowed}
    n = gbs // lay.micro_batch_size.astype(np.int64)
    n = np.where(gbs % lay.micro_batch_size == 0, n, 0)
    held = np.sum([np.where(caps[t] > 0, caps[t], 0) for t in allowed], axis=0)
    d_top = np.maximum(np.minimum(held, n), 1)
    # a type whose GPUs cannot hold the layout at its least memory (most replicas, one micro-batch: memory
    # never grows with dp nor shrinks with micro-batches, tests/test_planning_mixed.py) holds no replica
    for t in allowed:
        caps[t] = np.where(_fits_at_best(search, lay, t, d_top), caps[t], 0)
    held = np.sum([caps[t] for t in allowed], axis=0)
    usable_types = np.sum([caps[t] > 0 for t in allowed], axis=0)
    d_max = np.where(usable_types >= 2, np.minimum(held, n), 0)
    # rows of a layout: sum over D of (N - D + 1), as Python ints (a batch of 10^18 must not overflow)
    rows_of = [sum(max(int(n[i]) - d + 1, 0) for d in range(2, int(d_max[i]) + 1)) if n[i] <= MAX_MIXED_ROWS
               else MAX_MIXED_ROWS + 1 for i in range(len(lay))]
    per_layout = np.array([min(r, MAX_MIXED_ROWS + 1) for r in rows_of], dtype=np.int64)
    within = np.cumsum(per_layout) * len(allowed) <= MAX_MIXED_ROWS
    truncated = bool((~within & (per_layout > 0)).any())
    rl, rd, rm = [], [], []
    for li in np.flatnonzero(within & (per_layout > 0)):
        for d in range(2, int(d_max[li]) + 1):
            ms = np.arange(1, int(n[li]) - d + 2)
            rl.append(np.full(ms.size, li))
            rd.append(np.full(ms.size, d))
            rm.append(ms)
    if not rl:
        return [], truncated
    row_l, row_d, row_m = (np.concatenate(a).astype(np.int64) for a in (rl, rd, rm))
    inters = {t: search.links[t].inter_node_bytes_per_s for t in allowed}
    times = _row_times(search, lay, allowed, caps, row_l, row_d, row_m)
    out: list[MixedTables] = []
    for i in (int(k) for k in np.flatnonzero(within & (per_layout > 0))):
        sel = np.flatnonzero(row_l == i)
        usable_here = tuple(t for t in allowed if caps[t][i] > 0)
        s = int(tp[i] * groups[i])
        for size in range(2, len(usable_here) + 1):
            for types in itertools.combinations(usable_here, size):
                v = min(inters[t] for t in types)
                tabs = []
                for t in types:
                    tab = np.full((int(d_max[i]) + 1, int(n[i]) + 1), -1, dtype=np.int64)
                    tab[row_d[sel], row_m[sel]] = times[(t, min(inters[t], v))][sel]
                    tabs.append(tab)
                per_gpu = [search.specs[t].price_per_gpu_hour_usd for t in types]
                out.append(MixedTables(
                    layout=i, types=types, capacity=tuple(int(caps[t][i]) for t in types), gpus_per_replica=s,
                    micro_batches=int(n[i]), time_us=tuple(tabs),
                    price_units=tuple(None if p is None else round(p * s * PRICE_STEPS_PER_USD_HOUR)
                                      for p in per_gpu)))
    return out, truncated


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


def _limits(search: Search, n_tokens_per_step: int) -> Limits:
    c = search.constraints
    max_step = None
    if c.deadline_s is not None and c.token_budget is not None:
        steps = math.ceil(c.token_budget / n_tokens_per_step)
        max_step = math.floor(c.deadline_s / steps * TIME_STEPS_PER_S)
    price = None if c.max_price_per_hour_usd is None else math.floor(c.max_price_per_hour_usd
                                                                      * PRICE_STEPS_PER_USD_HOUR)
    return Limits(max_gpus=c.max_gpus, num_gpus=c.num_gpus, max_price_units=price, max_step_us=max_step)


def mixable_types(search: Search) -> tuple[str, ...]:
    """Allowed types with free GPUs that run the request's recipe as given (one recipe across the groups:
    a type that falls back to fp16 is not mixed with others), priced where the request needs prices."""
    c = search.constraints
    needs_price = search.objective is Objective.COST or c.max_price_per_hour_usd is not None
    return tuple(t for t in search.pool.gpu_types if (c.gpu_types is None or t in c.gpu_types)
                 and search.pool.free_gpus(t) > 0 and t not in search.precisions
                 and not (needs_price and search.specs[t].price_per_gpu_hour_usd is None))


def mixed_search(search: Search, deadline: float, solver: str = "cp-sat", incumbent: tuple[int, ...] | None = None
                 ) -> tuple[LayoutArrays, MixedChoice | None, list[str]]:
    """The best mixed choice over every replica layout and set of two or more allowed types that beats
    ``incumbent`` (the best single-type plan's :func:`score`), the replica layouts it indexes, and notes on
    what the search left out. Instances are solved best bound first and skipped once their bound cannot win.
    Only placement ``any``, and no launcher or one that launches mixed plans (``LaunchScope.mixed``)."""
    notes: list[str] = []
    none = LayoutArrays.from_configs(search.training, ParallelConfig()).take(np.zeros(0, dtype=np.int64))
    if not search.mixable:
        return none, None, notes
    if search.training.offloads:
        notes.append("the mixed-type search does not check host memory yet, so it is not run for a recipe that "
                     "offloads")
        return none, None, notes
    gbs = search.training.global_batch_size
    assert gbs is not None
    allowed = mixable_types(search)
    if len(allowed) < 2:
        return none, None, notes
    lay = _replica_layouts(search)
    lim = _limits(search, gbs * search.training.seq_len)
    instances, truncated = _all_tables(search, lay, allowed)
    if truncated:
        notes.append(f"the mixed-type search left out layouts beyond {MAX_MIXED_ROWS:,} estimated rows")
    best: tuple[tuple[int, ...], MixedChoice] | None = None
    for tables in instances:
        upper = incumbent if best is None else min(best[0][:-1], incumbent or best[0][:-1])
        allowed_d = promising(tables, search.objective, upper)
        if not allowed_d.any():
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            notes.append("the mixed-type search stopped at the time limit")
            break
        choice = (solve_tables_exhaustive(tables, search.objective, lim) if solver == "exhaustive"
                  else solve_tables_cp_sat(tables, search.objective, lim, left, allowed_d, upper))
        if choice is None:
            continue
        key = score(search.objective, choice.step_us, choice.num_gpus, choice.price_units) + (tables.layout,)
        if (best is None or key < best[0]) and (incumbent is None or key[:-1] < incumbent):
            best = (key, choice)
    return lay, (None if best is None else best[1]), notes
