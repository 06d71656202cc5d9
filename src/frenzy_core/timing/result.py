"""Result types of the iteration-time model: one estimate, or arrays of them from the vectorised estimator."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel

__all__ = ["TIME_CATEGORIES", "TimeEstimate", "TimeEstimateBatch"]

TIME_CATEGORIES: tuple[str, ...] = (
    "compute",
    "recompute",
    "elementwise",
    "kernel_launch",
    "tensor_parallel",
    "context_parallel",
    "expert_parallel",
    "pipeline_p2p",
    "pipeline_bubble",
    "data_parallel",
    "optimizer",
    "offload",
)
"""Components of an iteration on the busiest GPU, in seconds; ``iteration_s`` = their sum - ``overlapped_s``."""

FloatArray = npt.NDArray[np.float64]


class TimeEstimate(FrozenModel):
    """Seconds per optimizer step of a training job, with where they go."""

    iteration_s: float = Field(gt=0, description="Seconds per optimizer step.")
    breakdown: dict[str, float] = Field(description="Seconds per category (TIME_CATEGORIES), before overlap.")
    overlapped_s: float = Field(ge=0, description="Communication seconds hidden behind compute.")
    tokens_per_s: float = Field(gt=0, description="Training tokens per second, whole job.")
    samples_per_s: float = Field(gt=0, description="Sequences per second, whole job.")
    mfu: float = Field(ge=0, description="Model FLOPs utilisation: model FLOPs / (time x GPUs x dtype peak).")
    model_tflops_per_gpu: float = Field(ge=0, description="Model FLOPs (no recompute) per second per GPU, in 1e12.")
    num_microbatches: int = Field(gt=0, description="Micro-batches per data-parallel rank per step.")
    global_batch_size: int = Field(gt=0, description="Sequences per optimizer step.")
    world_size: int = Field(gt=0, description="GPUs the job uses.")

    @model_validator(mode="after")
    def _sums(self) -> TimeEstimate:
        if set(self.breakdown) != set(TIME_CATEGORIES):
            raise ValueError(f"breakdown keys must be {TIME_CATEGORIES}")
        total = sum(self.breakdown.values()) - self.overlapped_s
        if not math.isclose(total, self.iteration_s, rel_tol=1e-9):
            raise ValueError(f"sum(breakdown) - overlapped_s = {total}, not iteration_s={self.iteration_s}")
        return self


@dataclass(frozen=True)
class TimeEstimateBatch:
    """Arrays of estimates from :func:`estimate_iteration_time_batch`, one entry per candidate layout."""

    iteration_s: FloatArray
    breakdown: dict[str, FloatArray]
    overlapped_s: FloatArray
    tokens_per_s: FloatArray
    samples_per_s: FloatArray
    mfu: FloatArray
    model_tflops_per_gpu: FloatArray
    num_microbatches: npt.NDArray[np.int64]
    global_batch_size: npt.NDArray[np.int64]
    world_size: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.iteration_s.shape[0])

    def at(self, i: int) -> TimeEstimate:
        """Candidate ``i`` as a :class:`TimeEstimate`."""
        return TimeEstimate(
            iteration_s=float(self.iteration_s[i]),
            breakdown={k: float(v[i]) for k, v in self.breakdown.items()},
            overlapped_s=float(self.overlapped_s[i]),
            tokens_per_s=float(self.tokens_per_s[i]),
            samples_per_s=float(self.samples_per_s[i]),
            mfu=float(self.mfu[i]),
            model_tflops_per_gpu=float(self.model_tflops_per_gpu[i]),
            num_microbatches=int(self.num_microbatches[i]),
            global_batch_size=int(self.global_batch_size[i]),
            world_size=int(self.world_size[i]),
        )
