"""Plans the adapter tests share, built directly (not by the planner) so the tests fix the layout themselves."""

from __future__ import annotations

import functools

from frenzy_core import Cluster, plan_job
from frenzy_core.config import Framework, ModelConfig, ParallelConfig, Recompute, TrainingConfig
from frenzy_core.hardware.gpus import get_gpu_spec, load_gpu_specs
from frenzy_core.memory.estimator import estimate_memory
from frenzy_core.planning import Objective, Plan
from frenzy_core.timing import estimate_iteration_time


def make_plan(model: ModelConfig, gpu_type: str, placement: dict[str, list[int]], parallel: ParallelConfig,
              training: TrainingConfig) -> Plan:
    """A Plan with real memory and time estimates for a layout chosen by the test."""
    time = estimate_iteration_time(model, training, parallel, gpu_type)
    return Plan(
        model=model, gpu_type=gpu_type, num_gpus=parallel.world_size, placement=placement, parallel=parallel,
        training=training, memory=estimate_memory(model, training, parallel), time=time,
        usable_bytes=get_gpu_spec(gpu_type).memory_bytes, price_per_hour_usd=None,
        objective=Objective.THROUGHPUT, objective_value=time.tokens_per_s, stranded_gpus=0, optimal=True,
        solver="exhaustive", solve_time_s=0.0)


GPT2 = ModelConfig.preset("gpt2")
LLAMA = ModelConfig.preset("llama-2-7b")
MIXTRAL = ModelConfig.preset("mixtral-8x7b")


def single_gpu() -> Plan:
    """One A100-80GB; micro-batch 4, 4 accumulation steps."""
    return make_plan(GPT2, "a100-80gb", {"node:0": [3]}, ParallelConfig(),
                     TrainingConfig(seq_len=1024, micro_batch_size=4, global_batch_size=16))


def multi_node_dp() -> Plan:
    """Two nodes of 8 A100-80GB, pure data parallelism (DDP) with full recompute."""
    return make_plan(GPT2, "a100-80gb", {"node:0": list(range(8)), "node:1": list(range(8))},
                     ParallelConfig(dp=16),
                     TrainingConfig(seq_len=1024, micro_batch_size=2, global_batch_size=128, recompute=Recompute.FULL,
                                    recompute_num_layers=1))


def tp_pp_nodes() -> Plan:
    """Two nodes of 8 H100 SXM: tp=4 inside a node, pp=2 (interleaved, vpp=2) across nodes, dp=2; Megatron."""
    return make_plan(LLAMA, "h100-sxm", {"node:2": list(range(8)), "node:5": list(range(8))},
                     ParallelConfig(tp=4, pp=2, vpp=2, dp=2),
                     TrainingConfig(seq_len=4096, micro_batch_size=1, global_batch_size=32, framework=Framework.MEGATRON,
                                    distributed_optimizer=True, sequence_parallel=True, recompute=Recompute.SELECTIVE))


def cpu_dp2() -> Plan:
    """Two ranks on one node (run on CPU by the integration test): micro-batch 2, 3 accumulation steps."""
    return make_plan(GPT2, "a100-80gb", {"node:0": [0, 1]}, ParallelConfig(dp=2),
                     TrainingConfig(seq_len=128, micro_batch_size=2, global_batch_size=12))


def zero3_nodes() -> Plan:
    """Llama-2-7B (untied embeddings) on two nodes of 8 A100-80GB: ZeRO-3 / FSDP full sharding, dp=16."""
    return make_plan(LLAMA, "a100-80gb", {"node:0": list(range(8)), "node:1": list(range(8))},
                     ParallelConfig(dp=16),
                     TrainingConfig(seq_len=4096, micro_batch_size=1, global_batch_size=64, zero_stage=3,
                                    recompute=Recompute.SELECTIVE))


def moe_ep_nodes() -> Plan:
    """Mixtral-8x7B on two nodes of 8 H100 SXM: tp=2, expert parallel ep=8 over dp=8; Megatron recipe."""
    return make_plan(MIXTRAL, "h100-sxm", {"node:0": list(range(8)), "node:1": list(range(8))},
                     ParallelConfig(tp=2, dp=8, ep=8),
                     TrainingConfig(seq_len=4096, micro_batch_size=1, global_batch_size=64, framework=Framework.MEGATRON,
                                    distributed_optimizer=True, sequence_parallel=True, recompute=Recompute.FULL,
                                    recompute_num_layers=1, optimizer_impl="fused"))


THREE_PLANS = {"single_gpu": single_gpu, "multi_node_dp": multi_node_dp, "tp_pp_nodes": tp_pp_nodes}
"""The three shapes the documentation's examples use."""

FIVE_PLANS = {**THREE_PLANS, "zero3_nodes": zero3_nodes, "moe_ep_nodes": moe_ep_nodes}
"""The shapes every adapter is checked on by its real consumer: 1 GPU, data parallel across nodes, tp x pp x vpp
across nodes, ZeRO-3, MoE with expert parallelism."""


@functools.cache
def mixed_small() -> Plan:
    """Qwen2.5-0.5B on 2 free A100-80GB and 1 free H100 (nodes of 8): a mixed plan of 3 ranks, the A100 group
    (2 replicas, 1 micro-batch each) then the H100 group (1 replica, 2 micro-batches): small enough to run."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "free_gpus": 1},
                                           {"gpu": "a100-80gb", "gpus_per_node": 8, "free_gpus": 2}]})
    return plan_job(ModelConfig.preset("qwen2.5-0.5b"), cluster, TrainingConfig(seq_len=1024, global_batch_size=16),
                    top_k=0)


@functools.cache
def uneven_dp3() -> Plan:
    """Qwen2.5-0.5B on 3 GPUs of one type with a batch of 16: ranks that differ by one micro-batch (two groups
    of one A100-80GB node, e.g. 1 x 6 and 2 x 5 micro-batches of 1): small enough to run."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "free_gpus": 3}]})
    return plan_job(ModelConfig.preset("qwen2.5-0.5b"), cluster, TrainingConfig(seq_len=1024, global_batch_size=16),
                    constraints={"num_gpus": 3}, top_k=0)


@functools.cache
def mixed_uneven() -> Plan:
    """Llama-2-7B on 3 free H100 and 6 + 4 free A100-80GB: the A100 group spans two nodes of different sizes."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "free_gpus": 3},
                                           {"gpu": "a100-80gb", "gpus_per_node": 8, "free_gpus": 6},
                                           {"gpu": "a100-80gb", "gpus_per_node": 4, "free_gpus": 4}]})
    return plan_job(LLAMA, cluster, TrainingConfig(seq_len=4096, global_batch_size=64), top_k=0)


# ---- pipelines whose stages run on different GPU types (issue 12, form a): planned, one recipe each ----------

STAGE_MODEL = LLAMA.replace(name="tiny-8l", hidden_size=2048, num_layers=8, num_attention_heads=16, num_kv_heads=16,
                            ffn_hidden_size=5504)
"""A 1B-class model of 8 layers: on A10G and L4 cut to a few GiB, no GPU type alone holds it (as in
tests/test_planning_stages.py)."""
_STAGE_RECIPE = {"micro_batch_sizes": [1], "zero_stages": [2], "recompute": ["none"]}
"""The recipe the stage plans pin (torch tensor parallelism is modelled with torchtitan's sequence parallelism
only, so each stage at tp > 1 runs it)."""


def _stage_plan(memory_gib: tuple[int, int], nodes: list[tuple[str, int, int]]) -> Plan:
    specs = load_gpu_specs(overrides={"a10g": {"memory_bytes": memory_gib[0] * 2**30},
                                      "l4": {"memory_bytes": memory_gib[1] * 2**30}})
    cluster = Cluster.from_dict({"nodes": [{"gpu": g, "gpus_per_node": n, "count": c} for g, n, c in nodes]},
                                specs=specs)
    plan = plan_job(STAGE_MODEL, cluster, TrainingConfig(seq_len=1024, global_batch_size=8), constraints=_STAGE_RECIPE,
                    mixed_stages=True)
    assert plan.stages[0].pipeline_stage is not None, "the cluster no longer gives a pipeline over two types"
    return plan


@functools.cache
def stage_uneven() -> Plan:
    """Two stages of 5 and 3 layers (tp 2, dp 1) on a node of 2 A10G (6 GiB) and one of 2 L4 (4 GiB)."""
    return _stage_plan((6, 4), [("a10g", 2, 1), ("l4", 2, 1)])


@functools.cache
def stage_tps() -> Plan:
    """Two stages of their own tp (3 layers at tp 2 on 2 A10G, 5 at tp 4 on 4 L4; dp 1): 6 ranks."""
    return _stage_plan((4, 4), [("a10g", 2, 1), ("l4", 4, 1)])


@functools.cache
def stage_shared_node() -> Plan:
    """Three stages of tp 2 (3, 3 and 2 layers), the first two on one node of 4 A10G, the last on 2 L4."""
    return _stage_plan((4, 4), [("a10g", 4, 1), ("l4", 2, 1)])


STAGE_PLANS = {"stage_uneven": stage_uneven, "stage_tps": stage_tps, "stage_shared_node": stage_shared_node}
"""Form (a) plans every launcher that runs them is checked on."""


def _megatron_stage_plan(nodes: list[tuple[str, int, int]]) -> Plan:
    specs = load_gpu_specs(overrides={"a10g": {"memory_bytes": 6 * 2**30}, "l4": {"memory_bytes": 4 * 2**30}})
    cluster = Cluster.from_dict({"nodes": [{"gpu": g, "gpus_per_node": n, "count": c} for g, n, c in nodes]},
                                specs=specs)
    training = TrainingConfig(seq_len=1024, global_batch_size=8, framework=Framework.MEGATRON,
                              distributed_optimizer=True)
    plan = plan_job(STAGE_MODEL, cluster, training, constraints={"micro_batch_sizes": [1], "recompute": ["none"]},
                    mixed_stages=True)
    assert plan.stages[0].pipeline_stage is not None, "the cluster no longer gives a pipeline over two types"
    return plan


@functools.cache
def megatron_stages() -> Plan:
    """A Megatron recipe over two stages of tp 2 (4 and 4 layers) on 2 A10G and 2 L4."""
    return _megatron_stage_plan([("a10g", 2, 1), ("l4", 2, 1)])


@functools.cache
def megatron_stages_uneven() -> Plan:
    """A Megatron recipe over four stages of tp 2 whose split (2, 2, 3, 1) the first/last-stage flags cannot say
    (--pipeline-model-parallel-layout does)."""
    return _megatron_stage_plan([("a10g", 2, 2), ("l4", 2, 2)])
