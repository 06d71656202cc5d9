"""deepspeed adapter: a JSON config whose batch sizes, ZeRO stage, precision and checkpointing match the plan."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter_plans import GPT2, make_plan, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

deepspeed = ADAPTERS["deepspeed"]


def _config(plan: Plan, **options: object) -> dict[str, Any]:
    config = json.loads(deepspeed.emit(plan, **options))
    assert config == deepspeed(plan, **options)
    return config  # type: ignore[no-any-return]


def test_single_gpu() -> None:
    config = _config(single_gpu())
    assert config == {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
                      "zero_optimization": {"stage": 0}, "bf16": {"enabled": True}}


def test_multi_node_data_parallel() -> None:
    config = _config(multi_node_dp(), gradient_clipping=1.0)
    # DeepSpeed's own check: train_batch_size = micro x accumulation x data-parallel ranks (16)
    assert config["train_batch_size"] == 128 == 2 * 4 * 16
    assert config["zero_optimization"] == {"stage": 0}
    assert config["activation_checkpointing"]["partition_activations"] is False  # type: ignore[index]
    assert config["gradient_clipping"] == 1.0


def test_tp_pp_across_nodes() -> None:
    config = _config(tp_pp_nodes())
    assert (config["train_batch_size"], config["gradient_accumulation_steps"]) == (32, 16)  # dp = 2
    assert config["zero_optimization"] == {"stage": 1}  # distributed optimizer = ZeRO-1
    assert config["activation_checkpointing"]["partition_activations"] is True  # type: ignore[index]


@pytest.mark.parametrize(("precision", "block"), [("fp16-mixed", "fp16"), ("fp32", None)])
def test_precision_blocks(precision: str, block: str | None) -> None:
    plan = single_gpu()
    config = _config(make_plan(GPT2, plan.gpu_type, plan.placement, plan.parallel,
                               plan.training.replace(precision=precision)))
    assert [k for k in ("bf16", "fp16") if k in config] == ([block] if block else [])


def test_pure_bf16_is_refused() -> None:
    plan = single_gpu()
    pure = make_plan(GPT2, plan.gpu_type, plan.placement, plan.parallel, plan.training.replace(precision="bf16"))
    with pytest.raises(ConfigError, match="'bf16'") as err:
        deepspeed(pure)
    assert err.value.field == "training.precision"
