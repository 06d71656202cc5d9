"""megatron adapter: Megatron-LM flags that from_megatron_args reads back to the plan's configuration."""

from __future__ import annotations

import shlex

import pytest

from adapter_plans import GPT2, LLAMA, make_plan, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ModelConfig
from frenzy_core.config.megatron import from_megatron_args
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

megatron = ADAPTERS["megatron"]


def as_megatron(plan: Plan, model: ModelConfig) -> Plan:
    """The plan's layout with a Megatron-LM recipe (fused optimizer, explicit recompute chunk)."""
    changes: dict[str, object] = {"framework": "megatron", "optimizer_impl": "fused"}
    if plan.training.recompute.value == "full":
        changes["recompute_num_layers"] = 1
    return make_plan(model, plan.gpu_type, plan.placement, plan.parallel, plan.training.replace(**changes))


CASES = {
    "single_gpu": (single_gpu, GPT2),
    "multi_node_dp": (multi_node_dp, GPT2),
    "tp_pp_nodes": (tp_pp_nodes, LLAMA),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip(case: str) -> None:
    make, model = CASES[case]
    plan = as_megatron(make(), model)
    data = megatron(plan, model=model)
    assert data["world_size"] == plan.num_gpus
    model_back, training_back, parallel_back = from_megatron_args(data["args"], plan.num_gpus)
    assert parallel_back == plan.parallel
    assert training_back == plan.training
    # Not Megatron flags: the model's name, and what the Hugging Face class does beyond the architecture (its
    # KV-cache output; fused or separate projections, which Megatron-Core always fuses).
    assert model_back == model.replace(name=None, returns_kv_cache=False, fused_qkv=False)


def test_tp_pp_flags() -> None:
    data = megatron(as_megatron(tp_pp_nodes(), LLAMA), model=LLAMA)
    args = data["args"]

    def value(flag: str) -> str:
        return args[args.index(flag) + 1]

    assert value("--tensor-model-parallel-size") == "4"
    assert value("--pipeline-model-parallel-size") == "2"
    assert value("--num-virtual-stages-per-pipeline-rank") == "2"
    assert value("--micro-batch-size") == "1" and value("--global-batch-size") == "32"
    assert value("--recompute-granularity") == "selective"
    assert {"--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--swiglu"} <= set(args)


def test_shell_string_and_text_hold_the_same_tokens() -> None:
    data = megatron(single_gpu(), model=GPT2, script="pretrain_gpt.py")
    assert shlex.split(data["shell"]) == data["args"]
    text = megatron.emit(single_gpu(), model=GPT2)
    command = [line for line in text.replace("\\\n", " ").splitlines() if not line.startswith(("#", "export "))]
    assert shlex.split(command[0]) == ["pretrain_gpt.py", *data["args"]]


def test_model_defaults_to_the_plans_own() -> None:
    plan = single_gpu()
    assert megatron(plan)["args"] == megatron(plan, model=plan.model)["args"]
    assert "--num-layers" in megatron(plan)["args"]
    # A plan read back from JSON still launches: it carries its model.
    again = type(plan).model_validate_json(plan.model_dump_json())
    assert megatron(again)["args"] == megatron(plan)["args"]


def test_zero_2_cannot_be_written_as_megatron_flags() -> None:
    plan = single_gpu()
    zero2 = make_plan(GPT2, plan.gpu_type, plan.placement, plan.parallel, plan.training.replace(zero_stage=2))
    with pytest.raises(ConfigError, match="zero_stage"):
        megatron(zero2, model=GPT2)
