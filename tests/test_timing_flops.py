"""FLOP counts of the time model against Narayanan et al. (SC21) and hand counts."""

from __future__ import annotations

import pytest

from frenzy_core import Attention, ModelConfig, MoEConfig, Recompute
from frenzy_core.timing.flops import (
    attention_flops_per_token,
    causal_fraction,
    head_flops_per_token,
    linear_flops_per_token,
    training_flops,
)


def _gpt(h: int, layers: int, heads: int, vocab: int) -> ModelConfig:
    return ModelConfig(num_layers=layers, hidden_size=h, num_attention_heads=heads, vocab_size=vocab)


@pytest.mark.parametrize(("h", "layers", "heads", "s", "vocab", "batch"), [
    (2304, 24, 24, 2048, 51200, 512),     # SC21 Table 1, 1.7B
    (12288, 96, 96, 2048, 51200, 1536),   # GPT-3 175B
    (25600, 128, 160, 2048, 51200, 3072),  # SC21 Table 1, 1T
])
def test_reproduces_narayanan_formulas(h: int, layers: int, heads: int, s: int, vocab: int, batch: int) -> None:
    model = _gpt(h, layers, heads, vocab)
    # SC21 appendix: 72 B s l h^2 (1 + s/6h + V/12lh) without recompute, 96 B s l h^2 (1 + s/6h + V/16lh) with it.
    no_recompute = 72 * batch * s * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * layers * h))
    full_recompute = 96 * batch * s * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    assert training_flops(model, s, batch) == pytest.approx(no_recompute, rel=1e-12)
    assert training_flops(model, s, batch, Recompute.FULL) == pytest.approx(full_recompute, rel=1e-12)


def test_gqa_and_gated_mlp_hand_count() -> None:
    h, heads, kv, f = 4096, 32, 8, 14336
    model = ModelConfig(num_layers=32, hidden_size=h, num_attention_heads=heads, num_kv_heads=kv, ffn_hidden_size=f,
                        mlp="swiglu", norm="rmsnorm", vocab_size=128256, position_embedding="rotary")
    d = h // heads
    qkv = 2 * h * (heads * d + 2 * kv * d)
    out = 2 * heads * d * h
    mlp = 3 * 2 * h * f
    assert linear_flops_per_token(model) == qkv + out + mlp
    assert attention_flops_per_token(model, 8192) == 4 * 8192 * heads * d


def test_moe_counts_top_k_experts_and_router() -> None:
    h, f_e, experts, k = 1024, 2048, 8, 2
    moe = MoEConfig(num_experts=experts, top_k=k, expert_ffn_hidden_size=f_e)
    model = ModelConfig(num_layers=4, hidden_size=h, num_attention_heads=16, vocab_size=32000, mlp="swiglu",
                        moe=moe)
    attention = 2 * h * 3 * h + 2 * h * h
    assert linear_flops_per_token(model) == attention + k * 3 * 2 * h * f_e + 2 * h * experts
    # Every other layer MoE: the average of a dense and an MoE layer.
    half = model.replace(moe=moe.replace(layer_interval=2))
    dense = 3 * 2 * h * model.ffn_hidden_size
    assert linear_flops_per_token(half) == attention + (k * 3 * 2 * h * f_e + 2 * h * experts + dense) / 2


def test_selective_recompute_repeats_attention_core_only() -> None:
    model = _gpt(1024, 4, 16, 50000)
    s, b = 2048, 3
    extra = training_flops(model, s, b, Recompute.SELECTIVE) - training_flops(model, s, b)
    assert extra == pytest.approx(b * s * 4 * 4 * s * 1024)


def test_causal_fraction_and_encoder_head() -> None:
    decoder = _gpt(512, 2, 8, 1000)
    encoder = decoder.replace(arch="encoder")
    assert causal_fraction(decoder, Attention.FLASH) == 0.5
    assert causal_fraction(decoder, Attention.EAGER) == 1.0
    assert causal_fraction(encoder, Attention.FLASH) == 1.0
    assert head_flops_per_token(encoder) - head_flops_per_token(decoder) == 2 * 512 * 512
