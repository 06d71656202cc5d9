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


def test_measured_matmul_efficiency_is_derated_and_fallback_used() -> None:
    a100 = get_gpu_spec("a100-80gb")
    assert a100.matmul_efficiency is not None
    params = default_time_model_params(a100)
    assert params.matmul_efficiency == pytest.approx(a100.matmul_efficiency * 0.9)
    unmeasured = a100.replace(matmul_efficiency=None)
    assert default_time_model_params(unmeasured).matmul_efficiency == 0.75


def test_params_validate() -> None:
    params = default_time_model_params(get_gpu_spec("h100-sxm"))
    with pytest.raises(ConfigError, match="matmul_efficiency"):
        params.replace(matmul_efficiency=1.5)
    with pytest.raises(ConfigError, match="data_parallel_overlap"):
        params.replace(data_parallel_overlap=-0.1)
