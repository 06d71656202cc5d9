"""Measure a training step's peak memory on the CPU with fake tensors: no storage, no GPU.

The module is built and run under ``torch._subclasses.fake_tensor.FakeTensorMode`` while
``torch.distributed._tools.mem_tracker.MemTracker`` counts every live tensor storage by category
(parameter, buffer, gradient, activation, backward temporary, optimizer state). Needs the optional
``torch`` extra.

How the count relates to ``torch.cuda.max_memory_allocated``: every storage is rounded up to the CUDA
caching allocator's 512-byte block (see :func:`_block_rounding`), as the allocator does by default. The
allocator may still report more: a large-pool block is handed out whole when the remainder would be under
1 MiB, and ``roundup_power2_divisions`` rounds further; so the probe is the lower bound of what the GPU
counter shows. Kernels' workspaces (cuBLAS, flash) are not tensors and are not counted.

How the CPU run is kept close to a CUDA run (see :func:`_cuda_like_kernels`): dropout and SDPA with
dropout save what the CUDA kernels save, and under autocast softmax, log_softmax, layer_norm and pow run in
fp32 as CUDA autocast runs them. Not covered: the rest of CUDA autocast's fp32 list (exp, log, rsqrt, ...),
which the Hugging Face models probed here only ever give fp32 inputs.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import math
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.errors import ConfigError, OptionalDependencyError

if TYPE_CHECKING:
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from frenzy_core.config.model import ModelConfig
    from frenzy_core.config.training import TrainingConfig

__all__ = ["CUDA_BLOCK_BYTES", "Phase", "PhasePeak", "ProbeResult", "measure_training_step", "probe_memory"]

CUDA_BLOCK_BYTES = 512
"""CUDA caching allocator's rounding (``kMinBlockSize`` in c10/cuda/CUDACachingAllocator.cpp), which
``torch.cuda.max_memory_allocated`` counts; MemTracker applies it to CUDA tensors only."""


class Phase(str, enum.Enum):
    """Phases of a training step, in order."""

    FORWARD = "forward"
    """Forward pass and loss."""
    BACKWARD = "backward"
    """Backward pass, until the last gradient is written."""
    OPTIMIZER = "optimizer"
    """Optimizer step and ``zero_grad(set_to_none=True)``."""


# MemTracker categories (``_MemRefType`` values) -> the estimator's categories (MEMORY_CATEGORIES).
# Buffers (rotary tables, position ids) are counted with the parameters; backward temporaries
# (activation gradients, recomputed tensors) and the input batch with the activations, except the
# tensors of the head and loss (see ``backbone``), which go to logits_loss.
_CATEGORY_OF_TRACKER = {
    "Parameter": "parameters",
    "Buffer": "parameters",
    "Gradient": "gradients",
    "Activation": "activations",
    "Temp": "activations",
    "Optstate": "optimizer_states",
    "Other": "activations",
}


class PhasePeak(FrozenModel):
    """Peak of live tensor bytes within one phase of one micro-batch."""

    step: int = Field(ge=0, description="0-based optimizer step (iteration).")
    microbatch: int = Field(ge=0, description="0-based micro-batch of that step (0 for the optimizer phase).")
    phase: Phase = Field(description="Which phase.")
    peak_bytes: int = Field(
        ge=0, description="Largest sum of live (block-rounded) tensor bytes in the phase."
    )
    tracker_breakdown: dict[str, int] = Field(description="MemTracker's categories at that peak.")
    logits_loss_bytes: int = Field(
        default=0, ge=0, description="Bytes at that peak made by the head and loss."
    )
    end_bytes: int = Field(ge=0, description="Live bytes when the phase ended.")


class ProbeResult(FrozenModel):
    """Measured memory of a training step on one device: the peak, what it consisted of, and when."""

    peak_bytes: int = Field(
        ge=0, description="Peak of live tensor bytes (vs torch.cuda.max_memory_allocated)."
    )
    peak_phase: Phase = Field(description="Phase holding the peak.")
    peak_step: int = Field(ge=0, description="0-based step holding the peak.")
    breakdown: dict[str, int] = Field(description="Bytes per MEMORY_CATEGORIES category at the peak.")
    tracker_breakdown: dict[str, int] = Field(description="MemTracker's own categories at the peak.")
    phases: list[PhasePeak] = Field(
        description="Peak of every phase of every micro-batch and step, in order."
    )
    module_activation_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="Activation bytes a module leaves alive after its first forward (output, saved tensors).",
    )
    block_bytes: int = Field(description="Allocation rounding applied to every storage (1: none).")
    notes: list[str] = Field(default_factory=list, description="How the run differed from the request.")

    @model_validator(mode="after")
    def _sums(self) -> ProbeResult:
        if sum(self.breakdown.values()) != self.peak_bytes:
            raise ValueError(
                f"breakdown sums to {sum(self.breakdown.values())}, not peak_bytes={self.peak_bytes}"
            )
        return self

    def phase_peak_bytes(self, phase: Phase | str) -> int:
        """Largest peak of ``phase`` over every step and micro-batch."""
        try:
            wanted = Phase(phase)
        except ValueError:
            known = [p.value for p in Phase]
            raise ConfigError(
                f"phase must be one of {known}, got {phase!r}", field="phase", value=phase
            ) from None
        return max((p.peak_bytes for p in self.phases if p.phase is wanted), default=0)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise OptionalDependencyError("torch", "torch", "the memory probe") from None
    return torch


@contextlib.contextmanager
def _block_rounding(block_bytes: int) -> Iterator[None]:
    """Make MemTracker round every storage up to ``block_bytes``, whatever its device.

    MemTracker (torch/distributed/_tools/mem_tracker.py, ``_WeakRefInfo._calculate_mem_consumed``)
    rounds CUDA storages to 512 bytes and counts CPU ones exactly; fake tensors here are CPU tensors
    standing in for CUDA ones, so the rounding is applied to them for the duration of the probe.
    """
    from torch.distributed._tools import mem_tracker

    info = mem_tracker._WeakRefInfo
    original = info._calculate_mem_consumed

    def rounded(self: Any) -> int:
        return int(math.ceil(self.size * self.element_size / block_bytes) * block_bytes)

    info._calculate_mem_consumed = rounded  # type: ignore[method-assign]
    try:
        yield
    finally:
        info._calculate_mem_consumed = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _cuda_like_kernels() -> Iterator[None]:
    """Make CPU kernels and CPU autocast save what their CUDA counterparts save, while the probe runs.

    - ``F.dropout``: the CPU path (aten/src/ATen/native/Dropout.cpp, ``_dropout_impl``) keeps a noise tensor
      of the input's dtype, while CUDA's fused ``native_dropout`` keeps a 1-byte bool mask; the probe calls
      ``torch.native_dropout``, whose CPU kernel also returns a bool mask.
    - ``F.scaled_dot_product_attention`` with dropout: the CPU falls back to the math kernel and
      materialises s x s probabilities; CUDA flash/memory-efficient kernels drop out in-kernel and save the
      output and log-sum-exp only, which the CPU flash kernel (taken with ``dropout_p=0``) also saves.
    - Under autocast, CUDA runs ``softmax``/``log_softmax`` (no dtype given), ``layer_norm`` and ``pow`` in
      fp32 (aten/src/ATen/autocast_mode.cpp, the CUDA fp32 lists); CPU autocast leaves them in bf16/fp16.
      The probe upcasts their low-precision inputs while CPU autocast is on. Other ops of those lists
      (exp, log, rsqrt, ...) are not covered; the models probed here give them fp32 inputs anyway.

    The functions are swapped on ``torch.nn.functional`` and ``torch`` (not with a torch function mode,
    which checkpoint recomputation in backward would not see) and restored afterwards.
    """
    import torch
    import torch.nn.functional as F

    originals: dict[tuple[Any, str], Callable[..., Any]] = {
        (F, "dropout"): F.dropout,
        (F, "scaled_dot_product_attention"): F.scaled_dot_product_attention,
        (F, "softmax"): F.softmax,
        (F, "log_softmax"): F.log_softmax,
        (F, "layer_norm"): F.layer_norm,
        (torch, "pow"): torch.pow,
    }
    half = (torch.float16, torch.bfloat16)

    def upcast(t: Any) -> Any:
        """``t`` in fp32 if CPU autocast is on and ``t`` is a half-precision tensor (else unchanged)."""
        if isinstance(t, torch.Tensor) and t.dtype in half and torch.is_autocast_enabled("cpu"):
            return t.float()
        return t

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or not 0.0 < p < 1.0:
            return originals[F, "dropout"](input, p, training, inplace)
        out, _mask = torch.native_dropout(input, p, True)
        return input.copy_(out) if inplace else out

    def sdpa(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 4:  # dropout_p is the fifth positional argument
            args = (*args[:4], 0.0, *args[5:])
        else:
            kwargs["dropout_p"] = 0.0
        return originals[F, "scaled_dot_product_attention"](*args, **kwargs)

    def softmax(input: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        return originals[F, "softmax"](upcast(input) if dtype is None else input, dim, _stacklevel, dtype)

    def log_softmax(input: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        return originals[F, "log_softmax"](upcast(input) if dtype is None else input, dim, _stacklevel, dtype)

    def layer_norm(input: Any, shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
        if upcast(input) is input:
            return originals[F, "layer_norm"](input, shape, weight, bias, eps)
        return originals[F, "layer_norm"](upcast(input), shape, upcast(weight), upcast(bias), eps)

    def pow(input: Any, exponent: Any, **kwargs: Any) -> Any:
        return originals[torch, "pow"](upcast(input), upcast(exponent), **kwargs)

    replacements: dict[tuple[Any, str], Callable[..., Any]] = {
        (F, "dropout"): dropout,
        (F, "scaled_dot_product_attention"): sdpa,
        (F, "softmax"): softmax,
        (F, "log_softmax"): log_softmax,
        (F, "layer_norm"): layer_norm,
        (torch, "pow"): pow,
    }
    for (module, name), function in replacements.items():
        setattr(module, name, function)
    try:
        yield
    finally:
        for (module, name), function in originals.items():
            setattr(module, name, function)


def _snapshot_total(snap: Mapping[Any, Mapping[Any, int]]) -> tuple[int, dict[str, int]]:
    """Total bytes and per-category bytes of a MemTracker snapshot, summed over devices."""
    cats: dict[str, int] = {}
    total = 0
    for dev_snap in snap.values():
        for key, value in dev_snap.items():
            name = getattr(key, "value", key)
            if name == "Total":
                total += value
            else:
                cats[str(name)] = cats.get(str(name), 0) + value
    return total, cats


@functools.lru_cache(maxsize=1)
def _head_tracker_class() -> type:
    """MemTracker that also counts the bytes of storages created while ``tagging`` (the head and loss)."""
    from torch.distributed._tools.common_utils import get_untyped_storages
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    activation_types = (_MemRefType.ACT, _MemRefType.TEMP)

    class HeadTracker(MemTracker):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.tagging = False
            self.head_bytes_at_peak = 0
            self._head: dict[int, tuple[weakref.ref[Any], Any]] = {}

        @property
        def head_bytes(self) -> int:
            """Live activation bytes of tagged storages (a head weight's gradient is not counted)."""
            return sum(w.mem_consumed for _, w in self._head.values() if w.reftype in activation_types)

        def _track(self, reftype: Any, t: Any) -> None:
            new = [st for st in get_untyped_storages(t) if st not in self._WINFO] if self.tagging else []
            super()._track(reftype, t)
            for st in new:
                winfo, _ = self._WINFO.get(st, (None, None))
                if winfo is not None:
                    ref = weakref.ref(st, lambda r: self._head.pop(id(r), None))
                    self._head[id(ref)] = (ref, winfo)

        def _update_peak_stats(self, peak_state: Any) -> None:
            # The global peak only: MemTracker's per-module peak snapshots (a deep copy per active module
            # per op, a quarter of the run time) are not used by the probe.
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)
                    self.head_bytes_at_peak = self.head_bytes

    return HeadTracker


def _first_output(output: Any) -> Any:
    """The first tensor a module returned (a tensor, a tuple, or a Hugging Face ``ModelOutput``)."""
    if isinstance(output, (tuple, list)):
        return output[0] if output else None
    if isinstance(output, Mapping):
        return next(iter(output.values()), None)
    return output


def _tag_head(tracker: Any, backbone: Any) -> Any:
    """Tag storages made after ``backbone``'s forward and before backward reaches its output."""

    def stop_tagging(grad: Any) -> None:
        tracker.tagging = False

    def after_forward(module: Any, args: Any, output: Any) -> None:
        tracker.tagging = True
        first = _first_output(output)
        if getattr(first, "requires_grad", False):
            first.register_hook(stop_tagging)

    return backbone.register_forward_hook(after_forward)


class _PhaseRecorder:
    """Reads MemTracker's running peak per phase by resetting it at each phase start."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.records: list[PhasePeak] = []

    def start(self) -> None:
        # MemTracker keeps one running peak (private ``_peak_mem``/``_peak_mem_snap``); restarting it
        # from the current snapshot makes the next reading the peak of this phase alone.
        snap = self.tracker.get_tracker_snapshot("current")
        self.tracker._peak_mem_snap = snap
        self.tracker._peak_mem = {dev: dev_snap["Total"] for dev, dev_snap in snap.items()}
        self.tracker.head_bytes_at_peak = self.tracker.head_bytes

    def stop(self, step: int, microbatch: int, phase: Phase) -> None:
        peak, cats = _snapshot_total(self.tracker.get_tracker_snapshot("peak"))
        end, end_cats = _snapshot_total(self.tracker.get_tracker_snapshot("current"))
        head = self.tracker.head_bytes_at_peak
        if end > peak:  # the phase ended above anything seen during it (e.g. no op ran)
            peak, cats, head = end, end_cats, self.tracker.head_bytes
        self.records.append(
            PhasePeak(
                step=step,
                microbatch=microbatch,
                phase=phase,
                peak_bytes=peak,
                tracker_breakdown=cats,
                logits_loss_bytes=head,
                end_bytes=end,
            )
        )


def _module_activations(tracker: MemTracker) -> dict[str, int]:
    """Activation bytes alive after each module's forward that were not alive before it."""
    out: dict[str, int] = {}
    for stats in tracker.memory_tracking.values():
        pre = stats.snapshots.get(_state("PRE_FW"))
        post = stats.snapshots.get(_state("POST_FW"))
        if not pre or not post:
            continue
        _, pre_cats = _snapshot_total(pre[0])
        _, post_cats = _snapshot_total(post[0])
        out[stats.mod_fqn] = post_cats.get("Activation", 0) - pre_cats.get("Activation", 0)
    return out


def _state(name: str) -> Any:
    from torch.distributed._tools.mem_tracker import _ModState

    return getattr(_ModState, name)


def _breakdown(
    tracker_cats: Mapping[str, int], optimizer_state_bytes: int, logits_loss_bytes: int
) -> dict[str, int]:
    """Map MemTracker's categories onto MEMORY_CATEGORIES.

    Head-and-loss tensors move from activations to logits_loss; optimizer bytes beyond the final states
    are temporaries.
    """
    out: dict[str, int] = {}
    for name, value in tracker_cats.items():
        key = _CATEGORY_OF_TRACKER.get(name, "activations")
        out[key] = out.get(key, 0) + value
    logits_loss = min(logits_loss_bytes, out.get("activations", 0))
    out["logits_loss"] = logits_loss
    out["activations"] = out.get("activations", 0) - logits_loss
    opt = out.pop("optimizer_states", 0)
    states = min(opt, optimizer_state_bytes)
    out["optimizer_states"] = states
    out["optimizer_temporaries"] = opt - states
    return {k: v for k, v in out.items() if v}


def _optimizer_state_bytes(optimizer: torch.optim.Optimizer, block_bytes: int) -> int:
    torch = _import_torch()
    seen: set[int] = set()
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and id(value) not in seen:
                seen.add(id(value))
                nbytes = value.untyped_storage().nbytes()
                total += int(math.ceil(nbytes / block_bytes) * block_bytes)
    return total


def measure_training_step(
    module_factory: Callable[[], torch.nn.Module],
    batch_factory: Callable[[], Any],
    *,
    optimizer_factory: Callable[[Any], torch.optim.Optimizer] | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    backbone: str | None = None,
    autocast_dtype: torch.dtype | None = None,
    steps: int = 2,
    microbatches: int = 1,
    block_bytes: int = CUDA_BLOCK_BYTES,
) -> ProbeResult:
    """Peak memory of ``steps`` training iterations of ``microbatches`` forward/backward passes each.

    ``module_factory`` and ``batch_factory`` are called under fake-tensor mode (so parameters and inputs
    have no storage); the batch is a mapping (keyword arguments) or a tuple (positional ones);
    ``loss_fn`` turns the module's output into the scalar loss (default: ``output.loss``, as Hugging
    Face models return it when given labels); ``backbone`` names the submodule before the head (e.g.
    ``"model"``): tensors made after its forward and before backward reaches its output are reported as
    ``logits_loss``; ``optimizer_factory`` gets the parameters (default:
    ``torch.optim.AdamW(params, foreach=True)``); ``autocast_dtype`` runs forward and loss under
    ``torch.autocast("cpu", dtype=...)``. Only the loss is kept for backward: the output (logits included)
    and the batch are released first, as the Hugging Face Trainer's ``compute_loss`` does; tensors autograd
    saved stay alive. Gradients are set to None after each step. Two steps are the
    default because optimizer states are created during the first one. Dropout and attention dropout run
    as their CUDA kernels would store them (see :func:`_cuda_like_kernels`).
    """
    if steps < 1 or microbatches < 1:
        raise ConfigError(
            f"steps={steps} and microbatches={microbatches} must both be >= 1", field="steps", value=steps
        )
    if block_bytes < 1:
        raise ConfigError(
            f"block_bytes must be >= 1, got {block_bytes}", field="block_bytes", value=block_bytes
        )
    torch = _import_torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    def default_loss(output: Any) -> Any:
        return output.loss

    def default_optimizer(params: Any) -> Any:
        return torch.optim.AdamW(params, foreach=True)

    get_loss = loss_fn or default_loss
    make_optimizer = optimizer_factory or default_optimizer
    autocast = (
        torch.autocast("cpu", dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    module_acts: dict[str, int] = {}
    with _block_rounding(block_bytes), FakeTensorMode(), _cuda_like_kernels(), warnings.catch_warnings():
        # ModTracker warns when a module made in forward (e.g. a loss helper) is gone by backward; harmless.
        warnings.filterwarnings("ignore", message="Module is None. Skipping", category=UserWarning)
        module = module_factory()
        module.train()
        optimizer = make_optimizer(module.parameters())
        tracker = _head_tracker_class()()
        recorder = _PhaseRecorder(tracker)
        hook = _tag_head(tracker, module.get_submodule(backbone)) if backbone else None
        with tracker:
            tracker.track_external(module, optimizer)
            for step in range(steps):
                for mb in range(microbatches):
                    tracker.reset_mod_stats()  # MemTracker refuses a second root forward otherwise
                    batch = batch_factory()
                    tracker.tagging = False
                    recorder.start()
                    with autocast:
                        output = module(**batch) if isinstance(batch, Mapping) else module(*batch)
                        loss = get_loss(output)
                    recorder.stop(step, mb, Phase.FORWARD)
                    if step == 0 and mb == 0:
                        module_acts = _module_activations(tracker)
                    del output, batch  # as a training loop that keeps only the loss (e.g. HF Trainer)
                    recorder.start()
                    loss.backward()
                    del loss
                    recorder.stop(step, mb, Phase.BACKWARD)
                recorder.start()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                recorder.stop(step, 0, Phase.OPTIMIZER)
        if hook is not None:
            hook.remove()
        state_bytes = _optimizer_state_bytes(optimizer, block_bytes)
    best = max(recorder.records, key=lambda r: r.peak_bytes)
    return ProbeResult(
        peak_bytes=best.peak_bytes,
        peak_phase=best.phase,
        peak_step=best.step,
        breakdown=_breakdown(best.tracker_breakdown, state_bytes, best.logits_loss_bytes),
        tracker_breakdown=best.tracker_breakdown,
        phases=recorder.records,
        module_activation_bytes=module_acts,
        block_bytes=block_bytes,
    )


def probe_memory(model: ModelConfig, training: TrainingConfig, *, steps: int = 2) -> ProbeResult:
    """Measure one rank of ``training`` for ``model`` with its Hugging Face twin, data-parallel degree 1.

    ``training.global_batch_size`` sets the gradient-accumulation micro-batches (default one). ZeRO, tensor,
    pipeline and context parallelism are analytic only. See :mod:`frenzy_core.memory.hf_models` for how
    each setting maps onto Transformers and torch, and ``ProbeResult.notes`` for what was approximated.
    """
    from frenzy_core.config.layout import num_microbatches
    from frenzy_core.config.parallel import ParallelConfig
    from frenzy_core.memory.hf_models import hf_training_setup

    setup = hf_training_setup(model, training)
    with setup.runtime():
        result = measure_training_step(
            setup.module_factory,
            setup.batch_factory,
            optimizer_factory=setup.optimizer_factory,
            loss_fn=setup.loss_fn,
            backbone=setup.backbone,
            autocast_dtype=setup.autocast_dtype,
            steps=steps,
            microbatches=num_microbatches(training, ParallelConfig()),
        )
    return result.replace(notes=list(setup.notes)) if setup.notes else result
