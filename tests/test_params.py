"""Parameter counting by component, checked against hand-computed architectures."""

from __future__ import annotations

from frenzy_core import ModelConfig, count_parameters
from frenzy_core.config.params import layer_parameters


def test_gpt2_small_hand_count() -> None:
    # GPT-2 small: h=768, 12 layers, vocab 50257, 1024 positions, all biases, LayerNorm, tied head.
    h, L, V, P = 768, 12, 50257, 1024
    per_layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h
    expected = V * h + P * h + L * per_layer + 2 * h
    m = ModelConfig(num_layers=L, hidden_size=h, num_attention_heads=12, vocab_size=V, max_position_embeddings=P,
                    qkv_bias=True, linear_bias=True)
    assert m.num_params() == expected == 124_439_808


def test_llama_gqa_untied_hand_count() -> None:
    h, L, V, f, heads, kv = 2048, 16, 128256, 8192, 32, 8
    hd = h // heads
    per_layer = h * (heads * hd) + 2 * h * (kv * hd) + (heads * hd) * h + 3 * h * f + 2 * h
    expected = V * h + L * per_layer + h + V * h
    m = ModelConfig(num_layers=L, hidden_size=h, num_attention_heads=heads, num_kv_heads=kv, ffn_hidden_size=f,
                    mlp="swiglu", norm="rmsnorm", vocab_size=V, position_embedding="rotary", tied_embeddings=False)
    # Llama-3.2-1B with an untied head (the released model ties it: 1,235,814,400).
    assert m.num_params() == expected
    assert m.replace(tied_embeddings=True).num_params() == 1_235_814_400


def test_moe_counts_active_and_total() -> None:
    m = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100, mlp="swiglu",
                    norm="rmsnorm", position_embedding="rotary",
                    moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=32))
    layer = layer_parameters(m, 0)
    assert layer.experts == 8 * 3 * 64 * 32
    assert layer.router == 64 * 8
    counts = count_parameters(m)
    assert counts.experts == 2 * layer.experts
    assert counts.total - counts.active == 2 * 6 * 3 * 64 * 32
