"""plan_job plans a LoRA fine-tune where full fine-tuning does not fit, and says what trains (issue 10)."""

from __future__ import annotations

import pytest

from frenzy_core import InfeasiblePlanError, ModelConfig, TrainingConfig, plan_job
from frenzy_core.config.finetune import LoRAConfig

ONE_NODE = {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1}]}


def test_lora_plans_llama_70b_where_full_fine_tuning_is_infeasible() -> None:
    model = ModelConfig.preset("llama-3.1-70b")
    # full fine-tuning without offload (with the optimizer on the host, the fallback, 8 A100s do hold it)
    full = TrainingConfig(seq_len=2048, global_batch_size=16, offload_optimizer="none")
    with pytest.raises(InfeasiblePlanError, match="does not fit"):
        plan_job(model, ONE_NODE, full, time_limit_s=5)
    plan = plan_job(model, ONE_NODE, full.replace(lora=LoRAConfig(rank=16)), time_limit_s=5)
    assert plan.num_gpus <= 8 and plan.memory.device_bytes <= plan.usable_bytes
    text = plan.explain()
    assert "Trains: LoRA adapters of rank 16 on q, v, on a frozen base" in text
    # the frozen 70B base has no gradients or optimizer states; the adapters' are tiny
    assert plan.memory.breakdown["optimizer_states"] < 2**30
