"""``GPUSpec``: what one GPU type can hold and do, each number with its source."""

from __future__ import annotations

from pydantic import Field

from frenzy_core._base import FrozenModel

__all__ = ["GPUSpec"]


class GPUSpec(FrozenModel):
    """One GPU type. Bandwidths are bytes per second per direction; TFLOPS are dense peaks."""

    id: str = Field(description="Canonical lowercase id, e.g. 'h100-sxm'.")
    name: str = Field(description="Marketing name.")
    vendor: str = Field(description="nvidia or amd.")
    aliases: list[str] = Field(default_factory=list, description="Other names (driver names, short names).")
    memory_bytes: int = Field(gt=0, description="Usable memory as the driver reports it.")
    nominal_memory_bytes: int = Field(gt=0, description="Marketing memory size (GB = 1e9 bytes).")
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    peak_tflops: dict[str, float] = Field(description="Dense peak per dtype: fp32, tf32, bf16, fp16, fp8.")
    matmul_efficiency: float | None = Field(default=None, gt=0, le=1,
                                            description="Best measured bf16 matmul / bf16 peak, where measured.")
    intra_node_link: str = Field(description="nvlink2..5, pcie3..5, infinity-fabric, ...")
    intra_node_bytes_per_s: float = Field(gt=0, description="Per GPU, per direction.")
    gpus_per_node: int = Field(gt=0, description="Typical GPUs per node.")
    inter_node_bytes_per_s: float = Field(gt=0, description="Typical network bandwidth per GPU, per direction.")
    price_per_gpu_hour_usd: float | None = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, description="ISO date the price was read.")
    sources: dict[str, str] = Field(description="Field name -> source of its value.")
