"""One rule for a cluster's links: the planner's plans and estimate_iteration_time(cluster=...) agree."""

from __future__ import annotations

from frenzy_core import Cluster, ModelConfig, ParallelConfig, TrainingConfig, estimate_iteration_time, plan_job

MIXED = Cluster.from_dict({"nodes": [
    {"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1},
    {"gpu": "a100-80gb", "gpus_per_node": 4, "count": 2, "inter_node_bytes_per_s": 12.5e9},
    {"gpu": "v100-32gb", "gpus_per_node": 4, "count": 2},
]})


def test_cluster_links_take_the_largest_node_and_the_slowest_links() -> None:
    links = MIXED.links("a100-80gb")
    assert links.gpus_per_node == 8
    assert links.inter_node_bytes_per_s == 12.5e9
    assert links.intra_node_bytes_per_s == min(n.intra_node_bytes_per_s or 0 for n in MIXED.nodes
                                               if n.gpu == "a100-80gb")
    assert MIXED.links("a100") == links  # aliases resolve


def test_plan_time_is_the_time_model_on_the_links_of_its_placement() -> None:
    """The cluster's link speeds, and as node size what the placement gives every node it touches: inside one
    node every group is intra-node; across nodes the node with the fewest of the job's GPUs sets the pace."""
    model = ModelConfig.preset("llama-2-7b")
    training = TrainingConfig(seq_len=2048, global_batch_size=32, precision="fp16-mixed")
    for constraints in ({}, {"gpu_types": ["a100-80gb"], "num_gpus": 16}, {"gpu_types": ["v100-32gb"]}):
        plan = plan_job(model, MIXED, training, constraints=constraints, top_k=0)
        assert plan.links is not None
        again = estimate_iteration_time(model, plan.training, plan.parallel, plan.gpu_spec, cluster=plan.links)
        assert again == plan.time
        cluster = MIXED.links(plan.gpu_type)
        assert plan.links[1:] == cluster[1:]
        per_node = [len(gpus) for gpus in plan.placement.values()]
        if len(per_node) == 1:
            assert plan.links.gpus_per_node >= plan.num_gpus
        else:
            assert plan.links.gpus_per_node == min(per_node)


def test_tensor_parallel_inside_the_largest_node_is_intra_node() -> None:
    # issue 16's case: dp=2 tp=8 on one 8-GPU node and two 4-GPU nodes was 0.276 s by the time model (smallest
    # node: the tp=8 group counted as spanning nodes) and 0.243 s by the planner (largest node)
    model = ModelConfig.preset("llama-2-7b")
    training = TrainingConfig(seq_len=2048, global_batch_size=16)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1},
                                           {"gpu": "a100-80gb", "gpus_per_node": 4, "count": 2}]})
    one_node = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2}]})
    parallel = ParallelConfig(dp=2, tp=8)
    mixed = estimate_iteration_time(model, training, parallel, "a100-80gb", cluster=cluster)
    same_size = estimate_iteration_time(model, training, parallel, "a100-80gb", cluster=one_node)
    assert mixed.breakdown["tensor_parallel"] == same_size.breakdown["tensor_parallel"]


def test_per_layout_links_give_each_layout_the_time_of_its_own_links() -> None:
    """The batch time model takes Links of arrays, one entry per layout (how the planner times candidates placed
    differently in one call): each row equals that row timed alone with scalar links."""
    import numpy as np

    from frenzy_core import Links, estimate_iteration_time_batch
    from frenzy_core.config.arrays import LayoutArrays
    from frenzy_core.hardware import get_gpu_spec

    model = ModelConfig.preset("llama-2-7b")
    training = TrainingConfig(seq_len=2048, global_batch_size=64, zero_stage=3)
    layouts = LayoutArrays.from_columns({"dp": [8, 8, 16, 4, 8], "tp": [1, 2, 1, 2, 1], "pp": [1, 1, 1, 2, 2],
                                         "micro_batch_size": [1, 1, 2, 1, 1]}, training)
    gpn = np.array([8, 4, 6, 8, 2])
    inter = np.array([5e10, 5e10, 2e9, 5e10, 1e10])
    rows = Links(gpn, np.full(5, 3e11), inter)  # type: ignore[arg-type]
    gpu = get_gpu_spec("h100-sxm")
    together = estimate_iteration_time_batch(model, training, gpu, layouts, cluster=rows)
    for i in range(5):
        alone = estimate_iteration_time_batch(model, training, gpu, layouts.take([i]),
                                              cluster=Links(int(gpn[i]), 3e11, float(inter[i])))
        assert together.iteration_s[i] == alone.iteration_s[0]
        assert {k: v[i] for k, v in together.breakdown.items()} == {k: v[0] for k, v in alone.breakdown.items()}
