"""The training loops the probe can measure: a step protocol for any loop, and the two common ones by name.

Which loop runs changes the peak: a loop that keeps the model output (logits, KV cache) alive through backward,
the optimizer step and the next forward needs more memory than one that keeps only the loss. ``TrainingLoop``
names the two; a :class:`TrainingStep` is any other. The same steps run on the CPU probe and on a CUDA device
(``benchmarks/gpu_memory_check.py``), which supply their own :class:`StepContext`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from frenzy_core.errors import ConfigError
from frenzy_core.memory.probe_result import Phase

if TYPE_CHECKING:
    import torch

__all__ = ["StepContext", "TrainingLoop", "TrainingStep", "framework_step", "plain_step", "resolve_loop", "run_model"]


class TrainingLoop(str, enum.Enum):
    """The two ways training loops treat the model output; ``keep_outputs`` is the matching training setting."""

    FRAMEWORK = "framework"
    """Keeps only the loss: the output is released before backward (HF Trainer's ``compute_loss``, Accelerate
    examples, torchtitan, Megatron). ``keep_outputs=False``."""
    PLAIN = "plain"
    """``out = model(**batch); out.loss.backward(); opt.step(); opt.zero_grad()``: ``out`` (logits, any KV cache)
    lives through backward and the optimizer step, and until the next forward returns and rebinds the name.
    ``keep_outputs=True``."""

    @property
    def keep_outputs(self) -> bool:
        """Whether the loop keeps the model output alive (``TrainingConfig.keep_outputs``)."""
        return self is TrainingLoop.PLAIN

    @classmethod
    def from_keep_outputs(cls, keep_outputs: bool) -> TrainingLoop:
        """The loop ``TrainingConfig.keep_outputs`` describes."""
        return cls.PLAIN if keep_outputs else cls.FRAMEWORK


@dataclass
class StepContext:
    """What a training step gets besides the model, batch and optimizer."""

    step: int
    """0-based optimizer step."""
    microbatch: int
    """0-based micro-batch within the step."""
    microbatches: int
    """Micro-batches per optimizer step (gradient accumulation)."""
    loss: Callable[[Any], Any]
    """The scalar loss of a model output (Hugging Face: ``output.loss``)."""
    autocast: Callable[[], AbstractContextManager[Any]]
    """The autocast region the forward and loss run in (a null context without mixed precision)."""
    mark: Callable[[Phase], None]
    """Call ``mark(Phase.BACKWARD)`` before backward and ``mark(Phase.OPTIMIZER)`` before the optimizer step so
    that the measured peak is attributed to its phase (unmarked work counts as forward)."""
    state: dict[str, Any] = field(default_factory=dict)
    """Survives from one call to the next: a loop's variables (the plain loop keeps its output here)."""

    @property
    def last_microbatch(self) -> bool:
        """Whether this micro-batch ends the step (the optimizer steps after it)."""
        return self.microbatch == self.microbatches - 1


class TrainingStep(Protocol):
    """One micro-batch of a training loop: forward and loss, backward, and on the last micro-batch
    (``ctx.last_microbatch``) the optimizer step and ``zero_grad``."""

    def __call__(self, model: torch.nn.Module, batch: Any, optimizer: torch.optim.Optimizer, ctx: StepContext) -> None:
        ...


def run_model(model: Any, batch: Any) -> Any:
    """``model(**batch)`` for a mapping (keyword arguments), ``model(*batch)`` for a tuple."""
    return model(**batch) if isinstance(batch, Mapping) else model(*batch)


def _optimizer_step(optimizer: Any, ctx: StepContext) -> None:
    if ctx.last_microbatch:
        ctx.mark(Phase.OPTIMIZER)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def framework_step(model: Any, batch: Any, optimizer: Any, ctx: StepContext) -> None:
    """The framework loop: only the loss survives the forward (HF ``Trainer.training_step``)."""
    with ctx.autocast():
        output = run_model(model, batch)
        loss = ctx.loss(output)
    del output
    ctx.mark(Phase.BACKWARD)
    loss.backward()
    del loss
    _optimizer_step(optimizer, ctx)


def plain_step(model: Any, batch: Any, optimizer: Any, ctx: StepContext) -> None:
    """The plain loop: the output is a loop variable, replaced only when the next forward returns."""
    with ctx.autocast():
        ctx.state["out"] = run_model(model, batch)
        loss = ctx.loss(ctx.state["out"])
    ctx.mark(Phase.BACKWARD)
    loss.backward()
    del loss
    _optimizer_step(optimizer, ctx)


_STEPS: dict[TrainingLoop, TrainingStep] = {TrainingLoop.FRAMEWORK: framework_step, TrainingLoop.PLAIN: plain_step}


def resolve_loop(loop: TrainingLoop | str | TrainingStep) -> tuple[TrainingStep, str]:
    """The step function and its name for a loop name or a user's step callable."""
    if isinstance(loop, (TrainingLoop, str)):
        try:
            named = TrainingLoop(loop)
        except ValueError:
            known = [m.value for m in TrainingLoop]
            raise ConfigError(f"loop must be one of {known} or a step callable, got {loop!r}", field="loop",
                              value=loop, hint="'framework' frees outputs before backward, 'plain' keeps them") from None
        return _STEPS[named], named.value
    if not callable(loop):
        raise ConfigError(f"loop must be a loop name or a step callable, got {type(loop).__name__}", field="loop",
                          value=loop, hint="pass 'framework', 'plain' or f(model, batch, optimizer, ctx)")
    return loop, getattr(loop, "__name__", type(loop).__name__)
