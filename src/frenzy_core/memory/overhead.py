"""Kernel workspaces and runtime overhead per GPU: cuBLAS/TE workspaces, CUDA context, NCCL, fragmentation."""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt
from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core._data import data_text
from frenzy_core._files import load_yaml
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import Framework, TrainingConfig

__all__ = ["OverheadModel", "overhead_bytes", "overhead_model", "workspace_bytes"]


class OverheadModel(FrozenModel):
    """Constants of the overhead model (``data/memory_overhead.yaml``, each with its source)."""

    torch_workspace_bytes: int
    torch_workspace_source: str
    megatron_workspace_bytes: int
    megatron_workspace_source: str
    megatron_moe_workspace_bytes: int
    megatron_moe_workspace_source: str
    megatron_ub_workspace_bytes: int
    megatron_ub_workspace_source: str
    cuda_context_bytes: int
    cuda_context_source: str
    nccl_per_communicator_bytes: int
    nccl_per_communicator_source: str
    fragmentation_fraction: float = Field(ge=0.0)
    """Non-negative: device bytes then grow strictly with the live-tensor peak (the batch estimator picks the
    busiest stage by its peak)."""
    fragmentation_source: str
    nvme_param_buffer_bytes: int
    nvme_param_buffer_source: str
    nvme_optimizer_buffers: int
    nvme_optimizer_sub_group: int
    nvme_optimizer_source: str


@functools.lru_cache(maxsize=1)
def overhead_model() -> OverheadModel:
    """The packaged constants."""
    text = data_text("memory_overhead.yaml")
    return OverheadModel.model_validate(load_yaml(text, "memory_overhead.yaml"))


def workspace_bytes(model: ModelConfig, training: TrainingConfig) -> int:
    """Kernel workspaces that live in the caching allocator (counted in ``peak_bytes``)."""
    m = overhead_model()
    if training.framework is Framework.MEGATRON:
        return (m.megatron_workspace_bytes + (m.megatron_moe_workspace_bytes if model.moe is not None else 0)
                + (m.megatron_ub_workspace_bytes if training.tp_comm_overlap else 0))
    return m.torch_workspace_bytes


def overhead_bytes(peak_bytes: npt.ArrayLike, communicators: npt.ArrayLike) -> dict[str, npt.NDArray[np.int64]]:
    """Overhead by category for a live-tensor peak and the number of NCCL communicators a rank uses."""
    m = overhead_model()
    peak = np.asarray(peak_bytes, dtype=np.float64)
    comms = np.asarray(communicators, dtype=np.int64)
    ones = np.ones(np.broadcast(peak, comms).shape, dtype=np.int64)
    return {
        "cuda_context": ones * m.cuda_context_bytes,
        "nccl_buffers": comms * m.nccl_per_communicator_bytes * ones,
        "fragmentation": (ones * np.rint(peak * m.fragmentation_fraction)).astype(np.int64),
    }
