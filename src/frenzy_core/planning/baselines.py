"""Baselines to compare plans against: Frenzy's MARP + HAS replica, and a fixed user request.

MARP (Memory-Aware Resources Predictor) and HAS (Heterogeneity-Aware Scheduling) are from Chang et al.,
"Frenzy: A Memory-Aware Serverless LLM Training System for Heterogeneous GPU Clusters" (arXiv:2412.14479, 2024).
The replica follows the authors' public MARP and scheduler code, which the paper describes only in words:

* MARP: tensor parallelism ``tp`` in 1..64 dividing the attention heads, data parallelism ``dp`` in powers of two
  up to 512 (stopping once dp exceeds the global batch), no pipeline parallelism, no gradient accumulation (each
  rank runs ``global_batch / dp`` samples at once). Per GPU: 20 bytes per parameter over tp (fp16 + fp32 weights
  2 + 4, fp32 Adam moments 4 + 4, fp16 + fp32 gradients 2 + 4) plus the activations of Korthikanti et al. 2022
  (Table 2, tensor parallelism without sequence parallelism): ``s b h L (10 + 24/tp + 5 a s / (h tp))`` bytes,
  which is ``sbh(34 + 5as/h)`` per layer at tp = 1. Configurations are sorted by (GPUs, bytes per GPU).
* HAS: walk the list; a configuration is schedulable when the free GPUs whose memory (GB = 1e9 bytes) is at least
  the predicted bytes number at least its GPU count; the smallest sufficient memory size is matched first. We take
  the first schedulable configuration (fewest GPUs, the comments' stated intent; the public loop has no ``break``
  and so ends on the last one). Placement is best fit: nodes by (free GPUs ascending, FLOP/s descending); a node
  that alone holds the rest is taken, else the roomiest node, then the next larger memory size. Every GPU is an
  instance of its own, so a tp group may span nodes; GPU types of equal memory mix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.params import count_parameters
from frenzy_core.config.training import Recompute, TrainingConfig
from frenzy_core.errors import ConfigError, FrenzyError, InfeasiblePlanError
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpu import GPUSpec, usable_bytes
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.planning.nodes import FreeNode, NodePool
from frenzy_core.planning.plan import Plan
from frenzy_core.planning.planner import plan_job
from frenzy_core.planning.request import PlanConstraints
from frenzy_core.timing import estimate_iteration_time

__all__ = [
    "MARP_BYTES_PER_PARAM",
    "BaselineAssessment",
    "BaselinePlan",
    "MarpConfig",
    "assess_baseline",
    "marp_configs",
    "marp_plan",
    "user_request_plan",
]

MARP_BYTES_PER_PARAM = 20
"""MARP's model-state bytes per parameter: (2 + 4) weights + (4 + 4) Adam states + (2 + 4) gradients."""
MARP_MAX_TP = 64
"""MARP's tensor-parallel range is 1..64."""
MARP_MAX_DP_EXP = 9
"""MARP's data-parallel range is 2**0 .. 2**9."""


class MarpConfig(FrozenModel):
    """One MARP resource configuration."""

    tp: int
    dp: int
    num_gpus: int
    bytes_per_gpu: float = Field(description="MARP's predicted memory per GPU (bytes).")


class BaselinePlan(FrozenModel):
    """A baseline's choice, with its own memory prediction (not the library's)."""

    name: str
    gpu_types: list[str] = Field(description="GPU types it takes (HAS may mix types of equal memory).")
    num_gpus: int
    parallel: ParallelConfig
    training: TrainingConfig
    placement: dict[str, list[int]]
    predicted_bytes: float = Field(description="The baseline's own per-GPU memory prediction.")


class BaselineAssessment(FrozenModel):
    """A baseline judged by the library's estimators: does it really fit, and how fast is it."""

    fits: bool
    device_bytes: int | None = Field(description="Library estimate; None when the layout is invalid for the model.")
    usable_bytes: int = Field(description="Usable memory of the smallest GPU it uses.")
    tokens_per_s: float | None = Field(description="On the slowest GPU type it uses; None when invalid.")
    note: str = ""


def marp_configs(model: ModelConfig, training: TrainingConfig) -> list[MarpConfig]:
    """MARP's candidate list for ``model`` with ``training``'s global batch and sequence length, best first."""
    gbs = training.global_batch_size
    if gbs is None:
        raise ConfigError("MARP needs training.global_batch_size (it splits it over data-parallel ranks)",
                          field="training.global_batch_size")
    params = count_parameters(model).total
    s, h, layers, a = training.seq_len, model.hidden_size, model.num_layers, model.num_attention_heads
    out = []
    for tp in range(1, MARP_MAX_TP + 1):
        if a % tp:
            continue
        states = MARP_BYTES_PER_PARAM * params / tp
        for exp in range(MARP_MAX_DP_EXP + 1):
            dp = 2**exp
            if gbs // dp == 0:
                break
            activations = gbs / dp * s * h * layers * (10 + 24 / tp + 5 * a * s / (h * tp))
            out.append(MarpConfig(tp=tp, dp=dp, num_gpus=tp * dp, bytes_per_gpu=states + activations))
    return sorted(out, key=lambda c: (c.num_gpus, c.bytes_per_gpu))


def _flops(spec: GPUSpec) -> float:
    return spec.peak_tflops.get("bf16", spec.peak_tflops.get("fp16", spec.peak_tflops.get("fp32", 0.0)))


def _has_place(pool: NodePool, specs: Mapping[str, GPUSpec], need: int, size: int) -> dict[int, int] | None:
    """HAS best-fit placement of ``need`` single-GPU instances on memory sizes >= ``size``: node -> GPUs."""
    sizes = sorted({specs[n.gpu_type].nominal_memory_bytes for n in pool.nodes
                    if specs[n.gpu_type].nominal_memory_bytes >= size})
    order = sorted(range(len(pool.nodes)), key=lambda i: (pool.nodes[i].free, -_flops(specs[pool.nodes[i].gpu_type]),
                                                          i))
    taken: dict[int, int] = {}
    assigned = 0
    for match in sizes:
        members = [i for i in order if specs[pool.nodes[i].gpu_type].nominal_memory_bytes == match]
        last = len(members)
        while assigned < need and last > 0:
            roomiest = None
            for pos, i in enumerate(members[:last]):
                roomiest = pos
                if assigned + pool.nodes[i].free >= need:
                    taken[i] = need - assigned
                    assigned = need
                    break
            if assigned == need or roomiest is None:
                break
            i = members[roomiest]
            last = roomiest
            if pool.nodes[i].free > 0:
                taken[i] = pool.nodes[i].free
                assigned += pool.nodes[i].free
        if assigned == need:
            return taken
    return None


def marp_plan(model: ModelConfig, cluster: Any, training: TrainingConfig) -> BaselinePlan:
    """Frenzy's choice for ``model`` on the free GPUs of ``cluster`` (see the module docstring)."""
    pool = cluster if isinstance(cluster, NodePool) else NodePool.from_cluster(cluster)
    if not pool.nodes:
        raise ConfigError("the cluster has no nodes", field="cluster")
    specs = {name: cluster.gpu_spec(name) if isinstance(cluster, Cluster) else get_gpu_spec(name)
             for name in pool.gpu_types}
    gbs = training.global_batch_size
    for cfg in marp_configs(model, training):
        assert gbs is not None  # marp_configs checked it
        if gbs % cfg.dp:
            continue  # a whole number of samples per rank is needed to run it
        sizes = sorted(s.nominal_memory_bytes for s in specs.values() if s.nominal_memory_bytes >= cfg.bytes_per_gpu)
        if not sizes:
            continue
        free_ge = sum(n.free for n in pool.nodes if specs[n.gpu_type].nominal_memory_bytes >= sizes[0])
        if cfg.num_gpus > free_ge:
            continue
        taken = _has_place(pool, specs, cfg.num_gpus, sizes[0])
        if taken is None:
            continue
        nodes: list[FreeNode] = [pool.nodes[i] for i in sorted(taken)]
        placement = {n.name: list(n.free_indices[: taken[i]]) for i, n in zip(sorted(taken), nodes)}
        return BaselinePlan(
            name="marp", gpu_types=sorted({n.gpu_type for n in nodes}), num_gpus=cfg.num_gpus,
            parallel=ParallelConfig(dp=cfg.dp, tp=cfg.tp),
            training=training.replace(micro_batch_size=gbs // cfg.dp, recompute=Recompute.NONE, zero_stage=0,
                                      distributed_optimizer=False, sequence_parallel=False),
            placement=placement, predicted_bytes=cfg.bytes_per_gpu)
    raise InfeasiblePlanError(f"MARP/HAS finds no configuration of {model.name or 'the model'} that fits the free "
                              "GPUs of the cluster")


def assess_baseline(model: ModelConfig, baseline: BaselinePlan, headroom: float = 0.0) -> BaselineAssessment:
    """The library's memory and time estimates of a baseline's layout (slowest and smallest GPU it uses)."""
    specs = [get_gpu_spec(t) for t in baseline.gpu_types]
    smallest = min(specs, key=lambda s: s.memory_bytes)
    slowest = min(specs, key=_flops)
    usable = usable_bytes(smallest.memory_bytes, headroom)
    try:
        memory = estimate_memory(model, baseline.training, baseline.parallel)
        time = estimate_iteration_time(model, baseline.training, baseline.parallel, slowest)
    except FrenzyError as exc:
        return BaselineAssessment(fits=False, device_bytes=None, usable_bytes=usable, tokens_per_s=None,
                                  note=f"layout invalid for the model: {exc}")
    return BaselineAssessment(fits=memory.device_bytes <= usable, device_bytes=memory.device_bytes,
                              usable_bytes=usable, tokens_per_s=time.tokens_per_s)


def user_request_plan(model: ModelConfig, cluster: Any, training: TrainingConfig | None = None, *, gpu_type: str,
                      num_gpus: int, constraints: PlanConstraints | None = None, **kwargs: Any) -> Plan:
    """What a user asking for ``num_gpus`` x ``gpu_type`` gets: the fastest layout that fits on exactly those."""
    base = constraints or PlanConstraints()
    pinned = base.replace(gpu_types=[gpu_type], num_gpus=num_gpus)
    return plan_job(model, cluster, training, objective="throughput", constraints=pinned, **kwargs)
