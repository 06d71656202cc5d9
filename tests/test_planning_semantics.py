"""What a planning request means (issue 13): any GPU count the free GPUs and the batch allow, a fixed default
batch, the cluster's own GPU catalogue, placement rules and locality, objective keys that never overflow, a time
limit for the whole call, and fp16 where a GPU has no bf16."""

from __future__ import annotations

import functools
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import (
    Cluster,
    ConfigError,
    InfeasiblePlanError,
    ModelConfig,
    TrainingConfig,
    default_global_batch,
    estimate_iteration_time,
    estimate_memory,
    plan_job,
)
from frenzy_core import _limits as limits
from frenzy_core.hardware import load_gpu_specs
from frenzy_core.planning import Plan, PlanConstraints
from frenzy_core.planning.candidates import BATCH_ADJUST_TOLERANCE, divisors_up_to

GIB = 2**30
LLAMA = ModelConfig.preset("llama-3.1-8b")


@functools.cache
def _paper() -> Cluster:
    return Cluster.preset("frenzy-paper")


def _small(**changes: object) -> ModelConfig:
    base = {"name": "small-llama", "num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
            "mlp": "swiglu", "norm": "rmsnorm", "vocab_size": 32000, "position_embedding": "rotary",
            "tied_embeddings": False}
    base.update(changes)
    return ModelConfig(**base)


def _fits_its_own_spec(plan: Plan, model: ModelConfig) -> None:
    """Re-estimated, the plan fits the memory of the spec it was made with (the cluster's catalogue)."""
    again = estimate_memory(model, plan.training, plan.parallel)
    assert again.device_bytes == plan.memory.device_bytes <= plan.usable_bytes <= plan.gpu_spec.memory_bytes
    assert plan.links is not None
    assert estimate_iteration_time(model, plan.training, plan.parallel, plan.gpu_spec, cluster=plan.links) == plan.time


# ---------------------------------------------------------------------------------------------- GPU counts

@pytest.mark.parametrize("n", [3, 6, 13, 24, 32] + [pytest.param(n, marks=pytest.mark.slow) for n in (5, 7, 9, 11, 17, 31)])
def test_any_gpu_count_the_cluster_allows_gets_exactly_that_many(n: int) -> None:
    plan = plan_job(LLAMA, _paper(), constraints={"num_gpus": n}, top_k=0)
    assert plan.num_gpus == plan.parallel.world_size == n
    _fits_its_own_spec(plan, LLAMA)


@pytest.mark.slow
def test_every_gpu_count_from_1_to_32() -> None:
    """3..32 plan exactly; 1 and 2 cannot hold llama-3.1-8b with Adam in bf16-mixed on any type (16 bytes per
    parameter is 128 GB) and are refused for memory, not for the count."""
    for n in range(1, 33):
        try:
            plan = plan_job(LLAMA, _paper(), constraints={"num_gpus": n}, top_k=0)
        except InfeasiblePlanError as exc:
            assert n <= 2 and "does not fit" in str(exc)
            continue
        assert plan.num_gpus == n


def test_too_few_gpus_are_refused_for_memory_not_for_the_count() -> None:
    """Without offload (the request says none; else the fallback offloads the optimizer onto the host)."""
    with pytest.raises(InfeasiblePlanError, match="does not fit") as info:
        plan_job(LLAMA, _paper(), TrainingConfig(seq_len=2048, offload_optimizer="none"), constraints={"num_gpus": 1},
                 top_k=0)
    assert "dividing the global batch" not in str(info.value)


def test_max_gpus_can_use_a_count_that_is_not_a_power_of_two() -> None:
    plan = plan_job(LLAMA, _paper(), constraints={"max_gpus": 6}, top_k=0)
    assert plan.num_gpus == 6


def test_a_small_model_on_three_gpus_takes_data_parallelism_not_a_pipeline() -> None:
    """dp=3 has no bubble and no stage sends: more tokens/s than pp=3, so the objective prefers it (a tie would
    go to the smaller pp by the canonical order)."""
    plan = plan_job(ModelConfig.preset("qwen2.5-0.5b"), _paper(), constraints={"num_gpus": 3}, top_k=5)
    assert (plan.parallel.dp, plan.parallel.pp) == (3, 1)
    pipelines = [a for a in plan.alternatives if a.parallel.pp == 3]
    assert all(a.tokens_per_s < plan.time.tokens_per_s for a in pipelines)


def test_divisors_are_bounded_by_the_gpus_not_the_batch() -> None:
    started = time.perf_counter()
    assert divisors_up_to(10**18, 64) == [d for d in range(1, 65) if 10**18 % d == 0]
    assert time.perf_counter() - started < 0.1


# ---------------------------------------------------------------------------------------------- default batch

def test_default_batch_is_the_published_one_in_whole_sequences() -> None:
    # Llama 2: 4M tokens (2^22) = 1,024 sequences of 4,096; GPT-3 175B: 3.2M tokens of 2,048-token sequences
    assert default_global_batch(ModelConfig.preset("llama-2-7b"), 4096) == 1024
    assert default_global_batch(ModelConfig.preset("llama-2-7b"), 2048) == 2048
    assert default_global_batch(ModelConfig.preset("gpt3-175b"), 2048) == round(3.2 * 2**20 / 2048)
    # no published figure: 2^20 tokens; a changed preset is another model
    assert default_global_batch(LLAMA, 2048) == 512
    assert default_global_batch(ModelConfig.preset("llama-2-7b").replace(num_layers=2), 4096) == 256
    assert default_global_batch(LLAMA, 3 * 2**20) == 1  # at least one sequence
    with pytest.raises(ConfigError, match="seq_len"):
        default_global_batch(LLAMA, 0)


def test_without_a_batch_every_layout_trains_the_default_one() -> None:
    """Throughput then compares layouts on (nearly) the same work: each candidate's batch is the default moved
    by at most BATCH_ADJUST_TOLERANCE to split evenly, and the plan says it is the default."""
    plan = plan_job(LLAMA, _paper(), top_k=8)
    default = default_global_batch(LLAMA, plan.training.seq_len)
    assert plan.default_batch is not None and plan.default_batch.global_batch_size == default
    for parallel, mbs in [(plan.parallel, plan.training.micro_batch_size)] + [
            (a.parallel, a.micro_batch_size) for a in plan.alternatives]:
        moved = [abs(k * mbs * parallel.dp - default) for k in range(1, default + 1)]
        assert min(moved) <= BATCH_ADJUST_TOLERANCE * default
    assert "(default: " in plan.explain()
    pinned = plan_job(LLAMA, _paper(), TrainingConfig(global_batch_size=512), top_k=0)
    assert pinned.default_batch is None and pinned.training.global_batch_size == 512
    assert "(default" not in pinned.explain()


def test_default_batch_does_not_take_every_gpu_for_its_own_sake() -> None:
    """With one micro-batch per rank (the old default) more GPUs always meant a bigger batch; with the default
    batch fixed a model whose batch is small cannot use more data-parallel ranks than it has samples."""
    bert = ModelConfig.preset("bert-base")  # 256 sequences of 512 tokens
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 64}]})
    plan = plan_job(bert, cluster, TrainingConfig(seq_len=512), top_k=0)
    # (torch runs BERT at tp = 1 only, so the batch may move to the nearest multiple of micro-batch x dp,
    # BATCH_ADJUST_TOLERANCE: 268 = 2 x 134 here)
    gbs = plan.training.global_batch_size
    assert gbs is not None and abs(gbs - 256) <= BATCH_ADJUST_TOLERANCE * 256
    assert plan.parallel.dp <= gbs and gbs % (plan.parallel.dp * plan.training.micro_batch_size) == 0


def test_cli_json_marks_the_default_batch() -> None:
    from typer.testing import CliRunner

    from frenzy_core.cli import app

    result = CliRunner().invoke(app, ["plan", "gpt2", "--json", "--num-gpus", "6", "--runners-up", "0"])
    assert result.exit_code == 0, result.output
    import json

    out = json.loads(result.stdout)
    assert out["global_batch"]["default"] is True
    assert out["plan"]["default_batch"]["global_batch_size"] == 512
    assert out["plan"]["num_gpus"] == 6 and "(default: " in out["explanation"]


# ---------------------------------------------------------------------------------------------- catalogue

def test_an_overridden_spec_is_the_one_planned_with() -> None:
    specs = load_gpu_specs(overrides={"a100-80gb": {"memory_bytes": 40 * GIB}})
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2}]}, specs=specs)
    plan = plan_job(LLAMA, cluster, top_k=0)
    assert plan.gpu_spec.memory_bytes == 40 * GIB
    assert plan.memory.device_bytes <= 40 * GIB * 0.95
    _fits_its_own_spec(plan, LLAMA)


def test_a_custom_type_plans_with_its_own_spec(tmp_path: Path) -> None:
    data = load_gpu_specs()["l4"].model_dump(mode="json")
    data.update(id="labcard-9000", name="LabCard 9000", aliases=[], memory_bytes=12 * GIB, price_per_gpu_hour_usd=0.5,
                price_date="2026-01-01")
    import yaml

    (tmp_path / "labcard-9000.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    specs = load_gpu_specs(extra_dirs=[tmp_path])
    cluster = Cluster.from_dict({"nodes": [{"gpu": "LabCard 9000", "gpus_per_node": 4, "count": 4}]}, specs=specs)
    model = _small()
    plan = plan_job(model, cluster, objective="cost", top_k=0)
    assert plan.gpu_type == "labcard-9000" and plan.price_per_hour_usd == 0.5 * plan.num_gpus
    _fits_its_own_spec(plan, model)
    again = plan_job(model, cluster, constraints={"gpu_types": ["LabCard 9000"]}, top_k=0)
    assert again.gpu_type == "labcard-9000"


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.sampled_from(["a100-80gb", "h100-sxm", "l4", "a10g"]), st.integers(8, 80), st.floats(0.2, 3.0),
       st.integers(1, 3))
def test_every_plan_fits_the_clusters_own_spec(gpu: str, memory_gib: int, flops_scale: float, nodes: int) -> None:
    base = load_gpu_specs()[gpu]
    peaks = {k: v * flops_scale for k, v in base.peak_tflops.items()}
    specs = load_gpu_specs(overrides={gpu: {"memory_bytes": memory_gib * GIB, "peak_tflops": peaks}})
    cluster = Cluster.from_dict({"nodes": [{"gpu": gpu, "gpus_per_node": 8, "count": nodes}]}, specs=specs)
    model = _small()
    try:
        plan = plan_job(model, cluster, TrainingConfig(seq_len=2048), top_k=0,
                        constraints=PlanConstraints(micro_batch_sizes=[1, 2]))
    except InfeasiblePlanError:
        return
    assert plan.gpu_spec == specs[gpu]
    _fits_its_own_spec(plan, model)


# ---------------------------------------------------------------------------------------------- keys and limits

def test_the_ranking_is_the_same_for_every_token_budget_and_nothing_overflows() -> None:
    model = _small()
    cluster = Cluster.preset("aws-mixed")
    for objective in ("cost", "time_to_train"):
        choices = set()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for exponent in (6, 12, 15):  # up to the TOKENS bound, 2^50 (issue 15); beyond it a ConfigError
                plan = plan_job(model, cluster, objective=objective, constraints={"token_budget": 10**exponent},
                                top_k=0)
                choices.add((plan.gpu_type, plan.parallel, plan.training.micro_batch_size))
                assert plan.objective_value > 0 and plan.objective_value < float("inf")
            plan = plan_job(model, cluster, objective=objective, constraints={"token_budget": limits.TOKENS.high},
                            top_k=0)
            choices.add((plan.gpu_type, plan.parallel, plan.training.micro_batch_size))
            for exponent in (18, 30):
                with pytest.raises(ConfigError, match="token_budget"):
                    plan_job(model, cluster, objective=objective, constraints={"token_budget": 10**exponent})
        assert len(choices) == 1, (objective, choices)


def test_a_huge_global_batch_returns_within_the_time_limit() -> None:
    started = time.perf_counter()
    try:
        largest = int(limits.STEP_TOKENS.high) // TrainingConfig().seq_len  # the most tokens per step accepted
        plan_job(LLAMA, _paper(), TrainingConfig(global_batch_size=largest), time_limit_s=2)
    except InfeasiblePlanError:
        pass
    with pytest.raises(ConfigError, match="global_batch_size"):  # beyond the bound (issue 15)
        TrainingConfig(global_batch_size=10**18)
    assert time.perf_counter() - started < 2 + 1


def test_the_time_limit_covers_the_search_for_suggestions() -> None:
    big = ModelConfig.preset("llama-3.1-405b")
    cluster = Cluster.from_dict({"nodes": [{"gpu": "l4", "gpus_per_node": 8, "count": 2}]})
    started = time.perf_counter()
    with pytest.raises(InfeasiblePlanError):
        plan_job(big, cluster, TrainingConfig(seq_len=8192, global_batch_size=64), time_limit_s=0.05)
    assert time.perf_counter() - started < 0.05 + 1


# ---------------------------------------------------------------------------------------------- precision

def test_a_gpu_without_bf16_runs_the_default_recipe_in_fp16_and_says_so() -> None:
    plan = plan_job(_small(), _paper(), constraints={"gpu_types": ["v100-32gb"]}, top_k=0)
    assert plan.training.precision.value == "fp16-mixed"
    assert any("fp16-mixed" in note and "v100-32gb" in note for note in plan.notes)
    assert "fp16-mixed" in plan.explain()
    with pytest.raises(InfeasiblePlanError, match="bf16"):
        plan_job(_small(), _paper(), TrainingConfig(precision="bf16-mixed"), constraints={"gpu_types": ["v100"]})


# ---------------------------------------------------------------------------------------------- topology

def _trays(domain: bool) -> Cluster:
    """Four 4-GPU B200 trays, in one multi-node NVLink domain or not (a GB200 NVL72 rack in miniature)."""
    label = {"nvlink_domain": "nvl-0"} if domain else {}
    return Cluster.from_dict({"nodes": [{"gpu": "b200", "gpus_per_node": 4, "count": 4, **label}]})


def test_a_multi_node_nvlink_domain_is_one_fast_link_unit() -> None:
    model = _small(num_layers=16, hidden_size=4096, num_attention_heads=32)
    training = TrainingConfig(seq_len=2048, global_batch_size=64)
    cons = {"num_gpus": 16, "tp": 1, "pp": 1}
    inside = plan_job(model, _trays(True), training, constraints=cons, top_k=0)
    apart = plan_job(model, _trays(False), training, constraints=cons, top_k=0)
    assert inside.links is not None and apart.links is not None
    assert inside.links.gpus_per_node >= 16 and apart.links.gpus_per_node == 4
    assert inside.time.breakdown["data_parallel"] < apart.time.breakdown["data_parallel"]
    assert _trays(True).links("b200").gpus_per_node == 16
    _fits_its_own_spec(inside, model)


def _racks(inter_rack: float | None, zones: bool = False) -> Cluster:
    """Two racks of two 8-GPU H100 nodes (in two zones when ``zones``)."""
    nodes = [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "rack": rack, "zone": rack if zones else "z"}
             for rack in ("r1", "r2")]
    data: dict[str, object] = {"nodes": nodes}
    if inter_rack is not None:
        data["inter_rack_bytes_per_s"] = inter_rack
    return Cluster.from_dict(data)


def test_groups_stay_in_a_rack_when_one_holds_them_and_pay_the_slower_link_when_not() -> None:
    model = _small(num_layers=16, hidden_size=4096, num_attention_heads=32)
    training = TrainingConfig(seq_len=2048, global_batch_size=64)
    slow = _racks(inter_rack=2e9)
    in_rack = plan_job(model, slow, training, constraints={"num_gpus": 16, "tp": 1}, top_k=0)
    racks = {slow.nodes[int(name.split(":")[1]) // 2].rack for name in in_rack.placement}
    assert len(racks) == 1 and in_rack.links is not None
    assert in_rack.links.inter_node_bytes_per_s == slow.links("h100-sxm").inter_node_bytes_per_s
    across = plan_job(model, slow, training, constraints={"num_gpus": 32, "tp": 1}, top_k=0)
    assert across.links is not None and across.links.inter_node_bytes_per_s == 2e9
    assert any("racks" in note for note in across.notes)
    fabric = plan_job(model, _racks(inter_rack=None), training, constraints={"num_gpus": 32, "tp": 1}, top_k=0)
    assert across.time.iteration_s > fabric.time.iteration_s
    _fits_its_own_spec(across, model)


def test_crossing_zones_pays_the_inter_zone_link() -> None:
    model = _small()
    cluster = _racks(inter_rack=None, zones=True).replace(inter_zone_bytes_per_s=1e9)
    plan = plan_job(model, cluster, TrainingConfig(seq_len=2048, global_batch_size=64),
                    constraints={"num_gpus": 32, "tp": 1}, top_k=0)
    assert plan.links is not None and plan.links.inter_node_bytes_per_s == 1e9
    assert any("zones" in note for note in plan.notes)


# ---------------------------------------------------------------------------------------------- placement modes

@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from([4, 8]), st.integers(0, 8), st.integers(1, 3)), min_size=1, max_size=4),
       st.sampled_from(["even", "whole_nodes"]))
def test_even_and_whole_node_placements(shapes: list[tuple[int, int, int]], mode: str) -> None:
    nodes = [{"gpu": "a100-80gb", "gpus_per_node": n, "free_gpus": min(f, n), "count": c} for n, f, c in shapes]
    cluster = Cluster.from_dict({"nodes": nodes})
    try:
        plan = plan_job(_small(), cluster, TrainingConfig(seq_len=2048, global_batch_size=48),
                        constraints={"placement": mode, "micro_batch_sizes": [1, 2]}, top_k=0)
    except InfeasiblePlanError as exc:
        assert exc.reasons
        return
    counts = {len(gpus) for gpus in plan.placement.values()}
    assert len(counts) == 1
    if mode == "whole_nodes":
        sizes = {}
        index = 0
        for shape in cluster.nodes:
            for _ in range(shape.count):
                sizes[f"node:{index}"] = (shape.gpus_per_node, shape.free_gpus)
                index += 1
        assert all(len(gpus) == sizes[name][0] == sizes[name][1] for name, gpus in plan.placement.items())
    _fits_its_own_spec(plan, _small())
