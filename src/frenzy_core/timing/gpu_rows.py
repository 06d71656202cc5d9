"""Each layout's GPU figures, gathered by a type code from a table with one entry per GPU type, so one batch call of
the time model covers layouts on several GPU types (the planner's candidates): dtype peaks, HBM and host-link
bandwidth, GEMM tiling, the attention kernel's measured speed and the time-model parameters.

The table is built once per call (:func:`gpu_table`, which also checks that each type runs the recipe's dtype);
:meth:`GpuTable.at` gives the figures of rows of given type codes, as the per-shape terms need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core.config.training import Precision, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing.efficiency import MEMORY_EFFICIENT, GemmHardware, attention_kernel, gemm_hardware, kernel_figures
from frenzy_core.timing.offload import host_link_bytes_per_s
from frenzy_core.timing.params import TimeModelParams

__all__ = ["AttentionFigures", "GpuTable", "ParamRows", "Rates", "gpu_table", "peak_dtype", "peak_flops"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_PEAK_DTYPE = {
    Precision.FP32: "fp32", Precision.BF16: "bf16", Precision.AMP_BF16: "bf16", Precision.BF16_MIXED: "bf16",
    Precision.FP16: "fp16", Precision.AMP_FP16: "fp16", Precision.FP16_MIXED: "fp16", Precision.FP8_MIXED: "fp8",
}


def peak_dtype(precision: Precision) -> str:
    """The ``GPUSpec.peak_tflops`` key the matmuls of ``precision`` run at."""
    return _PEAK_DTYPE[precision]


def peak_flops(gpu: GPUSpec, precision: Precision) -> float:
    """The GPU's peak FLOP/s in the dtype of ``precision``'s matmuls; ConfigError where its spec lists none."""
    key = peak_dtype(precision)
    if key not in gpu.peak_tflops:
        raise ConfigError(f"{gpu.id} lists no {key} peak (has {sorted(gpu.peak_tflops)}), needed by "
                          f"precision={precision.value!r}", field="training.precision", value=precision.value,
                          hint=f"use a precision whose dtype {gpu.id} supports")
    return gpu.peak_tflops[key] * 1e12


class Rates(NamedTuple):
    """FLOP/s and bytes/s a GPU sustains, before shape factors (one value per entry)."""

    matmul: FloatArray
    fp8_matmul: FloatArray
    attention_peak: FloatArray
    memory: FloatArray


class ParamRows(NamedTuple):
    """:class:`TimeModelParams` with one value per entry (GPU type or layout), field for field."""

    matmul_efficiency: FloatArray
    fp8_matmul_efficiency: FloatArray
    attention_efficiency: FloatArray
    memory_efficiency: FloatArray
    collective_efficiency: FloatArray
    collective_latency_s: FloatArray
    ring_step_latency_s: FloatArray
    network_step_latency_s: FloatArray
    tensor_parallel_overlap: FloatArray
    context_parallel_overlap: FloatArray
    expert_parallel_overlap: FloatArray
    pipeline_p2p_overlap: FloatArray
    data_parallel_overlap: FloatArray
    comm_sms: FloatArray
    kernel_launch_s: FloatArray
    fsdp_prefetch_layers: FloatArray


assert ParamRows._fields == tuple(TimeModelParams.model_fields), "ParamRows mirrors TimeModelParams"


class AttentionFigures(NamedTuple):
    """The fused attention kernel's figures per entry (:func:`frenzy_core.timing.efficiency.kernel_figures`):
    ``flash`` where it runs a measured kernel, else the memory-efficient one (eager attention is the recipe's,
    the same on every type); the other fields are 1 where ``flash`` is False."""

    flash: BoolArray
    scale: FloatArray
    ratio_fwd: FloatArray
    ratio_bwd: FloatArray
    fwd_plateau: FloatArray
    fwd_half: FloatArray
    bwd_plateau: FloatArray
    bwd_half: FloatArray


class GpuTable(NamedTuple):
    """Figures of GPU types (one entry each), or of layouts (one entry per row, :meth:`at`). ``peak``: FLOP/s of
    the recipe's dtype; ``comm_share``: compute a running collective takes (its SMs over the GPU's)."""

    p: ParamRows
    rates: Rates
    gemm: GemmHardware
    attention: AttentionFigures
    peak: FloatArray
    host_link_bytes_per_s: FloatArray
    comm_share: FloatArray

    def at(self, code: IntArray) -> GpuTable:
        """The figures of entries ``code`` (a type code per row)."""
        return GpuTable(
            ParamRows(*(a[code] for a in self.p)), Rates(*(a[code] for a in self.rates)),
            GemmHardware(*(np.asarray(a)[code] for a in self.gemm)),
            AttentionFigures(self.attention.flash[code], *(a[code] for a in self.attention[1:])),
            self.peak[code], self.host_link_bytes_per_s[code], self.comm_share[code])


def _attention_entry(training: TrainingConfig, gpu: GPUSpec, causal: bool) -> tuple[float, ...]:
    kernel = attention_kernel(training, gpu)
    if kernel is None or kernel == MEMORY_EFFICIENT:
        return (0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    f = kernel_figures(kernel, gpu, causal)
    return (1.0, f.scale, f.ratio_fwd, f.ratio_bwd, *f.fwd, *f.bwd)


def gpu_table(training: TrainingConfig, gpus: Sequence[GPUSpec], params: Sequence[TimeModelParams],
              causal: bool) -> GpuTable:
    """The figures of each GPU type under ``training`` with its ``params`` (``causal``: the model's attention
    mask, which picks the kernel's measured series). ConfigError where a type has no peak in the recipe's dtype."""
    fp8 = training.precision is Precision.FP8_MIXED
    rows: list[tuple[float, ...]] = []
    for gpu, p in zip(gpus, params, strict=True):
        peak = peak_flops(gpu, training.precision)
        half = peak_flops(gpu, Precision.BF16_MIXED) if fp8 else peak  # fp8 recipes keep the head and attention bf16
        mem_bw = gpu.memory_bandwidth_bytes_per_s * p.memory_efficiency
        hw = gemm_hardware(gpu)
        rates = (half * p.matmul_efficiency, peak * p.fp8_matmul_efficiency if fp8 else 0.0, half, mem_bw)
        rows.append((*(float(getattr(p, f)) for f in ParamRows._fields), *rates, *(float(x) for x in hw),
                     *_attention_entry(training, gpu, causal), peak, host_link_bytes_per_s(gpu),
                     min(p.comm_sms / float(hw.sms), 1.0)))
    cols = np.array(rows, dtype=np.float64).reshape(len(rows), -1).T
    n_p, n_r, n_g = len(ParamRows._fields), len(Rates._fields), len(GemmHardware._fields)
    at = n_p + n_r + n_g
    attention = AttentionFigures(cols[at] > 0, *cols[at + 1:at + 8])
    return GpuTable(ParamRows(*cols[:n_p]), Rates(*cols[n_p:n_p + n_r]), GemmHardware(*cols[n_p + n_r:at]),
                    attention, cols[at + 8], cols[at + 9], cols[at + 10])
