"""Memory-bound traffic counts of the time model."""

from __future__ import annotations

from frenzy_core import Fp8Recipe, ModelConfig, MoEConfig, Optimizer, Precision
from frenzy_core.timing.traffic import (
    FP8_CAST_BYTES,
    elementwise_elements_per_token,
    fp8_elements_per_token,
    grad_reduce_bytes,
    optimizer_bytes_per_param,
)


def test_elementwise_elements_gpt_and_gated() -> None:
    h = 1024
    gpt = ModelConfig(num_layers=2, hidden_size=h, num_attention_heads=16, vocab_size=1000)
    got = elementwise_elements_per_token(gpt)
    assert got.replicated == 10 * h  # two norms (2 h) and two bias-dropout-adds without dropout (3 h)
    assert elementwise_elements_per_token(gpt.replace(hidden_dropout=0.1)).replicated == 11 * h  # + 1-byte masks
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


def test_eager_pytorch_counts_hugging_face_op_chains() -> None:
    h, f, heads, kv_heads = 1024, 2816, 16, 4
    llama = ModelConfig(num_layers=2, hidden_size=h, num_attention_heads=heads, num_kv_heads=kv_heads,
                        vocab_size=1000, mlp="swiglu", ffn_hidden_size=f, norm="rmsnorm", position_embedding="rotary")
    q, kv = h, kv_heads * 64
    fused, eager = elementwise_elements_per_token(llama), elementwise_elements_per_token(llama, fused=False)
    # RMSNorm as six ops (18 h each instead of 2 h), residual adds 3 h each, no dropout.
    assert eager.replicated == 2 * 18 * h + 2 * 3 * h
    # Rotary embedding as ten passes over q and k instead of two, SwiGLU as two ops (5 f) instead of one (3 f).
    assert eager.sharded - fused.sharded == 8 * (q + kv) + 2 * f
    gpt = ModelConfig(num_layers=2, hidden_size=h, num_attention_heads=heads, vocab_size=1000)
    assert elementwise_elements_per_token(gpt, fused=False).replicated == 2 * 2 * h + 2 * 3 * h


def test_fp8_quantises_projection_inputs_and_output_gradients() -> None:
    h = 1024
    gpt = ModelConfig(num_layers=2, hidden_size=h, num_attention_heads=16, vocab_size=1000)
    fwd, bwd = fp8_elements_per_token(gpt)
    assert (fwd.replicated, fwd.sharded) == (2 * h, h + 4 * h)  # inputs of QKV, MLP-up | attention-out, MLP-down
    assert (bwd.replicated, bwd.sharded) == (2 * h, 3 * h + 4 * h)  # grads of attention-out, MLP-down | QKV, MLP-up
    assert FP8_CAST_BYTES[Fp8Recipe.DELAYED] < FP8_CAST_BYTES[Fp8Recipe.CURRENT] < FP8_CAST_BYTES[Fp8Recipe.ROWWISE]
