"""GEMM and attention-kernel speeds against the measurements their tables transcribe (data/time_model.yaml)."""

from __future__ import annotations

import numpy as np
import pytest

from frenzy_core import TrainingConfig, get_gpu_spec
from frenzy_core.hardware.gpu import Links
from frenzy_core.timing.comm import ring_latency_s
from frenzy_core.timing.efficiency import attention_kernel, attention_rates, gemm_hardware, gemm_s, generation

H100 = get_gpu_spec("h100-sxm")
SEQ = np.array([512.0, 1024, 2048, 4096, 8192, 16384])
# Shah et al. 2024 (FlashAttention-3), Figs. 5-6, H100 SXM5, head dim 128, TFLOPS at the lengths above.
PUBLISHED = {
    ("fa2", "fwd", False): [309, 350, 362, 368, 370, 370],
    ("fa2", "fwd", True): [191, 260, 298, 319, 333, 335],
    ("fa2", "bwd", False): [214, 260, 291, 310, 318, 322],
    ("cudnn", "fwd", False): [497, 574, 617, 609, 600, 595],
    ("cudnn", "fwd", True): [315, 410, 484, 518, 529, 539],
    ("cudnn", "bwd", False): [305, 408, 465, 499, 518, 516],
}


@pytest.mark.parametrize(("kernel", "direction", "causal"), list(PUBLISHED))
def test_attention_tables_reproduce_the_published_h100_points(kernel: str, direction: str, causal: bool) -> None:
    rates = attention_rates(kernel, H100, 989.5e12, SEQ, causal, 1.0)
    got = getattr(rates, direction) / 1e12
    np.testing.assert_allclose(got, PUBLISHED[(kernel, direction, causal)], rtol=0.05)


def test_attention_kernel_by_framework_and_generation() -> None:
    a100, b200 = get_gpu_spec("a100-80gb"), get_gpu_spec("b200")
    megatron = TrainingConfig(framework="megatron")
    assert attention_kernel(megatron, H100) == "cudnn" and attention_kernel(megatron, b200) == "cudnn"
    assert attention_kernel(megatron, a100) == "fa2"  # Transformer Engine picks flash-attn on Ampere
    assert attention_kernel(TrainingConfig(attention="sdpa"), H100) == "fa2"
    assert attention_kernel(TrainingConfig(attention="eager"), H100) is None
    assert generation(a100) == "ampere" and generation(b200) == "blackwell"
    # FlashAttention-2 on A100: up to 73% (forward) and 63% (backward) of the peak (Dao 2023, section 4.1).
    long = attention_rates("fa2", a100, 312e12, np.array([1e9]), False, 1.0)
    assert long.fwd[0] / 312e12 == pytest.approx(0.73, rel=1e-6) and long.bwd[0] / 312e12 == pytest.approx(0.63)
    # No FlashAttention before Ampere: a memory-efficient kernel (batched GEMMs, scores on chip).
    assert attention_kernel(TrainingConfig(attention="sdpa", precision="fp16-mixed"), get_gpu_spec("v100-32gb")) \
        == "memory-efficient"
    # An AMD part takes Ampere's fractions scaled by its best-shape matmul efficiency relative to the A100's.
    mi300x = get_gpu_spec("mi300x")
    assert mi300x.matmul_efficiency is not None
    amd = attention_rates("fa2", mi300x, 1307e12, np.array([1e9]), False, 1.0)
    assert amd.fwd[0] / 1307e12 == pytest.approx(0.73 * mi300x.matmul_efficiency / 0.8686, rel=1e-6)
    # Blackwell reuses Hopper's fractions of its own peak.
    h, b = (attention_rates("cudnn", g, g.peak_tflops["bf16"] * 1e12, SEQ, True, 1.0) for g in (H100, b200))
    np.testing.assert_allclose(b.fwd / 2250e12, h.fwd / 989.5e12)


@pytest.mark.parametrize("gpu_id", ["a100-80gb", "h100-sxm"])
@pytest.mark.parametrize("causal", [False, True])
def test_triton_flash_attention_at_the_measured_ratio_to_fa2(gpu_id: str, causal: bool) -> None:
    # Dao 2023 section 4.1 (A100): FlashAttention-2 ~1.3-1.5x faster than FlashAttention in Triton forward, ~2x
    # backward.
    gpu = get_gpu_spec(gpu_id)
    fa2, triton = (attention_rates(k, gpu, 312e12, SEQ, causal, 1.0) for k in ("fa2", "triton"))
    assert np.all((fa2.fwd / triton.fwd >= 1.3) & (fa2.fwd / triton.fwd <= 1.5))
    np.testing.assert_allclose(fa2.bwd / triton.bwd, 2.0)
    assert attention_kernel(TrainingConfig(attention="triton"), gpu) == "triton"
    assert attention_kernel(TrainingConfig(attention="triton", framework="megatron"), gpu) != "triton"


def test_gemm_shape_law() -> None:
    hw = gemm_hardware(H100)
    assert hw.sms == 132
    rate, bw = 700e12, 2.7e12

    def eff(m: float, n: float, k: float) -> float:
        t = gemm_s(np.array([m]), np.array([n]), np.array([k]), rate, bw, 2.0, hw)[0]
        return float(2 * m * n * k / t / rate)

    # Large training GEMMs run near the sustained rate; a tp=8 shard of a small model's micro-batch does not;
    # a skinny GEMM is memory-bound.
    assert eff(16384, 16384, 8192) > 0.97
    assert eff(4096, 512, 4096) < 0.8
    assert eff(8, 8192, 8192) == pytest.approx(2 * 8 * 8192 * 8192 / ((2 * (8 * 8192 + 8192 * 8192) + 2 * 8 * 8192)
                                                                        / bw) / rate, rel=1e-9)
    batched = gemm_s(np.array([2048.0]), np.array([64.0]), np.array([2048.0]), rate, bw, 2.0, hw, 32.0)[0]
    single = gemm_s(np.array([2048.0]), np.array([64.0]), np.array([2048.0]), rate, bw, 2.0, hw)[0]
    assert batched < 32 * single  # one kernel over 32 heads fills the GPU that one head cannot


def test_ring_latency_follows_nccl_tuning_model() -> None:
    links = Links(gpus_per_node=8, intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=50e9)
    n = np.array([1.0, 8.0, 8.0, 512.0])
    span = np.array([1.0, 8.0, 64.0, 512.0])
    got = ring_latency_s(n, span, links, 8.4e-6, 5.7e-6, 6.6e-6)
    np.testing.assert_allclose(got, [8.4e-6, 8.4e-6 + 7 * 5.7e-6, 8.4e-6 + 7 * 6.6e-6, 8.4e-6 + 511 * 6.6e-6])
    assert ring_latency_s(n, span, links, 8.4e-6, 5.7e-6, 6.6e-6, 2.0)[1] == pytest.approx(8.4e-6 + 14 * 5.7e-6)
