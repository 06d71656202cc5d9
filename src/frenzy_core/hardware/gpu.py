"""``GPUSpec``: what one GPU type can hold and do, each number with its source."""

from __future__ import annotations

import enum
from typing import Annotated, NamedTuple

from pydantic import Field, model_validator

from frenzy_core import _limits as limits
from frenzy_core._base import FrozenModel
from frenzy_core._limits import at_most

__all__ = ["DTYPES", "GPUSpec", "LinkKind", "Links", "usable_bytes"]

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
"""Dtypes a GPU may list a dense peak for; a GPU without hardware support for one leaves it out."""


class LinkKind(str, enum.Enum):
    """How the GPUs inside one node talk to each other."""

    NVLINK2 = "nvlink2"
    """NVLink 2 (V100 SXM2, hybrid cube mesh)."""
    NVLINK3 = "nvlink3"
    """NVLink 3 through NVSwitch (A100 SXM; A800 with capped bandwidth)."""
    NVLINK4 = "nvlink4"
    """NVLink 4 through NVSwitch (H100/H200 SXM; H800 with capped bandwidth)."""
    NVLINK5 = "nvlink5"
    """NVLink 5 through NVSwitch (B200)."""
    PCIE3 = "pcie3"
    """PCIe gen 3 x16 only."""
    PCIE4 = "pcie4"
    """PCIe gen 4 x16 only."""
    PCIE5 = "pcie5"
    """PCIe gen 5 x16 only."""
    INFINITY_FABRIC = "infinity-fabric"
    """AMD Infinity Fabric links between the devices of a node."""

    @property
    def is_pcie(self) -> bool:
        """Whether GPUs reach each other only over PCIe (no direct GPU-GPU fabric)."""
        return self in (LinkKind.PCIE3, LinkKind.PCIE4, LinkKind.PCIE5)


class Links(NamedTuple):
    """Where node boundaries fall for a job on one GPU type and how fast each side is (per GPU, per direction):
    what the time model reads. From :attr:`GPUSpec.links` or :meth:`frenzy_core.Cluster.links`. The batch time
    model also takes numpy arrays here, one entry per layout (the planner times each candidate with the node
    size its placement gets, in one call per GPU type)."""

    gpus_per_node: int
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float


def usable_bytes(memory_bytes: float, headroom: float) -> int:
    """Bytes a GPU of ``memory_bytes`` may hold when the fraction ``headroom`` of it is kept free (whole bytes,
    rounded down): the one budget that estimates, plots and plans are checked against."""
    return int(memory_bytes * (1.0 - headroom))


class GPUSpec(FrozenModel):
    """One GPU type. Bandwidths are bytes per second per direction; TFLOPS are dense peaks."""

    id: str = Field(description="Canonical lowercase id, e.g. 'h100-sxm'.")
    name: str = Field(description="Marketing name.")
    vendor: str = Field(description="nvidia or amd.")
    aliases: list[str] = Field(default_factory=list, description="Other names (driver names, short names).")
    memory_bytes: Annotated[int, at_most(limits.GPU_MEMORY_BYTES)] = Field(
        gt=0, description="Usable memory as the driver reports it.")
    nominal_memory_bytes: Annotated[int, at_most(limits.GPU_MEMORY_BYTES)] = Field(
        gt=0, description="Marketing memory size (GB = 1e9 bytes).")
    memory_bandwidth_bytes_per_s: Annotated[float, at_most(limits.BYTES_PER_S)] = Field(ge=limits.MIN_BYTES_PER_S)
    peak_tflops: dict[str, float] = Field(description="Dense peak per dtype: fp32, tf32, bf16, fp16, fp8.")
    matmul_efficiency: float | None = Field(default=None, gt=0, le=1,
                                            description="Best measured bf16 matmul / bf16 peak, where measured.")
    intra_node_link: LinkKind = Field(description="nvlink2..5, pcie3..5, infinity-fabric.")
    intra_node_bytes_per_s: Annotated[float, at_most(limits.BYTES_PER_S)] = Field(
        ge=limits.MIN_BYTES_PER_S, description="Per GPU, per direction.")
    link_domain_gpus: Annotated[int, at_most(limits.GPUS_PER_NODE)] = Field(default=1, gt=0, description=(
        "GPUs of one node that share the fast intra-node link (NVLink/NVSwitch or Infinity Fabric domain); "
        "1 for cards that reach each other only over PCIe."))
    gpus_per_node: Annotated[int, at_most(limits.GPUS_PER_NODE)] = Field(gt=0, description="Typical GPUs per node.")
    node_host_memory_bytes: Annotated[int | None, at_most(limits.HOST_MEMORY_BYTES)] = Field(
        default=None, gt=0, description=(
            "Host (CPU) memory of the typical node of gpus_per_node GPUs, where a source gives it; None: unknown."))
    inter_node_bytes_per_s: Annotated[float, at_most(limits.BYTES_PER_S)] = Field(
        ge=limits.MIN_BYTES_PER_S, description="Typical network bandwidth per GPU, per direction.")
    host_link_bytes_per_s: Annotated[float | None, at_most(limits.BYTES_PER_S)] = Field(
        default=None, ge=limits.MIN_BYTES_PER_S, description=(
            "GPU <-> host link (its PCIe interface), per direction: what offloaded states cross each step; None: "
            "unknown (the time model then uses time_model.yaml's offload.default_host_link_bytes_per_s)."))
    price_per_gpu_hour_usd: Annotated[float | None, at_most(limits.PRICE_USD)] = Field(default=None, gt=0)
    price_date: str | None = Field(default=None, description="ISO date the price was read.")
    notes: str = Field(default="", description="Modelling choices worth knowing (e.g. one MI250X GCD per device).")
    sources: dict[str, str] = Field(description=(
        "Field name -> source of its value; 'peak_tflops' covers every dtype unless 'peak_tflops.<dtype>' is given."))

    @model_validator(mode="after")
    def _check(self) -> GPUSpec:
        unknown = sorted(set(self.peak_tflops) - set(DTYPES))
        if unknown:
            raise ValueError(f"peak_tflops has unknown dtypes {unknown}; use some of {list(DTYPES)}")
        bad = sorted(k for k, v in self.peak_tflops.items() if not limits.MIN_TFLOPS <= v <= limits.TFLOPS.high)
        if bad:
            raise ValueError(f"peak_tflops must be in [{limits.MIN_TFLOPS:g}, {limits.TFLOPS.high:g}] for {bad} "
                             f"({limits.TFLOPS.why}); leave a dtype out when it is unsupported")
        if self.link_domain_gpus > self.gpus_per_node:
            raise ValueError(f"link_domain_gpus ({self.link_domain_gpus}) exceeds gpus_per_node "
                             f"({self.gpus_per_node})")
        if (self.price_per_gpu_hour_usd is None) != (self.price_date is None):
            raise ValueError("price_per_gpu_hour_usd and price_date must be given together")
        missing = [f for f in self.numeric_fields()
                   if f not in self.sources and not (f.startswith("peak_tflops.") and "peak_tflops" in self.sources)]
        if missing:
            raise ValueError(f"no entry in sources for {missing}")
        return self

    def numeric_fields(self) -> list[str]:
        """Names of the numeric values set on this spec (``peak_tflops.<dtype>`` for each peak)."""
        names = [name for name, value in self
                 if isinstance(value, (int, float)) and not isinstance(value, bool)]
        return names + [f"peak_tflops.{dtype}" for dtype in self.peak_tflops]

    @property
    def links(self) -> Links:
        """Node size and link speeds of the type's typical node (what a job without a cluster is timed on)."""
        return Links(self.gpus_per_node, self.intra_node_bytes_per_s, self.inter_node_bytes_per_s)

    @property
    def peak_flops_per_s(self) -> dict[str, float]:
        """Dense peaks in FLOP/s per dtype (``peak_tflops`` times 1e12)."""
        return {dtype: tflops * 1e12 for dtype, tflops in self.peak_tflops.items()}
