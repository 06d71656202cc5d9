"""Plans spanning several GPU types (issue 12): the plan's groups, data-parallel replica groups of different types
(form b), and the search that chooses them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, ConfigError, InfeasiblePlanError, ModelConfig, ParallelConfig, TrainingConfig
from frenzy_core.hardware import get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.memory.kernel import torch_sp_covered
from frenzy_core.planning import Objective, Plan, plan_job
from frenzy_core.planning.mixed_solve import (
    Limits,
    MixedChoice,
    MixedTables,
    promising,
    score,
    solve_tables_cp_sat,
    solve_tables_exhaustive,
    solve_two_types,
)
from frenzy_core.timing import estimate_iteration_time


def _small_plan() -> Plan:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2}]})
    return plan_job(ModelConfig.preset("llama-2-7b"), cluster, TrainingConfig(seq_len=4096, global_batch_size=64))


def test_a_single_type_plan_is_one_group_of_its_own_fields() -> None:
    plan = _small_plan()
    assert plan.gpu_types == (plan.gpu_type,) and not plan.mixed
    (group,) = plan.stages
    assert (group.gpu_type, group.num_gpus, group.placement) == (plan.gpu_type, plan.num_gpus, plan.placement)
    assert (group.tp, group.pp, group.dp, group.cp) == (plan.parallel.tp, plan.parallel.pp, plan.parallel.dp,
                                                        plan.parallel.cp)
    assert group.num_layers == plan.model.num_layers and group.first_layer == 0
    assert group.samples == plan.training.global_batch_size
    assert group.micro_batches * group.dp * plan.training.micro_batch_size == group.samples
    assert (group.device_bytes, group.iteration_s) == (plan.memory.device_bytes, plan.time.iteration_s)
    assert Plan.model_validate_json(plan.model_dump_json()) == plan
    assert "Groups" not in plan.explain()


# ------------------------------------------------------------------------------------------ the solvers


@st.composite
def _instances(draw: st.DrawFn, types: int | None = None, most_replicas: int = 3
               ) -> tuple[MixedTables, Objective, Limits]:
    """Small random instances: 2-3 types (or ``types``), 1 to ``most_replicas`` replicas each, up to 10
    micro-batches, holes where a (D, m) does not fit, prices that may be missing, and random limits."""
    k = types or draw(st.integers(2, 3))
    caps = tuple(draw(st.integers(1, most_replicas)) for _ in range(k))
    n = draw(st.integers(k, 10))
    d_max = min(sum(caps), n)
    tabs = []
    for _ in range(k):
        tab = np.full((d_max + 1, n + 1), -1, dtype=np.int64)
        for d in range(2, d_max + 1):
            for m in range(1, n - d + 2):
                if draw(st.integers(0, 9)) > 0:  # a tenth of the entries do not fit
                    tab[d, m] = draw(st.integers(1, 60))
        tabs.append(tab)
    prices = tuple(draw(st.one_of(st.none(), st.integers(1, 50))) if draw(st.booleans()) else draw(
        st.integers(1, 50)) for _ in range(k))
    tables = MixedTables(layout=0, types=tuple(f"t{j}" for j in range(k)), capacity=caps,
                         gpus_per_replica=draw(st.sampled_from([1, 2, 4])), micro_batches=n, time_us=tuple(tabs),
                         price_units=prices)
    lim = Limits(max_gpus=draw(st.one_of(st.none(), st.integers(2, 24))),
                 max_step_us=draw(st.one_of(st.none(), st.integers(10, 60))),
                 max_price_units=draw(st.one_of(st.none(), st.integers(5, 200))))
    return tables, draw(st.sampled_from(list(Objective))), lim


def _key(choice: MixedChoice | None, objective: Objective) -> tuple[int, ...] | None:
    return None if choice is None else score(objective, choice.step_us, choice.num_gpus, choice.price_units)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_instances())
def test_cp_sat_equals_the_exhaustive_solver_on_small_instances(case: tuple) -> None:
    tables, objective, lim = case
    exact = solve_tables_exhaustive(tables, objective, lim)
    found = solve_tables_cp_sat(tables, objective, lim, time_limit_s=5)
    assert _key(found, objective) == _key(exact, objective)
    if found is not None:
        assert found.optimal
        assert sum(r * m for r, m in zip(found.replicas, found.micro_batches)) == tables.micro_batches
        assert all(1 <= r <= c for r, c in zip(found.replicas, tables.capacity))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_instances(types=2, most_replicas=6), st.booleans())
def test_two_types_are_solved_as_the_exhaustive_enumeration_solves_them(case: tuple, pruned: bool) -> None:
    """The same choice, ties included (the same enumeration order), with or without the relaxation's cut."""
    tables, objective, lim = case
    exact = solve_tables_exhaustive(tables, objective, lim)
    allowed = promising(tables, objective, _key(exact, objective)) if pruned and exact is not None else None
    found = solve_two_types(tables, objective, lim, allowed)
    assert (found is None) == (exact is None)
    if found is not None and exact is not None:
        assert (found.replicas, found.micro_batches, found.step_us) == (exact.replicas, exact.micro_batches,
                                                                         exact.step_us)
        assert found.optimal


def test_two_types_with_a_product_beyond_int64_keep_exact_keys() -> None:
    """Price x step of 2^62 and more is compared in Python integers, not wrapped int64."""
    tab = np.full((3, 3), -1, dtype=np.int64)
    tab[2, 1] = 2**40
    tables = MixedTables(layout=0, types=("a", "b"), capacity=(1, 1), gpus_per_replica=1, micro_batches=2,
                         time_us=(tab, tab), price_units=(2**22, 2**22))
    found = solve_two_types(tables, Objective.COST, Limits())
    assert found is not None and found.price_units is not None
    assert score(Objective.COST, found.step_us, found.num_gpus, found.price_units)[0] == 2**63


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_instances())
def test_the_relaxation_never_cuts_the_optimum(case: tuple) -> None:
    tables, objective, lim = case
    exact = solve_tables_exhaustive(tables, objective, lim)
    if exact is None:
        return
    key = _key(exact, objective)
    assert promising(tables, objective, None)[sum(exact.replicas)]
    assert promising(tables, objective, key)[sum(exact.replicas)]
    again = solve_tables_cp_sat(tables, objective, lim, 5, promising(tables, objective, key), key)
    assert _key(again, objective) == key


# ------------------------------------------------------------------------------------------ mixed plans

LLAMA_70B_REQUEST = TrainingConfig(seq_len=4096, global_batch_size=64)
A100_H100 = {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
                       {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2}]}


def _assert_valid_mixed(plan: Plan, cluster: Cluster) -> None:
    """Each group re-estimates to fit on its own type, uses only free GPUs of that type in whole TP groups per
    node, and the groups split the global batch in whole micro-batches."""
    free = {f"node:{i}": (shape.gpu, set(range(shape.gpus_per_node if shape.free_gpus is None
                                             else shape.free_gpus)))
            for i, shape in enumerate(s for s in cluster.nodes for _ in range(s.count))}
    mbs, gbs = plan.training.micro_batch_size, plan.training.global_batch_size
    assert sum(g.samples for g in plan.stages) == gbs
    seen: set[str] = set()
    for g in plan.stages:
        assert g.samples == g.dp * g.micro_batches * mbs
        assert g.num_gpus == g.dp * g.tp * g.pp * g.cp == sum(len(v) for v in g.placement.values())
        for node, gpus in g.placement.items():
            assert node not in seen
            seen.add(node)
            gpu_type, idle = free[node]
            assert gpu_type == g.gpu_type and set(gpus) <= idle and len(gpus) % g.tp == 0
        recipe = plan.training.replace(global_batch_size=g.micro_batches * mbs * plan.parallel.dp)
        assert plan.stage_training(g) == recipe
        memory = estimate_memory(plan.model, recipe, plan.parallel)
        usable = cluster.gpu_spec(g.gpu_type).memory_bytes * 0.95
        assert memory.device_bytes == g.device_bytes <= usable
        spec = cluster.gpu_spec(g.gpu_type)
        again = estimate_iteration_time(plan.model, recipe, plan.parallel, spec, cluster=g.links)
        assert again.iteration_s == g.iteration_s
    assert plan.parallel.dp == sum(g.dp for g in plan.stages)
    assert plan.time.iteration_s == max(g.iteration_s for g in plan.stages)
    assert Plan.model_validate_json(plan.model_dump_json()) == plan


def test_llama_2_70b_on_16_a100_and_16_h100_gets_a_mixed_plan() -> None:
    cluster = Cluster.from_dict(A100_H100)
    model = ModelConfig.preset("llama-2-70b")
    with pytest.raises(InfeasiblePlanError):
        plan_job(model, cluster, LLAMA_70B_REQUEST, mixed_types=False)
    plan = plan_job(model, cluster, LLAMA_70B_REQUEST)
    assert plan.mixed and set(plan.gpu_types) == {"a100-80gb", "h100-sxm"} and plan.num_gpus == 32
    _assert_valid_mixed(plan, cluster)
    # the faster type trains the larger share (groups finish together)
    share = {g.gpu_type: g.samples / g.dp for g in plan.stages}
    assert share["h100-sxm"] > share["a100-80gb"]
    text = plan.explain()
    assert "Groups" in text and "sets the step" in text


_TYPES = ["h100-sxm", "a100-80gb", "a100-40gb", "l4"]


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(_TYPES), st.sampled_from([4, 8]), st.integers(1, 8)), min_size=2,
                max_size=4),
       st.sampled_from(["throughput", "gpus", "cost"]))
def test_mixed_plans_are_valid_and_never_worse_than_the_best_single_type(shapes: list, objective: str) -> None:
    nodes = [{"gpu": g, "gpus_per_node": size, "free_gpus": min(free, size)} for g, size, free in shapes]
    cluster = Cluster.from_dict({"nodes": nodes})
    model = ModelConfig.preset("qwen2.5-0.5b")
    training = TrainingConfig(seq_len=2048, global_batch_size=32)
    cons = {"micro_batch_sizes": [1, 2], "zero_stages": [0, 1]}
    try:
        single = plan_job(model, cluster, training, objective=objective, constraints=cons, mixed_types=False)
    except InfeasiblePlanError:
        single = None
    plan = plan_job(model, cluster, training, objective=objective, constraints=cons)
    if single is not None:
        better = (plan.objective_value >= single.objective_value if objective == "throughput"
                  else plan.objective_value <= single.objective_value)
        assert better
        if not plan.mixed:
            assert plan.model_dump(exclude={"solve_time_s"}) == single.model_dump(exclude={"solve_time_s"})
    if plan.mixed:
        _assert_valid_mixed(plan, cluster)


def test_mixed_types_off_or_a_launcher_keep_single_type_plans() -> None:
    cluster = Cluster.from_dict(A100_H100)
    model = ModelConfig.preset("llama-2-7b")
    training = TrainingConfig(seq_len=4096, global_batch_size=64)
    assert not plan_job(model, cluster, training, mixed_types=False).mixed
    assert not plan_job(model, cluster, training, launcher="deepspeed").mixed


def test_two_types_of_equal_speed_together_beat_either_alone() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-40gb", "gpus_per_node": 8, "free_gpus": 4},
                                           {"gpu": "a100-80gb", "gpus_per_node": 8, "free_gpus": 4}]})
    model = ModelConfig.preset("qwen2.5-0.5b")
    training = TrainingConfig(seq_len=2048, global_batch_size=32)
    single = plan_job(model, cluster, training, mixed_types=False)
    plan = plan_job(model, cluster, training)
    assert plan.mixed and plan.num_gpus == 8 and plan.objective_value > single.objective_value
    _assert_valid_mixed(plan, cluster)
    assert "tokens/s against the best single-type plan" in plan.explain()
    # equal speed, equal shares
    assert len({g.samples for g in plan.stages}) == 1


def test_launchers_that_cannot_start_mixed_plans_refuse_them_and_name_those_that_can() -> None:
    from frenzy_core.adapters import get_adapter

    plan = plan_job(ModelConfig.preset("llama-2-70b"), Cluster.from_dict(A100_H100), LLAMA_70B_REQUEST)
    for name in ("megatron", "deepspeed", "accelerate", "kubeflow-trainjob", "ray", "skypilot"):
        with pytest.raises(ConfigError, match=f"launcher='{name}'") as err:
            get_adapter(name).emit(plan)
        assert "launch it with torchrun, slurm, kubernetes" in str(err.value)


@pytest.mark.parametrize("launcher", ["torchrun", "slurm", "kubernetes"])
def test_a_launcher_that_starts_mixed_plans_gets_one_it_accepts(launcher: str) -> None:
    from frenzy_core.adapters import get_adapter

    cluster = Cluster.from_dict(A100_H100)
    plan = plan_job(ModelConfig.preset("llama-2-70b"), cluster, LLAMA_70B_REQUEST, launcher=launcher, top_k=0)
    assert plan.mixed and plan.launcher == launcher
    _assert_valid_mixed(plan, cluster)
    get_adapter(launcher).emit(plan)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.sampled_from(["llama-2-7b", "gpt2", "qwen2.5-0.5b"]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]),
       st.sampled_from([0, 1, 2, 3]), st.sampled_from(["none", "selective", "full"]), st.integers(2, 8),
       st.integers(1, 8))
def test_memory_never_grows_with_dp_nor_shrinks_with_micro_batches(name: str, tp: int, pp: int, zero: int,
                                                                  recompute: str, dp: int, m: int) -> None:
    """The law the mixed search's memory pre-check rests on (a replica layout that does not fit at the most
    replicas and one micro-batch fits nowhere). From dp = 2, where mixed plans start: dp = 1 has no gradient
    all-reduce buckets, so going to 2 may need more."""
    model = ModelConfig.preset(name)
    if model.num_layers % pp or model.num_attention_heads % tp:
        return
    # torch tp > 1 is modelled with torchtitan's sequence parallelism, for the models it covers; Megatron's others
    covered = torch_sp_covered(model)
    training = TrainingConfig(seq_len=1024, micro_batch_size=1, zero_stage=zero if covered or tp == 1 else 0,
                              recompute=recompute, sequence_parallel=covered,
                              framework="torch" if covered or tp == 1 else "megatron")
    parallel = ParallelConfig(dp=dp, tp=tp, pp=pp)

    def need(d: int, micro: int) -> int:
        return int(estimate_memory(model, training.replace(global_batch_size=micro * d),
                                   parallel.replace(dp=d)).device_bytes)

    assert need(dp + 1, m) <= need(dp, m)
    assert need(dp, m + 1) >= need(dp, m)


def test_infeasible_requests_say_whether_mixing_helps() -> None:
    cluster = Cluster.from_dict(A100_H100)
    with pytest.raises(InfeasiblePlanError) as off:
        plan_job(ModelConfig.preset("llama-2-70b"), cluster, LLAMA_70B_REQUEST, mixed_types=False)
    assert any(s.startswith("mix GPU types (mixed_types=True): 32 GPUs of") for s in off.value.suggestions)
    with pytest.raises(InfeasiblePlanError, match="mixing GPU types"):
        plan_job(ModelConfig.preset("gpt3-175b"), Cluster.preset("frenzy-paper"),  # offloading, 32 A100s hold it
                 TrainingConfig(seq_len=2048, offload_optimizer="none"))


def test_a_mix_never_spans_gpu_vendors() -> None:
    """NCCL and RCCL ranks cannot join one communicator: with H100, MI300X and A100 free, the mix (which would
    take H100 + MI300X, 32 GPUs, were vendors ignored) stays on one vendor's types."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": gpu, "gpus_per_node": 8, "count": 2}
                                           for gpu in ("h100-sxm", "mi300x", "a100-80gb")]})
    plan = plan_job(ModelConfig.preset("llama-2-7b"), cluster, TrainingConfig(seq_len=4096, global_batch_size=256))
    vendors = {get_gpu_spec(t).vendor for t in plan.gpu_types}
    assert len(vendors) == 1, plan.gpu_types


def test_an_infeasible_message_says_why_the_stage_search_skipped_itself() -> None:
    # mixed_stages=True with pp pinned: the pipeline-stage search does not run, and the reason must say so rather
    # than read as a search that found nothing (gpt2 cannot train 10^12 tokens in 10 s on any GPUs here)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 4},
                                           {"gpu": "h100-sxm", "gpus_per_node": 4}]})
    with pytest.raises(InfeasiblePlanError) as err:
        plan_job(ModelConfig.preset("gpt2"), cluster, TrainingConfig(seq_len=1024), mixed_stages=True,
                 constraints={"token_budget": 10**12, "deadline_s": 10, "pp": 1})
    (mixing,) = [r for r in err.value.reasons if "mix of GPU types" in r]
    assert mixing.endswith("pipeline stages on different types with uneven layer counts were not searched "
                           "(pp is pinned to 1)")


@pytest.mark.parametrize("num_gpus", [1, 4])
def test_the_mixed_search_sizes_its_tables_within_the_requested_gpu_count(num_gpus: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A mix holds two replicas at least, of tp x pp x cp GPUs each: with one GPU asked for no table is built,
    and otherwise no table holds more replicas than the count allows (they took seconds of a 0.1 s limit)."""
    from frenzy_core.planning import mixed

    built: list[mixed.MixedTables] = []
    real = mixed._all_tables

    def spy(*args: object) -> tuple[list[mixed.MixedTables], bool]:
        tables, truncated = real(*args)  # type: ignore[arg-type]
        built.extend(tables)
        return tables, truncated

    monkeypatch.setattr(mixed, "_all_tables", spy)
    model = ModelConfig.preset("llama-3.1-8b")
    plan = plan_job(model, Cluster.preset("frenzy-paper"), TrainingConfig(seq_len=2048, global_batch_size=64),
                    constraints={"num_gpus": num_gpus})
    assert plan.num_gpus == num_gpus
    assert bool(built) == (num_gpus > 1)  # four GPUs: tables of two replicas and more (10 today)
    assert all((t.time_us[0].shape[0] - 1) * t.gpus_per_replica <= num_gpus for t in built)
