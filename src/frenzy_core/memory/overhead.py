"""Runtime overhead on each GPU beyond live tensors: CUDA context, workspaces, NCCL buffers, fragmentation."""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np
import numpy.typing as npt
import yaml

from frenzy_core._base import FrozenModel

__all__ = ["OverheadModel", "overhead_model", "overhead_bytes"]


class OverheadModel(FrozenModel):
    """Constants of the runtime-overhead model (``data/memory_overhead.yaml``, each with its source)."""

    cuda_context_bytes: int
    cuda_context_source: str
    cublas_workspace_bytes: int
    cublas_workspace_source: str
    nccl_per_communicator_bytes: int
    nccl_per_communicator_source: str
    fragmentation_fraction: float
    fragmentation_source: str


@functools.lru_cache(maxsize=1)
def overhead_model() -> OverheadModel:
    """The packaged overhead constants."""
    text = (resources.files("frenzy_core") / "data" / "memory_overhead.yaml").read_text(encoding="utf-8")
    return OverheadModel.model_validate(yaml.safe_load(text))


def overhead_bytes(peak_bytes: npt.ArrayLike, communicators: npt.ArrayLike,
                   model: OverheadModel | None = None) -> dict[str, npt.NDArray[np.int64]]:
    """Overhead by category for a live-tensor peak and the number of NCCL communicators a rank uses."""
    m = model or overhead_model()
    peak = np.asarray(peak_bytes, dtype=np.float64)
    comms = np.asarray(communicators, dtype=np.int64)
    ones = np.ones(np.broadcast(peak, comms).shape, dtype=np.int64)
    return {
        "cuda_context": ones * m.cuda_context_bytes,
        "workspaces": ones * m.cublas_workspace_bytes + comms * m.nccl_per_communicator_bytes,
        "fragmentation": (ones * np.rint(peak * m.fragmentation_fraction)).astype(np.int64),
    }
