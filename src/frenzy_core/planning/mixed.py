"""Data-parallel replica groups of different GPU types in one job (issue 12, form b), and their search.

Every replica runs the same layout (tp, pp, cp, vpp, micro-batch, recompute, ZeRO, ...) over all layers; the
replicas of type t form one group of r_t replicas, each running m_t micro-batches per step, so the global batch
B = mbs x sum_t r_t m_t splits in whole micro-batches and in proportion to speed. The step is the slowest group's:
each group is timed on its own type with the total data-parallel degree D = sum_t r_t (its ZeRO shards and its
gradient all-reduce span all D replicas) at the slowest inter-node link of the types used (types share no fast
fabric), with one tensor-parallel group per node (what every placement of whole TP groups gives at least).
Memory of a group: the layout at dp = D with m_t micro-batches per rank, on its own type.

The decomposition (docs/planner.md, "Mixed GPU types"): per replica layout and set S of types, a small integer
program over (r_t, m_t), solved exactly by :mod:`frenzy_core.planning.mixed_solve` (enumeration for two types,
CP-SAT for more).
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from frenzy_core._distinct import distinct
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import Links
from frenzy_core.planning.candidates import enumerate_layouts
from frenzy_core.planning.mixed_solve import (
    PRICE_STEPS_PER_USD_HOUR,
    TIME_STEPS_PER_S,
    Limits,
    MixedChoice,
    MixedTables,
    promising,
    score,
    solve_tables_cp_sat,
    solve_tables_exhaustive,
    solve_two_types,
)
from frenzy_core.planning.request import Objective
from frenzy_core.planning.search import Search

__all__ = ["MAX_MIXED_ROWS", "mixable_types", "mixed_search", "one_collective_library"]

MAX_MIXED_ROWS = 400_000
"""Most (layout, type, D, m) rows the mixed search estimates per call (our bound: about a second of the
vectorised estimators); layouts beyond it are left out and the plan says so."""

_RECIPE = ("tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "seq_len", "zero_stage", "distributed_optimizer",
           "recompute", "recompute_num_layers", "sequence_parallel", "schedule")
"""The columns a replica layout fixes (all but dp and the global batch)."""


def _capacities(search: Search, gpu_type: str, tp: np.ndarray, per_replica_groups: np.ndarray) -> np.ndarray:
    """Replicas of each layout ``gpu_type``'s free GPUs hold: its whole tp groups (inside one node each) over the
    groups one replica needs; 0 where tp exceeds its largest node. Worked out once per distinct tp."""
    classes = search.pool.classes(gpu_type)
    largest = search.pool.max_node_size(gpu_type)
    values, index = np.unique(tp, return_inverse=True)
    blocks = np.array([classes.free_blocks(int(v)) if v <= largest else 0 for v in values], dtype=np.int64)
    return blocks[index.reshape(tp.shape)] // np.maximum(per_replica_groups, 1)


def _replica_layouts(search: Search) -> LayoutArrays:
    """Distinct layouts of one replica among those the single-type search enumerates (experts and ZeRO-3: not
    mixed)."""
    c = search.constraints
    allowed = [t for t in search.pool.gpu_types if c.gpu_types is None or t in c.gpu_types]
    total = sum(search.pool.free_gpus(t) for t in allowed)
    max_tp = max([search.pool.max_node_size(t) for t in allowed], default=1)
    lay = enumerate_layouts(search.model, search.training, c.replace(num_gpus=None), max_world=max(total, 1),
                            max_tp=max_tp)
    if not len(lay):
        return lay
    # each distinct recipe's first row (a linear-time key per row: np.unique over 2-d rows sorted them as
    # bytes, a sixth of plan_job's CPU time at 1,024 GPUs of 6 types)
    _, combination = distinct(*(getattr(lay, k) for k in _RECIPE))
    keep = np.sort(np.unique(combination, return_index=True)[1])
    # replica groups run different micro-batch counts: no per-micro-batch collective may span them (expert
    # parallelism's all-to-all, ZeRO-3's gathers)
    keep = keep[(lay.ep[keep] == 1) & (lay.zero_stage[keep] != 3)]
    return lay.take(keep)


def _fits_at_best(search: Search, lay: LayoutArrays, allowed: tuple[str, ...], d: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """Per allowed type, per replica layout: whether it fits that type at dp = ``d`` with one micro-batch per
    rank. The rows are the same for every type: memory once per precision."""
    cols = {**{k: getattr(lay, k) for k in _RECIPE}, "dp": d, "num_microbatches": 1}
    devices: dict[object, np.ndarray] = {}
    out = {}
    for t in allowed:
        recipe = search.recipe(t)
        if recipe.precision not in devices:  # negative: the layout rules refuse the row
            rows = LayoutArrays.from_columns(cols, recipe)
            devices[recipe.precision] = search.estimator.device_bytes(search.model, recipe, rows)
        dev = devices[recipe.precision]
        out[t] = np.asarray((dev >= 0) & (dev <= search.usable_bytes(t)))
    return out


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
        if recipe.precision not in devices:  # negative: the layout rules refuse the row
            devices[recipe.precision] = search.estimator.device_bytes(search.model, recipe, rows)
        dev = devices[recipe.precision]
        fits = np.flatnonzero((dev >= 0) & (dev <= search.usable_bytes(t)) & (caps[t][row_l] > 0))
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
    caps = {t: _capacities(search, t, tp, groups) for t in allowed}
    n = gbs // lay.micro_batch_size.astype(np.int64)
    n = np.where(gbs % lay.micro_batch_size == 0, n, 0)
    held = np.sum([np.where(caps[t] > 0, caps[t], 0) for t in allowed], axis=0)
    d_top = np.maximum(np.minimum(held, n), 1)
    # a type whose GPUs cannot hold the layout at its least memory (most replicas, one micro-batch: memory
    # never grows with dp nor shrinks with micro-batches, tests/test_planning_mixed.py) holds no replica
    fits = _fits_at_best(search, lay, allowed, d_top)
    for t in allowed:
        caps[t] = np.where(fits[t], caps[t], 0)
    held = np.sum([caps[t] for t in allowed], axis=0)
    usable_types = np.sum([caps[t] > 0 for t in allowed], axis=0)
    d_max = np.where(usable_types >= 2, np.minimum(held, n), 0)
    cap = search.constraints.num_gpus or search.constraints.max_gpus
    if cap is not None:  # D replicas of tp x pp x cp GPUs each within the request's GPU count
        d_max = np.minimum(d_max, cap // np.maximum(tp * groups, 1))
    # rows of a layout: sum over 2 <= D <= d_max (<= N) of (N - D + 1) = (d_max - 1)(N + 1) - (d_max(d_max + 1)/2 - 1),
    # in int64 only for N within the row budget (at most 4e5^2 each); a larger N is over the budget anyway
    small = n <= MAX_MIXED_ROWS
    ns, ds = np.where(small, n, 0), np.where(small, d_max, 0)
    rows_of = np.maximum((ds - 1) * (ns + 1) - (ds * (ds + 1) // 2 - 1), 0)
    per_layout = np.where(small, np.minimum(rows_of, MAX_MIXED_ROWS + 1), MAX_MIXED_ROWS + 1)
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
            for types in filter(lambda ts: one_collective_library(search, ts),
                                itertools.combinations(usable_here, size)):
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
    a type that falls back to fp16 is not mixed with others), priced where the request needs prices, and that the
    launcher, if any, can run the recipe on."""
    c = search.constraints
    needs_price = search.objective is Objective.COST or c.max_price_per_hour_usd is not None
    scope = search.scope
    return tuple(t for t in search.pool.gpu_types if (c.gpu_types is None or t in c.gpu_types)
                 and search.pool.free_gpus(t) > 0 and t not in search.precisions
                 and not (needs_price and search.specs[t].price_per_gpu_hour_usd is None)
                 and (scope is None or scope.refusal(search.model, search.training, search.specs[t]) is None))


def one_collective_library(search: Search, types: tuple[str, ...]) -> bool:
    """Whether ``types`` can be ranks of one job: one vendor, since NCCL (NVIDIA) and RCCL (AMD) ranks cannot join
    one communicator (the adapters refuse such a plan; the search never builds one)."""
    return len({search.specs[t].vendor for t in types}) == 1


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
    cap = search.constraints.num_gpus or search.constraints.max_gpus
    if len(allowed) < 2 or (cap is not None and cap < 2):  # a mix holds two replicas at least
        return none, None, notes
    if time.perf_counter() >= deadline:
        notes.append("the mixed-type search stopped at the time limit")
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
                  else solve_two_types(tables, search.objective, lim, allowed_d) if len(tables.types) == 2
                  else solve_tables_cp_sat(tables, search.objective, lim, left, allowed_d, upper))
        if choice is None:
            continue
        key = score(search.objective, choice.step_us, choice.num_gpus, choice.price_units) + (tables.layout,)
        if (best is None or key < best[0]) and (incumbent is None or key[:-1] < incumbent):
            best = (key, choice)
    return lay, (None if best is None else best[1]), notes
