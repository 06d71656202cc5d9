"""How the probe counts: MemTracker with CUDA block rounding, head-and-loss tagging, per-phase peaks, attribution.

``torch.distributed._tools.mem_tracker.MemTracker`` counts every live tensor storage by category (parameter,
buffer, gradient, activation, backward temporary, optimizer state). This module adds what the probe needs on top
and maps the categories onto the estimator's. Needs torch.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from frenzy_core.memory.probe_result import PeakTensors, Phase, PhasePeak

if TYPE_CHECKING:
    import torch

__all__ = ["CUDA_BLOCK_BYTES", "PhaseRecorder", "block_rounding", "breakdown", "module_activations",
           "new_tracker", "optimizer_state_bytes", "tag_head"]

CUDA_BLOCK_BYTES = 512
"""CUDA caching allocator's rounding (``kMinBlockSize`` in c10/cuda/CUDACachingAllocator.cpp), which
``torch.cuda.max_memory_allocated`` counts; MemTracker applies it to CUDA tensors only."""

# MemTracker categories (``_MemRefType`` values) -> the estimator's categories (MEMORY_CATEGORIES).
# Buffers (rotary tables, position ids) are counted with the parameters; backward temporaries
# (activation gradients, recomputed tensors) and the input batch with the activations, except the
# tensors of the head and loss (see ``tag_head``), which go to logits_loss.
_CATEGORY_OF_TRACKER = {
    "Parameter": "parameters",
    "Buffer": "parameters",
    "Gradient": "gradients",
    "Activation": "activations",
    "Temp": "activations",
    "Optstate": "optimizer_states",
    "Other": "activations",
}

_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")  # ".3" in "model.layers.3.mlp"


@contextlib.contextmanager
def block_rounding(block_bytes: int) -> Iterator[None]:
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


def snapshot_total(snap: Mapping[Any, Mapping[Any, int]]) -> tuple[int, dict[str, int]]:
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
def _frozen_aware(tracker: Any, track: Any, module: Any, install_grad_hooks: bool) -> tuple[int, int]:
    """MemTracker's parameter tracking with frozen parameters (LoRA, frozen layers) counted as parameters without
    the gradient hooks torch refuses on them; ``track`` is MemTracker's own method, shown only the trainable ones."""
    from torch.distributed._tools.mem_tracker import _MemRefType

    frozen = [p for p in module.parameters() if not p.requires_grad]
    if not frozen or not install_grad_hooks:
        return track(module, install_grad_hooks)  # type: ignore[no-any-return]
    frozen_bytes = sum(w.mem_consumed for p in frozen
                       for w in tracker._update_and_maybe_create_winfos(p, _MemRefType.PARAM))
    trainable = [p for p in module.parameters() if p.requires_grad]
    module.__dict__["parameters"] = lambda *args, **kwargs: iter(trainable)
    try:
        param_bytes, buffer_bytes = track(module, install_grad_hooks)
    finally:
        del module.__dict__["parameters"]
    return param_bytes + frozen_bytes, buffer_bytes


def _tracker_class() -> type:
    """MemTracker that also tags head-and-loss storages, counts ops, and can list the live tensors at one op."""
    from torch.distributed._tools.common_utils import get_untyped_storages
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    activation_types = (_MemRefType.ACT, _MemRefType.TEMP)

    class ProbeTracker(MemTracker):  # type: ignore[misc]
        def __init__(self, attribute_at_op: int | None) -> None:
            super().__init__()
            self.tagging = False
            self.head_bytes_at_peak = 0
            self._head: dict[int, tuple[weakref.ref[Any], Any]] = {}
            self.op_index = 0
            self.peak_op_index = 0
            self.made_in = ""
            self.attribute_at_op = attribute_at_op
            self._origin: dict[int, tuple[str, str, str, str, tuple[int, ...]]] = {}
            self._op = ""
            self.live_at_op: list[PeakTensors] = []

        @property
        def head_bytes(self) -> int:
            """Live activation bytes of tagged storages (a head weight's gradient is not counted)."""
            return sum(w.mem_consumed for _, w in self._head.values() if w.reftype in activation_types)

        def _track_module_params_and_buffers(self, module: Any, install_grad_hooks: bool = True) -> tuple[int, int]:
            return _frozen_aware(self, super()._track_module_params_and_buffers, module, install_grad_hooks)
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.op_index += 1
            self._op = str(func)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if self.op_index == self.attribute_at_op:
                self.live_at_op = self._live_groups()
            return out

        def _track(self, reftype: Any, t: Any) -> None:
            watching = self.tagging or self.attribute_at_op is not None
            new = [st for st in get_untyped_storages(t) if st not in self._WINFO] if watching else []
            super()._track(reftype, t)
            for st in new:
                winfo, _ = self._WINFO.get(st, (None, None))
                if winfo is None:
                    continue
                if self.attribute_at_op is not None:
                    self._remember_origin(st, t)
                if self.tagging:
                    ref = weakref.ref(st, lambda r: self._head.pop(id(r), None))
                    self._head[id(ref)] = (ref, winfo)

        def _remember_origin(self, storage: Any, t: Any) -> None:
            parents = [p for p in self._mod_tracker.parents if p != "Global"]
            module = max(parents, key=lambda p: (p.count("."), len(p)), default="")
            key = id(storage)
            # Layer indices become '*' so that one row counts the same tensor of every layer.
            self._origin[key] = (_LAYER_INDEX.sub(".*", module), self._op, self.made_in, str(t.dtype).replace("torch.", ""),
                                 tuple(t.shape))
            weakref.finalize(storage, self._origin.pop, key, None)

        def _live_groups(self) -> list[PeakTensors]:
            groups: dict[tuple[Any, ...], list[int]] = {}
            for st, (winfo, _) in list(self._WINFO.items()):
                origin = self._origin.get(id(st), ("", "", "", "", ()))
                groups.setdefault((winfo.reftype.value, *origin), []).append(winfo.mem_consumed)
            rows = [PeakTensors(category=k[0], module=k[1], op=k[2], made_in=k[3], dtype=k[4], shape=k[5],
                                count=len(sizes), bytes=sum(sizes)) for k, sizes in groups.items()]
            rows.sort(key=lambda r: (-r.bytes, r.category, r.module, r.op))
            return rows

        def _update_peak_stats(self, peak_state: Any) -> None:
            # The global peak only: MemTracker's per-module peak snapshots (a deep copy per active module
            # per op, a quarter of the run time) are not used by the probe.
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)
                    self.head_bytes_at_peak = self.head_bytes
                    self.peak_op_index = self.op_index

    return ProbeTracker


def new_tracker(attribute_at_op: int | None = None) -> Any:
    """A fresh tracker; with ``attribute_at_op`` it lists the live tensors right after that op (1-based)."""
    return _tracker_class()(attribute_at_op)


def _first_output(output: Any) -> Any:
    """The first tensor a module returned (a tensor, a tuple, or a Hugging Face ``ModelOutput``)."""
    if isinstance(output, (tuple, list)):
        return output[0] if output else None
    if isinstance(output, Mapping):
        return next(iter(output.values()), None)
    return output


def tag_head(tracker: Any, backbone: Any) -> Any:
    """Tag storages made after ``backbone``'s forward and before backward reaches its output."""

    def stop_tagging(grad: Any) -> None:
        tracker.tagging = False

    def after_forward(module: Any, args: Any, output: Any) -> None:
        tracker.tagging = True
        first = _first_output(output)
        if getattr(first, "requires_grad", False):
            first.register_hook(stop_tagging)

    return backbone.register_forward_hook(after_forward)


class PhaseRecorder:
    """Reads MemTracker's running peak per phase by resetting it at each phase start."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.records: list[PhasePeak] = []
        self.peak_ops: list[int] = []
        """The tracker's op index at each record's peak (0: the phase's start or end)."""

    def start(self, step: int, phase: Phase) -> None:
        # MemTracker keeps one running peak (private ``_peak_mem``/``_peak_mem_snap``); restarting it
        # from the current snapshot makes the next reading the peak of this phase alone.
        snap = self.tracker.get_tracker_snapshot("current")
        self.tracker._peak_mem_snap = snap
        self.tracker._peak_mem = {dev: dev_snap["Total"] for dev, dev_snap in snap.items()}
        self.tracker.head_bytes_at_peak = self.tracker.head_bytes
        self.tracker.peak_op_index = self.tracker.op_index
        self.tracker.made_in = f"{phase.value} step {step}"

    def stop(self, step: int, microbatch: int, phase: Phase) -> None:
        peak, cats = snapshot_total(self.tracker.get_tracker_snapshot("peak"))
        end, end_cats = snapshot_total(self.tracker.get_tracker_snapshot("current"))
        head, peak_op = self.tracker.head_bytes_at_peak, self.tracker.peak_op_index
        if end > peak:  # the phase ended above anything seen during it (e.g. no op ran)
            peak, cats, head, peak_op = end, end_cats, self.tracker.head_bytes, self.tracker.op_index
        self.records.append(
            PhasePeak(step=step, microbatch=0 if phase is Phase.OPTIMIZER else microbatch, phase=phase,
                      peak_bytes=peak, tracker_breakdown=cats, logits_loss_bytes=head, end_bytes=end)
        )
        self.peak_ops.append(peak_op)


def module_activations(tracker: Any) -> dict[str, int]:
    """Activation bytes alive after each module's forward that were not alive before it."""
    from torch.distributed._tools.mem_tracker import _ModState

    out: dict[str, int] = {}
    for stats in tracker.memory_tracking.values():
        pre = stats.snapshots.get(_ModState.PRE_FW)
        post = stats.snapshots.get(_ModState.POST_FW)
        if not pre or not post:
            continue
        _, pre_cats = snapshot_total(pre[0])
        _, post_cats = snapshot_total(post[0])
        out[stats.mod_fqn] = post_cats.get("Activation", 0) - pre_cats.get("Activation", 0)
    return out


def breakdown(tracker_cats: Mapping[str, int], optimizer_state_bytes: int, logits_loss_bytes: int) -> dict[str, int]:
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


def optimizer_state_bytes(optimizer: torch.optim.Optimizer, block_bytes: int) -> int:
    """Block-rounded bytes of the optimizer's state tensors (each storage once)."""
    import torch

    seen: set[int] = set()
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and id(value) not in seen:
                seen.add(id(value))
                nbytes = value.untyped_storage().nbytes()
                total += int(math.ceil(nbytes / block_bytes) * block_bytes)
    return total
