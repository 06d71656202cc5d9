"""The offload fallback (issue 13, acceptance item 1 for 1 and 2 GPUs) and offload's time (issue 10, item 2): where
nothing fits without offload the planner offloads, says so, and what it plans fits device and host memory; the
time model charges the host step and the PCIe copies; every launcher writes the offload or refuses it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, ConfigError, InfeasiblePlanError, ModelConfig, TrainingConfig, plan_job
from frenzy_core.adapters import ADAPTERS
from frenzy_core.adapters.base import OFFLOAD_ENV
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.params import count_parameters
from frenzy_core.hardware.gpus import get_gpu_spec, load_gpu_specs
from frenzy_core.memory import estimate_memory
from frenzy_core.planning import Plan
from frenzy_core.timing import estimate_iteration_time
from frenzy_core.timing.offload import host_link_bytes_per_s, offload_rates

GIB = 2**30
WIDE = ModelConfig.preset("gpt2").replace(name="wide", num_layers=8, hidden_size=1024, num_attention_heads=16,
                                          num_kv_heads=16, ffn_hidden_size=4096, vocab_size=2048)
"""A 0.1B model whose model states outweigh its activations at 256 tokens (GPT-2's logits do not): on one GPU
about 3.0 GiB without offload, 0.9 GiB with the optimizer on the host at ZeRO 2; on two at ZeRO 3, 1.0 GiB
offloading the optimizer and 0.9 GiB offloading the parameters too."""
SMALL = TrainingConfig(seq_len=256, global_batch_size=8)
FAST = {"micro_batch_sizes": [1], "recompute": ["none"], "tp": 1, "pp": 1}


def _small_gpus(memory_gib: float, host_gib: float | None, gpus: int = 4, count: int = 2) -> Cluster:
    """Nodes of a100-80gb whose memory is cut to ``memory_gib`` (5 % of it kept free as headroom)."""
    specs = load_gpu_specs(overrides={"a100-80gb": {"memory_bytes": int(memory_gib * GIB)}})
    node: dict[str, Any] = {"gpu": "a100-80gb", "gpus_per_node": gpus, "count": count}
    if host_gib is not None:
        node["host_memory_bytes"] = int(host_gib * GIB)
    return Cluster.from_dict({"nodes": [node]}, specs=specs)


def _fits(plan: Plan) -> None:
    """The plan re-estimated from its own recipe and layout fits the GPU, and every node's ranks fit its host."""
    again = estimate_memory(plan.model, plan.training, plan.parallel)
    assert again.device_bytes <= plan.usable_bytes
    assert again.host_bytes == plan.memory.host_bytes
    for name, ranks in plan.placement.items():
        have = plan.host_memory_bytes[name]
        if plan.training.offloads:
            assert have is not None, f"{name}: offloaded onto a host of unknown memory"
            assert len(ranks) * again.host_bytes <= have, name


@pytest.mark.parametrize("n", [1, 2])
def test_one_or_two_gpus_of_frenzy_paper_train_llama_8b_by_offloading_the_optimizer(n: int) -> None:
    """`frenzy plan llama-3.1-8b --cluster frenzy-paper --num-gpus N` was refused for N = 1, 2 (189 GiB needed
    per GPU); with the fallback it plans exactly N GPUs, offloading the optimizer, and says why."""
    plan = plan_job(ModelConfig.preset("llama-3.1-8b"), Cluster.preset("frenzy-paper"), constraints={"num_gpus": n},
                    top_k=0)
    assert plan.num_gpus == n and plan.training.offload_optimizer.value == "cpu"
    _fits(plan)
    text = plan.explain()
    assert "offloads the optimizer" in text and "without offload the least layout needs" in text
    assert "Host memory:" in text and plan.time.breakdown["offload"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("n", range(1, 33))
def test_every_gpu_count_of_frenzy_paper_plans_llama_8b_with_the_default_batch(n: int) -> None:
    plan = plan_job(ModelConfig.preset("llama-3.1-8b"), Cluster.preset("frenzy-paper"), constraints={"num_gpus": n},
                    top_k=0)
    assert plan.num_gpus == n
    _fits(plan)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(memory_gib=st.sampled_from([0.9, 0.99, 1.2, 2.0, 4.0]), host_gib=st.sampled_from([None, 0.5, 2.0, 64.0]),
       n=st.integers(1, 4))
def test_every_plan_fits_device_and_host_memory(memory_gib: float, host_gib: float | None, n: int) -> None:
    """Law: whatever the fallback plans (offloading or not) re-estimates to fit the GPU, and an offloading plan
    sits only on hosts of known memory that hold its ranks' host bytes."""
    try:
        plan = plan_job(WIDE, _small_gpus(memory_gib, host_gib), SMALL, constraints={**FAST, "num_gpus": n},
                        top_k=0, mixed_types=False)
    except InfeasiblePlanError:
        return
    _fits(plan)
    assert ("offloads" in plan.explain()) == plan.training.offloads


def test_an_explicit_no_offload_is_kept() -> None:
    """A request that sets an offload field keeps it: no fallback, the refusal as before."""
    cluster = _small_gpus(1.2, 64.0)
    with pytest.raises(InfeasiblePlanError):
        plan_job(WIDE, cluster, SMALL.replace(offload_optimizer="none"), constraints={**FAST, "num_gpus": 1},
                 top_k=0, mixed_types=False)
    plan = plan_job(WIDE, cluster, SMALL, constraints={**FAST, "num_gpus": 1}, top_k=0, mixed_types=False)
    assert plan.training.offload_optimizer.value == "cpu" and plan.training.offload_params.value == "none"


def test_a_refusal_says_offloading_was_searched_too() -> None:
    with pytest.raises(InfeasiblePlanError, match="offloading the optimizer, then the parameters") as err:
        plan_job(WIDE, _small_gpus(0.5, 64.0), SMALL, constraints={**FAST, "num_gpus": 1}, top_k=0, mixed_types=False)
    assert "does not fit even at the largest layout" in str(err.value)  # the no-offload reasons stay


def test_the_fallback_is_deterministic_and_skips_hosts_of_unknown_memory() -> None:
    request = dict(constraints={**FAST, "num_gpus": 1}, top_k=0, mixed_types=False)
    first = plan_job(WIDE, _small_gpus(1.2, 64.0), SMALL, **request)  # type: ignore[arg-type]
    again = plan_job(WIDE, _small_gpus(1.2, 64.0), SMALL, **request)  # type: ignore[arg-type]
    assert (first.training, first.parallel, first.placement) == (again.training, again.parallel, again.placement)
    with pytest.raises(InfeasiblePlanError):
        plan_job(WIDE, _small_gpus(1.2, None), SMALL, **request)  # type: ignore[arg-type]


def test_parameters_are_offloaded_only_when_the_optimizer_is_not_enough() -> None:
    """Optimizer offload first; a GPU too small for the half weights too takes the ZeRO-3 parameter offload."""
    plan = plan_job(WIDE, _small_gpus(0.99, 64.0), SMALL, constraints={**FAST, "num_gpus": 2}, top_k=0,
                    mixed_types=False)
    assert plan.training.offload_params.value == "cpu" and plan.training.effective_zero_stage == 3
    _fits(plan)


@pytest.mark.parametrize("launcher", sorted(ADAPTERS))
def test_every_launcher_writes_the_offload_or_refuses_it(launcher: str) -> None:
    """A plan made for a launcher that offloads carries the offload in the launcher's own words; where the
    launcher cannot say it the planner does not offload for it (infeasible, as without the fallback). Megatron
    keeps its fp32 gradient buffer on the GPU, so its GPUs get more memory (still too little without offload)."""
    memory_gib = 1.5 if launcher == "megatron" else 1.2
    try:
        plan = plan_job(WIDE, _small_gpus(memory_gib, 64.0, gpus=2, count=1), SMALL,
                        constraints={**FAST, "num_gpus": 2}, top_k=0, launcher=launcher, mixed_types=False)
    except InfeasiblePlanError:
        pytest.fail(f"{launcher}: no plan")
    assert plan.training.offloads
    text = ADAPTERS[launcher].emit(plan)
    if launcher == "deepspeed":
        assert '"offload_optimizer": {\n      "device": "cpu"' in text
    elif launcher == "megatron":
        assert "--optimizer-cpu-offload" in text and "--use-precision-aware-optimizer" in text
    elif launcher == "accelerate":
        assert "fsdp_offload_params: true" in text
    else:
        assert all(name in text for name in OFFLOAD_ENV), launcher


def test_launchers_refuse_offload_they_cannot_write() -> None:
    plan = plan_job(WIDE, _small_gpus(1.2, 64.0, gpus=2, count=1), SMALL, constraints={**FAST, "num_gpus": 1},
                    top_k=0, mixed_types=False)
    assert plan.training.offload_optimizer.value == "cpu" and plan.training.offload_params.value == "none"
    with pytest.raises(ConfigError, match="FSDP's CPUOffload") as err:
        ADAPTERS["accelerate"](plan)
    assert err.value.field == "training.offload_optimizer"
    nvme = plan.replace(training=plan.training.replace(offload_optimizer="nvme"))
    with pytest.raises(ConfigError, match="nvme_path"):
        ADAPTERS["deepspeed"](nvme)
    with pytest.raises(ConfigError, match="torchtitan offloads only"):
        ADAPTERS["torchrun"](plan, torchtitan=True)


def test_offload_costs_time_and_the_host_step_is_shared_by_a_nodes_ranks() -> None:
    """Optimizer offload adds the host step and the copies; on 8 ranks of one node with no ZeRO each rank steps
    the whole model on the shared host: 8 x parameters / the node's CPU-Adam rate."""
    model, gpu = ModelConfig.preset("llama-3.1-8b"), get_gpu_spec("a100-80gb")
    t = TrainingConfig(seq_len=2048, global_batch_size=64)
    on_gpu = estimate_iteration_time(model, t, ParallelConfig(dp=8), gpu)
    offloaded = estimate_iteration_time(model, t.replace(offload_optimizer="cpu"), ParallelConfig(dp=8), gpu)
    assert offloaded.iteration_s > on_gpu.iteration_s
    params = count_parameters(model).total
    assert offloaded.breakdown["optimizer"] == pytest.approx(8 * params / offload_rates().deepspeed_cpu_adam_params_per_s,
                                                             rel=0.01)
    # the half weights cross back once per step, hidden behind that host step
    assert offloaded.breakdown["offload"] >= params * 2 / host_link_bytes_per_s(gpu)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(gpu=st.sampled_from(["a100-80gb", "h100-sxm", "rtx-3090", "l4"]), dp=st.sampled_from([1, 2, 4, 8]),
       zero=st.integers(1, 3), mbs=st.sampled_from([1, 2, 4]), params_too=st.booleans())
def test_offloading_never_makes_a_step_faster(gpu: str, dp: int, zero: int, mbs: int, params_too: bool) -> None:
    """Law (for these GPUs): the host steps slower than the GPU's memory-bound update (4.5e9 parameters/s per
    node against HBM bandwidth x 0.8 / 30 bytes: 8.5e9 on a T4, the slowest catalogue HBM) and the copies only add
    time, so offloading never shortens a step."""
    t = TrainingConfig(seq_len=1024, global_batch_size=8 * 4 * 8, micro_batch_size=mbs, zero_stage=zero)
    offloaded = t.replace(offload_optimizer="cpu", offload_params="cpu" if params_too and zero == 3 else "none")
    layout = ParallelConfig(dp=dp)
    plain = estimate_iteration_time(WIDE, t, layout, gpu).iteration_s
    assert estimate_iteration_time(WIDE, offloaded, layout, gpu).iteration_s >= plain
