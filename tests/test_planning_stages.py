"""Pipeline stages on different GPU types with uneven layer counts (issue 12, form a): the plan, its stages
re-estimated on their own types, and the search that chooses them (plan_job(mixed_stages=True))."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, ConfigError, InfeasiblePlanError, ModelConfig, ParallelConfig, TrainingConfig
from frenzy_core.adapters import get_adapter
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.hardware.gpus import load_gpu_specs
from frenzy_core.memory import estimate_memory
from frenzy_core.memory.batch import stage_device_bytes
from frenzy_core.planning import Plan, plan_job
from frenzy_core.timing.stages import PipelineStage, estimate_pipeline_time

# a 1B-class model on GPUs cut to 5 GiB: two GPUs of one type cannot hold it, four of two types can
TINY = ModelConfig.preset("llama-2-7b").replace(name="tiny-8l", hidden_size=2048, num_layers=8,
                                                 num_attention_heads=16, num_kv_heads=16, ffn_hidden_size=5504)
SPECS = load_gpu_specs(overrides={"a10g": {"memory_bytes": 5 * 2**30}, "l4": {"memory_bytes": 5 * 2**30}})
TINY_CLUSTER = {"nodes": [{"gpu": "a10g", "gpus_per_node": 2, "count": 1}, {"gpu": "l4", "gpus_per_node": 2, "count": 1}]}
TINY_REQUEST = TrainingConfig(seq_len=1024, global_batch_size=8)
FAST = {"micro_batch_sizes": [1], "zero_stages": [2], "recompute": ["none"]}
"""One recipe, so that the search runs in CI time."""


@functools.cache
def _tiny(mixed_stages: bool = True) -> Plan:
    return plan_job(TINY, Cluster.from_dict(TINY_CLUSTER, specs=SPECS), TINY_REQUEST, constraints=FAST,
                    mixed_stages=mixed_stages)


def _check_stages(plan: Plan) -> None:
    """Every law a form (a) plan keeps: layers sum to L in model order; each stage fits its own type and
    re-estimates to its own figures; the plan's time is the pipeline of its stages; only free GPUs, whole TP
    groups per node."""
    stages = plan.stages
    assert [s.pipeline_stage for s in stages] == list(range(len(stages)))
    assert sum(s.num_layers for s in stages) == plan.model.num_layers
    assert [s.first_layer for s in stages] == list(np.cumsum([0] + [s.num_layers for s in stages[:-1]]))
    assert plan.parallel.stage_layers == tuple(s.num_layers for s in stages)
    for i, s in enumerate(stages):
        memory = estimate_memory(plan.model, plan.stage_training(s), plan.stage_parallel(s))
        assert memory.stages[i].device_bytes == s.device_bytes <= s.usable_bytes
        lay = LayoutArrays.from_configs(plan.stage_training(s), plan.stage_parallel(s))
        assert int(stage_device_bytes(plan.model, plan.stage_training(s), lay, i)[0]) == s.device_bytes
        assert s.num_gpus == s.dp * s.tp == sum(len(v) for v in s.placement.values())
        assert all(len(v) % s.tp == 0 for v in s.placement.values())
    p2p = min(s.links.inter_node_bytes_per_s for s in stages if s.links is not None)
    cluster = Cluster.from_dict(TINY_CLUSTER, specs=SPECS) if plan.model.name == TINY.name else None
    specs = SPECS if cluster is not None else load_gpu_specs()
    again = estimate_pipeline_time(plan.model, plan.training, plan.parallel,
                                   [PipelineStage(specs[s.gpu_type], s.tp, s.links, p2p) for s in stages
                                    if s.links is not None])
    assert again.time == plan.time
    assert [s.microbatch_s for s in stages] == list(again.microbatch_s)
    used = [(node, k) for s in stages for node, ks in s.placement.items() for k in ks]
    assert len(used) == len(set(used)) == plan.num_gpus


def test_tiny_pipeline_spans_both_types_and_keeps_every_law() -> None:
    plan = _tiny()
    assert plan.mixed and plan.solver == "branch-and-bound" and plan.optimal
    assert set(plan.gpu_types) == {"a10g", "l4"}
    _check_stages(plan)
    assert Plan.model_validate_json(plan.model_dump_json()) == plan
    text = plan.explain()
    assert "Pipeline stages (1F1B" in text and "the split minimises" in text


def test_stages_never_lose_to_the_plan_without_them() -> None:
    """mixed_stages only adds options: the objective is never worse (here the replica mix all-reduces across
    types over the NICs, while each stage's replicas share a node)."""
    assert _tiny().objective_value >= _tiny(mixed_stages=False).objective_value


def test_stage_plans_are_deterministic() -> None:
    again = plan_job(TINY, Cluster.from_dict(TINY_CLUSTER, specs=SPECS), TINY_REQUEST, constraints=FAST,
                     mixed_stages=True)
    assert again.model_copy(update={"solve_time_s": 0.0}) == _tiny().model_copy(update={"solve_time_s": 0.0})


def test_launchers_without_pipeline_stages_refuse_stage_plans_and_name_those_with() -> None:
    """tests/test_adapters_stages.py checks the launchers that run them."""
    for name in ("deepspeed", "accelerate", "ray", "skypilot", "kubeflow-trainjob"):
        with pytest.raises(ConfigError, match="pipeline stages run on different types") as err:
            get_adapter(name).emit(_tiny())
        assert "launch it with torchrun, megatron, slurm, kubernetes" in (err.value.hint or "")


def test_stage_links_are_the_fewest_gpus_a_stage_has_on_a_node() -> None:
    plan = _tiny()
    for s in plan.stages:
        assert s.links is not None and s.links.gpus_per_node == min(len(v) for v in s.placement.values())


def test_a_launcher_or_pinned_pp_keeps_single_stage_types() -> None:
    cluster = Cluster.from_dict(TINY_CLUSTER, specs=SPECS)
    pinned = plan_job(TINY, cluster, TINY_REQUEST, constraints={**FAST, "pp": 1}, mixed_stages=True)
    assert all(s.pipeline_stage is None for s in pinned.stages)


@pytest.mark.slow
def test_llama_2_70b_on_16_a100_and_16_h100_pipelines_across_types() -> None:
    """The issue's example: the pipeline over both types beats the replica mix; every stage fits its type."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
                                           {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2}]})
    request = TrainingConfig(seq_len=4096, global_batch_size=64)
    model = ModelConfig.preset("llama-2-70b")
    replicas = plan_job(model, cluster, request, time_limit_s=60)
    staged = plan_job(model, cluster, request, time_limit_s=60, mixed_stages=True)
    assert staged.objective_value >= replicas.objective_value
    assert staged.stages[0].pipeline_stage is not None
    _check_stages(staged)


@pytest.mark.slow
def test_gpt3_175b_on_frenzy_paper_is_refused_saying_why() -> None:
    """The issue's other example: no form fits, because the types that can share a recipe hold too little."""
    with pytest.raises(InfeasiblePlanError, match="mixing GPU types does not help: the least memory"):
        plan_job(ModelConfig.preset("gpt3-175b"), Cluster.preset("frenzy-paper"), TrainingConfig(seq_len=2048),
                 time_limit_s=120, mixed_stages=True)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([0, 1, 2, 3]), st.sampled_from(["none", "selective", "full"]),
       st.sampled_from([1, 2]), st.integers(3, 6))
def test_stage_memory_never_falls_with_more_layers_or_more_in_flight(tp: int, zero: int, recompute: str, mbs: int,
                                                                     pp: int) -> None:
    """What the stage search's bisection and memory bounds rely on: a stage's memory grows with its layers, and
    a middle stage nearer the front (more 1F1B in-flight micro-batches) never needs less at the same layers."""
    model = ModelConfig.preset("llama-2-7b")
    training = TrainingConfig(seq_len=2048, global_batch_size=16 * mbs, micro_batch_size=mbs, zero_stage=zero,
                              recompute=recompute, sequence_parallel=True)  # torch tp > 1 runs torchtitan's plan
    rows = []
    for layers in range(1, 12):
        split = [1] * pp
        split[1], split[0] = layers, model.num_layers - layers - (pp - 2)
        rows.append(tuple(split))
    lay = LayoutArrays.from_columns({"dp": 2, "tp": tp, "pp": pp, "stage_layers": rows}, training)
    by_layers = stage_device_bytes(model, training, lay, 1)
    assert (by_layers >= 0).all() and (np.diff(by_layers) >= 0).all()
    same = [(1,) * (pp - 1) + (model.num_layers - pp + 1,)] * (pp - 2)
    lay = LayoutArrays.from_columns({"dp": 2, "tp": tp, "pp": pp, "stage_layers": same}, training)
    by_position = stage_device_bytes(model, training, lay, np.arange(1, pp - 1))
    assert (np.diff(by_position) <= 0).all()


def test_a_stage_of_a_row_the_memory_model_refuses_has_no_bytes() -> None:
    """stage_device_bytes refuses what estimate_memory and the batch estimator refuse (torch's context
    parallelism), not only what the layout rules refuse."""
    training = TINY_REQUEST.replace(framework="torch")
    lay = LayoutArrays.from_columns({"cp": [1, 2], "pp": 2}, training)
    with pytest.raises(ConfigError, match="ring attention"):
        estimate_memory(TINY, training, ParallelConfig(cp=2, pp=2))
    got = stage_device_bytes(TINY, training, lay, 0)
    assert got[0] > 0 and got[1] == -1


def test_an_offloading_recipe_gets_no_stage_plan() -> None:
    """Neither mixed search checks host memory per node yet, so neither runs for a recipe that offloads (the same
    request without offload pipelines across both types: test_tiny_pipeline_spans_both_types_and_keeps_every_law)."""
    offload = TINY_REQUEST.replace(offload_optimizer="cpu")
    plan = plan_job(TINY, Cluster.from_dict(TINY_CLUSTER, specs=SPECS), offload, mixed_stages=True, constraints=FAST)
    assert len(plan.gpu_types) == 1 and all(s.pipeline_stage is None for s in plan.stages)
