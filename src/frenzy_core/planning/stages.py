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
from frenzy_core.planning.request import PlacementMode
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


def _minplus(f: FloatArray, c: FloatArray) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """new[w, s] = min_l f[w, s - l] + c[w, l], and the minimising l (rows w: candidate bounds)."""
    n = f.shape[1]
    s = np.arange(n)[:, None] - np.arange(n)[None, :]  # [s, l] -> s - l
    gathered = np.where(s >= 0, f[:, np.clip(s, 0, None)], np.inf) + c[:, None, :]
    arg = np.argmin(gathered, axis=2)
    return np.take_along_axis(gathered, arg[..., None], axis=2)[..., 0], arg


def _min_sums(t: FloatArray, taus: FloatArray) -> FloatArray:
    """Per bound tau: the least sum_i t_i(l_i) over splits with every t_i(l_i) <= tau (inf: none)."""
    n_layers = t.shape[1] - 1
    f = np.full((taus.size, n_layers + 1), np.inf)
    f[:, 0] = 0.0
    for row in t:
        f, _ = _minplus(f, np.where(row[None, :] <= taus[:, None], row[None, :], np.inf))
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
    lo, hi = 0, values.size - 1  # least feasible tau by bisection (feasibility grows with tau)
    while lo < hi:
        mid = (lo + hi) // 2
        if math.isfinite(float(_min_sums(t, values[mid:mid + 1])[0])):
            hi = mid
        else:
            lo = mid + 1
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
        lay = lay.take(np.flatnonzero(search.scope.allows(lay)))
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
        self.floors: dict[tuple[int, int, str, int, bool, float], FloatArray] = {}

    def layout(self, r: npt.ArrayLike, dp: npt.ArrayLike, tp: npt.ArrayLike, splits: Sequence[tuple[int, ...]],
               gbs: npt.ArrayLike | None = None) -> LayoutArrays:
        """Rows of recipes ``r`` at (dp, tp) with pp = len(split) and each split (the request's global batch
        unless ``gbs``)."""
        n = len(splits)
        ri = np.broadcast_to(np.asarray(r, dtype=np.int64), (n,))
        tpa = np.broadcast_to(np.asarray(tp, dtype=np.int64), (n,))
        cols = {k: getattr(self.recipes, k)[ri] for k in _RECIPE}
        at_tp = (tpa > 1).astype(np.int64)
        cols["sequence_parallel"] = at_tp if self.sp_with_tp else cols["sequence_parallel"] & at_tp
        gbs = self.search.training.global_batch_size if gbs is None else gbs
        assert gbs is not None
        table: dict[tuple[int, ...], int] = {EVEN_SPLIT: 0}
        codes = np.array([table.setdefault(sp, len(table)) for sp in splits], dtype=np.int64)
        lay = LayoutArrays.from_columns({**cols, "dp": dp, "tp": tpa, "pp": np.array([len(s) for s in splits]),
                                         "global_batch_size": gbs}, self.search.training)
        return dataclasses.replace(lay, stage_split=codes, splits=tuple(table))

    def p2p(self, types: Sequence[str]) -> float:
        """The slowest link between the pipeline's types (they share no fast fabric): their slowest NICs."""
        return min(self.search.links[t].inter_node_bytes_per_s for t in types)

    def links(self, gpu_type: str, tp: int, p2p: float | None) -> Links:
        """A stage's links: its own type's, with ``p2p`` as the inter-node link for its sends (None: its own
        NICs, for its gradient sync)."""
        own = self.search.links[gpu_type]
        return Links(tp, own.intra_node_bytes_per_s, own.inter_node_bytes_per_s if p2p is None else p2p)

    def times(self, r: int, dp: int, gpu_type: str, tp: int, head: bool, p2p: float) -> FloatArray:
        """A stage's micro-batch seconds at 0..L layers."""
        key = (gpu_type, dp if self.fp8 else 1, p2p)
        if key not in self.cache:
            self.cache[key] = self._all_times(gpu_type, key[1], p2p)
        return self.cache[key][(r, tp, head)]

    def floor_times(self, r: int, dp: int, gpu_type: str, tp: int, head: bool, p2p: float) -> FloatArray:
        """g(l) = min over l' >= l of t(l'): the least time of a stage holding l layers or more
        (nondecreasing, so the layers a stage can hold within tau are at most #{l >= 1 : g(l) <= tau})."""
        key = (r, dp, gpu_type, tp, head, p2p)
        if key not in self.floors:
            self.floors[key] = np.minimum.accumulate(self.times(*key)[::-1])[::-1]
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
        splits = [(n_layers - int(layer), int(layer)) if h else (int(layer), n_layers - int(layer))
                  for layer, h in zip(ls, heads)]
        lay = self.layout(rs, dp, tps, splits)
        own = search.links[gpu_type]
        links = Links(tps, own.intra_node_bytes_per_s, p2p)  # type: ignore[arg-type]
        micro = stage_microbatch_batch(search.model, search.training, search.specs[gpu_type], lay,
                                       heads.astype(np.int64), links, params=stage_params(search, gpu_type))
        t = np.asarray(micro.microbatch_s, dtype=np.float64).reshape(len(combos), layers.size)
        return {c: t[k] for k, c in enumerate(combos)}

    def cap_bounds(self, r: int, dp: int, gpu_type: str, tp: int) -> npt.NDArray[np.int64]:
        """Per k = 0 .. MAX_STAGES: at least the layers a stage of recipe ``r`` at (dp, tp) holding k in-flight
        micro-batches (1F1B: min(P - i, m)) holds on ``gpu_type``: a middle stage (no embedding, no head: memory
        never falls with them) at the largest power of two k' <= k (memory never falls with more in-flight
        micro-batches); k = 1 at one micro-batch per step, which never needs more. Entry 0 is 0."""
        return self.bounds[(r, dp, gpu_type, tp)]

    def fill_cap_bounds(self, keys: list[tuple[int, int, str, int]]) -> None:
        """:meth:`cap_bounds` of every (recipe, dp, type, tp) of ``keys`` in one bisection (added to those known)."""
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
        found = np.array(self._bisect(rows, types, np.array(gbs)), dtype=np.int64).reshape(len(keys), -1)
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


def _enumerate(search: Search, recipes: LayoutArrays, tables: _Tables, deadline: float) -> list[_Config] | None:
    """Every configuration the free GPUs and limits allow, with a lower bound on its key, best bound first: the
    slowest stage takes at least tau = (L + sum_i t_i(0) / b_i) / sum_i 1 / b_i (b_i: the stage's least time
    per layer; below tau the layers cannot sum to L) and at least any stage's least time, and the step at least
    m tau (the gradient sync after it is not bounded below)."""
    c, gbs, n_layers = search.constraints, search.training.global_batch_size, search.model.num_layers
    assert gbs is not None
    allowed = mixable_types(search)
    top_dp = max(search.pool.free_gpus(t) for t in allowed)
    dps = {r: [d for d in range(1, min(n, top_dp) + 1) if n % d == 0]
           for r in range(len(recipes)) for n in [_micro_batches(gbs, int(recipes.micro_batch_size[r]))]}
    sa, sb = (x.ravel() for x in np.meshgrid(np.arange(1, MAX_STAGES), np.arange(1, MAX_STAGES)))
    out = []
    for r in range(len(recipes)):
        if time.perf_counter() > deadline:  # the memory caps are a bisection per recipe: bounded by the deadline too
            return None
        tables.fill_cap_bounds([(r, d, g, tp) for d in dps[r] for g in allowed for tp in _tps(search, g)])
        n = _micro_batches(gbs, int(recipes.micro_batch_size[r]))
        for dp in dps[r]:
            for (ta, tb), tpa, tpb in ((pair, x, y) for pair in itertools.permutations(allowed, 2)
                                       if one_collective_library(search, pair)
                                       for x in _tps(search, pair[0]) for y in _tps(search, pair[1])
                                       if search.scope is None or search.scope.stage_tp or x == y):
                # per pair of types: checked per recipe, a 10 s call ran 23 s at 1,024 GPUs of 6 types and 51 s at
                # 16,384 of 8, per (recipe, D) 12-14 s (benchmarks/planner.py, on the loaded 2-core machine)
                if time.perf_counter() > deadline:
                    return None
                cap_a = int(search.pool.classes(ta).free_blocks(tpa)) // dp
                cap_b = int(search.pool.classes(tb).free_blocks(tpb)) // dp
                m = n // dp
                ka = np.cumsum(tables.cap_bounds(r, dp, ta, tpa)[np.minimum(np.arange(MAX_STAGES + 1), m)])
                kb = np.cumsum(tables.cap_bounds(r, dp, tb, tpb)[np.minimum(np.arange(MAX_STAGES + 1), m)])
                keep = (sa <= cap_a) & (sb <= cap_b) & (sa + sb <= min(MAX_STAGES, n_layers))
                # memory: the stages' most layers (by their in-flight micro-batches) must reach L
                keep &= ka[np.minimum(sa + sb, MAX_STAGES)] - ka[sb] + kb[sb] >= n_layers
                if not keep.any():
                    continue
                p2p = tables.p2p((ta, tb))
                ga, gb, gh = (tables.floor_times(r, dp, g, tp, h, p2p) for g, tp, h in (
                    (ta, tpa, False), (tb, tpb, False), (tb, tpb, True)))
                gpus = dp * (sa * tpa + sb * tpb)
                keep &= (gpus <= (c.max_gpus or gpus.max())) & ((gpus == c.num_gpus) if c.num_gpus else True)
                price = _price(search, (ta, tb), dp * sa * tpa, dp * sb * tpb)
                if c.max_price_per_hour_usd is not None:
                    keep &= (price is not None) and price <= c.max_price_per_hour_usd * PRICE_STEPS_PER_USD_HOUR
                rows = np.flatnonzero(keep)
                tau = _tau_bound(ga, gb, gh, sa[rows], sb[rows], tables.cap_bounds(r, dp, ta, tpa),
                                 tables.cap_bounds(r, dp, tb, tpb), m)
                bound = np.zeros(sa.shape, dtype=np.int64)
                # sum_i t_i >= sum_i t_i(0) + L min_i b_i (b: a stage's least time per layer), max_i t_i >= tau
                b_least = min(float(np.min((g[1:] - g[0]) / np.arange(1, g.size))) for g in (ga, gb, gh))
                sums = sa[rows] * ga[0] + (sb[rows] - 1) * gb[0] + gh[0] + n_layers * max(b_least, 0.0)
                bound[rows] = np.floor(((m - 1) * tau + np.maximum(sums, tau)) * TIME_STEPS_PER_S).astype(np.int64)
                for k in np.flatnonzero(keep):
                    pk = None if price is None else int(np.asarray(price).ravel()[k] if np.ndim(price) else price)
                    out.append(_Config(r, dp, (ta, tb), (tpa, tpb), (int(sa[k]), int(sb[k])),
                                       score(search.objective, int(bound[k]), int(gpus[k]), pk), pk))
    return sorted(out, key=lambda x: (x.bound_key, x.recipe, x.dp, x.types, x.tps, x.counts))


def _tau_bound(ga: FloatArray, gb: FloatArray, gh: FloatArray, sa: npt.NDArray[np.int64],
               sb: npt.NDArray[np.int64], caps_a: npt.NDArray[np.int64], caps_b: npt.NDArray[np.int64], m: int
               ) -> FloatArray:
    """Per (s_a, s_b): the least tau within which the stages can hold L layers, each stage at most its memory
    bound (by its in-flight micro-batches) and the layers whose floor time is within tau, by bisection over
    the tables' values."""
    n_layers = ga.size - 1
    p = sa + sb
    pos = np.arange(MAX_STAGES)[None, :]
    inflight = np.minimum(p[:, None] - pos, m)
    cap = np.where(pos < sa[:, None], caps_a[np.clip(inflight, 0, MAX_STAGES)],
                   np.where(pos < p[:, None], caps_b[np.clip(inflight, 0, MAX_STAGES)], 0))
    kind = np.where(pos < sa[:, None], 0, np.where(pos < p[:, None] - 1, 1, 2))
    values = np.unique(np.concatenate([ga[1:], gb[1:], gh[1:]]))
    lo = np.zeros(sa.size, dtype=np.int64)
    hi = np.full(sa.size, values.size - 1, dtype=np.int64)

    def held(tau: FloatArray) -> npt.NDArray[np.int64]:
        counts = np.stack([np.searchsorted(g[1:], tau, side="right") for g in (ga, gb, gh)], axis=1)
        per_stage = np.take_along_axis(counts, kind, axis=1)
        return np.asarray(np.where(pos < p[:, None], np.minimum(per_stage, cap), 0).sum(axis=1))

    while (lo < hi).any():
        mid = (lo + hi) // 2
        ok = held(values[mid]) >= n_layers
        lo, hi = np.where(lo < hi, np.where(ok, lo, mid + 1), lo), np.where(lo < hi, np.where(ok, mid, hi), hi)
    return np.asarray(values[lo], dtype=np.float64)


def _micro_batches(gbs: int, mbs: int) -> int:
    return gbs // mbs if gbs % mbs == 0 else 0


def _price(search: Search, types: tuple[str, str], gpus_a: npt.NDArray[np.int64], gpus_b: npt.NDArray[np.int64]
           ) -> npt.NDArray[np.int64] | None:
    per = [search.specs[t].price_per_gpu_hour_usd for t in types]
    if per[0] is None or per[1] is None:
        return None
    return np.round((per[0] * gpus_a + per[1] * gpus_b) * PRICE_STEPS_PER_USD_HOUR).astype(np.int64)


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
    sync = [stage_links(search, g, pl) for g, pl in zip(cfg.stage_types, stage_placements(
        search, cfg.stage_types, cfg.stage_tps, cfg.dp))]
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
    configs = _enumerate(search, recipes, tables, deadline)
    if configs is None:
        notes.append("the pipeline-stage search stopped at the time limit before it had bounded every layout")
        return recipes, None, notes
    proved = True
    for n, cfg in enumerate(configs):
        if n % 32 == 0:
            tables.prefetch_caps(configs[n:n + 32])
        upper = best.key if best is not None else incumbent
        if upper is not None and cfg.bound_key >= upper:
            break
        if time.perf_counter() > deadline:
            notes.append("the pipeline-stage search stopped at the time limit")
            proved = False
            break
        choice = _evaluate(tables, cfg, upper, split_rule)
        if choice is not None and (upper is None or choice.key < upper):
            best = choice
    if best is not None and not proved:
        best = dataclasses.replace(best, optimal=False)
    return recipes, best, notes
