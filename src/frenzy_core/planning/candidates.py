"""Candidate layouts: enumerate the search space, estimate it in batch, keep what fits, rank by the objective.

A candidate is a (layout, GPU type) pair: parallel degrees plus the searched training fields on one GPU type.
The table is shared by every solver, so CP-SAT and the exhaustive reference see exactly the same data.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core._distinct import distinct
from frenzy_core.config.arrays import LAYOUT_COLUMNS, LayoutArrays
from frenzy_core.config.layout import layout_mask
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.config.training import Framework, Precision, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec, Links, usable_bytes
from frenzy_core.memory.kernel import torch_sp_covered
from frenzy_core.planning.estimators import LayoutEstimator, TypeTimes, iteration_times
from frenzy_core.planning.launchers import LaunchScope
from frenzy_core.planning.nodes import Locality, NodePool
from frenzy_core.planning.request import DEFAULT_MICRO_BATCH_SIZES, Objective, PlacementMode, PlanConstraints
from frenzy_core.planning.shapes import placement_shapes, shape_links

__all__ = [
    "BATCH_ADJUST_TOLERANCE",
    "KEY_STEPS_PER_DOUBLING",
    "LONG_CONTEXT_TOKENS",
    "NO_PRICE_KEY",
    "CandidateTable",
    "TypeReport",
    "adjusted_batch",
    "build_candidates",
    "dense_rank",
    "divisors_up_to",
    "enumerate_layouts",
    "enumerate_rows",
    "log_key",
    "placed_links",
    "row_links",
    "sp_with_tp",
    "tp_searched",
]

LONG_CONTEXT_TOKENS = 16384
"""Sequence length from which context parallelism is searched (Megatron-Core's CP targets long contexts;
below this the attention share is small and cp only adds communication: our threshold)."""

NO_PRICE_KEY = 1 << 40
"""Tie-break money key of a GPU type without a price: after every priced one (a log key of any float is below
2^27, see :data:`KEY_STEPS_PER_DOUBLING`)."""

KEY_STEPS_PER_DOUBLING = 1 << 16
"""Objective keys of real quantities are ``round(log2(x) * KEY_STEPS_PER_DOUBLING)``: int64 for every positive
float (|log2| < 1100), so no token budget or price overflows them, and values within 2^-16 of a doubling
(about 0.001 %) tie, to be decided by the next key."""

BATCH_ADJUST_TOLERANCE = 0.05
"""Most a default global batch may move (as a fraction) to split into whole, equal micro-batches per
data-parallel rank; a pinned batch never moves (our choice: the batch is a training hyperparameter, and a few
percent leave its optimisation behaviour unchanged in the critical-batch analysis of McCandlish et al. 2018)."""


def divisors_up_to(n: int, limit: int) -> list[int]:
    """Divisors of ``n`` not above ``limit``, ascending; O(limit), so a huge ``n`` costs no more than a small
    one (the search never needs a divisor beyond its GPU count)."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _divisors(n: int) -> list[int]:
    return divisors_up_to(n, n)


def adjusted_batch(batch: int, per_step: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The multiple of ``per_step`` (micro-batch x dp) nearest ``batch``, halves up, at least one."""
    k = np.maximum((2 * batch + per_step) // (2 * per_step), 1)
    return np.asarray(k * per_step, dtype=np.int64)


def _product(axes: list[list[int]]) -> np.ndarray:
    """The cartesian product of integer axes, one row per combination (last axis fastest)."""
    grids = np.meshgrid(*[np.asarray(a, dtype=np.int64) for a in axes], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def enumerate_layouts(model: ModelConfig, training: TrainingConfig, constraints: PlanConstraints, *,
                      max_world: int, max_tp: int, adjustable_batch: bool = False) -> LayoutArrays:
    """Every layout of at most ``max_world`` GPUs the model and recipe allow (:func:`layout_mask`) and the search
    covers, in canonical order, each splitting its global batch into whole, equal micro-batches per rank
    (:func:`enumerate_rows` without uneven splits)."""
    return enumerate_rows(model, training, constraints, max_world=max_world, max_tp=max_tp,
                          adjustable_batch=adjustable_batch)[0]


def tp_searched(model: ModelConfig, training: TrainingConfig, constraints: PlanConstraints) -> bool:
    """Whether tensor parallelism (tp > 1) is searched: for framework 'megatron' always; for torch only where its
    sequence parallelism is modelled for the model and not pinned off, since the memory model refuses torch tp > 1
    without it (``kernel.TORCH_TP_REFUSAL``)."""
    return training.framework is not Framework.TORCH or (torch_sp_covered(model)
                                                          and constraints.sequence_parallel is not False)


def sp_with_tp(model: ModelConfig, training: TrainingConfig, constraints: PlanConstraints) -> bool:
    """Whether tensor parallelism is searched only with sequence parallelism: torch, sequence parallelism unpinned
    and modelled for the model, as torchtitan's apply_tp always runs it; the eager terms of torch tp > 1 without it
    match no launcher's plan (Transformers' tp_plan keeps the embedding whole and gathers the logits:
    docs/memory-model.md, torch sequence parallelism, open items)."""
    return (training.framework is Framework.TORCH and constraints.sequence_parallel is None
            and torch_sp_covered(model))


def enumerate_rows(model: ModelConfig, training: TrainingConfig, constraints: PlanConstraints, *,
                   max_world: int, max_tp: int, adjustable_batch: bool = False, uneven: bool = False
                   ) -> tuple[LayoutArrays, npt.NDArray[np.int64]]:
    """The layouts the search covers and the samples each trains per step.

    The data-parallel degree is any integer that splits the global batch into whole micro-batches per rank: a
    divisor of it when it is pinned; when ``adjustable_batch`` (the request's default batch) any degree up to the
    batch, the batch moved to the nearest multiple of micro-batch x dp within :data:`BATCH_ADJUST_TOLERANCE`.
    With ``uneven`` (torch runtimes and launchers that pass each rank its own count) also any dp up to the
    M = batch / micro-batch micro-batches, M mod dp ranks running one micro-batch more than the others: such a
    row's global batch is the slowest rank's view (ceil(M / dp) micro-batches on every rank, what memory and
    time are estimated with) while its samples are the batch itself; unless ``num_gpus`` fixes the count, only
    the fewest ranks that run a given ceil(M / dp) (more ranks run the same micro-batches per step on more GPUs,
    their gradient ring a little slower; they shard ZeRO states over more ranks, which this policy forgoes).
    Canonical order (the last tie-break
    everywhere): fewer GPUs, smaller tp, pp, vpp, cp, ep, lighter recompute, lower ZeRO stage, no distributed
    optimizer, no sequence parallelism, larger micro-batch.
    """
    c = constraints
    megatron = training.framework is Framework.MEGATRON
    heads = math.gcd(model.num_attention_heads, model.num_kv_heads)
    any_tp = tp_searched(model, training, c)
    tps = [t for t in _divisors(heads) if t <= max_tp and (c.tp is None or t == c.tp) and (any_tp or t == 1)]
    pps = [p for p in _divisors(model.num_layers) if p <= max_world and (c.pp is None or p == c.pp)]
    vpps = [1, 2] if megatron else [1]
    cps = [1]
    if megatron and training.seq_len >= LONG_CONTEXT_TOKENS:
        cps += [k for k in (2, 4, 8) if training.seq_len % (2 * k) == 0]
    eps = _divisors(model.moe.num_experts) if model.moe is not None else [1]
    gbs = training.global_batch_size
    assert gbs is not None, "the search sets a global batch (the request's or the default)"
    mbss = sorted(set(c.micro_batch_sizes or DEFAULT_MICRO_BATCH_SIZES))
    if adjustable_batch:
        dps = list(range(1, min(gbs, max_world) + 1))
    elif uneven:
        dps = _uneven_degrees(gbs, mbss, max_world, every=c.num_gpus is not None)
    else:
        dps = divisors_up_to(gbs, max_world)
    recomputes = [r.code for r in (c.recompute or list(Recompute))]
    zeros = sorted(set(c.zero_stages if c.zero_stages is not None else ([0] if megatron else [0, 1, 2, 3])))
    dist_opts = [int(c.distributed_optimizer)] if c.distributed_optimizer is not None else ([0, 1] if megatron
                                                                                           else [0])
    sps = [int(c.sequence_parallel)] if c.sequence_parallel is not None else (
        [0, 1] if megatron or torch_sp_covered(model) else [0])

    structure = [tps, pps, vpps, cps, eps, dps]
    recipe = [recomputes, zeros, dist_opts, sps]
    if any(not a for a in structure + recipe + [mbss]):
        empty = np.zeros((0, len(structure + recipe) + 1), dtype=np.int64)
        return _layouts(empty, training, np.zeros(0, np.int64)), np.zeros(0, np.int64)
    # parallel degrees first (few combinations survive), then the micro-batch sizes that split the batch over
    # them, then crossed with the other recipe choices (which the split does not read)
    grid = _product(structure)
    tp, pp, vpp, cp, ep, dp = grid.T
    world = dp * tp * pp * cp
    keep = (world <= max_world) if c.num_gpus is None else (world == c.num_gpus)
    # search policy: every stage gets the same number of layers (pp divides them; with vpp, every chunk too)
    keep &= (vpp == 1) | ((pp > 1) & (model.num_layers % np.maximum(pp * vpp, 1) == 0))
    grid, batch, trained = _batch_rows(_cross(grid[keep], [mbss]), gbs, adjustable_batch, uneven,
                                       every=c.num_gpus is not None)
    grid, per_row = _cross(grid, recipe), math.prod(len(a) for a in recipe)
    batch, trained = np.repeat(batch, per_row), np.repeat(trained, per_row)
    sp, tp, zero = grid[:, 10], grid[:, 0], grid[:, 8]
    # search policy: sequence parallelism only where it has an effect; ranks with k + 1 and k micro-batches
    # (trained != batch) must issue the same collectives, not so for ZeRO-3's gather per micro-batch
    # (:func:`_batch_rows` leaves out expert parallelism alike)
    keep = ((sp == 0) | (tp > 1)) & ((trained == batch) | (zero != 3))
    if sp_with_tp(model, training, c):
        keep &= (tp == 1) | (sp == 1)
    grid, batch, trained = grid[keep], batch[keep], trained[keep]
    layouts = _layouts(grid, training, batch)
    ok = layout_mask(model, layouts)
    layouts, trained = layouts.take(ok), trained[ok]
    order = np.lexsort((trained != gbs, -layouts.micro_batch_size, layouts.sequence_parallel,
                        layouts.distributed_optimizer, layouts.zero_stage, layouts.recompute, layouts.ep,
                        layouts.cp, layouts.vpp, layouts.pp, layouts.tp, layouts.world_size))
    return layouts.take(order), trained[order]


def _cross(grid: np.ndarray, axes: list[list[int]]) -> np.ndarray:
    """Every row of ``grid`` with every combination of ``axes`` appended (the combinations fastest)."""
    choices = _product(axes)
    return np.concatenate([np.repeat(grid, len(choices), axis=0), np.tile(choices, (len(grid), 1))], axis=1)


def _batch_rows(grid: np.ndarray, gbs: int, adjustable: bool, uneven: bool, *, every: bool
                ) -> tuple[np.ndarray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The rows of ``grid`` (ep column 4, dp column 5, micro-batch column 6) that split the batch ``gbs`` into
    whole micro-batches per rank, with each row's global batch (moved where ``adjustable``; the slowest rank's
    view for an uneven split) and the samples it trains; ``every``: every uneven degree, else the fewest ranks
    per count (:func:`enumerate_rows`, which also leaves ZeRO-3 out of uneven rows)."""
    dp, mbs = grid[:, 5], grid[:, 6]
    even = adjusted_batch(gbs, mbs * dp) if adjustable else np.full_like(dp, gbs)
    kept = np.abs(even - gbs) <= BATCH_ADJUST_TOLERANCE * gbs if adjustable else gbs % (mbs * dp) == 0
    grids, batches, samples = [grid[kept]], [even[kept]], [even[kept]]
    if uneven:
        m = gbs // mbs
        padded = -(-m // np.maximum(dp, 1)) * mbs * dp
        odd = (gbs % mbs == 0) & (dp <= m) & (m % np.maximum(dp, 1) != 0)
        odd &= ~(kept & (even == padded))  # a moved batch as slow per step and larger trains more per second
        # ranks with k + 1 and k micro-batches must issue the same collectives: not so for expert parallelism
        # (an all-to-all per micro-batch among data-parallel ranks) nor ZeRO-3 (a gather per micro-batch, left
        # out by the caller), whose ranks would wait on each other forever; the replica mix leaves them out
        # alike (mixed._replica_layouts)
        odd &= grid[:, 4] == 1
        if not every:  # search policy: the fewest ranks that run ceil(M / dp) micro-batches each
            per_rank = padded // np.maximum(mbs * dp, 1)
            odd &= dp == -(-m // np.maximum(per_rank, 1))
        grids.append(grid[odd])
        batches.append(padded[odd])
        samples.append(np.full(int(odd.sum()), gbs, dtype=np.int64))
    return (np.concatenate(grids), np.concatenate(batches).astype(np.int64),
            np.concatenate(samples).astype(np.int64))


def _uneven_degrees(batch: int, micro_batch_sizes: list[int], max_world: int, *, every: bool) -> list[int]:
    """Data-parallel degrees up to ``max_world`` that split a pinned ``batch`` into whole micro-batches of one of
    ``micro_batch_sizes`` per rank, evenly or not: with ``every``, any degree up to the micro-batches; else the
    even ones and the fewest ranks that run a given ceil(M / dp) (O(sqrt(M)) of them, the search policy of
    :func:`enumerate_rows`)."""
    dp = np.arange(1, min(batch, max_world) + 1, dtype=np.int64)
    keep = np.zeros(dp.shape, dtype=bool)
    for mbs in micro_batch_sizes:
        if batch % mbs:
            continue
        m = batch // mbs
        fewest = dp == -(-m // -(-m // dp))
        keep |= (dp <= m) & ((m % dp == 0) | every | fewest)
    return [int(d) for d in dp[keep]]


def _layouts(grid: np.ndarray, training: TrainingConfig, gbs: np.ndarray) -> LayoutArrays:
    """Rows (tp, pp, vpp, cp, ep, dp, micro-batch, recompute, ZeRO, distributed optimizer, sequence parallel) as
    layouts with ``training``'s sequence length and recompute chunk and the global batch ``gbs`` per row."""
    tp, pp, vpp, cp, ep, dp, mbs, rc, zero, dopt, sp = grid.T
    schedule = np.where(vpp > 1, PipelineSchedule.INTERLEAVED.code, PipelineSchedule.ONE_F_ONE_B.code)
    columns = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "dp": dp, "micro_batch_size": mbs,
               "global_batch_size": gbs, "seq_len": np.full_like(dp, training.seq_len), "zero_stage": zero,
               "distributed_optimizer": dopt, "recompute": rc,
               "recompute_num_layers": np.full_like(dp, training.recompute_num_layers or 0),
               "sequence_parallel": sp, "schedule": schedule}
    arrays: dict[str, Any] = {k: np.ascontiguousarray(columns[k], dtype=np.int64) for k in LAYOUT_COLUMNS
                              if k in columns}
    return LayoutArrays(**arrays)


@dataclass(frozen=True)
class TypeReport:
    """What the search found for one GPU type; explains why it lost or was never an option."""

    gpu_type: str
    allowed: bool
    total_gpus: int
    free_gpus: int
    max_free_in_node: int
    usable_bytes: int
    price_per_gpu_hour_usd: float | None
    min_device_bytes: int | None
    """Least memory any layout (up to all GPUs of the type) needs; None when no layout was enumerated."""
    min_world_fit: int | None
    """Fewest GPUs of any layout that fits this type's memory (free or not)."""
    n_fit_free: int
    """Candidates that fit memory and the free GPU count."""
    n_within_limits: int
    """Of those, candidates that also meet price, deadline and objective requirements."""
    limit_reasons: tuple[str, ...]
    """Which limits removed the rest (when n_within_limits is 0)."""
    host_blocked: int = 0
    """Candidates that fit memory and the free GPU count and could be placed but for the nodes' host memory."""
    min_host_bytes: int = 0
    """Least host memory per rank among those (offload)."""
    refused: bool = False
    """Whether the launcher cannot run the recipe on this type, or the type cannot run it (its dtype has no peak
    there): no candidate of it is kept, whatever fits."""


@dataclass(frozen=True)
class CandidateTable:
    """Candidates that fit memory, free GPU counts and the request's limits, ranked for one objective.

    ``rank`` is the dense rank of the integer-scaled objective key (0 best); ``order`` the canonical position,
    unique per candidate. ``level`` and ``per_node`` say where each candidate can be placed
    (:mod:`frenzy_core.planning.shapes`); its time is the time of such a placement, which the solvers then find.
    """

    objective: Objective
    placement: PlacementMode
    gpu_types: tuple[str, ...]
    layouts: LayoutArrays
    """Every enumerated layout (type-independent)."""
    device_bytes: np.ndarray
    """Per layout."""
    layout: np.ndarray
    """Per candidate: index into ``layouts``."""
    gpu: np.ndarray
    """Per candidate: index into ``gpu_types``."""
    world: np.ndarray
    tp: np.ndarray
    iteration_s: np.ndarray
    tokens_per_s: np.ndarray
    price_per_hour_usd: np.ndarray
    """All GPUs of the candidate together; NaN without a price."""
    value: np.ndarray
    """Objective value in its unit: tokens/s, USD (per token without a budget), seconds or GPUs."""
    level: np.ndarray
    """Per candidate: the :class:`Locality` its placement is searched at; -1 when it cannot be placed."""
    per_node: np.ndarray
    """Per candidate: GPUs every node it touches gets at least (``any``) or exactly (``even``, ``whole_nodes``)."""
    rank: np.ndarray
    order: np.ndarray
    reports: tuple[TypeReport, ...]
    host_bytes: np.ndarray
    """Per layout: host memory one rank keeps (offload), which the ranks on a node share."""
    pools: tuple[NodePool, ...]
    """The pools candidates are placed in: the request's first, then host-capped ones (:meth:`NodePool.host_capped`)."""
    pool: np.ndarray
    """Per candidate: index into ``pools`` (0: the request's pool, every free GPU usable)."""
    uneven: bool
    """Whether data-parallel ranks that differ by one micro-batch were searched."""
    samples: np.ndarray
    """Per layout: sequences it trains per step, its global batch unless its data-parallel ranks differ by one
    micro-batch (then the request's batch, the layout's global batch being the slowest rank's view)."""

    def __len__(self) -> int:
        return int(self.layout.shape[0])

    @functools.cached_property
    def by_score(self) -> npt.NDArray[np.intp]:
        """Every candidate row, best first: by (rank, order); read-only, computed on first use."""
        rows = np.lexsort((self.order, self.rank))
        rows.setflags(write=False)
        return rows

    @functools.cached_property
    def options(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Rows representing each (type, tp, world, pool) option, sorted by (rank, order), and whether each can be
        placed (its shape: :mod:`frenzy_core.planning.shapes`); read-only, computed on first use."""
        if len(self) == 0:
            rows, placeable = np.zeros(0, np.int64), np.zeros(0, bool)
        else:
            by_score = self.by_score
            group = distinct(self.gpu, self.tp, self.world, self.pool)[1][by_score]
            first = np.zeros(len(by_score), dtype=bool)
            _, where = np.unique(group, return_index=True)  # first occurrence in score order = best of its group
            first[where] = True
            rows = by_score[first]
            placeable = self.level[rows] >= 0
        rows.setflags(write=False)
        placeable.setflags(write=False)
        return rows, placeable

    def pool_of(self, row: int, pool: NodePool) -> NodePool:
        """Where candidate ``row`` may be placed: ``pool`` (the request's), or the host-capped copy of it whose
        nodes keep only the GPUs their host memory holds ranks for."""
        k = int(self.pool[row])
        return pool if k == 0 else self.pools[k]


def dense_rank(keys: np.ndarray) -> np.ndarray:
    """Rank of each column of ``keys`` (rows: most significant first) among the distinct columns, 0 best."""
    n = keys.shape[1]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys[::-1])
    ordered = keys[:, order]
    new = np.concatenate([[False], np.any(ordered[:, 1:] != ordered[:, :-1], axis=0)])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.cumsum(new)
    return rank


def log_key(x: np.ndarray) -> np.ndarray:
    """``round(log2(x) * KEY_STEPS_PER_DOUBLING)`` as int64 (x > 0; 0 and infinity go to the ends)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.rint(np.log2(x) * KEY_STEPS_PER_DOUBLING)
    top = float(NO_PRICE_KEY - 1)
    return np.nan_to_num(key, nan=top, posinf=top, neginf=-top).astype(np.int64)


def _objective_keys(objective: Objective, world: np.ndarray, tokens_per_s: np.ndarray,
                    price_per_hour: np.ndarray, token_budget: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys to minimise lexicographically (most significant first), and the objective values.

    Real quantities are keyed by their logarithm (:data:`KEY_STEPS_PER_DOUBLING`), which nothing overflows;
    GPU counts are exact. A token budget scales every candidate's time and cost alike, so the keys are per
    token and the ranking is the same for every budget (time to train ranks as tokens/s does)."""
    tok = log_key(tokens_per_s)
    priced = ~np.isnan(price_per_hour)
    money = np.where(priced, log_key(np.nan_to_num(price_per_hour, nan=1.0)), NO_PRICE_KEY)
    if objective is Objective.THROUGHPUT:
        return np.stack([-tok, world, money]), tokens_per_s
    if objective is Objective.GPUS:
        return np.stack([world, -tok, money]), world.astype(np.float64)
    with np.errstate(divide="ignore"):  # a type that cannot run the recipe has 0 tokens/s: infinite time
        per_token_s = 1.0 / tokens_per_s
    if objective is Objective.TIME_TO_TRAIN:
        assert token_budget is not None, "time_to_train needs token_budget (checked by plan_job)"
        return np.stack([-tok, money, world]), float(token_budget) * per_token_s
    # cost: dollars per token, times the budget when there is one
    per_token_usd = np.nan_to_num(price_per_hour) / 3600.0 * per_token_s
    cents = np.where(priced, log_key(per_token_usd), NO_PRICE_KEY)
    return np.stack([cents, -tok, world]), per_token_usd * float(token_budget or 1)


def _within_launcher(scope: LaunchScope, layouts: LayoutArrays, training: TrainingConfig, refuse: bool
                     ) -> npt.NDArray[np.bool_]:
    """Which layouts ``scope``'s launcher can write with ``training``; ConfigError when the request leaves none
    and ``refuse`` (the request's own pins; the offload fallback's recipes pin ZeRO stages of their own)."""
    kept = scope.allows(layouts, training)
    # the layouts alone: a recipe it offloads only where ranks shard the model may leave none (then nothing fits)
    if refuse and len(layouts) and not kept.any() and not scope.allows(layouts).any():
        raise ConfigError(f"launcher {scope.name} can write none of the layouts the request allows",
                          field="launcher", value=scope.name, hint="lift a pin (ZeRO stage, tp, pp) or use another "
                          "launcher")
    return kept


def _shapes(pool: NodePool, name: str, tp: np.ndarray, world: np.ndarray, mode: PlacementMode
            ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`placement_shapes` of each (tp, world), computed once per distinct pair (it works per world)."""
    if tp.size == 0:
        return np.full(tp.shape, -1, dtype=np.int64), np.zeros(tp.shape, dtype=np.int64)
    first, inverse = distinct(tp, world)
    tps, worlds = tp[first], world[first]
    level = np.full(tps.shape, -1, dtype=np.int64)
    per_node = np.zeros(tps.shape, dtype=np.int64)
    for t in np.unique(tps):
        pairs = np.flatnonzero(tps == t)
        level[pairs], per_node[pairs] = placement_shapes(pool, name, int(t), worlds[pairs], mode)
    return level[inverse], per_node[inverse]


def row_links(pool: NodePool, name: str, base: Links, level: np.ndarray, per_node: np.ndarray) -> Links:
    """Each candidate's links, as one :class:`Links` of per-candidate arrays (the batch time model takes them,
    so a GPU type is one call): those of its placement shape. A candidate that cannot be placed is timed as if
    inside one domain (its time only orders the diagnosis of why it cannot be placed)."""
    level = np.where(level < 0, int(Locality.DOMAIN), level)
    per_node = np.where(level == Locality.DOMAIN, 0, per_node)  # inside a domain the node size is the domain's
    if level.size == 0:
        return Links(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))  # type: ignore[arg-type]
    first, which = distinct(level, per_node)
    each = np.array([shape_links(pool, name, base, int(level[k]), int(per_node[k])) for k in first],
                    dtype=np.float64).reshape(-1, 3)[which]
    return Links(each[:, 0].astype(np.int64), each[:, 1], each[:, 2])  # type: ignore[arg-type]


def placed_links(pool: NodePool, name: str, base: Links, tp: np.ndarray, world: np.ndarray, mode: PlacementMode
                 ) -> tuple[np.ndarray, np.ndarray, Links]:
    """Where each (tp, world) can go among ``pool``'s ``name`` GPUs (level and per-node GPUs,
    :func:`placement_shapes`) and the links it is timed with there (``base``: the type's link speeds), as one
    :class:`Links` of per-row arrays: the planner's rule, which the scheduler also applies to an allocation."""
    level, per_node = _shapes(pool, name, tp, world, mode)
    return level, per_node, row_links(pool, name, base, level, per_node)


def _memory_per_precision(model: ModelConfig, recipes: Mapping[str, TrainingConfig], layouts: LayoutArrays,
                          estimator: LayoutEstimator) -> tuple[dict[Precision, np.ndarray], dict[Precision, np.ndarray]]:
    """Device and host bytes of every layout, estimated once per precision the GPU types run the recipe in."""
    devices: dict[Precision, np.ndarray] = {}
    hosts: dict[Precision, np.ndarray] = {}
    for recipe in recipes.values():
        if recipe.precision not in devices:
            none = np.zeros(0, np.int64)
            devices[recipe.precision] = estimator.device_bytes(model, recipe, layouts) if len(layouts) else none
            hosts[recipe.precision] = estimator.host_bytes(model, recipe, layouts) if len(layouts) else none
    return devices, hosts


def build_candidates(model: ModelConfig, training: TrainingConfig, pool: NodePool, specs: dict[str, GPUSpec],
                     constraints: PlanConstraints, objective: Objective, estimator: LayoutEstimator,
                     links: Mapping[str, Links] | None = None, *, adjustable_batch: bool = False,
                     uneven: bool = False, scope: LaunchScope | None = None,
                     precisions: Mapping[str, Precision] | None = None, refuse_scope: bool = True) -> CandidateTable:
    """Enumerate layouts, estimate memory once (per precision) and time per GPU type and placement (vectorised),
    filter, rank.

    ``links`` maps a GPU type to the intra- and inter-node link speeds its time is estimated with (default:
    its typical node's); the node size each candidate is timed with comes from where it can be placed.
    ``precisions`` maps GPU types that run the recipe in another precision (the bf16 fallback) to it;
    ``scope`` keeps the layouts and GPU types a launcher can run (``refuse_scope``: ConfigError where it can
    write none of them); ``uneven`` also searches data-parallel ranks that differ by one micro-batch
    (:func:`enumerate_rows`).
    """
    c = constraints
    types = tuple(pool.gpu_types)
    allowed = {t: c.gpu_types is None or t in c.gpu_types for t in types}
    cap = c.num_gpus or c.max_gpus
    totals = {t: pool.total_gpus(t) for t in types}
    max_world = max([totals[t] for t in types if allowed[t]], default=0)
    if cap is not None:
        max_world = min(max_world, cap)
    max_tp = max([pool.max_node_size(t) for t in types if allowed[t]], default=1)
    layouts, samples = enumerate_rows(model, training, c, max_world=max_world, max_tp=max_tp,
                                      adjustable_batch=adjustable_batch, uneven=uneven)
    if scope is not None:
        within = _within_launcher(scope, layouts, training, refuse_scope)
        layouts, samples = layouts.take(within), samples[within]
    recipes = {name: training.replace(precision=(precisions or {})[name]) if name in (precisions or {}) else training
               for name in types}
    devices, hosts = _memory_per_precision(model, recipes, layouts, estimator)
    device = devices[training.precision] if training.precision in devices else next(iter(devices.values()))
    host = hosts[training.precision] if training.precision in hosts else next(iter(hosts.values()))
    pools: list[NodePool] = [pool]
    tokens_all = samples.astype(np.float64) * training.seq_len

    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("layout", "gpu", "iteration_s", "pph", "level", "node",
                                                          "pool")}
    placed = {name: _type_placed(pools, specs[name], name, allowed[name], layouts,
                                 (devices[recipes[name].precision], hosts[recipes[name].precision]), c,
                                 (links or {}).get(name)) for name in types}
    times = iteration_times(model, recipes, specs, layouts, {n: (got.idx, got.links) for n, got in placed.items()},
                            estimator)
    reports = []
    for g, name in enumerate(types):
        recipe = recipes[name]
        refusal = None if scope is None else scope.refusal(model, recipe, specs[name])
        found, report = _type_candidates(pools[0], specs[name], name, allowed[name], layouts,
                                         devices[recipe.precision], placed[name], times[name], tokens_all, c,
                                         objective, refusal)
        for key, part in found.items():
            parts[key].append(part)
        parts["gpu"].append(np.full(found["layout"].size, g, dtype=np.int64))
        reports.append(report)

    cat = {k: np.concatenate(v) if v else np.zeros(0, np.float64 if k in ("iteration_s", "pph") else np.int64)
           for k, v in parts.items()}
    layout_idx = cat["layout"].astype(np.int64)
    world = layouts.world_size[layout_idx]
    tokens = tokens_all[layout_idx] / cat["iteration_s"] if len(layout_idx) else np.zeros(0)
    keys, value = _objective_keys(objective, world, tokens, cat["pph"], c.token_budget)
    rank = dense_rank(keys)
    # canonical position: layout order first, GPU type name second
    order = np.empty(len(layout_idx), dtype=np.int64)
    order[np.lexsort((cat["gpu"], layout_idx))] = np.arange(len(layout_idx))
    return CandidateTable(objective=objective, placement=c.placement, gpu_types=types, layouts=layouts,
                          device_bytes=device, layout=layout_idx, gpu=cat["gpu"].astype(np.int64), world=world,
                          tp=layouts.tp[layout_idx], iteration_s=cat["iteration_s"], tokens_per_s=tokens,
                          price_per_hour_usd=cat["pph"], value=np.asarray(value, dtype=np.float64),
                          level=cat["level"].astype(np.int64), per_node=cat["node"].astype(np.int64), rank=rank,
                          order=order, reports=tuple(reports), host_bytes=host, pools=tuple(pools),
                          pool=cat["pool"].astype(np.int64), uneven=uneven,
                          samples=samples)


def _host_placed(pools: list[NodePool], name: str, base: Links, tp: np.ndarray, world: np.ndarray,
                 host: np.ndarray, mode: PlacementMode) -> tuple[np.ndarray, np.ndarray, Links, np.ndarray, np.ndarray]:
    """:func:`placed_links` of each row in the pool its host memory allows (``pools[0]`` with each node's free
    GPUs cut to the ranks its host memory holds at ``host`` bytes per rank; such pools are appended to
    ``pools``), the pool index of each row, and which rows only host memory keeps from being placed."""
    pool = pools[0]
    level, per_node = np.full(tp.shape, -1, np.int64), np.zeros(tp.shape, np.int64)
    cols, which = np.zeros((tp.size, 3)), np.zeros(tp.shape, np.int64)
    groups: dict[tuple[tuple[int, int], ...], list[np.ndarray]] = {}
    values, which_value = np.unique(host, return_inverse=True)
    for k, h in enumerate(values):
        groups.setdefault(pool.host_limits(name, int(h)), []).append(np.flatnonzero(which_value == k))
    for limits, members in groups.items():
        rows = members[0] if len(members) == 1 else np.sort(np.concatenate(members))
        capped = pool.host_capped(name, limits)
        if limits:
            pools.append(capped)
            which[rows] = len(pools) - 1
        level[rows], per_node[rows], got = placed_links(capped, name, base, tp[rows], world[rows], mode)
        cols[rows] = np.stack([np.asarray(v, dtype=np.float64) for v in got], axis=1)
    blocked = np.zeros(tp.shape, dtype=bool)
    held = np.flatnonzero((which > 0) & (level < 0))
    if held.size:
        blocked[held] = _shapes(pool, name, tp[held], world[held], mode)[0] >= 0
    return level, per_node, Links(cols[:, 0].astype(np.int64), cols[:, 1], cols[:, 2]), which, blocked  # type: ignore[arg-type]


class _Placed(NamedTuple):
    """One GPU type's layouts that fit on its free GPUs (``idx``), where each goes and the links it is timed with
    (:func:`_host_placed`), and which fit the type's memory (``within_total``, ``fits``)."""

    idx: np.ndarray
    level: np.ndarray
    per_node: np.ndarray
    links: Links
    pool: np.ndarray
    blocked: np.ndarray
    host: np.ndarray
    within_total: np.ndarray
    fits: np.ndarray


def _type_placed(pools: list[NodePool], spec: GPUSpec, name: str, allowed: bool, layouts: LayoutArrays,
                 memory: tuple[np.ndarray, np.ndarray], c: PlanConstraints, links: Links | None) -> _Placed:
    """The layouts one GPU type can hold on its free GPUs and where they go (``memory``: device and host bytes
    per layout)."""
    pool, (device, host) = pools[0], memory
    world = layouts.world_size
    cap = c.num_gpus or c.max_gpus
    total, free = pool.total_gpus(name), pool.free_gpus(name)
    # negative device bytes: a layout the memory model rejects for this model
    within_total = (world <= total) & (layouts.tp <= pool.max_node_size(name)) & (device >= 0)
    fits = within_total & (device <= usable_bytes(spec.memory_bytes, c.headroom))
    limit = min(free, cap) if cap is not None else free
    idx = np.flatnonzero(fits & (world <= limit)) if allowed else np.zeros(0, np.int64)
    level, per_node, timed_links, which, blocked = _host_placed(pools, name, links or spec.links, layouts.tp[idx],
                                                                world[idx], host[idx], c.placement)
    return _Placed(idx, level, per_node, timed_links, which, blocked, host[idx], within_total, fits)


def _type_candidates(pool: NodePool, spec: GPUSpec, name: str, allowed: bool, layouts: LayoutArrays,
                     device: np.ndarray, placed: _Placed, timed: TypeTimes, tokens: np.ndarray, c: PlanConstraints,
                     objective: Objective, refusal: str | None = None) -> tuple[dict[str, np.ndarray], TypeReport]:
    """The candidates of one GPU type (layout index, seconds, price, placement shape, pool) and what limited
    them (``device``: device bytes per layout; ``refusal``: why the launcher cannot run this type)."""
    world = layouts.world_size
    idx, level, per_node, which, blocked = placed.idx, placed.level, placed.per_node, placed.pool, placed.blocked
    within_total, fits = placed.within_total, placed.fits
    iteration, unsupported = timed
    price = spec.price_per_gpu_hour_usd
    pph = world[idx] * (price if price is not None else np.nan)
    keep, reasons = _limits(c, objective, price, pph, tokens[idx] / iteration)
    if refusal is not None:
        keep, reasons = np.zeros_like(keep), (f"the launcher cannot run it: {refusal}",)
    elif unsupported is not None:
        keep, reasons = np.zeros_like(keep), (unsupported,)
    host = placed.host
    report = TypeReport(
        gpu_type=name, allowed=allowed, total_gpus=pool.total_gpus(name), free_gpus=pool.free_gpus(name),
        max_free_in_node=pool.max_free_in_node(name), usable_bytes=usable_bytes(spec.memory_bytes, c.headroom),
        price_per_gpu_hour_usd=price,
        min_device_bytes=int(device[within_total].min()) if within_total.any() else None,
        min_world_fit=int(world[fits].min()) if fits.any() else None,
        n_fit_free=int(idx.size), n_within_limits=int(keep.sum()), limit_reasons=reasons,
        host_blocked=int((blocked & keep).sum()),
        min_host_bytes=int(host[blocked & keep].min()) if (blocked & keep).any() else 0,
        refused=refusal is not None or unsupported is not None)
    found = {"layout": idx[keep], "iteration_s": iteration[keep], "pph": pph[keep], "level": level[keep],
             "node": per_node[keep], "pool": which[keep]}
    return found, report


def _limits(c: PlanConstraints, objective: Objective, price: float | None, pph: np.ndarray,
            tokens_per_s: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Which candidates meet the price, deadline and objective requirements, and what removed the others."""
    keep = np.ones(pph.shape[0], dtype=bool)
    reasons: list[str] = []
    if price is None and (objective is Objective.COST or c.max_price_per_hour_usd is not None):
        why = "cost objective" if objective is Objective.COST else "max_price_per_hour_usd"
        return np.zeros_like(keep), (f"no price in the GPU catalogue (needed by {why})",)
    if c.max_price_per_hour_usd is not None:
        ok = pph <= c.max_price_per_hour_usd
        if keep.any() and not (keep & ok).any():
            reasons.append(f"every fitting layout costs more than max_price_per_hour_usd="
                           f"{c.max_price_per_hour_usd:g} (cheapest ${float(pph.min()):.2f}/h)")
        keep &= ok
    if c.deadline_s is not None and c.token_budget is not None:
        with np.errstate(divide="ignore"):  # 0 tokens/s (recipe not runnable): never meets the deadline
            seconds = float(c.token_budget) / tokens_per_s
        ok = seconds <= c.deadline_s
        if keep.any() and not (keep & ok).any():
            reasons.append(f"no fitting layout trains {c.token_budget:,} tokens within deadline_s="
                           f"{c.deadline_s:g} (fastest {float(seconds[keep].min()):,.0f} s)")
        keep &= ok
    return keep, tuple(reasons)
