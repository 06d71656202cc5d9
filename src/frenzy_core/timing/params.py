"""``TimeModelParams``: the efficiency and overlap parameters of the iteration-time model, per GPU type."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import Field

from frenzy_core._base import FrozenModel, load_yaml_mapping
from frenzy_core._data import data_text
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec

__all__ = ["TimeModelParams", "default_time_model_params", "time_model_param_sources"]


class TimeModelParams(FrozenModel):
    """What a GPU type reaches in practice: fractions of its peaks, and how much communication is hidden.

    Defaults and their sources are in ``frenzy_core/data/time_model.yaml``; :func:`calibrate` fits them.
    """

    matmul_efficiency: float = Field(gt=0, le=1, description="Dense GEMM FLOP/s as a fraction of the dtype peak.")
    attention_efficiency: float = Field(gt=0, le=1, description="Attention-core FLOP/s as a fraction of the peak.")
    memory_efficiency: float = Field(gt=0, le=1, description="Elementwise-kernel bandwidth / HBM bandwidth.")
    collective_efficiency: float = Field(gt=0, le=1, description="NCCL bus bandwidth / link bandwidth.")
    collective_latency_s: float = Field(ge=0, description="Fixed cost of one collective or send.")
    tensor_parallel_overlap: float = Field(ge=0, le=1, description="Share of TP collectives hidden by compute.")
    context_parallel_overlap: float = Field(ge=0, le=1, description="Share of ring-attention traffic hidden.")
    expert_parallel_overlap: float = Field(ge=0, le=1, description="Share of MoE all-to-alls hidden.")
    pipeline_p2p_overlap: float = Field(ge=0, le=1, description="Share of stage-boundary sends hidden.")
    data_parallel_overlap: float = Field(ge=0, le=1, description="Share of DP reduction hidden (window-capped).")


@functools.lru_cache(maxsize=1)
def _load_yaml() -> dict[str, Any]:
    data = load_yaml_mapping(data_text("time_model.yaml"), "time_model.yaml")
    unknown = set(data["defaults"]) - set(TimeModelParams.model_fields)
    if unknown:
        raise ConfigError(f"time_model.yaml: unknown parameters {sorted(unknown)}")
    return data


def time_model_param_sources() -> dict[str, str]:
    """Parameter name -> where its default value comes from."""
    data = _load_yaml()
    sources = {name: str(entry["source"]) for name, entry in data["defaults"].items()}
    sources["mamf_training_fraction"] = str(data["mamf_training_fraction"]["source"])
    return sources


def default_time_model_params(gpu: GPUSpec) -> TimeModelParams:
    """Documented defaults for ``gpu``: YAML defaults, its measured matmul efficiency (derated), per-GPU overrides."""
    data = _load_yaml()
    values: dict[str, float] = {name: float(entry["value"]) for name, entry in data["defaults"].items()}
    if gpu.matmul_efficiency is not None:
        values["matmul_efficiency"] = gpu.matmul_efficiency * float(data["mamf_training_fraction"]["value"])
    values.update({k: float(v) for k, v in (data.get("per_gpu") or {}).get(gpu.id, {}).items()})
    return TimeModelParams(**values)
