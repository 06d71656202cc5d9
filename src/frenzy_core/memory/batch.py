"""``estimate_memory_batch``: the estimator over arrays of layouts of one model, for planners.

Every configuration runs through the same array kernel as :func:`estimate_memory`, so the results are equal to
the scalar estimator's busiest stage, byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.memory.kernel import RECOMPUTE_CODES, SCHEDULE_CODES, ConfigArrays, stage_arrays
from frenzy_core.memory.overhead import overhead_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES

__all__ = ["BATCH_FIELDS", "BatchEstimate", "estimate_memory_batch"]

IntArray = npt.NDArray[np.int64]

BATCH_FIELDS: tuple[str, ...] = (
    "dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "seq_len", "num_microbatches", "global_batch_size",
    "zero_stage", "recompute", "recompute_num_layers", "sequence_parallel", "schedule",
)
"""Keys ``configs`` may hold (arrays or scalars). ``recompute`` and ``schedule`` take names or codes
(``RECOMPUTE_CODES``, ``SCHEDULE_CODES``); give ``num_microbatches`` or ``global_batch_size``, not both."""


@dataclass(frozen=True)
class BatchEstimate:
    """Per-configuration results (busiest stage); rows where ``valid`` is False hold -1."""

    peak_bytes: IntArray
    device_bytes: IntArray
    busiest_stage: IntArray
    valid: npt.NDArray[np.bool_]
    breakdown: dict[str, IntArray]


def _codes(value: object, table: dict[str, int], name: str) -> IntArray:
    arr = np.asarray(value)
    if arr.dtype.kind in "USO":
        flat = [str(getattr(v, "value", v)) for v in arr.ravel()]
        unknown = sorted({v for v in flat if v not in table})
        if unknown:
            raise ConfigError(f"configs[{name!r}] has unknown values {unknown}", field=name, value=unknown,
                              hint=f"use one of {sorted(table)} or codes {sorted(table.values())}")
        return np.array([table[v] for v in flat], dtype=np.int64).reshape(arr.shape)
    return arr.astype(np.int64)


def _arrays(model: ModelConfig, training: TrainingConfig, configs: Mapping[str, npt.ArrayLike]
            ) -> tuple[ConfigArrays, npt.NDArray[np.bool_]]:
    unknown = sorted(set(configs) - set(BATCH_FIELDS))
    if unknown:
        raise ConfigError(f"unknown configs keys {unknown}", field="configs", value=unknown,
                          hint=f"use keys from {list(BATCH_FIELDS)}")
    if "num_microbatches" in configs and "global_batch_size" in configs:
        raise ConfigError("give configs['num_microbatches'] or configs['global_batch_size'], not both",
                          field="configs")
    defaults: dict[str, object] = {
        "dp": 1, "tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "micro_batch_size": training.micro_batch_size,
        "seq_len": training.seq_len, "zero_stage": training.effective_zero_stage,
        "recompute": training.recompute.value, "recompute_num_layers": training.recompute_num_layers or 0,
        "sequence_parallel": int(training.sequence_parallel),
    }
    vals: dict[str, IntArray] = {}
    for key, default in defaults.items():
        raw = configs.get(key, default)
        vals[key] = _codes(raw, RECOMPUTE_CODES, key) if key == "recompute" else np.asarray(raw).astype(np.int64)
    vpp = vals["vpp"]
    sched_default = np.where(vpp > 1, SCHEDULE_CODES[PipelineSchedule.INTERLEAVED.value],
                             SCHEDULE_CODES[PipelineSchedule.ONE_F_ONE_B.value])
    vals["schedule"] = _codes(configs["schedule"], SCHEDULE_CODES, "schedule") if "schedule" in configs \
        else sched_default
    per_step = vals["micro_batch_size"] * vals["dp"]
    if "num_microbatches" in configs:
        m = np.asarray(configs["num_microbatches"]).astype(np.int64)
        gbs_ok = np.ones_like(m, dtype=bool)
    else:
        gbs = configs.get("global_batch_size", training.global_batch_size)
        if gbs is None:
            m = np.ones_like(per_step)
            gbs_ok = np.ones_like(m, dtype=bool)
        else:
            g = np.asarray(gbs).astype(np.int64)
            gbs_ok = (g > 0) & (g % np.maximum(per_step, 1) == 0)
            m = np.where(gbs_ok, g // np.maximum(per_step, 1), 1)
    try:
        shape = np.broadcast(*vals.values(), m).shape
    except ValueError as exc:
        raise ConfigError(f"configs arrays do not broadcast together: {exc}", field="configs") from None
    b = {k: np.broadcast_to(v, shape) for k, v in vals.items()}
    m = np.broadcast_to(m, shape)
    positive = [b[k] > 0 for k in ("dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "seq_len")]
    valid = np.logical_and.reduce(positive) & (m > 0) & np.broadcast_to(gbs_ok, shape)
    valid &= (b["zero_stage"] >= 0) & (b["zero_stage"] <= 3) & (b["recompute"] >= 0) & (b["recompute"] <= 2)
    valid &= (b["schedule"] >= 0) & (b["schedule"] <= 2) & (b["recompute_num_layers"] >= 0)
    safe = {k: np.where(valid, v, 1) for k, v in b.items()}
    for k in ("zero_stage", "recompute", "schedule", "recompute_num_layers", "sequence_parallel"):
        safe[k] = np.where(valid, b[k], 0)
    m = np.where(valid, m, 1)
    tp, pp, vpp, cp, ep, dp = (safe[k] for k in ("tp", "pp", "vpp", "cp", "ep", "dp"))
    # The checks of ParallelConfig and validate_layout, elementwise.
    valid &= (model.num_attention_heads % tp == 0) & (model.num_kv_heads % tp == 0)
    valid &= model.num_layers >= pp * vpp
    valid &= ~((vpp > 1) & (pp == 1)) & ~((vpp > 1) & (safe["schedule"] != SCHEDULE_CODES["interleaved"]))
    valid &= (dp * cp) % ep == 0
    valid &= (ep == 1) if model.moe is None else (model.moe.num_experts % ep == 0)
    valid &= (cp == 1) | (safe["seq_len"] % (2 * cp) == 0)
    if model.position_embedding is PositionEmbedding.LEARNED:
        valid &= safe["seq_len"] <= model.max_position_embeddings
    valid &= ~((vpp > 1) & (m % pp != 0))
    if training.distributed_optimizer:
        valid &= safe["zero_stage"] <= 1
    sp = np.where(tp > 1, safe["sequence_parallel"], 0)
    arrays = ConfigArrays(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, micro_batch_size=safe["micro_batch_size"],
                          seq_len=safe["seq_len"], num_microbatches=m, zero_stage=safe["zero_stage"],
                          recompute=safe["recompute"], recompute_num_layers=safe["recompute_num_layers"],
                          sequence_parallel=sp, schedule=safe["schedule"])
    return arrays, valid


def _candidate_stages(model: ModelConfig, pp: IntArray) -> list[IntArray]:
    """Stages that can be the busiest: the first and the last, unless MoE layers are spread unevenly."""
    if model.moe is not None and (model.moe.first_dense_layers > 0 or model.moe.layer_interval > 1):
        return [np.minimum(i, pp - 1) for i in range(int(pp.max(initial=1)))]
    return [np.zeros_like(pp), pp - 1]


def estimate_memory_batch(model: ModelConfig, configs: Mapping[str, npt.ArrayLike],
                          training: TrainingConfig = TrainingConfig()) -> BatchEstimate:  # noqa: B008 (frozen)
    """Busiest-stage peak and device bytes of every configuration in ``configs`` (see :data:`BATCH_FIELDS`).

    ``training`` fixes what the arrays do not vary (precision, optimizer, framework, attention, recompute method)
    and gives defaults for missing keys. Equal to ``estimate_memory`` per configuration; invalid ones
    (those ``estimate_memory`` would refuse) get ``valid`` False and -1.
    """
    arrays, valid = _arrays(model, training, configs)
    best_device = np.full(valid.shape, -1, dtype=np.int64)
    best_peak = np.full(valid.shape, -1, dtype=np.int64)
    best_stage = np.full(valid.shape, -1, dtype=np.int64)
    best_breakdown = {cat: np.full(valid.shape, -1, dtype=np.int64) for cat in MEMORY_CATEGORIES}
    for stage in _candidate_stages(model, arrays.pp):
        st = stage_arrays(model, training, arrays, stage)
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
        breakdown={k: np.where(invalid, -1, v) for k, v in best_breakdown.items()})
