"""accelerate adapter: DDP or FSDP for data-parallel plans, the Megatron-LM plugin for model-split ones."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from adapter_plans import GPT2, make_plan, moe_ep_nodes, multi_node_dp, single_gpu, tp_pp_nodes, zero3_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

accelerate = ADAPTERS["accelerate"]


def _config(plan: Plan, **options: object) -> dict[str, Any]:
    config = yaml.safe_load(accelerate.emit(plan, **options))
    assert config == accelerate(plan, **options)
    return config  # type: ignore[no-any-return]


def test_single_gpu() -> None:
    config = _config(single_gpu())
    assert (config["distributed_type"], config["num_machines"], config["num_processes"]) == ("NO", 1, 1)
    assert config["gpu_ids"] == "3" and config["mixed_precision"] == "bf16"
    assert "fsdp_config" not in config and "main_process_ip" not in config


def test_multi_node_fsdp() -> None:
    config = _config(zero3_nodes(), main_process_ip="10.0.0.1", machine_rank=1)
    assert (config["distributed_type"], config["num_machines"], config["num_processes"]) == ("FSDP", 2, 16)
    assert (config["main_process_ip"], config["machine_rank"]) == ("10.0.0.1", 1)
    fsdp = config["fsdp_config"]
    assert fsdp["fsdp_sharding_strategy"] == "FULL_SHARD"  # type: ignore[index]  # ZeRO-3
    assert fsdp["fsdp_activation_checkpointing"] is False  # type: ignore[index]  # selective: not FSDP's
    assert _config(multi_node_dp())["distributed_type"] == "MULTI_GPU"


def test_zero_2_is_shard_grad_op_and_zero_0_is_ddp() -> None:
    placement = {"node:0": list(range(4))}
    for stage, kind, strategy in ((2, "FSDP", "SHARD_GRAD_OP"), (0, "MULTI_GPU", None)):
        plan = make_plan(GPT2, "a100-80gb", placement, ParallelConfig(dp=4),
                         TrainingConfig(seq_len=512, zero_stage=stage))
        config = _config(plan)
        assert config["distributed_type"] == kind
        assert (config.get("fsdp_config") or {}).get("fsdp_sharding_strategy") == strategy  # type: ignore[union-attr]


def test_model_split_plans_use_the_megatron_lm_plugin() -> None:
    config = _config(moe_ep_nodes())
    assert config["distributed_type"] == "MEGATRON_LM"
    megatron = config["megatron_lm_config"]
    assert (megatron["megatron_lm_tp_degree"], megatron["megatron_lm_expert_model_parallel_size"]) == (2, 8)
    assert megatron["megatron_lm_num_micro_batches"] == 8 and megatron["megatron_lm_use_distributed_optimizer"]


def test_virtual_pipeline_is_refused_with_the_plugin_to_use() -> None:
    with pytest.raises(ConfigError, match="num_layers_per_virtual_pipeline_stage=8") as err:
        accelerate(tp_pp_nodes())
    assert err.value.field == "plan.parallel.vpp"


@pytest.mark.parametrize(("change", "field"), [
    ({"recompute": "selective", "recompute_modules": ["core_attn", "mlp"]}, "training.recompute_modules"),
    ({"tp_comm_overlap": True}, "training.tp_comm_overlap"),
])
def test_megatron_only_recipe_fields_are_refused_by_the_plugin(change: dict[str, object], field: str) -> None:
    plan = moe_ep_nodes()
    plan = plan.model_copy(update={"training": plan.training.replace(**change)})
    with pytest.raises(ConfigError, match="megatron adapter|no key") as err:
        accelerate(plan)
    assert err.value.field == field


def test_machine_rank_must_exist() -> None:
    with pytest.raises(ConfigError, match="machine_rank=2"):
        accelerate(multi_node_dp(), machine_rank=2)
