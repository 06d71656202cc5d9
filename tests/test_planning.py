"""plan_job end to end with the library's memory and time models: plans fit, use free GPUs only, keep tensor-
parallel groups inside a node, are deterministic, honour objectives and constraints, and explain themselves."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError, InfeasiblePlanError, ModelConfig, TrainingConfig, UnknownNameError
from frenzy_core.hardware import Cluster, get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.planning import Objective, Plan, PlanConstraints, RejectReason, plan_job
from frenzy_core.planning.candidates import KEY_STEPS_PER_DOUBLING

GIB = 2**30


def _model(**changes: object) -> ModelConfig:
    base = {"name": "small-llama", "num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
                "mlp": "swiglu", "norm": "rmsnorm", "vocab_size": 32000, "position_embedding": "rotary", "tied_embeddings": False}
    base.update(changes)
    return ModelConfig(**base)


def _cluster(h100_free: int = 6, a100_free: int = 8, l4_free: int = 8) -> Cluster:
    return Cluster.from_dict({"nodes": [
        {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "free_gpus": h100_free},
        {"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2, "free_gpus": a100_free},
        {"gpu": "l4", "gpus_per_node": 8, "count": 1, "free_gpus": l4_free},
    ]})


TRAINING = TrainingConfig(seq_len=2048, global_batch_size=32)
FAST = PlanConstraints(micro_batch_sizes=[1, 2], zero_stages=[0, 1])
"""Pins that keep the search small so the suite stays fast."""


def _plan(**kwargs: object) -> Plan:
    args: dict = {"model": _model(), "cluster": _cluster(), "training": TRAINING, "constraints": FAST}
    args.update(kwargs)
    return plan_job(**args)


def _assert_valid(plan: Plan, cluster: Cluster, model: ModelConfig | None = None) -> None:
    """Every group fits by the memory estimator on its own type, uses free GPUs of that type only, whole TP
    groups on each node (a single-type plan is one group)."""
    free = {}
    index = 0
    for shape in cluster.nodes:
        for _ in range(shape.count):
            free[f"node:{index}"] = (shape.gpu, shape.free_gpus)
            index += 1
    assert sum(len(g) for g in plan.placement.values()) == plan.num_gpus == sum(s.num_gpus for s in plan.stages)
    assert plan.num_gpus == plan.parallel.world_size or plan.mixed
    held: dict[str, list[int]] = {}
    for stage in plan.stages:
        spec = get_gpu_spec(stage.gpu_type)
        again = estimate_memory(model or _model(), plan.stage_training(stage), plan.parallel)
        assert again.device_bytes == stage.device_bytes
        assert stage.device_bytes <= stage.usable_bytes <= spec.memory_bytes
        for node, gpus in stage.placement.items():
            gpu, nfree = free[node]
            assert gpu == stage.gpu_type
            assert len(set(gpus)) == len(gpus) and all(0 <= g < nfree for g in gpus)
            assert len(gpus) % plan.parallel.tp == 0
            held.setdefault(node, []).extend(gpus)
    # the groups share out the plan's GPUs (two groups of one type may share a node: ranks differing by one
    # micro-batch)
    assert held == plan.placement
    assert plan.memory.device_bytes <= plan.usable_bytes


def test_plan_fits_uses_free_gpus_and_keeps_tp_in_a_node() -> None:
    plan = _plan()
    _assert_valid(plan, _cluster())
    assert plan.optimal and plan.solver == "cp-sat"
    assert plan.objective is Objective.THROUGHPUT
    assert plan.time.tokens_per_s == pytest.approx(plan.objective_value)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["h100-sxm", "a100-80gb", "a100-40gb", "l4"]), st.sampled_from([4, 8]),
                          st.integers(0, 8), st.integers(1, 3)), min_size=1, max_size=3),
       st.sampled_from(list(Objective)))
def test_random_requests_give_valid_plans(shapes: list, objective: Objective) -> None:
    nodes = [{"gpu": g, "gpus_per_node": n, "free_gpus": min(f, n), "count": c} for g, n, f, c in shapes]
    cluster = Cluster.from_dict({"nodes": nodes})
    try:
        plan = plan_job(_model(), cluster, TRAINING, objective=objective,
                        constraints=FAST.replace(token_budget=10**9, micro_batch_sizes=[1]))
    except InfeasiblePlanError as exc:
        assert exc.reasons  # says why
        return
    _assert_valid(plan, cluster)


def test_same_request_same_plan_and_json_round_trip() -> None:
    first, second = _plan(), _plan()
    assert first.model_dump(exclude={"solve_time_s"}) == second.model_dump(exclude={"solve_time_s"})
    assert Plan.model_validate_json(first.model_dump_json()) == first


def test_cp_sat_and_exhaustive_give_the_same_plan() -> None:
    a, b = _plan(solver="cp-sat"), _plan(solver="exhaustive")
    assert (a.objective_value, a.gpu_type, a.parallel, a.placement) == (b.objective_value, b.gpu_type, b.parallel,
                                                                         b.placement)


def test_throughput_plan_beats_every_alternative() -> None:
    plan = _plan(top_k=5)
    assert len(plan.alternatives) == 5
    assert all(alt.tokens_per_s <= plan.objective_value for alt in plan.alternatives)
    values = [alt.objective_value for alt in plan.alternatives]
    assert values == sorted(values, reverse=True)


def test_gpus_objective_takes_the_fewest_gpus() -> None:
    plan = _plan(objective="gpus")
    assert all(alt.num_gpus >= plan.num_gpus for alt in plan.alternatives)
    throughput = _plan()
    assert plan.num_gpus <= throughput.num_gpus
    assert plan.objective_value == plan.num_gpus


def test_time_needs_a_token_budget_and_cost_without_one_is_per_token() -> None:
    with pytest.raises(ConfigError, match="token_budget"):
        _plan(objective="time_to_train")
    per_token = _plan(objective="cost")
    assert per_token.objective_unit == "USD/token" and "per 1M tokens" in per_token.explain()
    assert per_token.price_per_hour_usd is not None
    assert per_token.objective_value == pytest.approx(per_token.price_per_hour_usd / 3600 / per_token.time.tokens_per_s,
                                                      rel=1e-9)
    budget = FAST.replace(token_budget=10**10)
    cost = _plan(objective="cost", constraints=budget)
    hours = 10**10 / cost.time.tokens_per_s / 3600
    assert cost.objective_value == pytest.approx(cost.price_per_hour_usd * hours, rel=1e-9)
    assert all(alt.objective_value >= cost.objective_value for alt in cost.alternatives)
    fastest = _plan(objective="time_to_train", constraints=budget)
    assert fastest.objective_value == pytest.approx(10**10 / fastest.time.tokens_per_s, rel=1e-9)
    # quantities within one key step (2^(1/KEY_STEPS_PER_DOUBLING), about 0.001 %) tie and go to the next key
    assert fastest.objective_value <= 10**10 / cost.time.tokens_per_s * 2 ** (1 / KEY_STEPS_PER_DOUBLING)


def test_constraints_are_honoured() -> None:
    plan = _plan(constraints=FAST.replace(max_gpus=4, gpu_types=["A100"]))
    assert plan.gpu_type == "a100-80gb" and plan.num_gpus <= 4
    pinned = _plan(constraints=FAST.replace(tp=2, recompute=["full"], micro_batch_sizes=[1]))
    assert pinned.parallel.tp == 2 and pinned.training.recompute.value == "full"
    assert pinned.training.micro_batch_size == 1
    price = get_gpu_spec("a100-80gb").price_per_gpu_hour_usd
    assert price is not None
    cheap = _plan(constraints=FAST.replace(max_price_per_hour_usd=4.5 * price))
    assert cheap.price_per_hour_usd is not None and cheap.price_per_hour_usd <= 4.5 * price


def test_fixed_training_fields_stay_fixed() -> None:
    training = TRAINING.replace(precision="fp16-mixed", optimizer="sgd-momentum")
    plan = _plan(training=training)
    assert plan.training.precision.value == "fp16-mixed"
    assert plan.training.optimizer.value == "sgd-momentum"
    assert plan.training.seq_len == 2048 and plan.training.global_batch_size == 32


def test_explain_covers_memory_time_runners_up_and_every_gpu_type() -> None:
    plan = _plan()
    text = plan.explain()
    assert plan.gpu_type in text and "Memory of the busiest GPU" in text and "Time per step" in text
    assert "Runners-up" in text
    others = {r.gpu_type for r in plan.rejected}
    assert others == {"h100-sxm", "a100-80gb", "l4"} - {plan.gpu_type}
    for rejection in plan.rejected:
        assert rejection.gpu_type in text and rejection.message in text


def test_outranked_and_unfit_types_are_explained() -> None:
    big = _model(num_layers=32, hidden_size=5120, num_attention_heads=40, num_kv_heads=8)
    plan = plan_job(big, _cluster(), TRAINING, constraints=FAST)
    reasons = {r.gpu_type: r for r in plan.rejected}
    assert "l4" in reasons
    assert reasons["l4"].reason in (RejectReason.DOES_NOT_FIT, RejectReason.OUTRANKED, RejectReason.TP_SPLIT)
    for r in plan.rejected:
        if r.reason is RejectReason.OUTRANKED:
            assert "slower by" in r.message


def test_tp_group_needs_a_node_with_enough_free_gpus() -> None:
    """A model that needs tp=8 on H100 cannot use nodes with 6 free; the error says how many more are needed."""
    big = _model(num_layers=6, hidden_size=16384, num_attention_heads=128, num_kv_heads=8)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "free_gpus": 6}]})
    constraints = PlanConstraints(micro_batch_sizes=[1], zero_stages=[0], recompute=["full"], pp=1)
    with pytest.raises(InfeasiblePlanError) as info:
        plan_job(big, cluster, TrainingConfig(seq_len=1024, global_batch_size=8), constraints=constraints)
    message = str(info.value)
    assert "h100-sxm" in message
    assert any("more free h100-sxm" in s for s in info.value.suggestions), info.value.suggestions


def test_infeasible_request_says_what_blocked_it_and_what_would_help() -> None:
    model = _model(num_layers=8, hidden_size=4096, num_attention_heads=32, num_kv_heads=8)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "l4", "gpus_per_node": 8, "count": 1, "free_gpus": 8}]})
    # (plain tensor parallelism: torchtitan's sequence parallelism, searched for this Llama-style model, would fit it)
    constraints = PlanConstraints(micro_batch_sizes=[1], zero_stages=[0], recompute=["none"], sequence_parallel=False)
    training = TrainingConfig(seq_len=32768, global_batch_size=8)
    with pytest.raises(InfeasiblePlanError) as info:
        plan_job(model, cluster, training, constraints=constraints)
    err = info.value
    assert "l4" in str(err) and "does not fit" in str(err)
    assert "recompute=full" in err.suggestions
    seq = [s for s in err.suggestions if s.startswith("sequence length <= ")]
    assert len(seq) == 1
    limit = int(seq[0].rsplit(" ", 1)[1])
    # the suggested changes really are feasible, and one step longer is not
    plan_job(model, cluster, training.replace(seq_len=limit), constraints=constraints)
    plan_job(model, cluster, training, constraints=constraints.replace(recompute=["full"]))
    with pytest.raises(InfeasiblePlanError):
        plan_job(model, cluster, training.replace(seq_len=limit + 256), constraints=constraints)


def test_megatron_search_covers_moe_and_long_context() -> None:
    moe = _model(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                 moe={"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 2048})
    training = TrainingConfig(seq_len=32768, global_batch_size=8, framework="megatron")
    cluster = _cluster()
    plan = plan_job(moe, cluster, training, constraints=PlanConstraints(micro_batch_sizes=[1]))
    _assert_valid(plan, cluster, moe)
    assert training.seq_len % (2 * plan.parallel.cp) == 0
    assert moe.moe is not None and moe.moe.num_experts % plan.parallel.ep == 0
    layouts = {(a.parallel.cp, a.parallel.ep, a.parallel.vpp) for a in plan.alternatives}
    layouts.add((plan.parallel.cp, plan.parallel.ep, plan.parallel.vpp))
    assert any(cp > 1 for cp, _, _ in layouts) and any(ep > 1 for _, ep, _ in layouts)


def test_price_and_deadline_limits_explain_the_smallest_change() -> None:
    budget = FAST.replace(token_budget=10**9)
    with pytest.raises(InfeasiblePlanError) as info:
        _plan(constraints=budget.replace(max_price_per_hour_usd=0.01))
    suggestion = [s for s in info.value.suggestions if s.startswith("max_price_per_hour_usd >= ")]
    assert suggestion and "cheapest" in str(info.value)
    price = float(suggestion[0].rsplit(" ", 1)[1])
    assert _plan(constraints=budget.replace(max_price_per_hour_usd=price + 0.01)).price_per_hour_usd <= price + 0.01
    with pytest.raises(InfeasiblePlanError) as info:
        _plan(constraints=budget.replace(deadline_s=1.0))
    suggestion = [s for s in info.value.suggestions if s.startswith("deadline_s >= ")]
    assert suggestion and "within deadline_s" in str(info.value)
    deadline = float(suggestion[0].rsplit(" ", 1)[1])
    plan = _plan(constraints=budget.replace(deadline_s=deadline + 1))
    assert 10**9 / plan.time.tokens_per_s <= deadline + 1


def test_impossible_gpu_count_suggests_the_nearest_possible_one() -> None:
    # on one type, dp x tp x pp = 6 would need dp = 3 or 6 (not dividing 32) or tp = 3, 6 (not dividing 16 heads);
    # Megatron needs equal micro-batch counts per rank, the torch runtime not (below)
    with pytest.raises(InfeasiblePlanError) as info:
        _plan(training=TRAINING.replace(framework="megatron"),
              constraints=FAST.replace(num_gpus=6, pp=1, distributed_optimizer=False, sequence_parallel=False),
              mixed_types=False)
    assert "no layout uses exactly num_gpus=6" in str(info.value)
    assert "num_microbatches_calculator" in str(info.value) and "framework 'torch'" in str(info.value)
    nearest = [s for s in info.value.suggestions if s.startswith("num_gpus=")]
    assert nearest in (["num_gpus=4"], ["num_gpus=8"])
    # torch ranks may differ by one micro-batch: 6 replicas split 32 samples as 2 x 6 + 4 x 5 (one type) or in
    # replica groups of two types, whichever trains faster
    grouped = _plan(constraints=FAST.replace(num_gpus=6, pp=1))
    assert grouped.grouped and grouped.num_gpus == 6
    assert sum(g.samples for g in grouped.stages) == TRAINING.global_batch_size
    counts = sorted(g.micro_batches for g in grouped.stages)
    assert grouped.mixed or counts[1] - counts[0] == 1


def test_tiny_time_limit_still_returns_a_valid_plan() -> None:
    plan = _plan(time_limit_s=1e-6)
    _assert_valid(plan, _cluster())
    assert plan.solver in ("cp-sat", "greedy")


def test_cost_objective_explains_more_expensive_types() -> None:
    plan = _plan(objective="cost", constraints=FAST.replace(token_budget=10**10))
    outranked = [r for r in plan.rejected if r.reason is RejectReason.OUTRANKED]
    assert outranked and all("more expensive by" in r.message for r in outranked)
    assert all(r.best_value is not None and r.best_value >= plan.objective_value for r in outranked)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"constraints": {"gpu_types": ["h1000"]}}, UnknownNameError, "h1000"),
    ({"constraints": {"gpu_types": ["v100-32gb"]}}, ConfigError, "names no GPU type of the cluster"),
    ({"constraints": {"token_budget": -5}}, ConfigError, "token_budget"),
    ({"constraints": {"max_gpus": 0}}, ConfigError, "max_gpus"),
    ({"constraints": {"deadline_s": 10.0}}, ConfigError, "deadline_s needs token_budget"),
    ({"objective": "speed"}, ConfigError, "unknown objective"),
    ({"solver": "gurobi"}, ConfigError, "unknown solver"),
    ({"time_limit_s": 0}, ConfigError, "time_limit_s"),
    ({"top_k": -1}, ConfigError, "top_k"),
])
def test_bad_inputs_raise_library_errors(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _plan(**kwargs)


def test_model_and_recipe_must_agree() -> None:
    gpt = _model(position_embedding="learned", max_position_embeddings=1024)
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        plan_job(gpt, _cluster(), TRAINING, constraints=FAST)


def test_cluster_may_be_given_as_a_mapping() -> None:
    plan = plan_job(_model(), {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "free_gpus": 4}]}, TRAINING,
                    constraints=FAST)
    assert plan.gpu_type == "a100-80gb" and plan.num_gpus <= 4


def test_empty_and_unknown_clusters_are_rejected() -> None:
    with pytest.raises(ConfigError, match="at least one node"):
        plan_job(_model(), {"nodes": []}, TRAINING)
    with pytest.raises(ConfigError):
        Cluster.from_dict({"nodes": [{"gpu": "h1000", "gpus_per_node": 8}]})


def test_no_free_gpus_is_infeasible_with_a_reason() -> None:
    with pytest.raises(InfeasiblePlanError, match="only 0 free"):
        _plan(cluster=_cluster(h100_free=0, a100_free=0, l4_free=0))


def test_docs_example_runs(tmp_path: Path) -> None:
    """The first Python block of docs/planner.md runs as written."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "planner.md"
    if not doc.exists():
        pytest.skip("docs/planner.md is not in this checkout")
    block = re.search(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
    assert block is not None
    script = tmp_path / "example.py"
    script.write_text(block.group(1), encoding="utf-8")
    result = runpy.run_path(str(script))
    assert isinstance(result["plan"], Plan)
    assert result["plan"].gpu_type in result["plan"].explain()


def test_explicit_training_fields_stay_fixed_and_defaults_are_searched() -> None:
    from frenzy_core import Cluster, ModelConfig, TrainingConfig, plan_job

    model = ModelConfig.preset("gpt2")
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1}]})
    searched = plan_job(model, cluster, TrainingConfig(seq_len=1024, global_batch_size=64))
    assert searched.training.recompute.value == "none"  # full recompute only costs time here
    pinned = plan_job(model, cluster, TrainingConfig(seq_len=1024, global_batch_size=64, recompute="full",
                                                     micro_batch_size=2))
    assert pinned.training.recompute.value == "full"
    assert pinned.training.micro_batch_size == 2
    # replace() keeps track of what was set: the changed field is pinned too.
    replaced = plan_job(model, cluster, TrainingConfig(seq_len=1024, global_batch_size=64).replace(zero_stage=2))
    assert replaced.training.zero_stage == 2
    # A PlanConstraints pin wins over the training value.
    overridden = plan_job(model, cluster, TrainingConfig(seq_len=1024, global_batch_size=64, recompute="full"),
                          constraints={"recompute": ["none", "selective"]})
    assert overridden.training.recompute.value != "full"


def test_impossible_pins_are_bad_input_not_infeasible() -> None:
    import pytest

    from frenzy_core import Cluster, ConfigError, ModelConfig, TrainingConfig, plan_job

    model = ModelConfig.preset("llama-3.1-8b")
    cluster = Cluster.preset("frenzy-paper")
    with pytest.raises(ConfigError, match="not divisible by tp=3"):
        plan_job(model, cluster, constraints={"tp": 3})
    with pytest.raises(ConfigError, match="pp=7 does not divide num_layers=32"):
        plan_job(model, cluster, constraints={"pp": 7})
    with pytest.raises(ConfigError, match="not divisible by any pinned micro-batch size"):
        plan_job(model, cluster, TrainingConfig(global_batch_size=6), constraints={"micro_batch_sizes": [4]})


def test_too_small_cluster_suggests_how_many_gpus_would_do() -> None:
    import pytest

    from frenzy_core import Cluster, InfeasiblePlanError, ModelConfig, TrainingConfig, plan_job

    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1}]})
    with pytest.raises(InfeasiblePlanError) as info:  # no offload asked for: else 8 GPUs do, offloading it
        plan_job(ModelConfig.preset("llama-2-70b"), cluster, TrainingConfig(seq_len=4096, global_batch_size=64,
                                                                              offload_optimizer="none"))
    (suggestion,) = [s for s in info.value.suggestions if "a cluster with at least" in s]
    need = int(suggestion.split("at least ")[1].split()[0])
    assert need > 8 and "(this one has 8)" in suggestion
    # The suggestion is right: a cluster of that many GPUs does get a plan.
    bigger = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": -(-need // 8)}]})
    plan = plan_job(ModelConfig.preset("llama-2-70b"), bigger, TrainingConfig(seq_len=4096, global_batch_size=64))
    assert plan.num_gpus >= need
