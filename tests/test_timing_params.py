"""Default time-model parameters: every value has a source; GPU-specific matmul efficiency is used."""

from __future__ import annotations

import pytest

from frenzy_core import ConfigError, get_gpu_spec
from frenzy_core.timing import TimeModelParams, default_time_model_params
from frenzy_core.timing.params import time_model_param_sources


def test_every_parameter_has_a_default_and_a_source() -> None:
    sources = time_model_param_sources()
    for name in TimeModelParams.model_fields:
        assert len(sources[name]) > 20, name


def test_sustained_matmul_rates_where_measured_else_derated_best_shape() -> None:
    # H200 and B200 carry their measured sustainable rate (MSMF / peak), H100 its best-shape rate x the H200's
    # sustained/boost ratio; other NVIDIA parts their best-shape rate x the NVIDIA ratio; AMD's is already sustained.
    assert default_time_model_params(get_gpu_spec("h200")).matmul_efficiency == pytest.approx(698.6 / 989.5, rel=1e-3)
    assert default_time_model_params(get_gpu_spec("b200")).matmul_efficiency == pytest.approx(1426.4 / 2250, rel=1e-3)
    h100 = default_time_model_params(get_gpu_spec("h100-sxm"))
    assert h100.matmul_efficiency == pytest.approx(794.5 / 989.5 * 698.6 / 823.9, rel=1e-3)
    assert h100.fp8_matmul_efficiency == pytest.approx(1402.6 / 1979 * 698.6 / 823.9, rel=1e-3)
    a100 = get_gpu_spec("a100-80gb")
    assert a100.matmul_efficiency is not None
    params = default_time_model_params(a100)
    assert params.matmul_efficiency == pytest.approx(a100.matmul_efficiency * 0.83)
    assert params.attention_efficiency == pytest.approx(0.83)
    assert params.fp8_matmul_efficiency == pytest.approx(params.matmul_efficiency * 0.9)
    mi300x = get_gpu_spec("mi300x")
    assert default_time_model_params(mi300x).matmul_efficiency == pytest.approx(mi300x.matmul_efficiency)
    unmeasured = a100.replace(matmul_efficiency=None)
    assert default_time_model_params(unmeasured).matmul_efficiency == 0.62


def test_new_fields_default_from_the_yaml() -> None:
    # Parameters built from the older field list get the documented values of the newer ones.
    old = TimeModelParams(matmul_efficiency=0.7, attention_efficiency=0.8, memory_efficiency=0.8,
                          collective_efficiency=0.75, collective_latency_s=1e-5, tensor_parallel_overlap=0.0,
                          context_parallel_overlap=1.0, expert_parallel_overlap=0.0, pipeline_p2p_overlap=0.0,
                          data_parallel_overlap=1.0)
    assert old.fp8_matmul_efficiency == pytest.approx(0.7 * 0.9)
    assert old.comm_sms == 16.0 and old.fsdp_prefetch_layers == 1.0 and old.kernel_launch_s == 1e-5


def test_params_validate() -> None:
    params = default_time_model_params(get_gpu_spec("h100-sxm"))
    with pytest.raises(ConfigError, match="matmul_efficiency"):
        params.replace(matmul_efficiency=1.5)
    with pytest.raises(ConfigError, match="data_parallel_overlap"):
        params.replace(data_parallel_overlap=-0.1)
