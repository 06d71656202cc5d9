"""``estimate_memory``: per-GPU peak memory of every pipeline stage of a training job."""

from __future__ import annotations

import numpy as np

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.layout import validate_layout
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.trainable import check_recipe
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError, require_instance
from frenzy_core.memory.kernel import PHASES, refusal, stage_arrays
from frenzy_core.memory.overhead import overhead_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES, MemoryEstimate, StageMemory

__all__ = ["estimate_memory"]


def estimate_memory(model: ModelConfig, training: TrainingConfig,
                    parallel: ParallelConfig = ParallelConfig()) -> MemoryEstimate:  # noqa: B008 (frozen)
    """Peak live-tensor bytes and device bytes of the busiest rank of every pipeline stage.

    The peak is the largest total over the phases of an iteration (end of the last forward, start of backward,
    optimizer step), comparable with ``torch.cuda.max_memory_allocated``; see docs/memory-model.md.
    """
    require_instance("model", model, ModelConfig, "use ModelConfig.preset(name) or ModelConfig(...)")
    require_instance("training", training, TrainingConfig)
    require_instance("parallel", parallel, ParallelConfig)
    validate_layout(model, training, parallel)
    check_recipe(model, training)
    layouts = LayoutArrays.from_configs(training, parallel)
    refused = refusal(model, training, layouts)
    if refused is not None:
        raise ConfigError(refused.message, field=refused.field, hint=refused.hint)
    arrays = stage_arrays(model, training, layouts, np.arange(parallel.pp, dtype=np.int64))
    if not arrays.in_range.all():
        raise ConfigError(f"stage {int(np.flatnonzero(~arrays.in_range)[0])} of this job would hold more than "
                          f"2^60 bytes (1 EiB), the most the estimator counts: a million times any GPU",
                          field="training", hint="shrink micro_batch_size x seq_len or the model, or split it "
                          "further (tp, pp, cp, ZeRO, recompute, flash attention)")
    over = overhead_bytes(arrays.peak_bytes, arrays.communicators)
    stages = []
    for i in range(parallel.pp):
        breakdown = {cat: int(arrays.breakdown[cat][i]) for cat in MEMORY_CATEGORIES}
        overhead = {k: int(v[i]) for k, v in over.items()}
        peak = int(arrays.peak_bytes[i])
        stages.append(StageMemory(
            stage=i, num_layers=int(arrays.num_layers[i]), num_params=round(float(arrays.num_params[i])),
            inflight_microbatches=float(arrays.inflight[i]), breakdown=breakdown, peak_bytes=peak,
            peak_phase=PHASES[int(arrays.phase[i])], overhead=overhead,
            model_state_bytes=int(arrays.model_state_bytes[i]), activation_bytes=int(arrays.activation_bytes[i]),
            host_bytes=int(arrays.host_bytes[i]), device_bytes=peak + sum(overhead.values())))
    busiest = max(stages, key=lambda st: (st.device_bytes, -st.stage))
    return MemoryEstimate(stages=stages, busiest_stage=busiest.stage, peak_bytes=busiest.peak_bytes,
                          device_bytes=busiest.device_bytes, breakdown=dict(busiest.breakdown),
                          overhead=dict(busiest.overhead), peak_phase=busiest.peak_phase,
                          host_bytes=max(st.host_bytes for st in stages))
