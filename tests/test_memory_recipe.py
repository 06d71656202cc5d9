"""Bytes per parameter of each precision recipe and optimizer (docs/memory-model.md, section 2)."""

from __future__ import annotations

import pytest

from frenzy_core.config import TrainingConfig
from frenzy_core.memory.recipe import ADAM_8BIT_BLOCK_SIZE, state_bytes


@pytest.mark.parametrize("precision,framework,expected", [
    # (weights, layer matmul weights, grads, master, states) for Adam
    ("fp32", "torch", (4, 4, 4, 0, 8)),
    ("bf16", "torch", (2, 2, 2, 0, 4)),
    ("amp-bf16", "torch", (4, 4, 4, 0, 8)),
    ("bf16-mixed", "torch", (2, 2, 2, 4, 8)),  # ZeRO paper: 2 + 2 + K with K = 12
    ("bf16-mixed", "megatron", (2, 2, 4, 4, 8)),  # Megatron: 18 bytes per parameter
    ("fp8-mixed", "megatron", (2, 3, 4, 4, 8)),  # Transformer Engine's fp8 copy of each linear weight
])
def test_adam_bytes_per_parameter(precision: str, framework: str, expected: tuple[int, ...]) -> None:
    sb = state_bytes(TrainingConfig(precision=precision, framework=framework, optimizer="adam"))
    assert (sb.param, sb.matmul_weight, sb.grad, sb.master, sb.states) == expected


def test_qlora_and_fp8_param_gather_weights() -> None:
    """QLoRA paper, section 3: 4-bit weights with 64-blocks cost 0.5 + 32/64 bits of absmax per weight, 0.127 bits
    with double quantisation; --fp8-param-gather keeps fp8 row- and column-wise data and no bf16 weight."""
    from frenzy_core.config.finetune import LoRAConfig

    nf4 = TrainingConfig(precision="bf16", lora=LoRAConfig(base_quantization="nf4", double_quant=False))
    assert state_bytes(nf4).matmul_weight == pytest.approx(0.5 + 4 / 64)
    dq = nf4.replace(lora=LoRAConfig(base_quantization="nf4"))
    assert state_bytes(dq).matmul_weight * 8 == pytest.approx(4 + 8 / 64 + 32 / (64 * 256))
    gather = TrainingConfig(precision="fp8-mixed", framework="megatron", fp8_param_gather=True)
    assert state_bytes(gather).matmul_weight == 2


def test_optimizer_states() -> None:
    def states(opt: str) -> float:
        return state_bytes(TrainingConfig(precision="fp32", optimizer=opt)).states

    assert states("sgd") == 0 and states("sgd-momentum") == 4 and states("adamw") == 8
    assert states("adam-8bit") == pytest.approx(2 * (1 + 4 / ADAM_8BIT_BLOCK_SIZE))


def test_step_temporaries_by_implementation() -> None:
    """torch/optim/adam.py: foreach keeps one sqrt copy of the local set; for-loop two of one tensor; fused none."""
    def sb(impl: str, precision: str = "fp32") -> tuple[float, float]:
        r = state_bytes(TrainingConfig(precision=precision, optimizer="adamw", optimizer_impl=impl))
        return r.step_temp_local, r.step_temp_largest

    assert sb("foreach") == (4, 0)
    assert sb("for-loop") == (0, 8)
    assert sb("fused") == (0, 0)
    assert sb("foreach", "bf16") == (2, 0)
    assert sb("fused", "bf16-mixed") == (4, 0)  # DeepSpeed's fp32 copy of the half gradient shard
