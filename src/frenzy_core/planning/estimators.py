"""What the planner needs from the memory and time models, and the default: frenzy_core's analytic ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.planning.layouts import LayoutBatch

__all__ = ["AnalyticEstimator", "LayoutEstimator"]


class LayoutEstimator(Protocol):
    """Memory and time of many layouts at once (vectorised), and full records for the chosen one."""

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutBatch) -> np.ndarray:
        """Bytes the busiest rank of each layout needs on its GPU (int64); negative: an invalid layout."""

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutBatch, gpu: GPUSpec,
                    cluster: Any) -> np.ndarray:
        """Seconds per optimizer step of each layout on ``gpu`` (float64)."""

    def memory(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> Any:
        """The full :class:`MemoryEstimate` of one layout."""

    def time(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, gpu: GPUSpec,
             cluster: Any) -> Any:
        """The full :class:`TimeEstimate` of one layout on ``gpu``."""


class AnalyticEstimator:
    """``frenzy_core.memory`` and ``frenzy_core.timing``: the library's own analytic models.

    ``time_model``: a calibrated-parameter file (``frenzy calibrate``); GPU types it names use its parameters.
    """

    def __init__(self, time_model: str | Path | None = None) -> None:
        self._fitted: dict[str, dict[str, float]] = {}
        if time_model is not None:
            from frenzy_core.timing.calibration_file import read_calibration_file

            self._fitted = read_calibration_file(time_model)

    def _params(self, gpu: GPUSpec) -> Any:
        fitted = self._fitted.get(gpu.id)
        if not fitted:
            return None
        from frenzy_core.timing import default_time_model_params

        return default_time_model_params(gpu).replace(**fitted)

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutBatch) -> np.ndarray:
        from frenzy_core.memory import estimate_memory_batch

        configs = {
            "dp": layouts.dp, "tp": layouts.tp, "pp": layouts.pp, "vpp": layouts.vpp, "cp": layouts.cp,
            "ep": layouts.ep, "micro_batch_size": layouts.micro_batch_size, "recompute": layouts.recompute,
            "zero_stage": np.maximum(layouts.zero_stage, layouts.distributed_optimizer),
            "sequence_parallel": layouts.sequence_parallel,
        }
        return np.asarray(estimate_memory_batch(model, configs, training).device_bytes, dtype=np.int64)

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutBatch, gpu: GPUSpec,
                    cluster: Any) -> np.ndarray:
        from frenzy_core.timing import estimate_iteration_time_batch

        result = estimate_iteration_time_batch(
            model, training, gpu, dp=layouts.dp, tp=layouts.tp, pp=layouts.pp, vpp=layouts.vpp, cp=layouts.cp,
            ep=layouts.ep, micro_batch_size=layouts.micro_batch_size, recompute=layouts.recompute,
            sequence_parallel=layouts.sequence_parallel.astype(bool),
            zero_stage=np.maximum(layouts.zero_stage, layouts.distributed_optimizer), cluster=cluster,
            params=self._params(gpu))
        return np.asarray(result.iteration_s, dtype=np.float64)

    def memory(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> Any:
        from frenzy_core.memory import estimate_memory

        return estimate_memory(model, training, parallel)

    def time(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, gpu: GPUSpec,
             cluster: Any) -> Any:
        from frenzy_core.timing import estimate_iteration_time

        return estimate_iteration_time(model, training, parallel, gpu, cluster=cluster, params=self._params(gpu))
