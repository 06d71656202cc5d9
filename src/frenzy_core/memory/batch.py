"""``estimate_memory_batch``: the estimator over arrays of layouts of one model, for planners.

Every configuration runs through the same array kernel as :func:`estimate_memory`, so the results are equal to
the scalar estimator's busiest stage, byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.layout import layout_mask
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.trainable import check_trainable
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import require_instance
from frenzy_core.memory.kernel import stage_arrays, unmodelled_rows
from frenzy_core.memory.overhead import overhead_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES

__all__ = ["BatchEstimate", "estimate_memory_batch"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BatchEstimate:
    """Per-configuration results (busiest stage); rows where ``valid`` is False hold -1: those the layout rules
    reject (:func:`layout_mask`), those the memory model does not cover (torch's sequence parallelism or routing
    imbalance under expert parallelism: :func:`~frenzy_core.memory.kernel.refusal`) and those whose estimate
    would exceed 2^60 bytes (what ``estimate_memory`` refuses)."""

    peak_bytes: IntArray
    device_bytes: IntArray
    busiest_stage: IntArray
    valid: npt.NDArray[np.bool_]
    breakdown: dict[str, IntArray]
    host_bytes: IntArray
    """The most host memory one rank of the layout keeps (offload), as ``MemoryEstimate.host_bytes``."""


def _candidate_stages(model: ModelConfig, lay: LayoutArrays, training: TrainingConfig) -> list[IntArray]:
    """Stages that can be the busiest: the first and the last, unless MoE layers are spread unevenly, a row
    splits its layers unevenly (``stage_layers``) or states are offloaded (the host figure is every stage's)."""
    pp = lay.pp
    uneven = bool(np.any(lay.stage_split > 0))
    moe_spread = model.moe is not None and (model.moe.first_dense_layers > 0 or model.moe.layer_interval > 1)
    if uneven or training.offloads or moe_spread:
        return [np.minimum(i, pp - 1) for i in range(int(pp.max(initial=1)))]
    return [np.zeros_like(pp), pp - 1]


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
    check_trainable(model, training)
    valid = layout_mask(model, layouts) & ~unmodelled_rows(training, layouts)
    arrays = layouts.masked(valid)
    best_device = np.full(valid.shape, -1, dtype=np.int64)
    best_peak = np.full(valid.shape, -1, dtype=np.int64)
    best_stage = np.full(valid.shape, -1, dtype=np.int64)
    best_breakdown = {cat: np.full(valid.shape, -1, dtype=np.int64) for cat in MEMORY_CATEGORIES}
    host = np.zeros(valid.shape, dtype=np.int64)
    for stage in _candidate_stages(model, arrays, training):
        st = stage_arrays(model, training, arrays, stage)
        valid = valid & st.in_range
        host = np.maximum(host, st.host_bytes)
        over = overhead_bytes(st.peak_bytes, st.communicators)
        device = st.peak_bytes + sum(over.values())
        better = (device > best_device) | ((device == best_device) & (stage < best_stage))
        best_device = np.where(better, device, best_device)
        best_peak = np.where(better, st.peak_bytes, best_peak)
        best_stage = np.where(better, stage, best_stage)
        for cat in MEMORY_CATEGORIES:
            best_breakdown[cat] = np.where(better, st.breakdown[cat], best_breakdown[cat])
    invalid = ~valid
    return BatchEstimate(
        peak_bytes=np.where(invalid, -1, best_peak), device_bytes=np.where(invalid, -1, best_device),
        busiest_stage=np.where(invalid, -1, best_stage), valid=valid,
        breakdown={k: np.where(invalid, -1, v) for k, v in best_breakdown.items()},
        host_bytes=np.where(invalid, -1, host))
