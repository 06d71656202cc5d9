"""``TimeModelParams``: the efficiency and overlap parameters of the iteration-time model, per GPU type."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel, load_yaml_mapping
from frenzy_core._data import data_text
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec

__all__ = ["TimeModelParams", "default_time_model_params", "load_time_model_params", "time_model_data",
           "time_model_param_sources"]

FP8_TO_BF16_MATMUL = 0.9
"""fp8 / bf16 best-measured matmul efficiency where a GPU has no fp8 measurement (source: time_model.yaml,
defaults.fp8_matmul_efficiency)."""


class TimeModelParams(FrozenModel):
    """What a GPU type reaches in practice: fractions of its peaks, and how much communication is hidden.

    Defaults and their sources are in ``frenzy_core/data/time_model.yaml``; :func:`calibrate` fits the
    ``*_efficiency`` ones.
    """

    matmul_efficiency: float = Field(gt=0, le=1, description=(
        "Sustained large-GEMM FLOP/s / dtype peak (before the shape factor)."))
    fp8_matmul_efficiency: float = Field(gt=0, le=1, description="As matmul_efficiency, for fp8 GEMMs / fp8 peak.")
    attention_efficiency: float = Field(gt=0, le=1, description=(
        "Share of the attention kernel's published speed reached in training (sustained clocks)."))
    memory_efficiency: float = Field(gt=0, le=1, description="Elementwise-kernel bandwidth / HBM bandwidth.")
    collective_efficiency: float = Field(gt=0, le=1, description="NCCL bus bandwidth / link bandwidth.")
    collective_latency_s: float = Field(ge=0, description="Fixed cost of one collective or send.")
    ring_step_latency_s: float = Field(default_factory=lambda: _default("ring_step_latency_s"), ge=0, description=(
        "Latency of one ring step inside a node (a ring of n ranks takes n - 1 steps)."))
    network_step_latency_s: float = Field(default_factory=lambda: _default("network_step_latency_s"), ge=0,
                                          description="Latency of one ring step when the ring spans nodes.")
    tensor_parallel_overlap: float = Field(ge=0, le=1, description=(
        "Share of TP collectives run as chunked, GEMM-overlapped collectives (--tp-comm-overlap, async TP)."))
    context_parallel_overlap: float = Field(ge=0, le=1, description="Share of ring-attention sends overlapped.")
    expert_parallel_overlap: float = Field(ge=0, le=1, description="Share of MoE all-to-alls hidden.")
    pipeline_p2p_overlap: float = Field(ge=0, le=1, description="Share of stage-boundary sends hidden.")
    data_parallel_overlap: float = Field(ge=0, le=1, description=(
        "Share of DP/FSDP collectives issued overlapped (what they can hide behind is modelled)."))
    comm_sms: float = Field(default_factory=lambda: _default("comm_sms"), ge=0, description=(
        "SMs a running collective occupies (overlapped compute loses them)."))
    kernel_launch_s: float = Field(default_factory=lambda: _default("kernel_launch_s"), ge=0, description=(
        "Host cost of launching one kernel: a layer's time floor."))
    fsdp_prefetch_layers: float = Field(default_factory=lambda: _default("fsdp_prefetch_layers"), ge=0,
                                        description="Layers FSDP/ZeRO-3 gathers ahead (0: no overlap).")

    @model_validator(mode="before")
    @classmethod
    def _fp8_from_bf16(cls, data: Any) -> Any:
        # Without an fp8 value, fp8 GEMMs reach the bf16 efficiency x the measured fp8/bf16 ratio.
        if isinstance(data, dict) and data.get("fp8_matmul_efficiency") is None \
                and isinstance(data.get("matmul_efficiency"), (int, float)):
            data = {**data, "fp8_matmul_efficiency": min(1.0, data["matmul_efficiency"] * FP8_TO_BF16_MATMUL)}
        return data


def _default(name: str) -> float:
    return float(time_model_data()["defaults"][name]["value"])


@functools.lru_cache(maxsize=1)
def time_model_data() -> dict[str, Any]:
    """The parsed ``time_model.yaml`` (cached)."""
    data = load_yaml_mapping(data_text("time_model.yaml"), "time_model.yaml")
    for section in [data["defaults"], *data["per_gpu"].values()]:
        unknown = set(section) - set(TimeModelParams.model_fields)
        if unknown:
            raise ConfigError(f"time_model.yaml: unknown parameters {sorted(unknown)}")
    return data


def time_model_param_sources() -> dict[str, str]:
    """Parameter name -> where its default value comes from."""
    data = time_model_data()
    sources = {name: str(entry["source"]) for name, entry in data["defaults"].items()}
    sources["sustained_clock_ratio"] = str(data["sustained_clock_ratio"]["nvidia"]["source"])
    return sources


def default_time_model_params(gpu: GPUSpec) -> TimeModelParams:
    """Documented defaults for ``gpu``: its sustained matmul rate where measured (``per_gpu``), else its
    best-shape matmul efficiency x its vendor's sustained/boost ratio, else the YAML fallbacks."""
    data = time_model_data()
    values: dict[str, float] = {name: float(entry["value"]) for name, entry in data["defaults"].items()}
    ratios = data["sustained_clock_ratio"]
    ratio = float(ratios.get(gpu.vendor, ratios["nvidia"])["value"])
    if gpu.matmul_efficiency is not None:
        values["matmul_efficiency"] = gpu.matmul_efficiency * ratio
        values["fp8_matmul_efficiency"] = values["matmul_efficiency"] * FP8_TO_BF16_MATMUL
    values["attention_efficiency"] = ratio
    values.update({k: float(v["value"]) for k, v in data["per_gpu"].get(gpu.id, {}).items()})
    return TimeModelParams(**values)


def load_time_model_params(path: str | Path, gpu: GPUSpec) -> TimeModelParams:
    """Parameters for ``gpu`` from a file written by ``frenzy calibrate`` (YAML or JSON): the GPU's entry under
    ``gpus`` on top of its defaults. A GPU the file does not name keeps its defaults."""
    from frenzy_core.timing.calibration_file import read_calibration_file

    fitted = read_calibration_file(path).get(gpu.id)
    base = default_time_model_params(gpu)
    return base.replace(**fitted) if fitted else base
