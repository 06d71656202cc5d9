"""``TrainingJob``: one LLM training job submitted to a shared cluster, with the work it must do."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from frenzy_core import _limits as limits
from frenzy_core._base import FrozenModel
from frenzy_core._limits import at_most, beyond_message
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import UnknownNameError
from frenzy_core.hardware.gpus import get_gpu_spec

__all__ = ["GPURequest", "TrainingJob"]


class GPURequest(FrozenModel):
    """The allocation a user asked for: a GPU count, optionally of one GPU type."""

    num_gpus: Annotated[int, at_most(limits.GPUS)] = Field(gt=0, description="GPUs asked for.")
    gpu_type: str | None = Field(default=None, description=(
        "GPU type id or alias, stored as the catalogue id (e.g. 'v100' -> 'v100-32gb'); None: any type."))

    @field_validator("gpu_type")
    @classmethod
    def _canonical_gpu(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return get_gpu_spec(value).id
        except UnknownNameError as exc:
            raise ValueError(str(exc)) from None


class TrainingJob(FrozenModel):
    """A training job: when it arrives, what it trains, and how much. Work is counted in tokens (or
    iterations, which need a fixed ``training.global_batch_size``): it must not depend on the layout."""

    id: str = Field(description="Unique within a workload.")
    submit_time_s: Annotated[float, at_most(limits.TIME_S)] = Field(
        ge=0, description="Arrival, seconds after the workload starts.")
    model: ModelConfig = Field(description="The model trained.")
    training: TrainingConfig = Field(description="The recipe (sequence length, batch, precision, optimizer).")
    work_tokens: Annotated[int | None, at_most(limits.TOKENS)] = Field(
        default=None, gt=0, description="Tokens to train; or work_iterations.")
    work_iterations: Annotated[int | None, at_most(limits.ITERATIONS)] = Field(
        default=None, gt=0, description="Optimizer steps; or work_tokens.")
    request: GPURequest | None = Field(default=None, description="The allocation the user asked for, if any.")
    deadline_s: Annotated[float | None, at_most(limits.TIME_S)] = Field(
        default=None, description="Finish by this time (same clock as submit).")
    priority: int = Field(default=0, ge=-(2**31), lt=2**31, description="Higher runs first under priority-aware policies.")

    @model_validator(mode="after")
    def _check(self) -> TrainingJob:
        if (self.work_tokens is None) == (self.work_iterations is None):
            raise ValueError(f"give exactly one of work_tokens ({self.work_tokens}) and work_iterations "
                             f"({self.work_iterations})")
        if self.total_tokens_or_none is not None and self.total_tokens_or_none > limits.TOKENS.high:
            raise ValueError(beyond_message(self.total_tokens_or_none, limits.TOKENS, "work_iterations x tokens per "
                                            "iteration"))
        if self.work_iterations is not None and self.training.global_batch_size is None:
            raise ValueError("work_iterations needs training.global_batch_size (without one the planner's "
                             "default batch may move by up to 5 % between layouts); give work_tokens instead")
        if self.deadline_s is not None and self.deadline_s <= self.submit_time_s:
            raise ValueError(f"deadline_s={self.deadline_s} must be after submit_time_s={self.submit_time_s}")
        return self

    @property
    def tokens_per_iteration(self) -> int | None:
        """Tokens one optimizer step trains on, when the global batch is fixed."""
        gbs = self.training.global_batch_size
        return None if gbs is None else gbs * self.training.seq_len

    @property
    def total_tokens_or_none(self) -> int | None:
        """The job's work in tokens; None for iterations without a fixed global batch (which the validator refuses)."""
        if self.work_tokens is not None:
            return self.work_tokens
        per_step = self.tokens_per_iteration
        return None if self.work_iterations is None or per_step is None else self.work_iterations * per_step

    @property
    def total_tokens(self) -> int:
        """The job's work in tokens."""
        if self.work_tokens is not None:
            return self.work_tokens
        per_step = self.tokens_per_iteration
        assert self.work_iterations is not None and per_step is not None  # the validator guarantees both
        return self.work_iterations * per_step
