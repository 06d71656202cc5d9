"""What the memory probe measures: the peak of one training run, per phase, and the tensors alive at it."""

from __future__ import annotations

import enum

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.errors import ConfigError

__all__ = ["PeakTensors", "Phase", "PhasePeak", "ProbeResult"]


class Phase(str, enum.Enum):
    """Phases of a training step, in order."""

    FORWARD = "forward"
    """Forward pass and loss."""
    BACKWARD = "backward"
    """Backward pass, until the last gradient is written."""
    OPTIMIZER = "optimizer"
    """Optimizer step and ``zero_grad(set_to_none=True)``."""


class PhasePeak(FrozenModel):
    """Peak of live tensor bytes within one phase of one micro-batch."""

    step: int = Field(ge=0, description="0-based optimizer step (iteration).")
    microbatch: int = Field(ge=0, description="0-based micro-batch of that step (0 for the optimizer phase).")
    phase: Phase = Field(description="Which phase.")
    peak_bytes: int = Field(ge=0, description="Largest sum of live (block-rounded) tensor bytes in the phase.")
    tracker_breakdown: dict[str, int] = Field(description="MemTracker's categories at that peak.")
    logits_loss_bytes: int = Field(default=0, ge=0, description="Bytes at that peak made by the head and loss.")
    end_bytes: int = Field(ge=0, description="Live bytes when the phase ended.")


class PeakTensors(FrozenModel):
    """Live tensors at the measured peak that share an origin: which op of which module made them, and when."""

    category: str = Field(description="MemTracker's category (Parameter, Gradient, Activation, Temp, Optstate, ...).")
    module: str = Field(description="Innermost module running when they were made ('' outside any module).")
    op: str = Field(description="The aten op that returned them ('' for parameters, gradients and states).")
    made_in: str = Field(description="Phase and step they were made in, e.g. 'forward step 1'.")
    dtype: str = Field(description="Element type.")
    shape: tuple[int, ...] = Field(description="Shape of the first of them.")
    count: int = Field(ge=1, description="How many storages.")
    bytes: int = Field(ge=0, description="Their block-rounded bytes together.")


class ProbeResult(FrozenModel):
    """Measured memory of a training step on one device: the peak, what it consisted of, and when."""

    peak_bytes: int = Field(ge=0, description="Peak of live tensor bytes (vs torch.cuda.max_memory_allocated).")
    peak_phase: Phase = Field(description="Phase holding the peak.")
    peak_step: int = Field(ge=0, description="0-based step holding the peak.")
    breakdown: dict[str, int] = Field(description="Bytes per MEMORY_CATEGORIES category at the peak.")
    tracker_breakdown: dict[str, int] = Field(description="MemTracker's own categories at the peak.")
    phases: list[PhasePeak] = Field(description="Peak of every phase of every micro-batch and step, in order.")
    module_activation_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="Activation bytes a module leaves alive after its first forward (output, saved tensors).",
    )
    peak_tensors: list[PeakTensors] = Field(
        default_factory=list,
        description="The tensors alive at the peak grouped by origin, largest first (when attribution was asked).",
    )
    loop: str = Field(default="framework", description="The training loop measured ('framework', 'plain', a name).")
    block_bytes: int = Field(description="Allocation rounding applied to every storage (1: none).")
    notes: list[str] = Field(default_factory=list, description="How the run differed from the request.")

    @model_validator(mode="after")
    def _sums(self) -> ProbeResult:
        if sum(self.breakdown.values()) != self.peak_bytes:
            raise ValueError(f"breakdown sums to {sum(self.breakdown.values())}, not peak_bytes={self.peak_bytes}")
        return self

    def phase_peak_bytes(self, phase: Phase | str) -> int:
        """Largest peak of ``phase`` over every step and micro-batch."""
        try:
            wanted = Phase(phase)
        except ValueError:
            known = [p.value for p in Phase]
            raise ConfigError(f"phase must be one of {known}, got {phase!r}", field="phase", value=phase) from None
        return max((p.peak_bytes for p in self.phases if p.phase is wanted), default=0)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30
