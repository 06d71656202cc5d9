"""Result types of the memory estimator."""

from __future__ import annotations

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import usable_bytes

__all__ = ["MEMORY_CATEGORIES", "OVERHEAD_CATEGORIES", "MemoryEstimate", "StageMemory"]

MEMORY_CATEGORIES: tuple[str, ...] = (
    "parameters",
    "gradients",
    "master_weights",
    "optimizer_states",
    "activations",
    "logits_loss",
    "optimizer_temporaries",
    "comm_buffers",
    "workspaces",
)
"""Categories of live tensors (``torch.cuda.max_memory_allocated`` counts all of them); ``workspaces`` are the
cuBLAS/cuBLASLt/Transformer Engine workspaces PyTorch allocates through its caching allocator."""

OVERHEAD_CATEGORIES: tuple[str, ...] = ("cuda_context", "nccl_buffers", "fragmentation")
"""Runtime memory outside the caching allocator's live tensors, which still has to fit on the card."""


class StageMemory(FrozenModel):
    """Memory of the busiest rank of one pipeline stage."""

    stage: int = Field(ge=0, description="0-based pipeline stage.")
    num_layers: int = Field(ge=0, description="Transformer layers held by this stage (all its virtual chunks).")
    num_params: int = Field(ge=0, description="Parameters held by one rank of this stage (after tp/ep sharding).")
    inflight_microbatches: float = Field(ge=0, description="Micro-batches whose activations are live at the peak.")
    breakdown: dict[str, int] = Field(description="Bytes per category live at this stage's peak.")
    peak_bytes: int = Field(ge=0, description="Peak of live tensor bytes over the iteration.")
    peak_phase: str = Field(description="Phase in which the peak occurs: forward, backward or optimizer.")
    overhead: dict[str, int] = Field(description="Runtime overhead bytes by category.")
    device_bytes: int = Field(ge=0, description="peak_bytes + overhead: what must fit on the card.")
    model_state_bytes: int = Field(
        default=0, ge=0, description="Parameters + gradients + master weights + optimizer states at the optimizer step.")
    activation_bytes: int = Field(
        default=0, ge=0, description="Largest activations (saved tensors and recompute working set) over the passes.")
    host_bytes: int = Field(default=0, ge=0, description=(
        "Host memory this stage's rank keeps: offloaded optimizer states, weights, gradients and activations, and "
        "offload staging buffers (0 without offload)."))

    @model_validator(mode="after")
    def _sums(self) -> StageMemory:
        if sum(self.breakdown.values()) != self.peak_bytes:
            raise ValueError(f"breakdown sums to {sum(self.breakdown.values())}, not peak_bytes={self.peak_bytes}")
        if self.peak_bytes + sum(self.overhead.values()) != self.device_bytes:
            raise ValueError("peak_bytes + overhead != device_bytes")
        return self


class MemoryEstimate(FrozenModel):
    """Per-GPU memory of a training job: every stage, and the busiest one."""

    stages: list[StageMemory] = Field(min_length=1)
    busiest_stage: int = Field(ge=0, description="Stage whose device_bytes is largest.")
    peak_bytes: int = Field(ge=0, description="Busiest stage's peak of live tensors (vs max_memory_allocated).")
    device_bytes: int = Field(ge=0, description="Busiest stage's peak plus runtime overhead.")
    breakdown: dict[str, int] = Field(description="Busiest stage's bytes per category at its peak.")
    overhead: dict[str, int] = Field(description="Busiest stage's runtime overhead bytes.")
    peak_phase: str
    host_bytes: int = Field(default=0, ge=0, description=(
        "The most host memory any one rank keeps (offload; its stage's ``host_bytes``): a node needs this times "
        "its GPUs."))

    def fits(self, gpu_memory_bytes: int, headroom: float = 0.0) -> bool:
        """Whether ``device_bytes`` fits in ``gpu_memory_bytes`` leaving ``headroom`` (a fraction) free."""
        if isinstance(gpu_memory_bytes, bool) or not isinstance(gpu_memory_bytes, (int, float)) \
                or gpu_memory_bytes <= 0:
            raise ConfigError(f"gpu_memory_bytes must be a positive number of bytes, got {gpu_memory_bytes!r}",
                              field="gpu_memory_bytes", value=gpu_memory_bytes, hint="e.g. 80 * 2**30")
        if not isinstance(headroom, (int, float)) or not 0.0 <= headroom < 1.0:
            raise ConfigError(f"headroom must be a fraction in [0, 1), got {headroom!r}", field="headroom",
                              value=headroom)
        return self.device_bytes <= usable_bytes(gpu_memory_bytes, headroom)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30

    @property
    def device_gib(self) -> float:
        return self.device_bytes / 2**30

    def table(self) -> str:
        """Plain-text table: one column per pipeline stage, one row per category, in GiB."""
        rows: list[tuple[str, list[str]]] = []
        for cat in MEMORY_CATEGORIES:
            rows.append((cat, [_gib(st.breakdown.get(cat, 0)) for st in self.stages]))
        rows.append(("= peak (live tensors)", [_gib(st.peak_bytes) for st in self.stages]))
        for cat in OVERHEAD_CATEGORIES:
            rows.append((cat, [_gib(st.overhead.get(cat, 0)) for st in self.stages]))
        rows.append(("= device", [_gib(st.device_bytes) for st in self.stages]))
        rows.append(("peak phase", [st.peak_phase for st in self.stages]))
        rows.append(("layers", [str(st.num_layers) for st in self.stages]))
        rows.append(("micro-batches in flight", [f"{st.inflight_microbatches:g}" for st in self.stages]))
        header = ["GiB per GPU"] + [f"stage {st.stage}" + ("*" if st.stage == self.busiest_stage else "")
                                    for st in self.stages]
        width0 = max(len(header[0]), *(len(r[0]) for r in rows))
        widths = [max(len(header[i + 1]), *(len(r[1][i]) for r in rows)) for i in range(len(self.stages))]
        lines = ["  ".join([header[0].ljust(width0)] + [h.rjust(w) for h, w in zip(header[1:], widths)])]
        for name, cells in rows:
            lines.append("  ".join([name.ljust(width0)] + [c.rjust(w) for c, w in zip(cells, widths)]))
        lines.append(f"* busiest stage: {self.device_gib:.2f} GiB on the device "
                     f"({self.peak_gib:.2f} GiB live tensors at the {self.peak_phase} peak)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _gib(n: int) -> str:
    return f"{n / 2**30:.3f}"
