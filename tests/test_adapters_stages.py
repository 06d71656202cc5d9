"""Launching pipelines whose stages run on different GPU types (issue 12, form a): torchrun's per-node lines,
torchtitan's module split, the Slurm heterogeneous job, the JobSet and Megatron-LM where its flags can say the
plan, on plans from ``plan_job(..., mixed_stages=True)`` (tests/adapter_plans.py: planned once per session).
The real consumers (JobSet models, strict batch/v1, torchtitan's command-line rules, a real sbatch) are in
tests/test_consumers.py and tests/test_consumers_slurm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter_plans import LLAMA, STAGE_PLANS, make_plan, megatron_stages, megatron_stages_uneven, stage_tps, stage_uneven
from frenzy_core.adapters import ADAPTERS, STAGE_ENV, emit
from frenzy_core.adapters.torchtitan import module_fqns_per_model_part, torchtitan_args
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.config.megatron import from_megatron_args
from frenzy_core.errors import ConfigError
from frenzy_core.planning import LAUNCH_SCOPES, Plan
from local_torchrun import run_lines

torchrun = ADAPTERS["torchrun"]
PROBE = Path(__file__).resolve().parent / "fixtures" / "adapters" / "stage_probe.py"
_STAGED = pytest.mark.parametrize("make", list(STAGE_PLANS.values()), ids=list(STAGE_PLANS))


def _parse(argv: list[str]) -> Any:
    """torchrun's own argument parser applied to the flags after the launcher prefix."""
    run = pytest.importorskip("torch.distributed.run")
    return run.get_args_parser().parse_args(argv[1:])


def _stage_of_rank(env: dict[str, str], rank: int) -> tuple[int, int, int]:
    """(stage, replica, tp index) of a global rank from the whole-pipeline variables alone, as a training script
    computes it (docs/adapters.md): stage i's ranks are FRENZY_DP x tp_i, stage after stage."""
    dp, tps = int(env["FRENZY_DP"]), [int(t) for t in env["FRENZY_STAGE_TPS"].split(",")]
    first = 0
    for stage, tp in enumerate(tps):
        if rank < first + dp * tp:
            return stage, (rank - first) // tp, (rank - first) % tp
        first += dp * tp
    raise AssertionError(f"rank {rank} is past the pipeline's {first} ranks")


@_STAGED
def test_torchrun_lines_give_each_rank_its_stage_and_keep_tp_groups_in_a_node(make: Any) -> None:
    plan: Plan = make()
    data = torchrun(plan)
    assert data["stages"] and data["world_size"] == plan.num_gpus == sum(n["nproc_per_node"] for n in data["nodes"])
    first = 0
    for k, node in enumerate(data["nodes"]):
        stage = plan.stages[node["group"]]
        env = node["env"]
        assert set(STAGE_ENV) <= set(env) and not any(v.startswith("FRENZY_GROUP") for v in env)
        args = _parse(node["argv"])
        assert (args.node_rank, args.nproc_per_node, args.rdzv_backend) == (k, str(node["nproc_per_node"]), "static")
        assert node["first_rank"] == first  # static rendezvous: this node's ranks follow the earlier nodes'
        ranks = range(first, first + node["nproc_per_node"])
        seen = {_stage_of_rank(env, r) for r in ranks}
        # every rank of the node is in the node's stage, and each replica's whole tp group is on this node
        assert {s for s, _, _ in seen} == {stage.pipeline_stage}
        for replica in {d for _, d, _ in seen}:
            assert {t for _, d, t in seen if d == replica} == set(range(stage.tp))
        assert (env["FRENZY_STAGE"], env["FRENZY_TP"], env["FRENZY_GPU_TYPE"]) == (
            str(stage.pipeline_stage), str(stage.tp), stage.gpu_type)
        assert (int(env["FRENZY_STAGE_FIRST_LAYER"]), int(env["FRENZY_STAGE_NUM_LAYERS"])) == (
            stage.first_layer, stage.num_layers)
        assert env["FRENZY_STAGE_FIRST_RANK"] == str(sum(s.num_gpus for s in plan.stages[:node["group"]]))
        assert env["FRENZY_STAGE_LAYERS"] == ",".join(map(str, plan.parallel.stage_layers or ()))
        assert env["FRENZY_PP"] == str(len(plan.stages)) and env["FRENZY_DP"] == str(stage.dp)
        assert node["layers"] == [stage.first_layer, stage.first_layer + stage.num_layers]
        first += node["nproc_per_node"]
    text = torchrun.emit(plan)
    assert f"stage {len(plan.stages) - 1} ({plan.stages[-1].gpu_type}, tp {plan.stages[-1].tp}, layers" in text


def test_the_pipeline_neighbours_of_a_replica_are_its_replica_in_the_next_stage() -> None:
    """With one tp on every stage, rank (stage i, replica d, tp index t) is i x dp x tp + d x tp + t: torchtitan's
    and torch's pp x dp x tp device mesh, so its pp group {(i, d, t) for every i} is what torch.distributed.
    pipelining expects."""
    plan = STAGE_PLANS["stage_shared_node"]()
    env = torchrun(plan)["nodes"][0]["env"]
    dp, tp = plan.parallel.dp, plan.stages[0].tp
    for rank in range(plan.num_gpus):
        stage, replica, index = _stage_of_rank(env, rank)
        assert rank == stage * dp * tp + replica * tp + index


def test_the_torchtitan_split_lists_every_module_once_in_model_order() -> None:
    plan = stage_uneven()
    parts = module_fqns_per_model_part(plan)
    assert len(parts) == len(plan.stages) == plan.parallel.pp
    layers = [int(name.split(".")[1]) for part in parts for name in part if name.startswith("layers.")]
    assert layers == list(range(plan.model.num_layers))
    for part, stage in zip(parts, plan.stages):
        assert [n for n in part if n.startswith("layers.")] == [f"layers.{k}" for k in
                                                                range(stage.first_layer, stage.first_layer + stage.num_layers)]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    args = torchtitan_args(plan)
    assert f"--parallelism.pipeline_parallel_degree={plan.parallel.pp}" in args
    assert args[args.index("--parallelism.module_fqns_per_model_part") + 1:] == [",".join(p) for p in parts]
    line = torchrun(plan, torchtitan=True)["nodes"][0]["argv"]
    assert line[-len(args):] == args


def test_torchtitan_refuses_stages_of_different_tp_naming_what_runs_them() -> None:
    plan = stage_tps()
    with pytest.raises(ConfigError, match="one tensor_parallel_degree on every pipeline stage") as err:
        torchrun(plan, torchtitan=True)
    assert err.value.field == "plan.stages" and "torchrun, slurm, kubernetes" in (err.value.hint or "")
    assert f"constraints={{'tp': {max(s.tp for s in plan.stages)}}}" in (err.value.hint or "")


@_STAGED
def test_slurm_hetjob_has_a_component_per_stage_run_with_that_stages_environment(make: Any) -> None:
    plan: Plan = make()
    data = ADAPTERS["slurm"](plan)
    script = data["script"]
    steps = data["srun"].removeprefix("srun ").split(" : ")
    assert script.count("#SBATCH hetjob") == len(steps) - 1 == len(plan.stages) - 1
    for i, (step, stage) in enumerate(zip(steps, plan.stages)):
        assert step.startswith(f"--het-group={i} ")
        assert f"FRENZY_STAGE={i} " in step and f"FRENZY_STAGE_FIRST_LAYER={stage.first_layer} " in step
        assert f"FRENZY_TP={stage.tp} " in step or f"export FRENZY_TP={stage.tp}\n" in script
        assert f"--nproc-per-node={stage.num_gpus // len(stage.placement)} " in step
    assert 'bash -c' in data["srun"] and '--node-rank="${SLURM_PROCID}"' in data["srun"]


@_STAGED
def test_the_jobset_runs_each_stage_on_its_type_with_its_environment(make: Any) -> None:
    plan: Plan = make()
    manifest = yaml.safe_load(emit(plan, "kubernetes"))
    assert manifest["kind"] == "JobSet"
    jobs = manifest["spec"]["replicatedJobs"]
    assert len(jobs) == len(plan.stages)
    for job, stage in zip(jobs, plan.stages):
        pod = job["template"]["spec"]["template"]["spec"]
        env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
        assert (env["FRENZY_STAGE"], env["FRENZY_TP"], env["FRENZY_GPU_TYPE"]) == (
            str(stage.pipeline_stage), str(stage.tp), stage.gpu_type)
        assert job["template"]["spec"]["parallelism"] == len(stage.placement)


@pytest.mark.parametrize("make", [megatron_stages, megatron_stages_uneven], ids=["first_last", "layout"])
def test_megatron_runs_a_pipeline_over_types_with_one_tp_and_its_split(make: Any) -> None:
    """One tp on every stage: Megatron's flags carry the split (the first/last-stage flags where they say it,
    else --pipeline-model-parallel-layout), and Megatron's reader reads them back to the plan's stages."""
    plan: Plan = make()
    assert len({s.tp for s in plan.stages}) == 1
    data = ADAPTERS["megatron"](plan)
    _, _, parallel = from_megatron_args(data["args"], plan.num_gpus)
    assert (parallel.tp, parallel.pp) == (plan.stages[0].tp, len(plan.stages))
    assert list(parallel.stage_layers or ()) == [s.num_layers for s in plan.stages]
    assert data["gpu_type"] == ", ".join(plan.gpu_types)


def test_megatron_refuses_per_stage_tp_naming_launchers_that_run_it() -> None:
    with pytest.raises(ConfigError, match="one --tensor-model-parallel-size on every pipeline stage") as err:
        emit(stage_tps(), "megatron")
    assert err.value.field == "plan.stages" and "launch it with torchrun, slurm, kubernetes" in (err.value.hint or "")


def test_launchers_that_cannot_run_stages_refuse_and_the_others_accept() -> None:
    plan = stage_uneven()
    for name, scope in LAUNCH_SCOPES.items():
        if name == "megatron":
            continue  # a torch recipe (ZeRO 2): refused for its recipe, as a single-type plan would be
        if scope.stages:
            assert emit(plan, name)
        else:
            with pytest.raises(ConfigError, match="pipeline stages run on different types"):
                emit(plan, name)


@pytest.mark.slow  # two agents and four ranks start torch: about a minute on 2 cores
def test_the_lines_of_a_pipeline_over_two_types_train_one_step_equal_to_the_full_batch(tmp_path: Path) -> None:
    """Both nodes' emitted lines started on this host (gloo, CPU): each rank builds its stage from its
    variables as docs/adapters.md says, the 1F1B schedule runs over the pp groups those variables give, and
    every stage's layers after one step equal one full-batch step on one process."""
    pytest.importorskip("torch.distributed.pipelining")
    plan = stage_uneven()
    records = run_lines(plan, PROBE, tmp_path)
    assert [r["rank"] for r in records] == list(range(plan.num_gpus))
    expected = [(s.pipeline_stage, d, [s.first_layer, s.first_layer + s.num_layers], s.gpu_type)
                for s in plan.stages for d in range(s.dp)]
    assert [(r["stage"], r["replica"], r["layers"], r["gpu_type"]) for r in records] == expected
    assert all(r["matches_full_batch"] for r in records)


@st.composite
def _pipelines(draw: st.DrawFn) -> Plan:
    """A form (a) plan reshaped by hand: 2 to 4 stages, each of its own tp and GPU type, dp 1, 2 or 4 (dividing
    the global batch of 8), every stage's replicas spread over nodes that each hold whole tp groups."""
    base = stage_uneven()
    dp = draw(st.sampled_from([1, 2, 4]))
    count = draw(st.integers(2, 4))
    tps = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=count, max_size=count))
    split = draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
    stages, node, first = [], 0, 0
    for i, (tp, layers) in enumerate(zip(tps, split)):
        groups_per_node = draw(st.sampled_from([g for g in (1, 2, 4) if dp % g == 0]))
        placement = {}
        for _ in range(dp // groups_per_node):
            placement[f"node:{node}"] = list(range(groups_per_node * tp))
            node += 1
        stages.append(base.stages[i % 2].model_copy(update={
            "tp": tp, "dp": dp, "num_gpus": dp * tp, "pipeline_stage": i, "first_layer": first,
            "num_layers": layers, "placement": placement}))
        first += layers
    model = base.model.replace(num_layers=first)
    parallel = base.parallel.replace(dp=dp, pp=count, tp=min(tps), stage_layers=tuple(split))
    return base.model_copy(update={"model": model, "parallel": parallel, "stages": tuple(stages),
                                   "num_gpus": sum(s.num_gpus for s in stages)})


@settings(max_examples=15, deadline=None)
@given(_pipelines())
def test_every_rank_of_any_pipeline_finds_its_stage_replica_and_tp_group_from_its_variables(plan: Plan) -> None:
    """The law the contract rests on, for any stage tps, dp and node spread: stage i's ranks are consecutive from
    dp x (tp_0 + ... + tp_{i-1}) in torchrun's static order, and each node's ranks are whole tp groups of its stage."""
    nodes = torchrun.build(plan, torchrun.options())["nodes"]
    assert sum(n["nproc_per_node"] for n in nodes) == plan.num_gpus
    for node in nodes:
        stage = plan.stages[node["group"]]
        seen = [_stage_of_rank(node["env"], r) for r in range(node["first_rank"],
                                                              node["first_rank"] + node["nproc_per_node"])]
        assert {s for s, _, _ in seen} == {stage.pipeline_stage}
        assert sorted(t for _, _, t in seen) == sorted(list(range(stage.tp)) * (len(seen) // stage.tp))
        assert seen[0][2] == 0 and len(seen) % stage.tp == 0
        assert node["env"]["FRENZY_STAGE_FIRST_RANK"] == str(plan.parallel.dp * sum(s.tp for s in
                                                                                     plan.stages[:node["group"]]))


def test_the_torchtitan_split_of_a_single_type_pipeline_is_its_even_split() -> None:
    """Without stage_layers the memory model's even split (the first stages one layer longer) is what torchtitan
    is told, so the run builds the stages the plan was estimated with."""
    model = LLAMA.replace(num_layers=30)
    plan = make_plan(model, "h100-sxm", {"node:0": list(range(8))}, ParallelConfig(tp=2, pp=4),
                     TrainingConfig(seq_len=1024, micro_batch_size=1, global_batch_size=8, sequence_parallel=True))
    parts = module_fqns_per_model_part(plan)
    assert [sum(n.startswith("layers.") for n in part) for part in parts] == [30 // 4 + (i < 30 % 4) for i in range(4)]
    assert torchtitan_args(plan)[2] == "--parallelism.tensor_parallel_degree=2"
    with pytest.raises(ConfigError, match="one stage per pp rank"):
        module_fqns_per_model_part(make_plan(model, "h100-sxm", {"node:0": list(range(8))},
                                             ParallelConfig(tp=2, pp=2, vpp=3, dp=2), plan.training))
