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


def _small(**changes: object) -> ModelConfig:
    return ModelConfig(**{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 2,
                          "ffn_hidden_size": 96, "mlp": "swiglu", "norm": "rmsnorm", "vocab_size": 100,
                          "position_embedding": "rotary", "tied_embeddings": False, **changes})


def test_norm_placement_counts_the_norms_it_places() -> None:
    pre = _small()
    assert _small(norm_placement="sandwich").num_params() - pre.num_params() == 2 * 2 * 64  # two more per layer
    assert _small(norm_placement="post").num_params() == pre.num_params()
    parallel = _small(parallel_block=True)
    assert parallel.num_params() - _small(parallel_block=True, norm_placement="shared").num_params() == 2 * 64


def test_qk_norm_scopes() -> None:
    base, d = _small().num_params(), 16
    assert _small(qk_norm=True).num_params() - base == 2 * 2 * d  # one norm of head_dim for q and for k
    assert _small(qk_norm=True, qk_norm_scope="all-heads").num_params() - base == 2 * (4 * d + 2 * d)
    assert _small(qk_norm=True, qk_norm_scope="each-head").num_params() - base == 2 * (4 + 2) * d
    layernorm = _small(norm="layernorm", qk_norm=True)  # Phi-2's qk LayerNorms have biases
    assert layernorm.num_params() - _small(norm="layernorm").num_params() == 2 * 2 * 2 * d


def test_latent_attention_hand_count() -> None:
    # DeepseekV2Attention with q_lora_rank 24: q_a (64x24), q_a_layernorm (24), q_b (24 x 4x(16+8)),
    # kv_a_proj_with_mqa (64 x (32+8)), kv_a_layernorm (32), kv_b (32 x 4x(16+16)), o_proj (4x16 x 64).
    mla = {"q_lora_rank": 24, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}
    model = _small(num_kv_heads=4, mla=mla)
    attention = 64 * 24 + 24 + 24 * 96 + 64 * 40 + 32 + 32 * 128 + 64 * 64
    assert count_parameters(model).layers == 2 * (attention + 3 * 64 * 96 + 2 * 64)
    no_q_lora = _small(num_kv_heads=4, mla={**mla, "q_lora_rank": None})
    assert model.num_params() - no_q_lora.num_params() == 2 * (64 * 24 + 24 + 24 * 96 - 64 * 96)


def test_head_bias_vision_tower_and_fused_projections() -> None:
    base = _small()
    assert _small(lm_head_bias=True).num_params() - base.num_params() == 100
    vision = _small(vision_tower_params=1234)
    assert vision.num_params() - base.num_params() == 1234 and vision.num_active_params() == base.num_active_params()
    assert count_parameters(vision).vision == 1234
    fused = _small(fused_qkv=True, fused_gate_up=True)
    assert fused.num_params() == base.num_params()  # fusing changes the modules' outputs, not their weights
