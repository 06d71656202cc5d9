"""Data-parallel ranks that differ by one micro-batch (issue 13, item 1): the split, the estimates of its two
groups re-made from the plan alone, the launch of both groups, and the refusal where a runtime needs equal counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, ConfigError, InfeasiblePlanError, ModelConfig, TrainingConfig
from frenzy_core.adapters import ADAPTERS
from frenzy_core.hardware import get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.planning import Plan, plan_job
from frenzy_core.planning.uneven import split_counts
from frenzy_core.timing import estimate_iteration_time


def _small() -> ModelConfig:
    return ModelConfig(name="small-llama", num_layers=8, hidden_size=2048, num_attention_heads=16, num_kv_heads=8,
                       mlp="swiglu", norm="rmsnorm", vocab_size=32000, position_embedding="rotary",
                       tied_embeddings=False)


FAST = {"micro_batch_sizes": [1, 2], "zero_stages": [0, 1], "recompute": ["none", "full"]}
"""Pins that keep each plan well under a second."""


@given(dp=st.integers(1, 4096), k=st.integers(1, 10**6), r=st.integers(0, 4095), mbs=st.integers(1, 64))
@settings(max_examples=30, deadline=None, derandomize=True)
def test_the_split_shares_out_every_micro_batch_and_differs_by_at_most_one(dp: int, k: int, r: int, mbs: int) -> None:
    r %= dp
    samples = (dp * k + r) * mbs
    (r_hi, m_hi), (r_lo, m_lo) = split_counts(samples, mbs, dp)
    assert (r_hi, r_lo) == (r, dp - r) and (m_hi, m_lo) == (k + 1, k)
    assert (r_hi * m_hi + r_lo * m_lo) * mbs == samples


def _check_groups(plan: Plan, batch: int) -> None:
    """The law of a plan's groups: they share out the batch and the GPUs; each re-estimates from the plan alone
    to its own memory (within its type's usable memory) and time; the step is the slowest group's."""
    assert sum(g.samples for g in plan.stages) == batch == plan.training.global_batch_size
    assert sum(g.dp for g in plan.stages) == plan.parallel.dp
    held: dict[str, list[int]] = {}
    for g in plan.stages:
        recipe = plan.stage_training(g)
        memory = estimate_memory(plan.model, recipe, plan.parallel)
        assert memory.device_bytes == g.device_bytes <= g.usable_bytes
        again = estimate_iteration_time(plan.model, recipe, plan.parallel, plan.gpu_spec, cluster=g.links)
        assert again.iteration_s == pytest.approx(g.iteration_s, rel=1e-12)
        for node, gpus in g.placement.items():
            held.setdefault(node, []).extend(gpus)
    assert held == plan.placement
    assert plan.time.iteration_s == max(g.iteration_s for g in plan.stages)
    assert plan.time.tokens_per_s == pytest.approx(batch * plan.training.seq_len / plan.time.iteration_s)
    assert plan.memory.device_bytes == max(g.device_bytes for g in plan.stages) <= plan.usable_bytes


@given(free=st.integers(1, 8), batch=st.integers(1, 48), data=st.data())
@settings(max_examples=6, deadline=None, derandomize=True)
def test_every_uneven_plan_re_estimates_to_fit_and_uses_the_gpus_asked(free: int, batch: int,
                                                                        data: st.DataObject) -> None:
    num_gpus = data.draw(st.integers(1, 8 + free))
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8},
                                           {"gpu": "a100-80gb", "gpus_per_node": 8, "free_gpus": free}]})
    try:
        plan = plan_job(_small(), cluster, TrainingConfig(seq_len=1024, global_batch_size=batch),
                        constraints={**FAST, "num_gpus": num_gpus}, top_k=0, mixed_types=False)
    except InfeasiblePlanError:
        return  # e.g. more GPUs than micro-batches
    assert plan.num_gpus == num_gpus
    _check_groups(plan, batch)
    if plan.grouped:
        (hi, lo) = plan.stages
        assert hi.gpu_type == lo.gpu_type and hi.micro_batches == lo.micro_batches + 1
        assert "does not split evenly" in plan.explain()


def test_a_pinned_batch_no_gpu_count_divides_is_planned_on_exactly_those_gpus() -> None:
    """100 sequences over 6 ranks: 4 run 17 micro-batches and 2 run 16 (mbs 1), or the like at mbs 2."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2}]})
    plan = plan_job(_small(), cluster, TrainingConfig(seq_len=1024, global_batch_size=100),
                    constraints={**FAST, "num_gpus": 6, "tp": 1, "pp": 1}, top_k=0, mixed_types=False)
    assert plan.num_gpus == 6 and plan.grouped and not plan.mixed
    _check_groups(plan, 100)
    m = 100 // plan.training.micro_batch_size
    assert [(g.dp, g.micro_batches) for g in plan.stages] == [(m % 6, m // 6 + 1), (6 - m % 6, m // 6)]


def test_megatron_and_one_count_launchers_get_no_uneven_plan() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2}]})
    pins = {**FAST, "num_gpus": 6, "tp": 1, "pp": 1}
    with pytest.raises(InfeasiblePlanError, match="num_microbatches_calculator"):
        plan_job(_small(), cluster, TrainingConfig(seq_len=1024, global_batch_size=100, framework="megatron"),
                 constraints={**pins, "distributed_optimizer": False, "sequence_parallel": False}, top_k=0,
                 mixed_types=False)
    with pytest.raises(InfeasiblePlanError):  # DeepSpeed writes one gradient_accumulation_steps per job
        plan_job(_small(), cluster, TrainingConfig(seq_len=1024, global_batch_size=100), constraints=pins, top_k=0,
                 launcher="deepspeed")


def _paper() -> Cluster:
    return Cluster.preset("frenzy-paper")


@pytest.mark.parametrize("n", [6, 13] + [pytest.param(n, marks=pytest.mark.slow) for n in range(1, 33)
                                         if n not in (6, 13)])
def test_a_pinned_batch_of_100_gets_exactly_the_gpus_asked_on_frenzy_paper(n: int) -> None:
    """`frenzy plan llama-3.1-8b --num-gpus N --global-batch 100`: before uneven splits only the N whose dp could
    divide 100 were planned; 1 and 2 GPUs hold the model only by offloading its optimizer (the fallback; CI runs
    them with the default batch in test_planning_offload.py)."""
    plan = plan_job(ModelConfig.preset("llama-3.1-8b"), _paper(), TrainingConfig(seq_len=2048, global_batch_size=100),
                    constraints={"num_gpus": n}, top_k=0)
    assert plan.num_gpus == n
    _check_groups(plan, 100)


def _uneven_plan() -> Plan:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2}]})
    return plan_job(_small(), cluster, TrainingConfig(seq_len=1024, global_batch_size=100),
                    constraints={**FAST, "num_gpus": 6, "tp": 1, "pp": 1, "micro_batch_sizes": [1]}, top_k=0,
                    mixed_types=False)


def test_torchrun_gives_each_rank_its_groups_count_and_samples() -> None:
    plan = _uneven_plan()  # 4 ranks x 17 + 2 ranks x 16 on one node: two node lines for the node's two groups
    data = ADAPTERS["torchrun"](plan)
    assert data["mixed"] and len(data["nodes"]) == 2 and data["nodes"][0]["node"] == data["nodes"][1]["node"]
    envs = [node["env"] for node in data["nodes"]]
    assert [e["FRENZY_GRAD_ACCUM_STEPS"] for e in envs] == ["17", "16"]
    assert [e["FRENZY_GROUP_FIRST_RANK"] for e in envs] == ["0", "4"]
    assert [e["FRENZY_GROUP_FIRST_SAMPLE"] for e in envs] == ["0", "68"]
    assert {e["FRENZY_GLOBAL_BATCH_SIZE"] for e in envs} == {"100"} and {e["FRENZY_DP"] for e in envs} == {"6"}
    assert [node["gpus"] for node in data["nodes"]] == [[0, 1, 2, 3], [4, 5]]
    for name in ("slurm", "kubernetes"):  # the other launchers of replica groups write it too
        assert ADAPTERS[name].emit(plan)


def test_launchers_with_one_count_per_job_refuse_an_uneven_plan() -> None:
    with pytest.raises(ConfigError, match="different micro-batch counts") as err:
        ADAPTERS["deepspeed"](_uneven_plan())
    assert err.value.field == "plan.stages" and "torchrun" in str(err.value)


def test_an_uneven_plan_fits_its_gpu() -> None:
    plan = _uneven_plan()
    assert plan.memory.device_bytes <= plan.usable_bytes <= get_gpu_spec("a100-80gb").memory_bytes
