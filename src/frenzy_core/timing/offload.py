"""What offload costs per step: the optimizer step on the host CPU and the host-link copies of offloaded states.

Framework ``torch`` runs DeepSpeed's schedule (ZeRO-Offload, Ren et al. USENIX ATC'21, section 4; ZeRO-Infinity's
``offload_param``; FSDP ``CPUOffload`` moves the same bytes): each micro-batch's gradient shard is copied to the
host as its backward produces it, hidden behind the rest of that backward (at ZeRO >= 2, as the memory model
moves it; below, the accumulated shard crosses once before the step); CPU-Adam steps on the host and copies
the updated half weights back tile by tile while it runs (section 5.1), so the step costs the longer of the two.
Offloaded parameters are copied to the GPU layer by layer for each forward and backward,
prefetched behind the compute beside them, as FSDP gathers are. The one-step delayed parameter update (section
5.2) is an opt-in that changes the training semantics and is not modelled. Framework ``megatron``
(``--optimizer-cpu-offload --optimizer-offload-fraction 1.0 --overlap-cpu-optimizer-d2h-h2d``, as the writer
emits it) copies the fp32 main gradients to the host once per step, steps torch's CPU AdamW and copies the
weights back, the three pipelined over parameter groups: the step costs the longest of them. The host's CPU
step is shared by the job's ranks on a node (a memory-bound step: the node's rate, not a core's). Constants and
sources: ``data/time_model.yaml``, section ``offload``; docs/time-model.md, "Offload".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.training import Framework, OffloadDevice, TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing.params import time_model_data
from frenzy_core.timing.traffic import grad_reduce_bytes

__all__ = ["OffloadRates", "OffloadTerms", "host_link_bytes_per_s", "offload_rates", "offload_terms"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class OffloadRates:
    """The offload section of ``time_model.yaml``: host-link efficiency, the default link and CPU Adam rates."""

    host_link_efficiency: float
    default_host_link_bytes_per_s: float
    cpu_adam_params_per_s: float
    torch_cpu_adam_params_per_s: float


@functools.lru_cache(maxsize=1)
def offload_rates() -> OffloadRates:
    """The documented offload constants (cached)."""
    section = time_model_data()["offload"]
    return OffloadRates(**{name: float(section[name]["value"]) for name in OffloadRates.__dataclass_fields__})


def host_link_bytes_per_s(gpu: GPUSpec) -> float:
    """Bytes per second one GPU's copies to or from the host reach (per direction): its PCIe interface, or the
    documented default where its spec gives none, times the pinned-copy efficiency."""
    rates = offload_rates()
    link = gpu.host_link_bytes_per_s or rates.default_host_link_bytes_per_s
    return link * rates.host_link_efficiency


@dataclass(frozen=True)
class OffloadTerms:
    """Seconds per step of one rank: the host optimizer step, the host-link copies before overlap, and how much
    of those copies is hidden (behind compute or the host step)."""

    host_step_s: FloatArray
    transfer_s: FloatArray
    hidden_s: FloatArray


def offload_terms(training: TrainingConfig, link_bytes_per_s: FloatArray | float, *, stepped: FloatArray,
                  held: FloatArray, zero_stage: npt.NDArray[np.int64], ranks_per_node: FloatArray, m: FloatArray,
                  fwd_window: FloatArray, bwd_window: FloatArray) -> OffloadTerms:
    """The offload terms of each layout. ``link_bytes_per_s``: the host link of each layout's GPU
    (:func:`host_link_bytes_per_s`); ``stepped``: parameters this rank's optimizer steps (after ZeRO
    sharding); ``held``: parameters it keeps (its ZeRO-3 shard where parameters are offloaded); ``zero_stage``:
    each layout's effective ZeRO stage;
    ``ranks_per_node``: the job's ranks sharing one host; ``m``: micro-batches per step; ``fwd_window`` and
    ``bwd_window``: one micro-batch's forward and backward compute, which per-micro-batch copies hide behind
    (a recomputation reuses the weights its backward fetches, as the ZeRO-3 gathers are counted)."""
    zero = 0.0 * m
    if training.offload_optimizer is OffloadDevice.NONE and training.offload_params is OffloadDevice.NONE:
        return OffloadTerms(zero, zero, zero)
    rates = offload_rates()
    link = link_bytes_per_s
    half = float(training.precision.param_bytes)
    on_host = training.offload_optimizer is not OffloadDevice.NONE
    if training.framework is Framework.MEGATRON:  # optimizer offload only (TrainingConfig refuses the rest)
        step = stepped * ranks_per_node / rates.torch_cpu_adam_params_per_s
        d2h = stepped * grad_reduce_bytes(training.precision) / link
        h2d = stepped * half / link
        longest = np.maximum(step, np.maximum(d2h, h2d))
        return OffloadTerms(step, d2h + h2d, step + d2h + h2d - longest)
    step = stepped * ranks_per_node / rates.cpu_adam_params_per_s if on_host else zero
    grads = stepped * half / link
    # ZeRO >= 2 (and offloaded parameters) move each micro-batch's gradient shard to the host during its backward;
    # below, the gradients accumulate on the GPU and the shard crosses once, before the step
    per_mb = (zero_stage >= 2) | (training.offload_params is not OffloadDevice.NONE)
    transfer = np.where(per_mb, m * grads, grads)
    hidden = np.where(per_mb, m * np.minimum(grads, bwd_window), 0.0)
    if training.offload_params is not OffloadDevice.NONE:
        fwd = held * half / link  # the weights to the GPU for the forward and again for the backward
        transfer = transfer + m * 2.0 * fwd
        hidden = hidden + m * (np.minimum(fwd, fwd_window) + np.minimum(fwd, bwd_window))
    else:  # the updated half weights back to the GPU, tile by tile while CPU-Adam runs
        back = stepped * half / link
        transfer, hidden = transfer + back, hidden + np.minimum(back, step)
    return OffloadTerms(step, transfer, hidden)
