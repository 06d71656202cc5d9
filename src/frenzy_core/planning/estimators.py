"""What the planner needs from the memory and time models, and the default: frenzy_core's analytic ones."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.memory import estimate_memory, estimate_memory_batch
from frenzy_core.timing import estimate_iteration_time, estimate_iteration_time_batch

__all__ = ["AnalyticEstimator", "LayoutEstimator"]


class LayoutEstimator(Protocol):
    """Memory and time of many layouts at once (vectorised), and full records for the chosen one."""

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        """Bytes the busiest rank of each layout needs on its GPU (int64); negative: an invalid layout."""

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays, gpu: GPUSpec,
                    cluster: Any) -> np.ndarray:
        """Seconds per optimizer step of each layout on ``gpu`` (float64)."""

    def memory(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> Any:
        """The full :class:`MemoryEstimate` of one layout."""

    def time(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, gpu: GPUSpec,
             cluster: Any) -> Any:
        """The full :class:`TimeEstimate` of one layout on ``gpu``."""


class AnalyticEstimator:
    """``frenzy_core.memory`` and ``frenzy_core.timing``: the library's own analytic models."""

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        return np.asarray(estimate_memory_batch(model, layouts, training).device_bytes, dtype=np.int64)

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays, gpu: GPUSpec,
                    cluster: Any) -> np.ndarray:
        result = estimate_iteration_time_batch(model, training, gpu, layouts, cluster=cluster)
        return np.asarray(result.iteration_s, dtype=np.float64)

    def memory(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> Any:
        return estimate_memory(model, training, parallel)

    def time(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, gpu: GPUSpec,
             cluster: Any) -> Any:
        return estimate_iteration_time(model, training, parallel, gpu, cluster=cluster)
