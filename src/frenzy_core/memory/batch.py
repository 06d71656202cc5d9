"""``estimate_memory_batch``: the estimator over arrays of layouts of one model, for planners.

Every configuration runs through the same array kernel as :func:`estimate_memory`, so the results are equal to
the scalar estimator's busiest stage, byte for byte.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from frenzy_core._distinct import collapsed, distinct, gather
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.layout import layout_mask
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.trainable import check_recipe
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import require_instance
from frenzy_core.memory.kernel import (
    StateTerms,
    TokenTerms,
    stage_arrays,
    state_keys,
    state_terms,
    token_keys,
    token_terms,
    unmodelled_rows,
)
from frenzy_core.memory.overhead import overhead_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES

__all__ = ["BatchEstimate", "estimate_memory_batch", "stage_device_bytes"]

IntArray = npt.NDArray[np.int64]
T = TypeVar("T")


@dataclass(frozen=True)
class BatchEstimate:
    """Per-configuration results (busiest stage); rows where ``valid`` is False hold -1: those the layout rules
    reject (:func:`layout_mask`), those the memory model does not cover (torch's sequence parallelism of a model
    torchtitan's plan does not cover, torch's context parallelism, routing imbalance under expert parallelism:
    :func:`~frenzy_core.memory.kernel.refusal`) and those whose estimate
    would exceed 2^60 bytes (what ``estimate_memory`` refuses)."""

    peak_bytes: IntArray
    device_bytes: IntArray
    busiest_stage: IntArray
    valid: npt.NDArray[np.bool_]
    breakdown: dict[str, IntArray]
    host_bytes: IntArray
    """The most host memory one rank of the layout keeps (offload), as ``MemoryEstimate.host_bytes``."""


BLOCK_ELEMENTS = 1 << 14
"""Rows x candidate stages the kernel evaluates at once: its few hundred float64 temporaries then stay in a core's
cache (1 MiB of L2 on the benchmark machine), about twice as fast as whole arrays of 200,000 rows, while the Python
work per block stays small (docs/benchmarks.md, vectorised memory estimator)."""


RULE_ROWS = 1 << 15
"""Rows the layout rules (:func:`layout_mask`) check at once: their temporaries are mostly booleans (32 KiB), and
each of their forty rules costs a few numpy calls per block, so larger blocks than the kernel's pay less Python
(docs/benchmarks.md, vectorised memory estimator: 25 -> 16 ms for the benchmark's 200,000 rows)."""


def _stage_count(model: ModelConfig, lay: LayoutArrays, valid: npt.NDArray[np.bool_],
                 training: TrainingConfig) -> int:
    """How many stages can be the busiest: 2 (the first and the last) unless MoE layers are spread unevenly, a
    valid row splits its layers unevenly (``stage_layers``) or states are offloaded (the host figure is every
    stage's); then the largest pp of a valid row (every stage)."""
    uneven = bool(np.any(lay.stage_split[valid] > 0))
    moe_spread = model.moe is not None and (model.moe.first_dense_layers > 0 or model.moe.layer_interval > 1)
    if uneven or training.offloads or moe_spread:
        return int(lay.pp[valid].max(initial=1))
    return 2


def _candidate_stages(lay: LayoutArrays, count: int, every: bool) -> IntArray:
    """The candidate stages of each row as the rows of a 2-d array: every stage (those beyond a row's pp repeat
    its last), or the first and the last."""
    pp = lay.pp
    if every:
        return np.stack([np.minimum(i, pp - 1) for i in range(count)])
    return np.stack([np.zeros_like(pp), pp - 1])


def _blocks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def estimate_memory_batch(model: ModelConfig, configs: LayoutArrays | Mapping[str, npt.ArrayLike],
                          training: TrainingConfig = TrainingConfig()) -> BatchEstimate:  # noqa: B008 (frozen)
    """Busiest-stage peak and device bytes of every layout in ``configs``: a :class:`LayoutArrays`, or a mapping
    of its columns (:data:`LAYOUT_COLUMNS`, or ``num_microbatches`` for the global batch) as arrays or scalars.

    ``training`` fixes what the arrays do not vary (precision, optimizer, framework, attention, recompute method)
    and gives defaults for missing columns. Equal to ``estimate_memory`` per layout; invalid ones (those
    ``estimate_memory`` would refuse: :func:`layout_mask`) get ``valid`` False and -1.
    """
    require_instance("model", model, ModelConfig, "use ModelConfig.preset(name) or ModelConfig(...)")
    require_instance("training", training, TrainingConfig)
    layouts = configs if isinstance(configs, LayoutArrays) else LayoutArrays.from_columns(configs, training)
    check_recipe(model, training)
    shape, flat = layouts.shape, layouts.flat()
    n = len(flat)
    valid = np.concatenate([_modelled(model, training, flat.take(sl)) for sl in _blocks(n, RULE_ROWS)])
    count = _stage_count(model, flat, valid, training)
    out = {name: np.full(n, -1, dtype=np.int64) for name in ("peak", "device", "stage", "host")}
    breakdown = {cat: np.full(n, -1, dtype=np.int64) for cat in MEMORY_CATEGORIES}
    # only the rows the rules accept are evaluated (a planner's table holds many it rejects: they read -1), those
    # of one pipeline stage at that stage alone (their first stage is their last); each block takes its own rows
    # (no copy of every accepted row at once: glibc would return its pages to the OS and fault them in again)
    single = flat.pp == 1
    for rows_of, stages in ((valid & single, 1), (valid & ~single, count)):
        accepted = np.flatnonzero(rows_of)
        shared = _shared(flat, state_keys(flat), accepted, functools.partial(_state_terms, model, training, stages))
        per_token = _shared(flat, token_keys(flat), accepted, lambda keys: token_terms(model, training, keys))
        for sl in _blocks(len(accepted), max(BLOCK_ELEMENTS // stages, 1)):
            picked = accepted[sl]
            terms = None if shared is None else gather(shared[0], shared[1][sl], shared[2])
            tokens = None if per_token is None else gather(per_token[0], per_token[1][sl], per_token[2])
            block = _block(model, training, flat.take(picked), stages, terms, tokens)
            ok = block.pop("in_range").astype(bool)
            valid[picked] = ok
            every = bool(ok.all())  # (the rows beyond 2^60 bytes read -1)
            for name, values in block.items():
                target = breakdown[name] if name in breakdown else out[name]
                target[picked] = values if every else np.where(ok, values, -1)
    return BatchEstimate(
        peak_bytes=out["peak"].reshape(shape), device_bytes=out["device"].reshape(shape),
        busiest_stage=out["stage"].reshape(shape), valid=valid.reshape(shape),
        breakdown={k: v.reshape(shape) for k, v in breakdown.items()}, host_bytes=out["host"].reshape(shape))


def _modelled(model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> npt.NDArray[np.bool_]:
    """Rows the layout rules accept and the estimator models (the scalar path refuses the others)."""
    return np.asarray(layout_mask(model, layouts) & ~unmodelled_rows(model, training, layouts), dtype=np.bool_)


SHARED_MIN_ROWS = 1024
"""Fewer accepted rows than this are evaluated without sharing terms (:func:`_shared`): the pass that finds
the distinct keys would cost more than it saves."""
SHARED_MIN_REPEATS = 4
"""Terms are shared only where the rows repeat their keys this many times on average: the gathers cost
about what the terms do at a few rows per key (docs/benchmarks.md, vectorised memory estimator)."""


def _shared(flat: LayoutArrays, keys: tuple[npt.NDArray[np.int64] | npt.NDArray[np.bool_], ...],
            rows: npt.NDArray[np.intp], terms: Callable[[LayoutArrays], T]
            ) -> tuple[T, npt.NDArray[np.intp], int] | None:
    """``terms`` of one row of each distinct combination of ``keys`` (columns of ``flat``: :func:`state_keys` or
    :func:`token_keys`) among its rows ``rows``, each row's combination number and their count, to gather per block; None
    where most rows are distinct (or few): then each block computes its own."""
    if len(rows) < max(SHARED_MIN_ROWS, 1):
        return None
    first, inverse = distinct(*keys, rows=rows)
    if SHARED_MIN_REPEATS * len(first) > len(rows):
        return None
    return collapsed(terms(flat.take(rows[first]))), inverse, len(first)


def _state_terms(model: ModelConfig, training: TrainingConfig, count: int, keys: LayoutArrays) -> StateTerms:
    """:func:`~frenzy_core.memory.kernel.state_terms` of ``keys`` at their ``count`` candidate stages."""
    return state_terms(model, training, keys, _candidate_stages(keys, count, count != 2))


def _block(model: ModelConfig, training: TrainingConfig, arrays: LayoutArrays, count: int,
           terms: StateTerms | None = None, tokens: TokenTerms | None = None) -> dict[str, IntArray]:
    """The busiest stage of each row of ``arrays`` (rows the rules accept): peak, device and host
    bytes, the stage, its categories, and ``in_range`` (0 where a stage's total exceeds 2^60 bytes); ``terms``
    and ``tokens``: their state terms at the candidate stages and their token terms, where shared
    (:func:`_shared`)."""
    stages = _candidate_stages(arrays, count, count != 2)
    st = stage_arrays(model, training, arrays, stages, terms, tokens)
    best_peak, best_stage = st.peak_bytes[0], stages[0]
    best_breakdown = {cat: st.breakdown[cat][0] for cat in MEMORY_CATEGORIES}
    # a stage replaces the best so far where it needs more device memory (ties: the lower stage, already first
    # unless a stage repeats); device bytes grow strictly with the peak (the overhead of a row's stages differs
    # only by the fragmentation share of their peaks), so the peaks decide and the overhead is formed once
    for i in range(1, len(stages)):
        peak, stage = st.peak_bytes[i], stages[i]
        better = (peak > best_peak) | ((peak == best_peak) & (stage < best_stage))
        best_peak = np.where(better, peak, best_peak)
        best_stage = np.where(better, stage, best_stage)
        for cat in MEMORY_CATEGORIES:
            best_breakdown[cat] = np.where(better, st.breakdown[cat][i], best_breakdown[cat])
    device = best_peak + sum(overhead_bytes(best_peak, st.communicators[0]).values())
    return {"peak": best_peak, "device": device, "stage": best_stage, "host": np.maximum(st.host_bytes.max(axis=0), 0),
            "in_range": st.in_range.all(axis=0).astype(np.int64), **best_breakdown}


def stage_device_bytes(model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays,
                       stage: npt.ArrayLike) -> IntArray:
    """Device bytes of pipeline stage ``stage`` of each layout (its own layers, tp, in-flight micro-batches and
    ends): ``estimate_memory(...).stages[stage].device_bytes`` per row; -1 where the layout rules refuse the
    row (or the estimator does not model it) or the estimate exceeds 2^60 bytes."""
    check_recipe(model, training)
    valid = _modelled(model, training, layouts)
    arrays = layouts.masked(valid)
    st = stage_arrays(model, training, arrays, np.asarray(stage, dtype=np.int64))
    over = overhead_bytes(st.peak_bytes, st.communicators)
    device = st.peak_bytes + sum(over.values())
    return np.asarray(np.where(valid & st.in_range, device, -1), dtype=np.int64)
