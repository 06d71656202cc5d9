"""Calibration of the time model's efficiencies from measurements."""

from __future__ import annotations

import pytest

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, Recompute, TrainingConfig, get_gpu_spec
from frenzy_core.timing import default_time_model_params, estimate_iteration_time, training_flops
from frenzy_core.timing.calibrate import Measurement, calibrate

A100 = get_gpu_spec("a100-80gb")


def _runs() -> list[tuple[ModelConfig, TrainingConfig, ParallelConfig]]:
    out = []
    for h, layers, tp, pp, dp in [(2048, 24, 1, 1, 8), (4096, 32, 4, 1, 4), (5120, 40, 8, 2, 2),
                                  (8192, 48, 8, 4, 2), (3072, 28, 2, 1, 16), (6144, 44, 8, 1, 8)]:
        model = ModelConfig(num_layers=layers, hidden_size=h, num_attention_heads=h // 128, vocab_size=50304)
        training = TrainingConfig(seq_len=2048, global_batch_size=64, recompute=Recompute.SELECTIVE)
        out.append((model, training, ParallelConfig(dp=dp, tp=tp, pp=pp)))
    return out


def test_recovers_known_efficiencies() -> None:
    truth = default_time_model_params(A100).replace(matmul_efficiency=0.6, memory_efficiency=0.55)
    measurements = [
        Measurement(model=m, training=t, parallel=p, gpu=A100,
                    iteration_s=estimate_iteration_time(m, t, p, A100, params=truth).iteration_s)
        for m, t, p in _runs()
    ]
    result = calibrate(measurements, fit=("matmul_efficiency", "memory_efficiency"), prior_weight=0.0)
    assert result.median_abs_error_before > 0.05
    assert result.median_abs_error_after < 1e-4
    assert result.params.matmul_efficiency == pytest.approx(0.6, rel=1e-3)
    assert result.params.memory_efficiency == pytest.approx(0.55, rel=1e-3)
    assert result.fitted == ("matmul_efficiency", "memory_efficiency")
    assert len(result.errors_after) == len(measurements)
    # With the default pull towards the start and four parameters free, the fit is still close.
    regularised = calibrate(measurements)
    assert regularised.median_abs_error_after < 0.02


def test_tflops_measurement_converts_with_its_flop_count() -> None:
    model, training, parallel = _runs()[0]
    flops = training_flops(model, 2048, 64)
    m = Measurement(model=model, training=training, parallel=parallel, gpu="a100-80gb", tflops_per_gpu=100.0)
    assert m.gpu == A100
    assert m.measured_iteration_s() == pytest.approx(flops / (100e12 * 8))
    hw = m.replace(tflops_include_recompute=True)
    assert hw.measured_iteration_s() == pytest.approx(
        training_flops(model, 2048, 64, Recompute.SELECTIVE) / (100e12 * 8))


def test_rejects_bad_input() -> None:
    model, training, parallel = _runs()[0]
    with pytest.raises(ConfigError, match="exactly one"):
        Measurement(model=model, training=training, parallel=parallel, gpu=A100)
    with pytest.raises(ConfigError, match="run_settings"):
        Measurement(model=model, training=training, parallel=parallel, gpu=A100, iteration_s=1.0,
                    run_settings={"warp_speed": 1.0})
    a = Measurement(model=model, training=training, parallel=parallel, gpu=A100, iteration_s=1.0)
    h = a.replace(gpu=get_gpu_spec("h100-sxm"))
    with pytest.raises(ConfigError, match="one GPU type"):
        calibrate([a, h])
    with pytest.raises(ConfigError, match="cannot fit"):
        calibrate([a], fit=("collective_latency_s",))
    with pytest.raises(ConfigError, match="at least one"):
        calibrate([])
