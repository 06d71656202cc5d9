"""The offload fallback's edges (issue 13, review of ``plan_job(offload_fallback=True)``): a GPU type that cannot be
used does not stop it, the time limit bounds it, the refusal says what it searched, and the suggestions after it
are found for its recipes too."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from frenzy_core import Cluster, ConfigError, InfeasiblePlanError, ModelConfig, TrainingConfig, plan_job
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.hardware.gpus import load_gpu_specs
from frenzy_core.planning.estimators import AnalyticEstimator
from frenzy_core.planning.launchers import FULL_OFFLOAD, LAUNCH_SCOPES, TORCHTITAN, offload_kind

GIB = 2**30
WIDE = ModelConfig.preset("gpt2").replace(name="wide", num_layers=8, hidden_size=1024, num_attention_heads=16,
                                          num_kv_heads=16, ffn_hidden_size=4096, vocab_size=2048)
"""tests/test_planning_offload.py's 0.1B model whose model states outweigh its activations at 256 tokens."""
SMALL = TrainingConfig(seq_len=256, global_batch_size=8)
FAST = {"micro_batch_sizes": [1], "recompute": ["none"], "tp": 1, "pp": 1}


def _cluster(memory_gib: float, nodes: list[dict[str, Any]]) -> Cluster:
    """``nodes`` with a100-80gb memory cut to ``memory_gib``."""
    specs = load_gpu_specs(overrides={"a100-80gb": {"memory_bytes": int(memory_gib * GIB)}})
    return Cluster.from_dict({"nodes": nodes}, specs=specs)


def test_a_type_the_launcher_refuses_does_not_stop_the_fallback() -> None:
    """The V100s hold the model without offload, but Megatron-LM cannot run them (no FlashAttention below compute
    capability 8.0): the A100s, too small without offload, train it with the optimizer offloaded."""
    cluster = _cluster(1.5, [{"gpu": "a100-80gb", "gpus_per_node": 2, "count": 1, "host_memory_bytes": 64 * GIB},
                             {"gpu": "v100-32gb", "gpus_per_node": 2, "count": 1, "host_memory_bytes": 64 * GIB}])
    request = dict(constraints={**FAST, "num_gpus": 2}, top_k=0, mixed_types=False)
    plan = plan_job(WIDE, cluster, SMALL, launcher="megatron", **request)  # type: ignore[arg-type]
    assert plan.gpu_type == "a100-80gb" and plan.training.offload_optimizer.value == "cpu"
    (v100,) = plan.rejected
    assert v100.gpu_type == "v100-32gb" and "the launcher cannot run it" in v100.message
    # without the launcher the V100s run it as it is (no offload)
    plain = plan_job(WIDE, cluster, SMALL, **request)  # type: ignore[arg-type]
    assert plain.gpu_type == "v100-32gb" and not plain.training.offloads


class _SlowOffloadEstimator(AnalyticEstimator):
    """The analytic estimator, taking ``delay_s`` over the memory of each offloading table (a large cluster's)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.offloads: list[str] = []

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        if training.offloads:
            self.offloads.append(training.offload_params.value)
            time.sleep(self.delay_s)
        return super().device_bytes(model, training, layouts)


def test_the_time_limit_bounds_the_fallback() -> None:
    """2 GPUs of 0.99 GiB need the parameters offloaded too (the second recipe). With each offloading table taking
    0.6 s and a 0.4 s limit, the optimizer's table is the last one started: the call returns within the limit and
    that table (under limit + 1 s), and the refusal says what the limit left out. With time, it plans."""
    cluster = _cluster(0.99, [{"gpu": "a100-80gb", "gpus_per_node": 4, "count": 2, "host_memory_bytes": 64 * GIB}])
    request = dict(constraints={**FAST, "num_gpus": 2}, top_k=0, mixed_types=False)
    slow = _SlowOffloadEstimator(0.6)
    start = time.perf_counter()
    with pytest.raises(InfeasiblePlanError, match="the time limit ended the search before offloading the optimizer "
                       "and the parameters was tried") as err:
        plan_job(WIDE, cluster, SMALL, estimator=slow, time_limit_s=0.4, **request)  # type: ignore[arg-type]
    assert time.perf_counter() - start < 0.4 + 1.0
    assert slow.offloads == ["none"]  # the optimizer's table only
    assert "offloading the optimizer to the host memory" in str(err.value)
    plan = plan_job(WIDE, cluster, SMALL, estimator=_SlowOffloadEstimator(0.0), **request)  # type: ignore[arg-type]
    assert plan.training.offload_params.value == "cpu"


def test_the_refusal_names_only_the_recipes_searched() -> None:
    """Megatron-LM offloads the optimizer only (HybridDeviceOptimizer): its refusal says so, not 'then the
    parameters' (torch's says both, in order: tests/test_planning_offload.py)."""
    cluster = _cluster(0.5, [{"gpu": "a100-80gb", "gpus_per_node": 4, "count": 1, "host_memory_bytes": 64 * GIB}])
    with pytest.raises(InfeasiblePlanError) as err:  # the suggestions cut short by the time limit
        plan_job(WIDE, cluster, SMALL.replace(framework="megatron"), constraints=FAST, top_k=0, mixed_types=False,
                 time_limit_s=0.6)
    assert "offloading the optimizer to the host memory of the nodes that give it does not fit either" in err.value.reasons
    assert "parameters" not in str(err.value)


def test_suggestions_after_the_fallback_are_found_with_offload_too_and_each_works() -> None:
    """3 free GPUs of 1.2 GiB on hosts of 0.5 GiB: without offload 8 GPUs are needed; offloading, the hosts are
    too small. The suggestions name both (the offloading ones saying so), and applying the host one plans."""
    def cluster(host_bytes: int) -> Cluster:
        return _cluster(1.2, [{"gpu": "a100-80gb", "gpus_per_node": 4, "count": 1, "host_memory_bytes": host_bytes,
                               "free_gpus": free} for free in (2, 1)])

    request = dict(constraints=FAST, top_k=0, mixed_types=False)
    with pytest.raises(InfeasiblePlanError) as err:
        plan_job(WIDE, cluster(GIB // 2), SMALL, **request)  # type: ignore[arg-type]
    assert "needs 5 more free a100-80gb GPUs (8 GPUs in whole tp=1 groups per node)" in err.value.suggestions
    (host,) = [s for s in err.value.suggestions if s.startswith("a100-80gb nodes with host_memory_bytes >=")
               and s.endswith(", with the optimizer offloaded")]
    need = int(host.split(">= ")[1].split(" ")[0].replace(",", ""))
    plan = plan_job(WIDE, cluster(need), SMALL, **request)  # type: ignore[arg-type]
    assert plan.training.offload_optimizer.value == "cpu"
    assert all(len(ranks) * plan.memory.host_bytes <= need for ranks in plan.placement.values())


def test_torchtitan_is_given_offload_only_where_it_runs_it() -> None:
    """torchtitan's CPU offload is FSDP2's, applied only with data or context parallel ranks (its declaration,
    ``TORCHTITAN.sharded_offload``): on one GPU the fallback has no plan for it (plain torchrun offloads the
    optimizer there), on two it offloads at dp = 2 and torchtitan's flags say so."""
    cluster = _cluster(0.99, [{"gpu": "a100-80gb", "gpus_per_node": 4, "count": 1, "host_memory_bytes": 64 * GIB}])
    scope = ADAPTERS["torchrun"].scope_for(torchtitan=True)
    assert scope is TORCHTITAN and ADAPTERS["torchrun"].scope_for() is LAUNCH_SCOPES["torchrun"]
    request = dict(top_k=0, mixed_types=False, time_limit_s=0.5)
    plain = plan_job(WIDE, cluster, SMALL, constraints={**FAST, "num_gpus": 1}, launcher="torchrun", **request)  # type: ignore[arg-type]
    assert plain.training.offloads and plain.parallel.dp == 1
    with pytest.raises(ConfigError, match="torchtitan offloads"):
        ADAPTERS["torchrun"](plain, torchtitan=True)
    with pytest.raises(InfeasiblePlanError):
        plan_job(WIDE, cluster, SMALL, constraints={**FAST, "num_gpus": 1}, launcher=scope, **request)  # type: ignore[arg-type]
    plan = plan_job(WIDE, cluster, SMALL, constraints={**FAST, "num_gpus": 2}, launcher=scope, **request)  # type: ignore[arg-type]
    assert offload_kind(plan.training) == FULL_OFFLOAD and plan.parallel.dp == 2
    (first, *_) = ADAPTERS["torchrun"](plan, torchtitan=True)["nodes"]
    assert "--training.enable_cpu_offload" in first["argv"]
