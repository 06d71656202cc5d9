"""``estimate_memory``: per-GPU peak memory of every pipeline stage of a training job."""

from __future__ import annotations

import numpy as np

from frenzy_core.config.layout import num_microbatches, validate_layout
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import require_instance
from frenzy_core.memory.kernel import PHASES, RECOMPUTE_CODES, SCHEDULE_CODES, ConfigArrays, stage_arrays
from frenzy_core.memory.overhead import overhead_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES, MemoryEstimate, StageMemory

__all__ = ["config_arrays", "estimate_memory"]


def config_arrays(training: TrainingConfig, parallel: ParallelConfig) -> ConfigArrays:
    """The kernel's per-configuration integers for one (training, parallel) pair, as 0-d arrays."""
    def a(x: int) -> np.ndarray:
        return np.asarray(x, dtype=np.int64)

    return ConfigArrays(
        dp=a(parallel.dp), tp=a(parallel.tp), pp=a(parallel.pp), vpp=a(parallel.vpp), cp=a(parallel.cp),
        ep=a(parallel.ep), micro_batch_size=a(training.micro_batch_size), seq_len=a(training.seq_len),
        num_microbatches=a(num_microbatches(training, parallel)), zero_stage=a(training.effective_zero_stage),
        recompute=a(RECOMPUTE_CODES[training.recompute.value]),
        recompute_num_layers=a(training.recompute_num_layers or 0),
        sequence_parallel=a(int(training.sequence_parallel and parallel.tp > 1)),
        schedule=a(SCHEDULE_CODES[parallel.schedule.value]),
    )


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
    arrays = stage_arrays(model, training, config_arrays(training, parallel),
                          np.arange(parallel.pp, dtype=np.int64))
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
            device_bytes=peak + sum(overhead.values())))
    busiest = max(stages, key=lambda st: (st.device_bytes, -st.stage))
    return MemoryEstimate(stages=stages, busiest_stage=busiest.stage, peak_bytes=busiest.peak_bytes,
                          device_bytes=busiest.device_bytes, breakdown=dict(busiest.breakdown),
                          overhead=dict(busiest.overhead), peak_phase=busiest.peak_phase)
