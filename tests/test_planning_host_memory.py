"""The planner keeps an offloading job's ranks on a node within the node's host memory (issue 10, item 2)."""

from __future__ import annotations

from typing import Any

import pytest

from frenzy_core import (
    Cluster,
    ConfigError,
    InfeasiblePlanError,
    ModelConfig,
    TrainingConfig,
    estimate_memory,
    estimate_memory_batch,
    plan_job,
)
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.planning.diagnosis import type_rejections
from frenzy_core.planning.plan import Plan, RejectReason
from frenzy_core.planning.search import make_search

GIB = 2**30
MODEL = ModelConfig.preset("gpt2")
OFFLOAD = TrainingConfig(seq_len=1024, global_batch_size=8, offload_optimizer="cpu")
"""GPT-2 (124M) with ZeRO-Offload: about 1.9 GiB of fp32 master weights, Adam states and gradient copy on the
host in all, sharded over the data-parallel ranks (0.23 GiB per rank at dp = 8)."""


def _cluster(host_memory_bytes: int | None, count: int = 1, gpus: int = 8) -> dict[str, Any]:
    node: dict[str, Any] = {"gpu": "a100-80gb", "gpus_per_node": gpus, "count": count}
    if host_memory_bytes is not None:
        node["host_memory_bytes"] = host_memory_bytes
    return {"nodes": [node]}


def _check_host(plan: Plan) -> None:
    """Every node of the plan holds its ranks' host bytes, and the plan's (scalar) host figure is the batch one."""
    batch = estimate_memory_batch(MODEL, LayoutArrays.from_configs(plan.training, plan.parallel), plan.training)
    assert plan.memory.host_bytes == int(batch.host_bytes[0]) > 0
    assert plan.memory.host_bytes == estimate_memory(MODEL, plan.training, plan.parallel).host_bytes
    for name, gpus in plan.placement.items():
        have = plan.host_memory_bytes[name]
        assert have is not None and len(gpus) * plan.memory.host_bytes <= have, name


def test_offload_refused_on_a_small_ram_node_and_accepted_on_a_large_one() -> None:
    """8 ranks keep 1.9 GiB on the host: a node of 1 GiB holds no placement (fewer ranks keep more each), one
    of 64 GiB does."""
    search = make_search(MODEL, _cluster(GIB), OFFLOAD, "throughput", None)
    table = search.table()
    _, ok = table.options
    assert not ok.any()
    (rejection,) = type_rejections(table, search.pool, *table.options, None,
                                   search.constraints)
    assert rejection.reason is RejectReason.HOST_MEMORY
    assert "host memory" in rejection.message and "fewer ranks per node" in rejection.message
    assert "no offload" in rejection.message and "host_memory_bytes" in rejection.message
    plan = plan_job(MODEL, _cluster(64 * GIB), OFFLOAD, time_limit_s=5)
    _check_host(plan)
    assert "Host memory: 0.2 GiB per rank (offload); 8 ranks on node:0 keep 1.9 GiB of its 64 GiB" in plan.explain()


@pytest.mark.slow
def test_infeasible_message_names_host_memory_and_what_helps() -> None:
    with pytest.raises(InfeasiblePlanError) as err:
        plan_job(MODEL, _cluster(GIB), OFFLOAD, time_limit_s=10)
    assert "host memory" in str(err.value)
    assert any("no offload" in s for s in err.value.suggestions)
    assert any("host_memory_bytes >= " in s for s in err.value.suggestions)


def test_fewer_ranks_per_node_when_host_memory_binds() -> None:
    """Two nodes of 1.5 GiB: eight ranks on one node need 1.9 GiB, so an 8-GPU plan spreads its ranks over both
    (8 GPUs: with more, the planner takes 16 over both nodes whatever their host memory)."""
    eight = {"num_gpus": 8}
    plan = plan_job(MODEL, _cluster(3 * GIB // 2, count=2), OFFLOAD, constraints=eight, time_limit_s=5)
    _check_host(plan)
    assert len(plan.placement) == 2
    unlimited = plan_job(MODEL, _cluster(None, count=2), OFFLOAD, constraints=eight, time_limit_s=5)
    assert len(unlimited.placement) == 1  # without the limit it packs one node


def test_no_offload_is_not_limited_by_host_memory() -> None:
    """Host memory limits only what is offloaded: the same recipe without offload plans as if it were unknown."""
    on_gpu = OFFLOAD.replace(offload_optimizer="none")
    small = plan_job(MODEL, _cluster(GIB // 4), on_gpu, time_limit_s=5)
    unknown = plan_job(MODEL, _cluster(None, gpus=8), on_gpu, time_limit_s=5)
    assert small.memory.host_bytes == 0
    assert (small.num_gpus, small.parallel, small.placement) == (unknown.num_gpus, unknown.parallel,
                                                                 unknown.placement)
    assert "Host memory" not in small.explain()


def test_unknown_host_memory_is_not_checked_and_explain_says_so() -> None:
    """A 4-GPU A100 node is not the catalogue's typical 8-GPU node (DGX A100), so its host memory is unknown."""
    plan = plan_job(MODEL, _cluster(None, gpus=4), OFFLOAD, time_limit_s=5)
    assert set(plan.host_memory_bytes.values()) == {None}
    assert "is unknown, so not checked (give host_memory_bytes in the cluster file)" in plan.explain()


def test_node_host_memory_defaults_from_the_typical_node() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8},
                                           {"gpu": "h100-sxm", "gpus_per_node": 4},
                                           {"gpu": "h100-sxm", "gpus_per_node": 4, "host_memory_bytes": 512 * GIB},
                                           {"gpu": "rtx-3090", "gpus_per_node": 8}]})
    assert [n.host_memory_bytes for n in cluster.nodes] == [2 * 1024 * GIB, None, 512 * GIB, None]
    assert Cluster.from_dict(cluster.to_dict()) == cluster


@pytest.mark.parametrize("value", [0, -1, 2**51])
def test_bad_host_memory_is_a_config_error_naming_the_field(value: int) -> None:
    with pytest.raises(ConfigError, match="host_memory_bytes"):
        Cluster.from_dict(_cluster(value))
