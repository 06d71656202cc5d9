"""Memory-bound traffic counts of the time model."""

from __future__ import annotations

from frenzy_core import ModelConfig, MoEConfig, Optimizer, Precision
from frenzy_core.timing.traffic import (
    elementwise_elements_per_token,
    grad_reduce_bytes,
    optimizer_bytes_per_param,
)


def test_elementwise_elements_gpt_and_gated() -> None:
    h = 1024
    gpt = ModelConfig(num_layers=2, hidden_size=h, num_attention_heads=16, vocab_size=1000)
    got = elementwise_elements_per_token(gpt)
    assert got.replicated == 11 * h
    assert got.sharded == 2 * 3 * h + 2 * h + 2 * 4 * h  # head split + merge, bias-GeLU on 4h
    swiglu = gpt.replace(mlp="swiglu", ffn_hidden_size=2816, num_kv_heads=4)
    kv = 4 * 64
    assert elementwise_elements_per_token(swiglu).sharded == 2 * (h + 2 * kv) + 2 * h + 3 * 2816


def test_elementwise_moe_counts_routed_copies() -> None:
    h = 512
    moe = ModelConfig(num_layers=2, hidden_size=h, num_attention_heads=8, vocab_size=1000, mlp="swiglu",
                      moe=MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=256))
    heads = 2 * 3 * h + 2 * h
    assert elementwise_elements_per_token(moe).sharded == heads + 3 * 2 * 256 + 4 * 2 * h


def test_optimizer_and_gradient_bytes() -> None:
    assert optimizer_bytes_per_param(Precision.BF16_MIXED, Optimizer.ADAMW) == 8 + 16 + 4 + 2
    assert optimizer_bytes_per_param(Precision.BF16, Optimizer.ADAMW) == 4 + 8 + 2
    assert optimizer_bytes_per_param(Precision.FP32, Optimizer.SGD) == 8 + 4
    assert grad_reduce_bytes(Precision.BF16_MIXED) == 4 and grad_reduce_bytes(Precision.FP16) == 2
