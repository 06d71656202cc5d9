"""Measure a training step's peak memory on the CPU with fake tensors: no storage, no GPU.

The module is built and run under ``torch._subclasses.fake_tensor.FakeTensorMode`` while MemTracker counts every
live tensor storage (:mod:`frenzy_core.memory.probe_tracker`), for any training loop
(:mod:`frenzy_core.memory.probe_loops`). Needs the optional ``torch`` extra.

How the count relates to ``torch.cuda.max_memory_allocated``: every storage is rounded up to the CUDA caching
allocator's 512-byte block, as the allocator does by default. The allocator may still report more: a large-pool
block is handed out whole when the remainder would be under 1 MiB, and ``roundup_power2_divisions`` rounds
further; so the probe is the lower bound of what the GPU counter shows. Kernels' workspaces (cuBLAS, flash) are
not tensors and are not counted.

The CPU run is made to save what a CUDA run saves: dropout and scaled-dot-product attention take the CUDA kernels'
paths (:mod:`frenzy_core.memory.cuda_kernels`) and CPU autocast casts what CUDA autocast casts
(:mod:`frenzy_core.memory.cuda_autocast`).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING, Any

from frenzy_core import _limits as limits
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import (
    FrenzyError,
    MeasurementError,
    OptionalDependencyError,
    require_instance,
    require_number,
)
from frenzy_core.memory.cuda_autocast import cuda_autocast_policy
from frenzy_core.memory.cuda_kernels import cuda_dropout_and_attention
from frenzy_core.memory.probe_loops import StepContext, TrainingLoop, TrainingStep, resolve_loop
from frenzy_core.memory.probe_result import PeakTensors, Phase, PhasePeak, ProbeResult
from frenzy_core.memory.probe_tracker import (
    CUDA_BLOCK_BYTES,
    PhaseRecorder,
    block_rounding,
    breakdown,
    module_activations,
    new_tracker,
    optimizer_state_bytes,
    tag_head,
)

if TYPE_CHECKING:
    import torch

    from frenzy_core.config.model import ModelConfig

__all__ = ["CUDA_BLOCK_BYTES", "PeakTensors", "Phase", "PhasePeak", "ProbeResult", "StepContext", "TrainingLoop",
           "TrainingStep", "built_on_meta", "measure_training_step", "probe_memory"]

HFConfigSource = Mapping[str, Any] | str | PathLike[str]
"""A Hugging Face config: the parsed ``config.json`` dict, its path, or the folder holding it."""


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise OptionalDependencyError("torch", "torch", "the memory probe") from None
    return torch


@contextlib.contextmanager
def _cuda_like_run() -> Any:
    """Fake tensors, CUDA block rounding and CUDA kernel behaviour, for one measurement."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), cuda_dropout_and_attention(), cuda_autocast_policy(), _untracked_dtensor_metadata(), \
            warnings.catch_warnings():
        # ModTracker warns when a module made in forward (e.g. a loss helper) is gone by backward; harmless.
        warnings.filterwarnings("ignore", message="Module is None. Skipping", category=UserWarning)
        yield


@contextlib.contextmanager
def _untracked_dtensor_metadata() -> Iterator[None]:
    """DTensor works out an op's global output shape by running it on fake tensors of the global shapes
    (``ShardingPropagator._propagate_tensor_meta_non_cached``, in whatever fake mode is active): on a GPU those
    tensors hold no memory, but under the probe's fake mode the tracker would count them (at tp = 2, 8 bytes more
    per element of a vocabulary-parallel loss). While the probe runs, that propagation runs with the modes set
    aside, in a fake mode of its own. Nothing is patched unless DTensor is already imported."""
    module = sys.modules.get("torch.distributed.tensor._sharding_prop")
    if module is None:
        yield
        return
    from torch.utils._python_dispatch import _disable_current_modes

    cls = module.ShardingPropagator
    original = cls._propagate_tensor_meta_non_cached

    def untracked(self: Any, op_schema: Any) -> Any:
        with _disable_current_modes():
            return original(self, op_schema)

    cls._propagate_tensor_meta_non_cached = untracked
    try:
        yield
    finally:
        cls._propagate_tensor_meta_non_cached = original


@dataclass
class _Run:
    """What one pass over the steps recorded."""

    records: list[PhasePeak]
    peak_ops: list[int]
    state_bytes: int
    module_acts: dict[str, int]
    live_at_peak: list[PeakTensors]


@dataclass(frozen=True)
class _Plan:
    """Everything a measurement needs, resolved from measure_training_step's arguments."""

    module_factory: Callable[[], Any]
    batch_factory: Callable[[], Any]
    make_optimizer: Callable[[Any], Any]
    loss: Callable[[Any], Any]
    backbone: str | None
    autocast: Callable[[], Any]
    step: TrainingStep
    steps: int
    microbatches: int
    block_bytes: int
    label: str


def _run(plan: _Plan, attribute_at_op: int | None) -> _Run:
    """Build the module and run ``plan.steps`` optimizer steps under the tracker."""
    with block_rounding(plan.block_bytes), _cuda_like_run():
        module = plan.module_factory()
        module.train()
        optimizer = plan.make_optimizer(module.parameters())
        tracker = new_tracker(attribute_at_op)
        recorder = PhaseRecorder(tracker)
        hook = tag_head(tracker, module.get_submodule(plan.backbone)) if plan.backbone else None
        module_acts: dict[str, int] = {}
        state: dict[str, Any] = {}
        with tracker:
            tracker.track_external(module, optimizer)
            for step in range(plan.steps):
                for mb in range(plan.microbatches):
                    tracker.reset_mod_stats()  # MemTracker refuses a second root forward otherwise
                    tracker.tagging = False
                    _one_microbatch(plan, module, optimizer, recorder, step, mb, state)
                    if step == 0 and mb == 0:
                        module_acts = module_activations(tracker)
            state.clear()
        if hook is not None:
            hook.remove()
        state_bytes = optimizer_state_bytes(optimizer, plan.block_bytes)
    return _Run(recorder.records, recorder.peak_ops, state_bytes, module_acts, tracker.live_at_op)


def _one_microbatch(plan: _Plan, module: Any, optimizer: Any, recorder: Any, step: int, microbatch: int,
                    state: dict[str, Any]) -> None:
    """Run the step on one fresh micro-batch, recording a peak per phase the step marks."""
    current = [Phase.FORWARD]

    def mark(phase: Phase) -> None:
        recorder.stop(step, microbatch, current[0])
        recorder.start(step, phase)
        current[0] = phase

    ctx = StepContext(step=step, microbatch=microbatch, microbatches=plan.microbatches, loss=plan.loss,
                      autocast=plan.autocast, mark=mark, state=state)
    batch = plan.batch_factory()
    recorder.start(ctx.step, Phase.FORWARD)
    try:
        plan.step(module, batch, optimizer, ctx)
    except FrenzyError:
        raise
    except Exception as exc:
        where = f"step {ctx.step}, micro-batch {ctx.microbatch}, {current[0].value}"
        raise MeasurementError(plan.label, where, exc) from exc
    del batch
    recorder.stop(ctx.step, ctx.microbatch, current[0])


def _result(run: _Run, plan: _Plan, loop_name: str) -> ProbeResult:
    best = max(run.records, key=lambda r: r.peak_bytes)
    return ProbeResult(
        peak_bytes=best.peak_bytes,
        peak_phase=best.phase,
        peak_step=best.step,
        breakdown=breakdown(best.tracker_breakdown, run.state_bytes, best.logits_loss_bytes),
        tracker_breakdown=best.tracker_breakdown,
        phases=run.records,
        module_activation_bytes=run.module_acts,
        peak_tensors=run.live_at_peak,
        loop=loop_name,
        block_bytes=plan.block_bytes,
    )


MAX_PROBE_STEPS = 1000
"""Most optimizer steps one probe runs: the peak settles by the second step (the default), so more only costs time."""


def built_on_meta(module_factory: Callable[[], torch.nn.Module]) -> Callable[[], torch.nn.Module]:
    """A module factory for :func:`measure_training_step` that runs ``module_factory`` on the meta device, with
    fake-tensor mode paused, and hands the probe that module with fake tensors of the same shapes, dtypes,
    ``requires_grad`` and sharing (tied weights stay tied). For code that moves or casts its weights with ``.to()``
    while it builds (``peft.get_peft_model``): ``Module._apply`` swaps fake parameters in place, which the fake
    mode's weak references to them refuse."""

    def build() -> torch.nn.Module:
        torch = _import_torch()
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily(), torch.device("meta"):
            module = module_factory()
        fakes: dict[int, Any] = {}
        for sub in module.modules():
            for store in (sub._parameters, sub._buffers):
                for name, t in store.items():
                    if t is not None and id(t) not in fakes:
                        fake = torch.empty(t.shape, dtype=t.dtype)
                        is_param = isinstance(t, torch.nn.Parameter)
                        fakes[id(t)] = torch.nn.Parameter(fake, requires_grad=t.requires_grad) if is_param else fake
                    if t is not None:
                        store[name] = fakes[id(t)]
        return module

    return build


def _check_counts(steps: object, microbatches: object, block_bytes: object) -> None:
    require_number("steps", steps, low=1, high=MAX_PROBE_STEPS, integer=True)
    require_number("microbatches", microbatches, low=1, high=limits.GLOBAL_BATCH.high, integer=True)
    require_number("block_bytes", block_bytes, low=1, high=limits.GPU_MEMORY_BYTES.high, integer=True)


def measure_training_step(
    module_factory: Callable[[], torch.nn.Module] | HFConfigSource,
    batch_factory: Callable[[], Any],
    *,
    optimizer_factory: Callable[[Any], torch.optim.Optimizer] | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    backbone: str | None = None,
    autocast_dtype: torch.dtype | None = None,
    steps: int = 2,
    microbatches: int = 1,
    block_bytes: int = CUDA_BLOCK_BYTES,
    loop: TrainingLoop | str | TrainingStep = TrainingLoop.FRAMEWORK,
    label: str = "training step",
    attribute_peak: bool = False,
) -> ProbeResult:
    """Peak memory of ``steps`` training iterations of ``microbatches`` forward/backward passes each.

    ``module_factory`` builds the module (called under fake-tensor mode, so parameters have no storage), or is a
    Hugging Face config (dict, ``config.json`` path or folder) whose ``architectures`` class is built in fp32;
    ``batch_factory`` makes one micro-batch, a mapping (keyword arguments) or a tuple (positional ones);
    ``loss_fn`` turns the output into the scalar loss (default ``output.loss``); ``backbone`` names the submodule
    before the head (tensors made after its forward and before backward reaches its output are reported as
    ``logits_loss``; default for a config: its base model); ``optimizer_factory`` gets the parameters (default
    ``torch.optim.AdamW(params, foreach=True)``); ``autocast_dtype`` runs forward and loss under autocast.
    ``loop`` is ``"framework"`` (the output is freed before backward), ``"plain"`` (kept until the next forward
    returns) or any :class:`TrainingStep`; an exception it raises becomes a
    :class:`~frenzy_core.errors.MeasurementError` naming ``label``. ``attribute_peak`` runs the steps a second
    time to list the tensors alive at the peak (``ProbeResult.peak_tensors``). Two steps are the default because
    optimizer states are created during the first one.
    """
    _check_counts(steps, microbatches, block_bytes)
    step_fn, loop_name = resolve_loop(loop)
    torch = _import_torch()
    if not callable(module_factory):
        from frenzy_core.memory.hf_models import hf_module_factory

        module_factory, config_backbone = hf_module_factory(module_factory, microbatches=microbatches, steps=steps)
        backbone = backbone or config_backbone
    autocast = (lambda: torch.autocast("cpu", dtype=autocast_dtype)) if autocast_dtype else contextlib.nullcontext
    plan = _Plan(
        module_factory=module_factory, batch_factory=batch_factory,
        make_optimizer=optimizer_factory or (lambda params: torch.optim.AdamW(params, foreach=True)),
        loss=loss_fn or (lambda output: output.loss), backbone=backbone, autocast=autocast, step=step_fn,
        steps=steps, microbatches=microbatches, block_bytes=block_bytes, label=label,
    )
    run = _run(plan, None)
    if attribute_peak:
        best = max(range(len(run.records)), key=lambda i: run.records[i].peak_bytes)
        run.live_at_peak = _run(plan, run.peak_ops[best]).live_at_peak
    return _result(run, plan, loop_name)


def probe_memory(
    model: ModelConfig | HFConfigSource,
    training: TrainingConfig,
    *,
    loop: TrainingLoop | str | TrainingStep | None = None,
    use_cache: bool | None = None,
    steps: int = 2,
    attribute_peak: bool = False,
) -> ProbeResult:
    """Measure one rank of ``training`` for ``model``, data-parallel degree 1.

    ``model`` is a :class:`ModelConfig` (probed as the Hugging Face class ``to_hf_config`` names) or a Hugging Face
    config (dict, ``config.json`` path or folder), probed as the class its ``architectures`` names, built with
    ``from_config`` (no weights, no network, no remote code). ``loop`` defaults to the one
    ``training.keep_outputs`` describes where that setting exists, else the framework loop. ``use_cache`` overrides
    the config's (a ModelConfig's is its ``returns_kv_cache``). ``training.global_batch_size`` sets the
    gradient-accumulation micro-batches. ZeRO, tensor, pipeline and context parallelism are analytic only. See
    :mod:`frenzy_core.memory.hf_models` for how each setting maps onto Transformers and torch, and
    ``ProbeResult.notes`` for what was approximated.
    """
    from frenzy_core.config.layout import num_microbatches
    from frenzy_core.config.parallel import ParallelConfig
    from frenzy_core.memory.hf_models import hf_training_setup

    require_instance("training", training, TrainingConfig)
    _check_counts(steps, num_microbatches(training, ParallelConfig()), 1)
    if loop is None:
        loop = TrainingLoop.from_keep_outputs(bool(getattr(training, "keep_outputs", False)))
    setup = hf_training_setup(model, training, use_cache=use_cache, steps=steps)
    _, loop_name = resolve_loop(loop)
    with setup.runtime():
        result = measure_training_step(
            setup.module_factory, setup.batch_factory, optimizer_factory=setup.optimizer_factory,
            loss_fn=setup.loss_fn, backbone=setup.backbone, autocast_dtype=setup.autocast_dtype, steps=steps,
            microbatches=num_microbatches(training, ParallelConfig()), loop=loop,
            label=f"{setup.label}, {loop_name} loop", attribute_peak=attribute_peak,
        )
    return result.replace(notes=list(setup.notes)) if setup.notes else result
