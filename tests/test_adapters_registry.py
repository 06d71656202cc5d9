"""The adapter registry and base: launcher names, emit, option checking, shared plan views."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter_plans import GPT2, LLAMA, THREE_PLANS, make_plan, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS, LAUNCHERS, RECIPE_ENV, emit, get_adapter
from frenzy_core.adapters.base import (
    _launcher_names,
    launcher_gpu_name,
    node_slots,
    recipe_env,
    uniform_gpus_per_node,
)
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError, UnknownNameError
from frenzy_core.hardware import Cluster
from frenzy_core.hardware.gpus import load_gpu_specs
from frenzy_core.planning import Plan, plan_job


def test_launcher_names_are_the_documented_ones() -> None:
    assert LAUNCHERS == ("torchrun", "megatron", "deepspeed", "accelerate", "slurm", "kubernetes",
                         "kubeflow-trainjob", "ray", "skypilot")
    assert all(ADAPTERS[name].name == name for name in LAUNCHERS)


def test_unknown_launcher_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        emit(single_gpu(), "torchrunn")
    assert isinstance(err.value, ConfigError)
    assert err.value.suggestions[0] == "torchrun"
    with pytest.raises(ConfigError, match="kubernetes"):
        get_adapter("no-such-launcher-xyz")


def test_launcher_names_are_case_insensitive() -> None:
    assert get_adapter(" Slurm ") is ADAPTERS["slurm"]


def test_unknown_option_is_named() -> None:
    with pytest.raises(ConfigError, match="rdzv_prot"):
        emit(single_gpu(), "torchrun", rdzv_prot=1234)


def test_a_plan_is_required() -> None:
    with pytest.raises(ConfigError, match="expected a Plan"):
        ADAPTERS["deepspeed"]({"gpu_type": "a100-80gb"})  # type: ignore[arg-type]


@pytest.mark.parametrize("plan_name", sorted(THREE_PLANS))
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_launcher_writes_text_or_says_why_not(plan_name: str, launcher: str) -> None:
    plan = THREE_PLANS[plan_name]()
    options = {"model": LLAMA if plan_name == "tp_pp_nodes" else GPT2} if launcher == "megatron" else {}
    if launcher == "accelerate" and plan_name == "tp_pp_nodes":
        with pytest.raises(ConfigError, match="vpp=2"):
            emit(plan, launcher, **options)
        return
    text = emit(plan, launcher, **options)
    assert text.endswith("\n") and len(text.splitlines()) >= 3
    assert emit(plan, launcher, **options) == text  # pure: same plan, same text


def test_node_slots_keep_placement_order() -> None:
    plan = tp_pp_nodes()
    slots = node_slots(plan)
    assert [(s.name, s.rank, s.host) for s in slots] == [("node:2", 0, "node-2"), ("node:5", 1, "node-5")]
    assert uniform_gpus_per_node(plan, "x") == 8


def test_uneven_placement_is_refused_where_it_must_be() -> None:
    plan = make_plan(GPT2, "a100-80gb", {"node:0": list(range(8)), "node:1": [0, 1, 2, 3]},
                     ParallelConfig(dp=12), TrainingConfig(seq_len=512))
    with pytest.raises(ConfigError, match="node:0: 8, node:1: 4"):
        uniform_gpus_per_node(plan, "slurm")


def test_recipe_env_values() -> None:
    env = recipe_env(multi_node_dp())
    assert list(env) == list(RECIPE_ENV)
    # 128 samples per step / (2 per micro-batch x 16 replicas) = 4 micro-batches per rank
    assert (env["FRENZY_GRAD_ACCUM_STEPS"], env["FRENZY_GLOBAL_BATCH_SIZE"], env["FRENZY_DP"]) == ("4", "128", "16")
    assert env["FRENZY_ZERO_STAGE"] == "0" and env["FRENZY_RECOMPUTE"] == "full"
    # Megatron's distributed optimizer counts as ZeRO-1
    assert recipe_env(tp_pp_nodes())["FRENZY_ZERO_STAGE"] == "1"


def test_launcher_gpu_names_cover_the_catalogue() -> None:
    table = _launcher_names()
    assert set(table.gpus) == set(load_gpu_specs())
    assert all(set(row) == {"kubernetes", "ray", "skypilot"} for row in table.gpus.values())


def test_missing_launcher_gpu_name_names_the_override_option() -> None:
    plan = single_gpu().model_copy(update={"gpu_type": "rtx-4090"})
    with pytest.raises(ConfigError, match="accelerator_type=") as err:
        launcher_gpu_name(plan.gpu_type, "ray", "accelerator_type", None)
    assert err.value.field == "accelerator_type"
    assert launcher_gpu_name(plan.gpu_type, "ray", "accelerator_type", "RTX4090") == "RTX4090"


def _gpus_each_launcher_starts(plan: Plan) -> dict[str, int]:
    """GPUs (processes) each launcher's output asks for, read back from the output itself."""
    k8s = ADAPTERS["kubernetes"](plan)
    sky = ADAPTERS["skypilot"](plan)
    slurm_lines = ADAPTERS["slurm"].emit(plan).splitlines()
    nodes = next(int(x.split("=")[1]) for x in slurm_lines if x.startswith("#SBATCH --nodes="))
    gres = next(int(x.rsplit(":", 1)[1]) for x in slurm_lines if x.startswith("#SBATCH --gres="))
    return {
        "torchrun": sum(n["nproc_per_node"] for n in ADAPTERS["torchrun"](plan)["nodes"]),
        "kubernetes": sum(g["replicas"] for g in k8s["spec"]["pytorchReplicaSpecs"].values())
        * int(k8s["spec"]["nprocPerNode"]),
        "slurm": nodes * gres,
        "ray": ADAPTERS["ray"](plan)["scaling_config"]["num_workers"],
        "skypilot": sky["num_nodes"] * sum(sky["resources"]["accelerators"].values()),
    }


@settings(max_examples=25, deadline=None)
@given(nodes=st.integers(1, 3), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2]),
       micro=st.sampled_from([1, 2, 4]), accum=st.integers(1, 4))
def test_every_launcher_starts_the_plans_gpus_with_its_batch(nodes: int, tp: int, pp: int, micro: int,
                                                             accum: int) -> None:
    per_node = 8
    world = nodes * per_node
    dp = world // (tp * pp)
    plan = make_plan(GPT2, "a100-80gb", {f"node:{i}": list(range(per_node)) for i in range(nodes)},
                     ParallelConfig(dp=dp, tp=tp, pp=pp),
                     # torch tp > 1 is modelled only with sequence parallelism, which GPT-2 is outside of (and
                     # DeepSpeed's AutoTP cannot run): Megatron's recipe there
                     TrainingConfig(seq_len=256, micro_batch_size=micro, global_batch_size=micro * dp * accum,
                                    framework="megatron" if tp > 1 else "torch"))
    assert set(_gpus_each_launcher_starts(plan).values()) == {world}
    ds = ADAPTERS["deepspeed"](plan)
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (micro * dp * accum, accum)
    assert recipe_env(plan)["FRENZY_GRAD_ACCUM_STEPS"] == str(accum)


def test_plans_from_the_planner_emit_consistently() -> None:
    """A plan_job plan (whatever layout it picks) is written for every launcher with its own GPU count."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2}]})
    plan = plan_job(GPT2, cluster, TrainingConfig(seq_len=1024, global_batch_size=256),
                    constraints={"num_gpus": 16}, time_limit_s=5)
    assert set(_gpus_each_launcher_starts(plan).values()) == {16}
    assert ADAPTERS["deepspeed"](plan)["train_batch_size"] == 256
