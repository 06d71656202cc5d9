"""Candidate layouts: enumerate the search space, estimate it in batch, keep what fits, rank by the objective.

A candidate is a (layout, GPU type) pair: parallel degrees plus the searched training fields on one GPU type.
The table is shared by every solver, so CP-SAT and the exhaustive reference see exactly the same data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from frenzy_core.config.arrays import LAYOUT_COLUMNS, LayoutArrays
from frenzy_core.config.layout import layout_mask
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.config.training import Framework, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.planning.estimators import LayoutEstimator
from frenzy_core.planning.nodes import NodePool
from frenzy_core.planning.request import DEFAULT_MICRO_BATCH_SIZES, Objective, PlanConstraints

__all__ = [
    "LONG_CONTEXT_TOKENS",
    "NO_PRICE_KEY",
    "CandidateTable",
    "TypeReport",
    "build_candidates",
    "dense_rank",
    "enumerate_layouts",
]

LONG_CONTEXT_TOKENS = 16384
"""Sequence length from which context parallelism is searched (Megatron-Core's CP targets long contexts;
below this the attention share is small and cp only adds communication: our threshold)."""

NO_PRICE_KEY = 1 << 40
"""Tie-break money key of a GPU type without a price: after every priced one."""


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})


def _product(axes: list[list[int]]) -> np.ndarray:
    """The cartesian product of integer axes, one row per combination (last axis fastest)."""
    grids = np.meshgrid(*[np.asarray(a, dtype=np.int64) for a in axes], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(max(limit, 1).bit_length()) if (1 << i) <= limit]


def enumerate_layouts(model: ModelConfig, training: TrainingConfig, constraints: PlanConstraints, *,
                      max_world: int, max_tp: int, dp_hints: tuple[int, ...] = ()) -> LayoutArrays:
    """Every layout of at most ``max_world`` GPUs the model and recipe allow (:func:`layout_mask`) and the search
    covers, in canonical order.

    Canonical order (the last tie-break everywhere): fewer GPUs, smaller tp, pp, vpp, cp, ep, lighter
    recompute, lower ZeRO stage, no distributed optimizer, no sequence parallelism, larger micro-batch.
    """
    c = constraints
    megatron = training.framework is Framework.MEGATRON
    heads = math.gcd(model.num_attention_heads, model.num_kv_heads)
    tps = [t for t in _divisors(heads) if t <= max_tp and (c.tp is None or t == c.tp)]
    pps = [p for p in _divisors(model.num_layers) if p <= max_world and (c.pp is None or p == c.pp)]
    vpps = [1, 2] if megatron else [1]
    cps = [1]
    if megatron and training.seq_len >= LONG_CONTEXT_TOKENS:
        cps += [k for k in (2, 4, 8) if training.seq_len % (2 * k) == 0]
    eps = _divisors(model.moe.num_experts) if model.moe is not None else [1]
    gbs = training.global_batch_size
    if gbs is not None:
        dps = [d for d in _divisors(gbs) if d <= max_world]
    else:
        dps = sorted(set(_powers_of_two(max_world)) | {d for d in dp_hints if 0 < d <= max_world})
    mbss = sorted(set(c.micro_batch_sizes or DEFAULT_MICRO_BATCH_SIZES))
    recomputes = [r.code for r in (c.recompute or list(Recompute))]
    zeros = sorted(set(c.zero_stages if c.zero_stages is not None else ([0] if megatron else [0, 1, 2, 3])))
    dist_opts = [int(c.distributed_optimizer)] if c.distributed_optimizer is not None else ([0, 1] if megatron
                                                                                           else [0])
    sps = [int(c.sequence_parallel)] if c.sequence_parallel is not None else ([0, 1] if megatron else [0])

    structure = [tps, pps, vpps, cps, eps, dps]
    recipe = [mbss, recomputes, zeros, dist_opts, sps]
    if any(not a for a in structure + recipe):
        return _layouts(np.zeros((0, len(structure + recipe)), dtype=np.int64), training)
    # parallel degrees first (few combinations survive), then crossed with the recipe choices
    grid = _product(structure)
    tp, pp, vpp, cp, ep, dp = grid.T
    world = dp * tp * pp * cp
    keep = (world <= max_world) if c.num_gpus is None else (world == c.num_gpus)
    # search policy: every stage gets the same number of layers (pp divides them; with vpp, every chunk too)
    keep &= (vpp == 1) | ((pp > 1) & (model.num_layers % np.maximum(pp * vpp, 1) == 0))
    grid = grid[keep]
    choices = _product(recipe)
    grid = np.concatenate([np.repeat(grid, len(choices), axis=0), np.tile(choices, (len(grid), 1))], axis=1)
    sp, tp = grid[:, 10], grid[:, 0]
    grid = grid[(sp == 0) | (tp > 1)]  # search policy: sequence parallelism only where it has an effect
    layouts = _layouts(grid, training)
    layouts = layouts.take(layout_mask(model, layouts))
    order = np.lexsort((-layouts.micro_batch_size, layouts.sequence_parallel, layouts.distributed_optimizer,
                        layouts.zero_stage, layouts.recompute, layouts.ep, layouts.cp, layouts.vpp, layouts.pp,
                        layouts.tp, layouts.world_size))
    return layouts.take(order)


def _layouts(grid: np.ndarray, training: TrainingConfig) -> LayoutArrays:
    """Rows (tp, pp, vpp, cp, ep, dp, micro-batch, recompute, ZeRO, distributed optimizer, sequence parallel) as
    layouts with ``training``'s sequence length, global batch and recompute chunk."""
    tp, pp, vpp, cp, ep, dp, mbs, rc, zero, dopt, sp = grid.T
    gbs = np.full_like(dp, training.global_batch_size) if training.global_batch_size is not None else mbs * dp
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


@dataclass(frozen=True)
class CandidateTable:
    """Candidates that fit memory, free GPU counts and the request's limits, ranked for one objective.

    ``rank`` is the dense rank of the integer-scaled objective key (0 best); ``order`` the canonical position,
    unique per candidate. Placement (whole TP groups per node) is left to the solvers.
    """

    objective: Objective
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
    """Objective value in its unit: tokens/s, USD, seconds or GPUs."""
    rank: np.ndarray
    order: np.ndarray
    reports: tuple[TypeReport, ...]

    def __len__(self) -> int:
        return int(self.layout.shape[0])


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


def _objective_keys(objective: Objective, world: np.ndarray, tokens_per_s: np.ndarray,
                    price_per_hour: np.ndarray, token_budget: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys to minimise lexicographically (most significant first), and the objective values."""
    tok = np.rint(tokens_per_s).astype(np.int64)  # 1 token/s resolution
    priced = ~np.isnan(price_per_hour)
    money = np.where(priced, np.rint(np.nan_to_num(price_per_hour) * 1000.0), NO_PRICE_KEY).astype(np.int64)
    if objective is Objective.THROUGHPUT:
        return np.stack([-tok, world, money]), tokens_per_s
    if objective is Objective.GPUS:
        return np.stack([world, -tok, money]), world.astype(np.float64)
    assert token_budget is not None, "cost and time_to_train need token_budget (checked by plan_job)"
    with np.errstate(divide="ignore"):  # a type that cannot run the recipe has 0 tokens/s: infinite time
        seconds = token_budget / tokens_per_s
    if objective is Objective.TIME_TO_TRAIN:
        return np.stack([np.rint(seconds).astype(np.int64), money, world]), seconds
    dollars = np.nan_to_num(price_per_hour) * seconds / 3600.0
    cents = np.where(priced, np.rint(dollars * 100.0), NO_PRICE_KEY).astype(np.int64)
    return np.stack([cents, -tok, world]), dollars


def build_candidates(model: ModelConfig, training: TrainingConfig, pool: NodePool, specs: dict[str, GPUSpec],
                     constraints: PlanConstraints, objective: Objective, estimator: LayoutEstimator,
                     links: Mapping[str, Links] | None = None) -> CandidateTable:
    """Enumerate layouts, estimate memory once and time per GPU type (vectorised), filter and rank.

    ``links`` maps a GPU type to the node size and link speeds its time is estimated with (default: the type's
    typical node).
    """
    c = constraints
    types = tuple(pool.gpu_types)
    allowed = {t: c.gpu_types is None or t in c.gpu_types for t in types}
    cap = c.num_gpus or c.max_gpus
    totals = {t: pool.total_gpus(t) for t in types}
    frees = {t: pool.free_gpus(t) for t in types}
    max_world = max([totals[t] for t in types if allowed[t]], default=0)
    if cap is not None:
        max_world = min(max_world, cap)
    max_tp = max([pool.max_node_size(t) for t in types if allowed[t]], default=1)
    hints = tuple(sorted({v for t in types for v in (totals[t], frees[t])}))
    layouts = enumerate_layouts(model, training, c, max_world=max_world, max_tp=max_tp, dp_hints=hints)
    device = estimator.device_bytes(model, training, layouts) if len(layouts) else np.zeros(0, np.int64)
    world_all = layouts.world_size
    gbs_all = layouts.global_batch_size

    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("layout", "gpu", "iteration_s", "pph")}
    reports = []
    for g, name in enumerate(types):
        spec = specs[name]
        usable = int(spec.memory_bytes * (1.0 - c.headroom))
        # negative device bytes: a layout the memory model rejects for this model
        within_total = (world_all <= totals[name]) & (layouts.tp <= pool.max_node_size(name)) & (device >= 0)
        fits = within_total & (device <= usable)
        limit = min(frees[name], cap) if cap is not None else frees[name]
        fit_free = fits & (world_all <= limit) if allowed[name] else np.zeros_like(fits)
        idx = np.flatnonzero(fit_free)
        price = spec.price_per_gpu_hour_usd
        unsupported = None
        try:
            iteration = (estimator.iteration_s(model, training, layouts.take(idx), spec, (links or {}).get(name))
                         if idx.size else np.zeros(0))
        except ConfigError as exc:  # e.g. the recipe's dtype has no peak on this GPU
            iteration, unsupported = np.full(idx.size, np.inf), f"cannot run this recipe: {exc}"
        pph = world_all[idx] * (price if price is not None else np.nan)
        keep, reasons = _limits(c, objective, price, pph, gbs_all[idx] * training.seq_len / iteration)
        if unsupported is not None:
            keep, reasons = np.zeros_like(keep), (unsupported,)
        parts["layout"].append(idx[keep])
        parts["gpu"].append(np.full(int(keep.sum()), g, dtype=np.int64))
        parts["iteration_s"].append(iteration[keep])
        parts["pph"].append(pph[keep])
        reports.append(TypeReport(
            gpu_type=name, allowed=allowed[name], total_gpus=totals[name], free_gpus=frees[name],
            max_free_in_node=pool.max_free_in_node(name), usable_bytes=usable, price_per_gpu_hour_usd=price,
            min_device_bytes=int(device[within_total].min()) if within_total.any() else None,
            min_world_fit=int(world_all[fits].min()) if fits.any() else None,
            n_fit_free=int(idx.size), n_within_limits=int(keep.sum()), limit_reasons=reasons))

    layout_idx = np.concatenate(parts["layout"]) if parts["layout"] else np.zeros(0, np.int64)
    gpu_idx = np.concatenate(parts["gpu"]) if parts["gpu"] else np.zeros(0, np.int64)
    iteration_s = np.concatenate(parts["iteration_s"]) if parts["iteration_s"] else np.zeros(0)
    pph = np.concatenate(parts["pph"]) if parts["pph"] else np.zeros(0)
    world = world_all[layout_idx]
    tokens = gbs_all[layout_idx] * training.seq_len / iteration_s if len(layout_idx) else np.zeros(0)
    keys, value = _objective_keys(objective, world, tokens, pph, c.token_budget)
    rank = dense_rank(keys)
    # canonical position: layout order first, GPU type name second
    order = np.empty(len(layout_idx), dtype=np.int64)
    order[np.lexsort((gpu_idx, layout_idx))] = np.arange(len(layout_idx))
    return CandidateTable(objective=objective, gpu_types=types, layouts=layouts, device_bytes=device,
                          layout=layout_idx, gpu=gpu_idx, world=world, tp=layouts.tp[layout_idx],
                          iteration_s=iteration_s, tokens_per_s=tokens, price_per_hour_usd=pph,
                          value=np.asarray(value, dtype=np.float64), rank=rank, order=order,
                          reports=tuple(reports))


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
            seconds = c.token_budget / tokens_per_s
        ok = seconds <= c.deadline_s
        if keep.any() and not (keep & ok).any():
            reasons.append(f"no fitting layout trains {c.token_budget:,} tokens within deadline_s="
                           f"{c.deadline_s:g} (fastest {float(seconds[keep].min()):,.0f} s)")
        keep &= ok
    return keep, tuple(reasons)
