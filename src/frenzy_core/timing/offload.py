"""What offload costs per step: the optimizer step on the host CPU and the host-link copies of offloaded states.

Each framework steps the host copy with its own optimizer (:func:`host_step_rate`): Megatron-Core's
HybridDeviceOptimizer builds torch's fused CPU AdamW; a torch recipe that offloads the optimizer alone runs
DeepSpeed's ZeRO-Offload and its CPU-Adam (no FSDP launcher offloads the optimizer without the parameters);
one that offloads the parameters too runs FSDP's ``CPUOffload`` (Accelerate, torchtitan) and torch's AdamW on
the CPU shards, fused where ``optimizer_impl`` says so (torchtitan's default), else torch's for-loop.

Framework ``torch`` moves DeepSpeed's bytes (ZeRO-Offload, Ren et al. USENIX ATC'21, section 4; FSDP
``CPUOffload`` moves the same): each micro-batch's gradient shard is copied to the host as its backward
produces it, layer by layer behind the rest of that backward (at ZeRO >= 2, as the memory model moves it;
below, the accumulated shard crosses once before the step); without offloaded parameters the updated half
weights return tile by tile while the host steps (section 5.1). Offloaded parameters are copied to the GPU
layer by layer for each forward and backward, prefetched behind the compute beside them, as FSDP gathers are.
The one-step delayed parameter update (section 5.2) is an opt-in that changes the training semantics and is not
modelled. Framework ``megatron`` (``--optimizer-cpu-offload --optimizer-offload-fraction 1.0
--overlap-cpu-optimizer-d2h-h2d``, as the writer emits it) copies the fp32 main gradients to the host once per
step, steps each parameter's CPU AdamW and copies it back, the three pipelined parameter by parameter on their
own streams. Every stream of per-layer copies hides as the data-parallel traffic does
(:func:`frenzy_core.timing.overlap.pipelined_hidden`: the first or last layer's copy stays exposed). The host's
CPU step is shared by the job's ranks on a node (a memory-bound step: the node's rate, not a core's). Constants
and sources: ``data/time_model.yaml``, section ``offload``; docs/time-model.md, "Offload".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.training import Framework, OffloadDevice, OptimizerImpl, TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing.overlap import pipelined_hidden
from frenzy_core.timing.params import time_model_data
from frenzy_core.timing.traffic import grad_reduce_bytes

__all__ = ["OffloadRates", "OffloadTerms", "host_link_bytes_per_s", "host_step_rate", "offload_rates",
           "offload_terms"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class OffloadRates:
    """The offload section of ``time_model.yaml``: host-link efficiency, the default link and each host
    optimizer's rate (parameters per second per node)."""

    host_link_efficiency: float
    default_host_link_bytes_per_s: float
    deepspeed_cpu_adam_params_per_s: float
    torch_cpu_adamw_params_per_s: float
    torch_fused_cpu_adamw_params_per_s: float


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


def host_step_rate(training: TrainingConfig) -> float:
    """Parameters per second one node's host optimizer steps for ``training`` (its optimizer offloaded):
    Megatron's torch fused CPU AdamW, DeepSpeed's CPU-Adam for a torch recipe offloading the optimizer alone,
    torch's AdamW (fused or for-loop, as ``optimizer_impl``) under FSDP's CPUOffload of the parameters too."""
    rates = offload_rates()
    if training.framework is Framework.MEGATRON:  # HybridDeviceOptimizer: torch.optim.AdamW(fused=True)
        return rates.torch_fused_cpu_adamw_params_per_s
    if training.offload_params is OffloadDevice.NONE:  # ZeRO-Offload (DeepSpeedCPUAdam)
        return rates.deepspeed_cpu_adam_params_per_s
    # FSDP CPUOffload: torch's default on CPU tensors is the for-loop (its foreach kernels are for accelerators)
    return (rates.torch_fused_cpu_adamw_params_per_s if training.optimizer_impl is OptimizerImpl.FUSED
            else rates.torch_cpu_adamw_params_per_s)


@dataclass(frozen=True)
class OffloadTerms:
    """Seconds per step of one rank: the host optimizer step, the host-link copies before overlap, and how much
    of those copies is hidden (behind compute or the host step)."""

    host_step_s: FloatArray
    transfer_s: FloatArray
    hidden_s: FloatArray


def offload_terms(training: TrainingConfig, link_bytes_per_s: FloatArray | float, *, stepped: FloatArray,
                  held: FloatArray, zero_stage: npt.NDArray[np.int64], layers: FloatArray, ranks_per_node: FloatArray,
                  m: FloatArray, fwd_window: FloatArray, bwd_window: FloatArray) -> OffloadTerms:
    """The offload terms of each layout. ``link_bytes_per_s``: the host link of each layout's GPU
    (:func:`host_link_bytes_per_s`); ``stepped``: parameters this rank's optimizer steps (after ZeRO
    sharding); ``held``: parameters it keeps (its ZeRO-3 shard where parameters are offloaded); ``zero_stage``:
    each layout's effective ZeRO stage; ``layers``: the stage's layers, the copies' pieces (a stream's first or
    last stays exposed); ``ranks_per_node``: the job's ranks sharing one host; ``m``: micro-batches per step;
    ``fwd_window`` and ``bwd_window``: one micro-batch's forward and backward compute, which per-micro-batch
    copies hide behind (a recomputation reuses the weights its backward fetches, as the ZeRO-3 gathers are
    counted)."""
    zero = 0.0 * m
    if training.offload_optimizer is OffloadDevice.NONE:  # TrainingConfig refuses parameters offloaded alone
        return OffloadTerms(zero, zero, zero)
    link = link_bytes_per_s
    half = float(training.precision.param_bytes)
    pieces = np.maximum(layers, 1.0)

    def hidden_behind(copy: FloatArray, window: FloatArray) -> FloatArray:
        return pipelined_hidden(copy, copy / pieces, window, 1.0)

    step = stepped * ranks_per_node / host_step_rate(training)
    if training.framework is Framework.MEGATRON:  # optimizer offload only (TrainingConfig refuses the rest)
        d2h = stepped * grad_reduce_bytes(training.precision) / link
        h2d = stepped * half / link
        # three streams over the same parameters: each shorter one hides behind the longest but its own first
        # (the gradients) or last (the weights) piece
        longest = np.maximum(step, np.maximum(d2h, h2d))
        parts = (step, d2h, h2d)
        hidden = sum(hidden_behind(x, longest) for x in parts) - hidden_behind(longest, longest)
        return OffloadTerms(step, d2h + h2d, np.asarray(hidden, dtype=np.float64))
    grads = stepped * half / link
    # ZeRO >= 2 (and offloaded parameters) move each micro-batch's gradient shard to the host during its backward;
    # below, the gradients accumulate on the GPU and the shard crosses once, before the step
    per_mb = (zero_stage >= 2) | (training.offload_params is not OffloadDevice.NONE)
    transfer = np.where(per_mb, m * grads, grads)
    hidden = np.where(per_mb, m * hidden_behind(grads, bwd_window), 0.0)
    if training.offload_params is not OffloadDevice.NONE:
        fwd = held * half / link  # the weights to the GPU for the forward and again for the backward
        transfer = transfer + m * 2.0 * fwd
        hidden = hidden + m * (hidden_behind(fwd, fwd_window) + hidden_behind(fwd, bwd_window))
    else:  # the updated half weights back to the GPU, tile by tile while CPU-Adam runs
        back = stepped * half / link
        transfer, hidden = transfer + back, hidden + hidden_behind(back, step)
    return OffloadTerms(step, transfer, np.asarray(hidden, dtype=np.float64))
