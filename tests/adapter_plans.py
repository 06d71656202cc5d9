"""Plans the adapter tests share, built directly (not by the planner) so the tests fix the layout themselves."""

from __future__ import annotations

import functools

from frenzy_core import Cluster, plan_job
from frenzy_core.config import Framework, ModelConfig, ParallelConfig, Recompute, TrainingConfig
from frenzy_core.hardware.gpus import get_gpu_spec
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
