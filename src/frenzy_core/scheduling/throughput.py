"""Default throughput of an allocation: the planner's fastest layout on that many GPUs of one type."""

from __future__ import annotations

import math

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpus import get_gpu_spec

__all__ = ["homogeneous_cluster", "planned_tokens_per_s"]


def homogeneous_cluster(gpu_type: str, num_gpus: int) -> Cluster:
    """The smallest cluster of the type's typical nodes (``gpus_per_node`` each) holding ``num_gpus``."""
    spec = get_gpu_spec(gpu_type)
    nodes = math.ceil(num_gpus / spec.gpus_per_node)
    shape = {"gpu": spec.id, "gpus_per_node": spec.gpus_per_node, "count": nodes}
    return Cluster.from_dict({"name": f"{nodes} x {spec.gpus_per_node} {spec.id}", "nodes": [shape]})


def planned_tokens_per_s(model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
    """Tokens per second of the fastest layout on exactly ``num_gpus`` GPUs of ``gpu_type`` that fits in
    memory (frenzy_core's planner with its analytic estimators); raises InfeasiblePlanError when none fits."""
    from frenzy_core.planning import plan_job

    plan = plan_job(model, homogeneous_cluster(gpu_type, num_gpus), training, objective="throughput",
                    constraints={"num_gpus": num_gpus, "gpu_types": [get_gpu_spec(gpu_type).id]}, top_k=0)
    return float(plan.time.tokens_per_s)
