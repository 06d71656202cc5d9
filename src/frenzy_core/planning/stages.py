"""Pipeline stages on different GPU types with uneven layer counts (issue 12, form a), and their search.

A pipeline of P = s_a + s_b stages: the first s_a on type a with tensor-parallel degree tp_a, the other s_b on
type b with tp_b (each type one contiguous block, as Metis maps stages to device groups), every stage replicated
dp = D times, one recipe (micro-batch, recompute, ZeRO / distributed optimizer, sequence parallelism where the
stage has tp > 1) for all. Stage i holds l_i consecutive layers (sum_i l_i = L, l_i >= 1), the embedding on the
first and the head on the last. Memory of a stage: the memory model's stage i of that layout on its own type
(its layers, tp, 1F1B's min(P - i, m) in-flight micro-batches, its ends); time: timing/stages.py.

Search (docs/planner.md, "Pipeline stages on different types"): every (recipe, D, ordered type pair, tp_a, tp_b,
s_a, s_b) the free GPUs and the request's limits allow gets a lower bound on its step; they are taken best bound
first, and for each the layer split that minimises the pipeline's step exactly (:func:`best_split`, a dynamic
program), until the next bound cannot beat the best found or the time limit is reached.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import EVEN_SPLIT, LayoutArrays
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Precision
from frenzy_core.hardware.gpu import Links
from frenzy_core.memory.batch import stage_device_bytes
from frenzy_core.planning.candidates import enumerate_layouts, sp_with_tp, tp_searched
from frenzy_core.planning.estimators import AnalyticEstimator
from frenzy_core.planning.mixed import mixable_types, one_collective_library
from frenzy_core.planning.mixed_plan import group_placement
from frenzy_core.planning.mixed_solve import PRICE_STEPS_PER_USD_HOUR, TIME_STEPS_PER_S, score
from frenzy_core.planning.request import Objective, PlacementMode
from frenzy_core.planning.search import Search
from frenzy_core.timing.params import TimeModelParams
from frenzy_core.timing.stages import pipeline_step_s, stage_microbatch_batch, stage_tail_batch

__all__ = [
    "MAX_STAGES",
    "MAX_TAUS",
    "SplitRule",
    "StageChoice",
    "best_split",
    "stage_links",
    "stage_params",
    "stage_placements",
    "stage_search",
]

MAX_STAGES = 16
"""Most pipeline stages a form (a) plan has (our bound on the search; Metis's and FlashFlex's largest published
pipelines have 8 to 16 stages)."""

MAX_TAUS = 256
"""Most candidate values of the slowest stage's time :func:`best_split` tries (beyond them it is not proved
optimal). Our bound on the work, not a published figure: each value costs one min-plus pass over stages x layers^2
(16 x 80^2 entries for an 80-layer model at the most stages), so 256 of them keep one split within the planner's
per-configuration budget; a plan whose split stopped at it is marked not proved optimal."""

_RECIPE = ("micro_batch_size", "zero_stage", "distributed_optimizer", "recompute", "recompute_num_layers",
           "sequence_parallel")
"""The columns one recipe fixes for every stage."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StageChoice:
    """A form (a) solution: the recipe row of ``recipes``, dp, the per-stage types, tps and layers."""

    recipe: int
    dp: int
    types: tuple[str, ...]
    tps: tuple[int, ...]
    layers: tuple[int, ...]
    microbatches: int
    step_us: int
    key: tuple[int, ...]
    optimal: bool
    why: str
    """Why the split is what it is, in words."""

    @property
    def num_gpus(self) -> int:
        return self.dp * sum(self.tps)


@functools.cache
def _shifts(n: int) -> npt.NDArray[np.intp]:
    """[s, l] -> s - l where l <= s, else n (the padding column of :func:`_gathered`)."""
    s = np.arange(n)[:, None] - np.arange(n)[None, :]
    return np.where(s >= 0, s, n)


def _gathered(f: FloatArray, c: FloatArray) -> FloatArray:
    """[w, s, l] -> f[w, s - l] + c[w, l] (inf where l > s)."""
    padded = np.concatenate([f, np.full((f.shape[0], 1), np.inf)], axis=1)
    return np.asarray(padded[:, _shifts(f.shape[1])] + c[:, None, :])


def _minplus(f: FloatArray, c: FloatArray) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """new[w, s] = min_l f[w, s - l] + c[w, l], and the minimising l (rows w: candidate bounds)."""
    gathered = _gathered(f, c)
    return gathered.min(axis=2), np.argmin(gathered, axis=2)


def _min_sums(t: FloatArray, taus: FloatArray) -> FloatArray:
    """Per bound tau: the least sum_i t_i(l_i) over splits with every t_i(l_i) <= tau (inf: none)."""
    n_layers = t.shape[1] - 1
    f = np.full((taus.size, n_layers + 1), np.inf)
    f[:, 0] = 0.0
    for row in t:
        f = _gathered(f, np.where(row[None, :] <= taus[:, None], row[None, :], np.inf)).min(axis=2)
    return f[:, n_layers]


def best_split(t: FloatArray, m: int) -> tuple[tuple[int, ...], float, bool] | None:
    """The split (l_i >= 1, sum l_i = L) minimising ``sum_i t_i(l_i) + (m - 1) max_i t_i(l_i)``, the value, and
    whether it is proved optimal; ``t[i, l]`` is stage i's micro-batch time with l layers (inf: does not fit).

    Exact: for a bound tau on the slowest stage, a min-plus dynamic program over stages gives the least sum of
    times S(tau) with every t_i <= tau, and the optimum is min over tau of S(tau) + (m - 1) tau, tau running over
    the table's values from the least feasible one up to where (m - 1) tau + S(inf) cannot beat the best (at most
    :data:`MAX_TAUS` of them)."""
    t = np.where(np.isfinite(t), t, np.inf)
    t[:, 0] = np.inf  # every stage holds a layer
    values = np.unique(t[np.isfinite(t)])
    if values.size == 0:
        return None
    s_inf = float(_min_sums(t, values[-1:])[0])
    if not math.isfinite(s_inf):
        return None
    lo = _least_feasible(t, values)
    best, best_tau, optimal, start = math.inf, float(values[lo]), True, lo
    while start < values.size:
        taus = values[start:start + 32]
        live = (m - 1) * taus + s_inf < best
        if not live.any():
            break
        if start - lo >= MAX_TAUS:
            optimal = False
            break
        sums = _min_sums(t, taus)
        f = sums + (m - 1) * taus
        k = int(np.argmin(f))
        if f[k] < best:
            best, best_tau = float(f[k]), float(taus[k])
        start += 32
    return _split_at(t, best_tau), best, optimal


def _least_feasible(t: FloatArray, values: FloatArray) -> int:
    """Index of the least tau of ``values`` within which some split keeps every stage (feasibility grows with
    tau; the last one is feasible). Where every stage's time grows with its layers, stage i may hold any count
    up to k_i(tau) = #{l >= 1 : t_i(l) <= tau}, so a split exists exactly when every k_i >= 1 and
    sum_i k_i >= L; otherwise by bisection over the dynamic program."""
    rows = t[:, 1:]
    if np.all(rows[:, 1:] >= rows[:, :-1]):
        k = np.stack([np.searchsorted(row, values, side="right") for row in rows])
        return int(np.argmax((k >= 1).all(axis=0) & (k.sum(axis=0) >= rows.shape[1])))
    lo, hi = 0, values.size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if math.isfinite(float(_min_sums(t, values[mid:mid + 1])[0])):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _split_at(t: FloatArray, tau: float) -> tuple[int, ...]:
    """The least-sum split with every stage within ``tau``, by the dynamic program's back pointers."""
    n_layers = t.shape[1] - 1
    f = np.full((1, n_layers + 1), np.inf)
    f[0, 0] = 0.0
    args = []
    for row in t:
        f, arg = _minplus(f, np.where(row <= tau, row, np.inf)[None, :])
        args.append(arg[0])
    split, s = [], n_layers
    for arg in reversed(args):
        layer = int(arg[s])
        split.append(layer)
        s -= layer
    return tuple(reversed(split))


def _recipes(search: Search) -> LayoutArrays:
    """Distinct recipes of the single-type enumeration's pipelined 1F1B layouts (no vpp, cp or experts)."""
    c = search.constraints
    allowed = mixable_types(search)
    lay = enumerate_layouts(search.model, search.training, c.replace(num_gpus=None, pp=None, tp=None),
                            max_world=max(sum(search.pool.free_gpus(t) for t in allowed), 1),
                            max_tp=max(search.pool.max_node_size(t) for t in allowed))
    keep = np.flatnonzero((lay.pp > 1) & (lay.vpp == 1) & (lay.cp == 1) & (lay.ep == 1)
                          & (lay.schedule == PipelineSchedule.ONE_F_ONE_B.code))
    lay = lay.take(keep)
    if search.scope is not None:  # what the launcher can write (a stage launcher's rule reads recipe fields only)
        lay = lay.take(np.flatnonzero(search.scope.allows(lay, search.training)))
    if not len(lay):
        return lay
    tied = sp_with_tp(search.model, search.training, c)  # then a stage's tp alone sets sequence parallelism
    cols = np.stack([np.zeros(len(lay), dtype=np.int64) if tied and k == "sequence_parallel" else getattr(lay, k)
                     for k in _RECIPE], axis=1)
    _, first = np.unique(cols, axis=0, return_index=True)
    return lay.take(np.sort(first))


@dataclass(frozen=True)
class _Config:
    """One (recipe, D, type pair, tps, stage counts) of the enumeration, with its bound."""

    recipe: int
    dp: int
    types: tuple[str, str]
    tps: tuple[int, int]
    counts: tuple[int, int]
    bound_key: tuple[int, ...]
    price_units: int | None

    @property
    def stage_types(self) -> tuple[str, ...]:
        return (self.types[0],) * self.counts[0] + (self.types[1],) * self.counts[1]

    @property
    def stage_tps(self) -> tuple[int, ...]:
        return (self.tps[0],) * self.counts[0] + (self.tps[1],) * self.counts[1]


def stage_params(search: Search, gpu_type: str) -> TimeModelParams | None:
    """The time model's parameters of ``gpu_type`` (a calibration file's where the estimator has one)."""
    est = search.estimator
    return est.params(search.specs[gpu_type]) if isinstance(est, AnalyticEstimator) else None


class _Tables:
    """A stage's micro-batch seconds at 0..L layers per (recipe, type, tp, head), one estimator call per type
    (and per dp for fp8 recipes, whose weight casts depend on the micro-batch count), and memory caps."""

    def __init__(self, search: Search, recipes: LayoutArrays) -> None:
        self.search, self.recipes = search, recipes
        self.fp8 = search.training.precision is Precision.FP8_MIXED
        self.cache: dict[tuple[str, int, float], dict[tuple[int, int, bool], FloatArray]] = {}
        self.caps: dict[tuple[int, int, str, int, int, int], int] = {}
        self.bounds: dict[tuple[int, int, str, int], npt.NDArray[np.int64]] = {}
        self.sp_with_tp = sp_with_tp(search.model, search.training, search.constraints)
        self.floors: dict[tuple[str, int, float], FloatArray] = {}
        self.placements: dict[tuple[tuple[str, ...], tuple[int, ...], int], list[dict[str, list[int]]]] = {}

    def layout(self, r: npt.ArrayLike, dp: npt.ArrayLike, tp: npt.ArrayLike, splits: Sequence[tuple[int, ...]],
               gbs: npt.ArrayLike | None = None, which: npt.NDArray[np.int64] | None = None) -> LayoutArrays:
        """Rows of recipes ``r`` at (dp, tp) with pp = len(split) and each split (the request's global batch
        unless ``gbs``); with ``which``, row k has split ``splits[which[k]]``."""
        which = np.arange(len(splits)) if which is None else which
        n = which.size
        ri = np.broadcast_to(np.asarray(r, dtype=np.int64), (n,))
        tpa = np.broadcast_to(np.asarray(tp, dtype=np.int64), (n,))
        cols = {k: getattr(self.recipes, k)[ri] for k in _RECIPE}
        at_tp = (tpa > 1).astype(np.int64)
        cols["sequence_parallel"] = at_tp if self.sp_with_tp else cols["sequence_parallel"] & at_tp
        gbs = self.search.training.global_batch_size if gbs is None else gbs
        assert gbs is not None
        table: dict[tuple[int, ...], int] = {EVEN_SPLIT: 0}
        codes = np.array([table.setdefault(sp, len(table)) for sp in splits], dtype=np.int64)[which]
        pp = np.array([len(sp) for sp in splits], dtype=np.int64)[which]
        lay = LayoutArrays.from_columns({**cols, "dp": dp, "tp": tpa, "pp": pp, "global_batch_size": gbs},
                                        self.search.training)
        return dataclasses.replace(lay, stage_split=codes, splits=tuple(table))

    def p2p(self, types: Sequence[str]) -> float:
        """The slowest link between the pipeline's types (they share no fast fabric): their slowest NICs."""
        return min(self.search.links[t].inter_node_bytes_per_s for t in types)

    def times(self, r: int, dp: int, gpu_type: str, tp: int, head: bool, p2p: float) -> FloatArray:
        """A stage's micro-batch seconds at 0..L layers."""
        key = (gpu_type, dp if self.fp8 else 1, p2p)
        if key not in self.cache:
            self.cache[key] = self._all_times(gpu_type, key[1], p2p)
        return self.cache[key][(r, tp, head)]

    def floor_stack(self, gpu_type: str, dp: int, p2p: float) -> FloatArray:
        """Rows (recipe, tp of :func:`_tps`, head) of g(l) = min over l' >= l of t(l'): the least time of a stage
        holding l layers or more (nondecreasing, so the layers a stage can hold within tau are at most
        #{l >= 1 : g(l) <= tau})."""
        key = (gpu_type, dp if self.fp8 else 1, p2p)
        if key not in self.floors:
            t = np.stack([self.times(r, dp, gpu_type, tp, head, p2p) for r in range(len(self.recipes))
                          for tp in _tps(self.search, gpu_type) for head in (False, True)])
            self.floors[key] = np.minimum.accumulate(t[:, ::-1], axis=1)[:, ::-1]
        return self.floors[key]

    def _all_times(self, gpu_type: str, dp: int, p2p: float) -> dict[tuple[int, int, bool], FloatArray]:
        search, n_layers = self.search, self.search.model.num_layers
        combos = [(r, tp, head) for r in range(len(self.recipes)) for tp in _tps(search, gpu_type)
                  for head in (False, True)]
        layers = np.arange(n_layers + 1)
        rs = np.repeat([c[0] for c in combos], layers.size)
        tps = np.repeat([c[1] for c in combos], layers.size)
        heads = np.repeat([c[2] for c in combos], layers.size)
        ls = np.tile(layers, len(combos))
        splits = [(int(layer), n_layers - int(layer)) for layer in layers] + [
            (n_layers - int(layer), int(layer)) for layer in layers]
        lay = self.layout(rs, dp, tps, splits, which=ls + heads.astype(np.int64) * layers.size)
        own = search.links[gpu_type]
        links = Links(tps, own.intra_node_bytes_per_s, p2p)  # type: ignore[arg-type]
        micro = stage_microbatch_batch(search.model, search.training, search.specs[gpu_type], lay,
                                       heads.astype(np.int64), links, params=stage_params(search, gpu_type))
        t = np.asarray(micro.microbatch_s, dtype=np.float64).reshape(len(combos), layers.size)
        return {c: t[k] for k, c in enumerate(combos)}

    def fill_cap_bounds(self, keys: list[tuple[int, int, str, int]]) -> None:
        """``bounds[(recipe, dp, type, tp)]`` of every key of ``keys`` in one bisection (added to those known): per
        k = 0 .. MAX_STAGES, at least the layers a stage of recipe ``r`` at (dp, tp) holding k in-flight
        micro-batches (1F1B: min(P - i, m)) holds on ``gpu_type``: a middle stage (no embedding, no head: memory
        never falls with them) at the largest power of two k' <= k (memory never falls with more in-flight
        micro-batches); k = 1 at one micro-batch per step, which never needs more; L - 1 where that stage held as
        many layers as its layout leaves it. Entry 0 is 0."""
        rows, types, gbs = [], [], []
        full = self.search.training.global_batch_size
        assert full is not None
        powers = [k for k in (2, 4, 8, 16, 32) if k <= MAX_STAGES]
        for r, dp, g, tp in keys:
            rows.append((r, dp, tp, 3, 1))
            types.append(g)
            gbs.append(int(self.recipes.micro_batch_size[r]) * dp)
            for k in powers:
                rows.append((r, dp, tp, k + 1, 1))
                types.append(g)
                gbs.append(full)
        found = np.array(self._bisect(rows, types, np.array(gbs)), dtype=np.int64)
        # the bisection stops at L - (pp - 1) layers (every other stage of its layout holds one), below what a
        # stage of a shorter pipeline may hold: a stage that holds that many is bounded by L - 1 instead
        top = np.array([self.search.model.num_layers - (row[3] - 1) for row in rows])
        found = np.where(found >= top, self.search.model.num_layers - 1, found).reshape(len(keys), -1)
        level = np.floor(np.log2(np.arange(1, MAX_STAGES + 1))).astype(np.int64)  # k -> its power's column
        self.bounds.update({key: np.concatenate([[0], v[level]]) for key, v in zip(keys, found)})

    def _bisect(self, rows: list[tuple[int, int, int, int, int]], types: list[str],
                gbs: npt.NDArray[np.int64] | None = None) -> list[int]:
        """Per (recipe, dp, tp, pp, stage) row: the most layers that stage holds on its type, by bisection."""
        n_layers = self.search.model.num_layers
        lo = np.zeros(len(rows), dtype=np.int64)
        hi = np.array([n_layers - (row[3] - 1) for row in rows], dtype=np.int64)
        usable = np.array([self.search.usable_bytes(g) for g in types])
        stage = np.array([row[4] for row in rows])
        while (lo < hi).any():
            mid = (lo + hi + 1) // 2
            splits = []
            for (_, _, _, p, i), layer in zip(rows, mid):
                split = [0] * p
                split[i], split[1 if i == 0 else 0] = int(layer), n_layers - int(layer)
                splits.append(tuple(split))
            lay = self.layout(np.array([row[0] for row in rows]), np.array([row[1] for row in rows]),
                              np.array([row[2] for row in rows]), splits, gbs)
            dev = stage_device_bytes(self.search.model, self.search.training, lay, stage)
            ok = (dev >= 0) & (dev <= usable)
            lo, hi = np.where(lo < hi, np.where(ok, mid, lo), lo), np.where(lo < hi, np.where(ok, hi, mid - 1), hi)
        return [int(v) for v in lo]

    def stage_caps(self, cfg: _Config) -> list[int]:
        """Per stage: the most layers it holds on its own type (memory never falls with more layers)."""
        self.prefetch_caps([cfg])
        return [self.caps[k] for k in _cap_keys(cfg)]

    def prefetch_caps(self, cfgs: Sequence[_Config]) -> None:
        """:meth:`stage_caps` of several configurations in one bisection over all their stages."""
        todo = list(dict.fromkeys(k for cfg in cfgs for k in _cap_keys(cfg) if k not in self.caps))
        if todo:
            found = self._bisect([(k[0], k[1], k[3], k[4], k[5]) for k in todo], [k[2] for k in todo])
            self.caps.update(zip(todo, found))


def _cap_keys(cfg: _Config) -> list[tuple[int, int, str, int, int, int]]:
    p = sum(cfg.counts)
    return [(cfg.recipe, cfg.dp, g, tp, p, i) for i, (g, tp) in enumerate(zip(cfg.stage_types, cfg.stage_tps))]


def _tps(search: Search, gpu_type: str) -> list[int]:
    heads = math.gcd(search.model.num_attention_heads, search.model.num_kv_heads)
    top = search.pool.max_node_size(gpu_type)
    pinned = search.constraints.tp
    any_tp = tp_searched(search.model, search.training, search.constraints)
    return [tp for tp in range(1, top + 1) if heads % tp == 0 and (pinned is None or tp == pinned)
            and (any_tp or tp == 1)]


CHUNK_BLOCKS = 128
"""Blocks :class:`_Frontier` expands into their configurations at once (our choice: enough rows per numpy call
that its fixed cost is small, few enough that little is expanded beyond the bound that stops the search)."""

IntArray = npt.NDArray[np.int64]


def _lex_less(cols: Sequence[IntArray], upper: tuple[int, ...] | None) -> npt.NDArray[np.bool_]:
    """Per row, whether the key of columns ``cols`` is below ``upper`` lexicographically (None: every row)."""
    if upper is None:
        return np.ones(cols[0].shape, dtype=bool)
    less, equal = np.zeros(cols[0].shape, dtype=bool), np.ones(cols[0].shape, dtype=bool)
    for col, bound in zip(cols, upper):
        less |= equal & (col < bound)
        equal &= col == bound
    return less


def _key_columns(search: Search, step_us: IntArray, gpus: IntArray, price: FloatArray) -> list[IntArray]:
    """:func:`score` of every row as columns (``price`` in price units, NaN: no price)."""
    if search.objective is Objective.GPUS:
        return [gpus, step_us]
    if search.objective is Objective.COST:
        units = np.where(np.isnan(price), 0, price).astype(np.int64)
        return [np.where(np.isnan(price), 1 << 62, units * step_us), step_us, gpus]
    return [step_us, gpus]


class _Frontier:
    """The configurations of the search in the order of their bound, made as the search needs them.

    A block is one (recipe, D, ordered type pair, tp_a, tp_b); its configurations are its (s_a, s_b). Each block
    gets a lower bound on every one of its configurations' bound keys (:meth:`_block_keys`), so a block is
    expanded (its configurations bounded, :meth:`_expand`) once its bound is below the best found so far and
    not above any configuration not yet taken (a tie expands it first); configurations then come out in exactly
    the order of sorting all of them by (bound key, recipe, D, types, tps, counts), and blocks whose bound cannot
    win are never expanded."""

    def __init__(self, search: Search, recipes: LayoutArrays, tables: _Tables, upper: tuple[int, ...] | None,
                 deadline: float = math.inf) -> None:
        self.search, self.recipes, self.tables, self.deadline = search, recipes, tables, deadline
        self.stopped = False
        """Whether the time limit cut the bounding short."""
        self.size = self.next = 0
        self.keys: list[tuple[int, ...]] = []
        self.refined: list[tuple[tuple[int, ...], int]] = []
        self.heap: list[tuple[tuple[int, ...], int, int, tuple[str, str], tuple[int, int], tuple[int, int],
                              _Config]] = []
        gbs, n_layers = search.training.global_batch_size, search.model.num_layers
        assert gbs is not None
        allowed = mixable_types(search)
        top_dp = max(search.pool.free_gpus(t) for t in allowed)
        micro = [_micro_batches(gbs, int(mbs)) for mbs in recipes.micro_batch_size]
        rd = [(r, d) for r, n in enumerate(micro) for d in range(1, min(n, top_dp) + 1) if n % d == 0]
        self.pairs = [pair for pair in itertools.permutations(allowed, 2) if one_collective_library(search, pair)]
        tps = {g: _tps(search, g) for g in allowed}
        combos = [(q, x, y) for q, (ta, tb) in enumerate(self.pairs) for x in tps[ta] for y in tps[tb]
                  if search.scope is None or search.scope.stage_tp or x == y]
        if not rd or not combos or n_layers < 2:
            return
        dps = sorted({d for _, d in rd}) if tables.fp8 else [1]
        stacks: list[FloatArray] = []
        base: dict[tuple[str, int, float], int] = {}
        for ta, tb in self.pairs:
            for g in (ta, tb):
                for d in dps:
                    key = (g, d, tables.p2p((ta, tb)))
                    if time.perf_counter() > deadline:
                        self.stopped = True
                        return
                    if key not in base:
                        base[key] = sum(len(x) for x in stacks)
                        stacks.append(tables.floor_stack(g, d, key[2]))
        self.floors = np.concatenate(stacks)
        self.b_least = np.min((self.floors[:, 1:] - self.floors[:, :1]) / np.arange(1, n_layers + 1), axis=1)
        ci = np.tile(np.arange(len(combos)), len(rd))
        self.r = np.repeat(np.array([r for r, _ in rd], dtype=np.int64), len(combos))
        self.dp = np.repeat(np.array([d for _, d in rd], dtype=np.int64), len(combos))
        self.q = np.array([q for q, _, _ in combos], dtype=np.int64)[ci]
        self.tp = np.array([[x, y] for _, x, y in combos], dtype=np.int64)[ci]
        self.m = np.array(micro, dtype=np.int64)[self.r] // self.dp
        blocks = np.array([[search.pool.classes(self.pairs[q][k]).free_blocks(t) for k, t in ((0, x), (1, y))]
                           for q, x, y in combos], dtype=np.int64)
        self.stage_cap = blocks[ci] // self.dp[:, None]
        di = np.searchsorted(dps, self.dp) if tables.fp8 else np.zeros(ci.size, dtype=np.int64)
        offsets = np.array([[[base[(self.pairs[q][k], d, tables.p2p(self.pairs[q]))] + tps[self.pairs[q][k]].index(t)
                              * 2 for d in dps] for k, t in ((0, x), (1, y))] for q, x, y in combos],
                           dtype=np.int64)  # [combo, side, dp] -> row of (recipe 0, this tp, no head)
        ntp = np.array([[len(tps[self.pairs[q][0]]), len(tps[self.pairs[q][1]])] for q, _, _ in combos])[ci]
        rows = offsets[ci, :, di] + self.r[:, None] * ntp * 2
        self.ids = np.stack([rows[:, 0], rows[:, 1], rows[:, 1] + 1], axis=1)  # a's, b's, the head's table
        live = (self.stage_cap >= 1).all(axis=1)
        cols = self._block_keys()
        live &= _lex_less(cols, upper)
        order = np.flatnonzero(live)[np.lexsort([c[live] for c in reversed(cols)])]
        self.order, self.size = order, order.size
        self.keys = list(zip(*(c[order].tolist() for c in cols)))

    def _block_keys(self) -> list[IntArray]:
        """Per block, a key below every configuration's bound key: its stages within ``P_max`` = min(16, L, the
        stages its free GPUs hold) can hold L layers within tau only if one of its stage kinds holds
        ceil(L / P_max) layers within tau (each stage holds at most #{l >= 1 : g(l) <= tau} layers), so tau is
        at least the least g(ceil(L / P_max)) of the kinds; the step then as :meth:`_expand` bounds it, with
        the fewest stages' least total, GPUs and price (s_a = s_b = 1)."""
        search, n_layers = self.search, self.search.model.num_layers
        most = np.minimum(np.minimum(self.stage_cap, MAX_STAGES - 1).sum(axis=1), min(MAX_STAGES, n_layers))
        j = -(-n_layers // np.maximum(most, 1))
        tau = np.min(self.floors[self.ids, j[:, None]], axis=1)
        one = np.ones(self.r.shape, dtype=np.int64)
        step = self._step_us(tau, one, one, self.ids, self.m)
        gpus = self.dp * self.tp.sum(axis=1)
        return _key_columns(search, step, gpus, self._price(one, one, np.arange(self.r.size)))

    def _step_us(self, tau: FloatArray, sa: IntArray, sb: IntArray, ids: IntArray, m: IntArray) -> IntArray:
        """The bound on the step, in microseconds: m tau, and at least (m - 1) tau + the stages' least total
        (sum_i t_i >= sum_i t_i(0) + L min_i b_i, b: a stage's least time per layer)."""
        ga0, gb0, gh0 = (self.floors[ids[:, k], 0] for k in range(3))
        b_least = np.min(self.b_least[ids], axis=1)
        sums = sa * ga0 + (sb - 1) * gb0 + gh0 + self.search.model.num_layers * np.maximum(b_least, 0.0)
        return np.floor(((m - 1) * tau + np.maximum(sums, tau)) * TIME_STEPS_PER_S).astype(np.int64)

    def _price(self, sa: IntArray, sb: IntArray, blocks: IntArray) -> FloatArray:
        """Price units of each row of ``blocks`` at (s_a, s_b) (NaN: a type of its pair has no price)."""
        per = np.array([[np.nan if (x := self.search.specs[t].price_per_gpu_hour_usd) is None else x for t in pair]
                        for pair in self.pairs], dtype=np.float64)
        rate, dp, tp = per[self.q[blocks]], self.dp[blocks], self.tp[blocks]
        return np.asarray(np.round((rate[:, 0] * (dp * sa * tp[:, 0]) + rate[:, 1] * (dp * sb * tp[:, 1]))
                                   * PRICE_STEPS_PER_USD_HOUR), dtype=np.float64)

    def _refine(self, upper: tuple[int, ...] | None) -> None:
        """Queue the next :data:`CHUNK_BLOCKS` blocks of the first bound under a tighter one (those below
        ``upper``): a configuration's stages hold at most s_a c_a(tau) + (s_b - 1) c_b(tau) + c_h(tau) layers
        within tau (c: a kind's #{l >= 1 : g(l) <= tau}, memory left out), which over the block's (s_a, s_b) is
        largest at one of two corners, as many stages of a as the rest allows or as many of b; so tau is at
        least the lesser of the two corners' least tau."""
        n_layers = self.search.model.num_layers
        blocks = self.order[self.next:self.next + CHUNK_BLOCKS]
        self.next += blocks.size
        most = min(MAX_STAGES, n_layers)
        cap = np.minimum(self.stage_cap[blocks], MAX_STAGES - 1)
        a_first = np.minimum(cap[:, 0], most - 1)
        b_first = np.minimum(cap[:, 1], most - 1)
        sa = np.concatenate([a_first, np.minimum(cap[:, 0], most - b_first)])
        sb = np.concatenate([np.minimum(cap[:, 1], most - a_first), b_first])
        ids, m = np.tile(self.ids[blocks], (2, 1)), np.tile(self.m[blocks], 2)
        free = np.full((sa.size, 2, MAX_STAGES + 1), n_layers, dtype=np.int64)
        tau = np.minimum(*np.split(self._tau(ids, sa, sb, free, m), 2))
        one = np.ones(blocks.size, dtype=np.int64)
        cols = _key_columns(self.search, self._step_us(tau, one, one, self.ids[blocks], self.m[blocks]),
                            self.dp[blocks] * self.tp[blocks].sum(axis=1), self._price(one, one, blocks))
        win = np.flatnonzero(_lex_less(cols, upper))
        for b, key in zip(blocks[win].tolist(), zip(*(col[win].tolist() for col in cols))):
            heapq.heappush(self.refined, (key, b))

    def _expand(self, upper: tuple[int, ...] | None) -> None:
        """Bound the configurations of the next :data:`CHUNK_BLOCKS` blocks of the tighter bound (as the
        enumeration bounds them: the free GPUs, memory by in-flight micro-batches, GPU and price limits, then
        tau by bisection) and queue those whose bound key is below ``upper``."""
        search, tables, c = self.search, self.tables, self.search.constraints
        n_layers = search.model.num_layers
        taken = [heapq.heappop(self.refined) for _ in range(min(CHUNK_BLOCKS, len(self.refined)))]
        blocks = np.array([b for key, b in taken if upper is None or key < upper], dtype=np.int64)
        if not blocks.size:
            return
        cap_keys = [[(int(self.r[b]), int(self.dp[b]), self.pairs[int(self.q[b])][k], int(self.tp[b, k]))
                     for k in (0, 1)] for b in blocks]
        missing = list(dict.fromkeys(k for keys in cap_keys for k in keys if k not in tables.bounds))
        if missing:
            tables.fill_cap_bounds(missing)
        caps = np.array([[tables.bounds[k] for k in keys] for keys in cap_keys])  # [block, side, k]
        m = self.m[blocks]
        held = np.take_along_axis(caps, np.minimum(np.arange(MAX_STAGES + 1), m[:, None])[:, None, :], axis=2)
        most = np.cumsum(held, axis=2)
        sa, sb = (x.ravel() for x in np.meshgrid(np.arange(1, MAX_STAGES), np.arange(1, MAX_STAGES)))
        local = np.repeat(np.arange(blocks.size), sa.size)
        sa, sb = np.tile(sa, blocks.size), np.tile(sb, blocks.size)
        cap = self.stage_cap[blocks][local]
        keep = (sa <= cap[:, 0]) & (sb <= cap[:, 1]) & (sa + sb <= min(MAX_STAGES, n_layers))
        # memory: the stages' most layers (by their in-flight micro-batches) must reach L
        keep &= (most[local, 0, np.minimum(sa + sb, MAX_STAGES)] - most[local, 0, sb] + most[local, 1, sb]
                 >= n_layers)
        dp, tp = self.dp[blocks][local], self.tp[blocks][local]
        gpus = dp * (sa * tp[:, 0] + sb * tp[:, 1])
        if c.max_gpus:
            keep &= gpus <= c.max_gpus
        if c.num_gpus:
            keep &= gpus == c.num_gpus
        price = self._price(sa, sb, blocks[local])
        if c.max_price_per_hour_usd is not None:
            keep &= ~np.isnan(price) & (price <= c.max_price_per_hour_usd * PRICE_STEPS_PER_USD_HOUR)
        rows = np.flatnonzero(keep)
        if not rows.size:
            return
        ids = self.ids[blocks][local[rows]]
        tau = self._tau(ids, sa[rows], sb[rows], caps[local[rows]], m[local[rows]])
        step = self._step_us(tau, sa[rows], sb[rows], ids, m[local[rows]])
        cols = _key_columns(search, step, gpus[rows], price[rows])
        win = np.flatnonzero(_lex_less(cols, upper))
        for k, key in zip(rows[win].tolist(), zip(*(col[win].tolist() for col in cols))):
            b = int(blocks[local[k]])
            pk = None if np.isnan(price[k]) else int(price[k])
            cfg = _Config(int(self.r[b]), int(self.dp[b]), self.pairs[int(self.q[b])],
                          (int(self.tp[b, 0]), int(self.tp[b, 1])), (int(sa[k]), int(sb[k])), key, pk)
            heapq.heappush(self.heap, (key, cfg.recipe, cfg.dp, cfg.types, cfg.tps, cfg.counts, cfg))

    def _tau(self, ids: IntArray, sa: IntArray, sb: IntArray, caps: IntArray, m: IntArray) -> FloatArray:
        """Per configuration: the least tau within which its stages can hold L layers, each stage at most its
        memory bound (by its in-flight micro-batches) and the layers whose floor time is within tau, by
        bisection over its tables' values."""
        n_layers = self.search.model.num_layers
        floors = self.floors[ids]  # [row, kind, l]: a's, b's, the head's
        p = sa + sb
        pos = np.arange(MAX_STAGES)[None, :]
        inflight = np.clip(np.minimum(p[:, None] - pos, m[:, None]), 0, MAX_STAGES)
        cap = np.where(pos < sa[:, None], np.take_along_axis(caps[:, 0], inflight, axis=1),
                       np.where(pos < p[:, None], np.take_along_axis(caps[:, 1], inflight, axis=1), 0))
        kind = np.where(pos < sa[:, None], 0, np.where(pos < p[:, None] - 1, 1, 2))
        values = np.sort(floors[:, :, 1:].reshape(ids.shape[0], -1), axis=1)
        fresh = np.ones(values.shape, dtype=bool)
        fresh[:, 1:] = values[:, 1:] != values[:, :-1]
        count = fresh.sum(axis=1)
        values = np.take_along_axis(values, np.argsort(~fresh, axis=1, kind="stable"), axis=1)  # distinct first
        lo, hi = np.zeros(sa.size, dtype=np.int64), count - 1

        def held(tau: FloatArray) -> IntArray:
            counts = (floors[:, :, 1:] <= tau[:, None, None]).sum(axis=2)
            per_stage = np.take_along_axis(counts, kind, axis=1)
            return np.asarray(np.where(pos < p[:, None], np.minimum(per_stage, cap), 0).sum(axis=1))

        while (lo < hi).any():
            mid = (lo + hi) // 2
            ok = held(values[np.arange(sa.size), mid]) >= n_layers
            lo, hi = np.where(lo < hi, np.where(ok, lo, mid + 1), lo), np.where(lo < hi, np.where(ok, mid, hi), hi)
        return np.asarray(values[np.arange(sa.size), lo], dtype=np.float64)

    def take(self, upper: tuple[int, ...] | None, most: int) -> list[_Config]:
        """The next configurations in bound order (at most ``most``), all with a bound key below ``upper``
        (bounding blocks as needed); empty when none is left."""
        while True:
            if time.perf_counter() > self.deadline:
                self.stopped = True
                return []
            first = self.keys[self.next] if self.next < self.size else None
            tight = self.refined[0][0] if self.refined else None
            block = first if tight is None or (first is not None and first <= tight) else tight
            if self.heap and (block is None or self.heap[0][0] < block):
                out: list[_Config] = []
                while self.heap and len(out) < most and (block is None or self.heap[0][0] < block):
                    entry = heapq.heappop(self.heap)
                    if upper is not None and entry[0] >= upper:
                        self.heap.clear()
                        self.next, self.refined = self.size, []
                        break
                    out.append(entry[-1])
                return out
            if block is None or (upper is not None and block >= upper):
                return []
            if block is first:
                self._refine(upper)
            else:
                self._expand(upper)


def _micro_batches(gbs: int, mbs: int) -> int:
    return gbs // mbs if gbs % mbs == 0 else 0


SplitRule = Callable[[FloatArray, int], "tuple[tuple[int, ...], float, bool] | None"]
"""A layer-split rule: stage time tables (inf: does not fit) and micro-batches -> (split, value, optimal)."""


def _evaluate(tables: _Tables, cfg: _Config, upper: tuple[int, ...] | None, split_rule: SplitRule
              ) -> StageChoice | None:
    """The best split of one configuration, and its full key (the gradient sync after the pipeline included);
    None where it does not fit or its pipeline alone cannot beat ``upper``."""
    search = tables.search
    caps = tables.stage_caps(cfg)
    if min(caps) < 1 or sum(caps) < search.model.num_layers:
        return None
    p = sum(cfg.counts)
    rows = []
    for i, (g, tp) in enumerate(zip(cfg.stage_types, cfg.stage_tps)):
        t = tables.times(cfg.recipe, cfg.dp, g, tp, i == p - 1, tables.p2p(cfg.types)).copy()
        t[caps[i] + 1:] = np.inf
        rows.append(t)
    mbs = int(tables.recipes.micro_batch_size[cfg.recipe])
    gbs = search.training.global_batch_size
    assert gbs is not None
    m = gbs // (mbs * cfg.dp)
    found = split_rule(np.stack(rows), m)
    if found is None:
        return None
    split, pipe, optimal = found
    gpus = cfg.dp * sum(cfg.stage_tps)
    if upper is not None and score(search.objective, math.ceil(pipe * TIME_STEPS_PER_S), gpus,
                                   cfg.price_units) >= upper:
        return None
    tails = _tails(tables, cfg, split, pipe, m)
    step_us = math.ceil((float(pipeline_step_s(np.array([r[layer] for r, layer in zip(rows, split)]), m))
                         + max(tails)) * TIME_STEPS_PER_S)
    limit = search.constraints.deadline_s
    budget = search.constraints.token_budget
    if limit is not None and budget is not None and step_us > limit / math.ceil(
            budget / (gbs * search.training.seq_len)) * TIME_STEPS_PER_S:
        return None
    key = score(search.objective, step_us, gpus, cfg.price_units)
    return StageChoice(cfg.recipe, cfg.dp, cfg.stage_types, cfg.stage_tps, split, m, step_us, key, optimal,
                       _why(rows, split, caps, m))


def stage_placements(search: Search, types: Sequence[str], tps: Sequence[int], dp: int
                     ) -> list[dict[str, list[int]]]:
    """Per stage, its dp TP groups on free GPUs of its type: each type's stages placed together (roomiest nodes
    first), then cut in pipeline order, so a TP group never spans nodes."""
    out: list[dict[str, list[int]]] = [{} for _ in types]
    for g in dict.fromkeys(types):
        idx = [i for i, t in enumerate(types) if t == g]
        tp = tps[idx[0]]
        gpus = [(node, k) for node, ks in group_placement(search, g, tp, dp * len(idx), set()).items() for k in ks]
        per = dp * tp
        for n, i in enumerate(idx):
            for node, k in gpus[n * per:(n + 1) * per]:
                out[i].setdefault(node, []).append(k)
    return out


def stage_links(search: Search, gpu_type: str, placement: dict[str, list[int]]) -> Links:
    """A stage's links for its gradient sync: its own type's, the node size the fewest GPUs it has on a node
    (a ring gets that many NICs' worth there)."""
    own = search.links[gpu_type]
    return Links(min(len(v) for v in placement.values()), own.intra_node_bytes_per_s, own.inter_node_bytes_per_s)


def _tails(tables: _Tables, cfg: _Config, split: tuple[int, ...], pipe: float, m: int) -> list[float]:
    """Each stage's exposed gradient sync (on its placement's links) and optimizer step after the pipeline."""
    search = tables.search
    out = [0.0] * len(split)
    key = (cfg.stage_types, cfg.stage_tps, cfg.dp)
    if key not in tables.placements:
        tables.placements[key] = stage_placements(search, *key)
    sync = [stage_links(search, g, pl) for g, pl in zip(cfg.stage_types, tables.placements[key])]
    for g in dict.fromkeys(cfg.types):
        idx = np.array([i for i, t in enumerate(cfg.stage_types) if t == g])
        tps = np.array([cfg.stage_tps[i] for i in idx])
        lay = tables.layout(cfg.recipe, cfg.dp, tps, [split] * idx.size)
        spec, params = search.specs[g], stage_params(search, g)
        own = search.links[g]
        micro = stage_microbatch_batch(search.model, search.training, spec, lay, idx,
                                       Links(tps, own.intra_node_bytes_per_s, tables.p2p(cfg.types)),  # type: ignore[arg-type]
                                       params=params)
        per_node = np.array([sync[i].gpus_per_node for i in idx])
        dp_s, hidden, opt = stage_tail_batch(search.model, search.training, spec, lay, idx, micro,
                                             (pipe - m * micro.microbatch_s) / 2.0,
                                             Links(per_node, own.intra_node_bytes_per_s,  # type: ignore[arg-type]
                                                   own.inter_node_bytes_per_s), params=params)
        for k, i in enumerate(idx):
            out[int(i)] = float(dp_s[k] - hidden[k] + opt[k])
    return out


def _why(rows: list[FloatArray], split: tuple[int, ...], caps: list[int], m: int) -> str:
    times = [float(r[layer]) for r, layer in zip(rows, split)]
    k = int(np.argmax(times))
    full = [i for i, (layer, cap) in enumerate(zip(split, caps)) if layer == cap]
    words = (f"the split minimises sum_i t_i + (m - 1) max_i t_i at m = {m}: stage {k} is the slowest "
             f"({times[k] * 1e3:.1f} ms per micro-batch; stages {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} ms)")
    if full:
        words += "; memory caps stages " + ", ".join(f"{i} at {caps[i]} layers" for i in full)
    return words


def stage_search_skipped(search: Search) -> str | None:
    """Why :func:`stage_search` does not run for this request (None: it does), in words for the infeasibility
    message (a search that skipped itself must not read as one that found nothing)."""
    if search.scope is not None and not search.scope.stages:
        return f"the {search.scope.name} launcher does not start pipelines over GPU types"
    if search.mixed_placement is not PlacementMode.ANY:
        return f"they are searched with placement any only, not {search.mixed_placement.value}"
    if len(mixable_types(search)) < 2:
        return "fewer than two GPU types can mix"
    if search.model.moe is not None:
        return "the search does not split expert layers"
    if search.constraints.pp is not None:
        return f"pp is pinned to {search.constraints.pp}"
    if not isinstance(search.estimator, AnalyticEstimator):
        return "the search reads the analytic estimator's per-stage tables, and another estimator was given"
    return None


def stage_search(search: Search, deadline: float, incumbent: tuple[int, ...] | None = None,
                 split_rule: SplitRule = best_split) -> tuple[LayoutArrays, StageChoice | None, list[str]]:
    """The best form (a) pipeline that beats ``incumbent`` (the best plan's key so far, in the mixed search's
    units), the recipes it indexes, and notes on what the search left out. Only placement ``any`` (for mixed
    plans: a launcher's rule is for single-type ones), no launcher or one that launches such pipelines
    (``LaunchScope.stages``; one tp on every stage where its ``stage_tp`` says so), no experts; configurations
    are taken best bound first until none can win or time runs out."""
    notes: list[str] = []
    if stage_search_skipped(search) is not None:
        return LayoutArrays.from_configs(search.training, ParallelConfig()).take(np.zeros(0, dtype=np.int64)), \
            None, notes
    if search.training.offloads:  # as the replica mix: neither search checks host memory per node yet
        notes.append("the pipeline-stage search does not check host memory yet, so it is not run for a recipe "
                     "that offloads")
        return LayoutArrays.from_configs(search.training, ParallelConfig()).take(np.zeros(0, dtype=np.int64)), \
            None, notes
    recipes = _recipes(search)
    if not len(recipes):
        return recipes, None, notes
    tables = _Tables(search, recipes)
    best: StageChoice | None = None
    frontier = _Frontier(search, recipes, tables, incumbent, deadline)
    proved = True
    while True:
        batch = frontier.take(best.key if best is not None else incumbent, 32)
        if frontier.stopped or (batch and time.perf_counter() > deadline):
            notes.append("the pipeline-stage search stopped at the time limit")
            proved = False
            break
        if not batch:
            break
        tables.prefetch_caps(batch)
        for cfg in batch:
            upper = best.key if best is not None else incumbent
            if upper is not None and cfg.bound_key >= upper:
                break
            if time.perf_counter() > deadline:
                break
            choice = _evaluate(tables, cfg, upper, split_rule)
            if choice is not None and (upper is None or choice.key < upper):
                best = choice
    if best is not None and not proved:
        best = dataclasses.replace(best, optimal=False)
    return recipes, best, notes
