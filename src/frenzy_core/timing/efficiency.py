"""How fast one GPU runs a GEMM of a given shape and an attention kernel of a given length, vectorised.

GEMM: dtype peak x sustained efficiency x a shape factor from wave quantization (tiles of 128 x 256 over the
SMs) and the per-tile pipeline fill along K (Anthony et al. 2024; NVIDIA's Matrix Multiplication Background
guide), never faster than reading its operands from HBM (roofline). Attention: the measured speed of the kernel
the framework runs (FlashAttention-2, or cuDNN fused attention under Transformer Engine on Hopper and newer),
saturating in the sequence length. Numbers and sources: ``data/time_model.yaml``; formulas: docs/time-model.md.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core.config.training import Attention, Framework, TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing.params import time_model_data

__all__ = ["MEMORY_EFFICIENT", "AttentionRates", "GemmHardware", "KernelFigures", "attention_kernel", "attention_rates",
           "gemm_hardware", "gemm_s", "generation", "kernel_figures", "kernel_rate"]

FloatArray = npt.NDArray[np.float64]


class GemmHardware(NamedTuple):
    """What the GEMM shape factor needs to know about a GPU."""

    sms: float | FloatArray
    tile_area: float | FloatArray
    tail_waves: float | FloatArray
    k_fill: float | FloatArray


def generation(gpu: GPUSpec) -> str:
    """The GPU's architecture generation (``ampere``, ``hopper``, ...), ``unknown`` if not listed."""
    return str(time_model_data()["generations"]["value"].get(gpu.id, "unknown"))


def gemm_hardware(gpu: GPUSpec) -> GemmHardware:
    """SM count and tiling constants for ``gpu`` (``data/time_model.yaml``, section ``gemm``)."""
    g = time_model_data()["gemm"]
    sms = float(g["sms"]["value"].get(gpu.id, g["default_sms"]["value"]))
    return GemmHardware(sms=sms, tile_area=float(g["tile_m"]["value"]) * float(g["tile_n"]["value"]),
                        tail_waves=float(g["tail_waves"]["value"]), k_fill=float(g["k_fill"]["value"]))


def gemm_s(m: FloatArray, n: FloatArray, k: FloatArray, rate: float | FloatArray, mem_bw: float | FloatArray,
           in_bytes: float, hw: GemmHardware, batch: FloatArray | float = 1.0) -> FloatArray:
    """Seconds of ``batch`` (m x k) @ (k x n) GEMMs run as one kernel (batched or grouped): 2 m n k FLOPs each
    at ``rate`` x shape factor, or their HBM traffic (inputs at ``in_bytes``, 2-byte outputs) at ``mem_bw``,
    whichever is longer."""
    mn = m * n * batch
    shape = mn / (mn + hw.tail_waves * hw.tile_area * hw.sms) * (k / (k + hw.k_fill))
    compute = 2.0 * mn * k / (rate * shape)
    traffic = batch * (in_bytes * (m * k + k * n) + 2.0 * m * n) / mem_bw
    return np.asarray(np.maximum(compute, traffic), dtype=np.float64)


MEMORY_EFFICIENT = "memory-efficient"
"""The kernel of GPUs without FlashAttention: tiled batched GEMMs whose scores stay on chip."""


def attention_kernel(training: TrainingConfig, gpu: GPUSpec) -> str | None:
    """The fused attention kernel a run uses (``fa2``, ``cudnn``, ``triton``, ``memory-efficient``), or None for
    eager (unfused) attention.

    Megatron-Core with Transformer Engine runs cuDNN fused attention on Hopper and newer (TE's backend choice;
    NVTE_FUSED_ATTN=1 in NVIDIA's recipes) and flash-attn on Ampere; torch runs FlashAttention-2 (the flash_attn
    package, or SDPA's flash backend, which is FlashAttention-2 since torch 2.2), or FlashAttention in Triton
    where the run asks for it; GPUs older than Ampere have no FlashAttention and run a memory-efficient kernel.
    """
    if training.attention is Attention.EAGER:
        return None
    if generation(gpu) in time_model_data()["attention_kernel_fallback"]["no_flash"]:
        return MEMORY_EFFICIENT
    if training.framework is Framework.MEGATRON:  # Transformer Engine's backends; no Triton kernel
        return "cudnn" if generation(gpu) in ("hopper", "blackwell") else "fa2"
    return "triton" if training.attention is Attention.TRITON else "fa2"


class AttentionRates(NamedTuple):
    """Executed attention FLOP/s of the forward and the backward kernel."""

    fwd: FloatArray
    bwd: FloatArray


def _kernel_table(kernel: str, gpu: GPUSpec) -> tuple[dict[str, list[float]], float]:
    """The measured table of ``kernel`` for the GPU's generation, or of the nearest measured generation (and
    fa2's where the kernel has no table there), with the scale its fractions take on this GPU."""
    data = time_model_data()
    tables = data["attention_kernels"]
    fallback = data["attention_kernel_fallback"]
    measured = {gen for table in tables.values() for gen in table if gen != "source"}
    gen, scale = generation(gpu), 1.0
    if gen not in measured:
        gen = str(fallback["value"].get(gen, "ampere"))
        if gen == "ampere":  # a kernel reaches a similar share of what the GPU's matmuls reach
            mamf = gpu.matmul_efficiency if gpu.matmul_efficiency is not None else float(fallback["unmeasured_mamf"])
            scale = min(1.0, mamf / float(fallback["mamf_reference"]))
    return dict(tables[kernel if gen in tables[kernel] else "fa2"][gen]), scale


class KernelFigures(NamedTuple):
    """What a kernel's speed on one GPU is made of: the scale its measured fractions take there, the measured
    ratio of each pass to another kernel's (1 where measured itself), and (plateau, s_half) of each pass."""

    scale: float
    ratio_fwd: float
    ratio_bwd: float
    fwd: tuple[float, float]
    bwd: tuple[float, float]


def kernel_figures(kernel: str, gpu: GPUSpec, causal: bool) -> KernelFigures:
    """The measured figures of ``kernel`` on ``gpu`` (``relative_kernels``: FlashAttention in Triton measured
    against FlashAttention-2, its speed that kernel's times the ratio of each pass)."""
    relative = time_model_data()["relative_kernels"].get(kernel)
    ratio = {"fwd": 1.0, "bwd": 1.0} if relative is None else {d: float(relative[d]) for d in ("fwd", "bwd")}
    table, scale = _kernel_table(kernel if relative is None else str(relative["of"]), gpu)
    suffix = "_causal" if causal else ""
    fwd, bwd = (table[name + suffix] for name in ("fwd", "bwd"))
    return KernelFigures(scale, ratio["fwd"], ratio["bwd"], (float(fwd[0]), float(fwd[1])),
                         (float(bwd[0]), float(bwd[1])))


def kernel_rate(peak_flops: FloatArray | float, efficiency: FloatArray | float, scale: FloatArray | float,
                ratio: FloatArray | float, plateau: FloatArray | float, half: FloatArray | float,
                seq: FloatArray) -> FloatArray:
    """Executed FLOP/s of one pass at sequence length ``seq``: plateau x s / (s + s_half) of the bf16 peak, times
    ``efficiency``, the GPU's ``scale`` and the measured ``ratio`` (scalars or one value per row)."""
    return np.asarray(peak_flops * efficiency * scale * ratio * plateau * seq / (seq + half), dtype=np.float64)


def attention_rates(kernel: str, gpu: GPUSpec, peak_flops: float, seq: FloatArray, causal: bool,
                    efficiency: float) -> AttentionRates:
    """Forward and backward speed of ``kernel`` on ``gpu`` at sequence length ``seq``: plateau x s / (s + s_half)
    of the measured kernel, a fraction of the bf16 peak, times ``efficiency`` (sustained clocks)
    (:func:`kernel_figures`, :func:`kernel_rate`)."""
    f = kernel_figures(kernel, gpu, causal)
    return AttentionRates(fwd=kernel_rate(peak_flops, efficiency, f.scale, f.ratio_fwd, *f.fwd, seq),
                          bwd=kernel_rate(peak_flops, efficiency, f.scale, f.ratio_bwd, *f.bwd, seq))
