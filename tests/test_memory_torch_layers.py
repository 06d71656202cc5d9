"""The eager-PyTorch layer terms (memory/torch_attention.py, memory/torch_layers.py) against what the Transformers 5
modules and the CUDA kernels keep, derived by hand per structure field (docs/memory-model.md, section 3)."""

from __future__ import annotations

import pytest

from frenzy_core import ModelConfig, TrainingConfig
from frenzy_core.memory.activations import layer_activations, logit_bytes
from frenzy_core.memory.torch_attention import Kernel, attention_terms, sdpa_kernel
from frenzy_core.memory.torch_layers import norm_bytes

S, B = 1024, 2
TOKENS = S * B
LLAMA = ModelConfig(num_layers=2, hidden_size=512, num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=1408,
                    mlp="swiglu", norm="rmsnorm", position_embedding="rotary", vocab_size=4096, tied_embeddings=False)
GEMMA = LLAMA.replace(mlp="geglu", tied_embeddings=True, num_kv_heads=1, head_dim=128)
BF16 = TrainingConfig(seq_len=S, micro_batch_size=B, precision="bf16", attention="sdpa")


def _layer(model: ModelConfig, training: TrainingConfig, seq: int = S) -> object:
    return layer_activations(model, training, tp=1, sp=False, cp=1, seq_len=seq, micro_batch_size=B)


@pytest.mark.parametrize(("precision", "kv_heads", "masked", "head_dim", "kernel"), [
    ("bf16", 2, False, 64, Kernel.FLASH),          # half, no mask, d <= 256: FlashAttention-2 (GQA passed through)
    ("bf16", 8, True, 64, Kernel.EFFICIENT),       # a mask rules out flash
    ("fp32", 8, False, 64, Kernel.EFFICIENT),      # flash is half precision only
    ("fp32", 2, False, 64, Kernel.MATH),           # this build's efficient kernel takes equal head counts only
    ("bf16", 8, False, 288, Kernel.EFFICIENT),     # flash takes head dimensions up to 256
])
def test_sdpa_kernel_as_cuda_selects_it(precision: str, kv_heads: int, masked: bool, head_dim: int,
                                        kernel: Kernel) -> None:
    model = LLAMA.replace(head_dim=head_dim, num_kv_heads=kv_heads)
    training = BF16.replace(precision=precision)
    in_bytes = 4 if precision == "fp32" else 2
    assert sdpa_kernel(model, training, masked=masked, heads_given=kv_heads, in_bytes=in_bytes) is kernel


def test_fused_gate_up_saves_the_same_tensors_but_casts_its_input_once() -> None:
    fused = LLAMA.replace(fused_gate_up=True)
    assert float(_layer(fused, BF16).dense) == float(_layer(LLAMA, BF16).dense)
    amp = BF16.replace(precision="amp-bf16")
    assert float(_layer(LLAMA, amp).dense) - float(_layer(fused, amp).dense) == 2 * LLAMA.hidden_size * TOKENS


def test_sliding_window_layers_save_a_per_layer_mask_once_the_window_is_reached() -> None:
    """SDPA of a local layer gets a boolean mask once s >= window (masking_utils._ignore_causal_mask_sdpa); the
    kernel call converts it to an additive bf16 (b, 1, s, s) copy that the memory-efficient kernel saves."""
    local = LLAMA.replace(sliding_window=S)
    extra = float(_layer(local, BF16).dense) - float(_layer(LLAMA, BF16).dense)
    assert extra == B * S * S * 2
    assert float(_layer(local, BF16).masks) == S * S  # one boolean (s, s) mask, expanded over the batch
    shorter = LLAMA.replace(sliding_window=S + 1)  # the window exceeds the sequence: no mask, flash
    assert float(_layer(shorter, BF16).dense) == float(_layer(LLAMA, BF16).dense)


def test_eager_soft_capping_saves_the_tanh_of_the_scores() -> None:
    eager = BF16.replace(attention="eager")
    capped = attention_terms(GEMMA.replace(attn_logit_softcapping=50.0), eager, masked=False, cache=False)
    plain = attention_terms(GEMMA, eager, masked=False, cache=False)
    assert capped.core_per_key - plain.core_per_key == GEMMA.num_attention_heads * 2  # bf16 tanh per head and key


def test_final_soft_capping_saves_the_tanh_of_the_logits() -> None:
    kw = {"tp": 1, "cp": 1, "seq_len": S, "micro_batch_size": B}
    capped = logit_bytes(LLAMA.replace(final_logit_softcapping=30.0), BF16, **kw)
    plain = logit_bytes(LLAMA, BF16, **kw)
    tanh = TOKENS * LLAMA.vocab_size * 2
    for field in ("saved", "forward_peak", "backward_peak"):
        assert float(getattr(capped, field)) - float(getattr(plain, field)) == tanh


def test_kv_cache_of_rotary_keys_is_fp32_under_autocast() -> None:
    """cos/sin take the fp32 residual stream's dtype, so rotated keys (and their cache copies) are fp32; SDPA saves
    autocast's bf16 casts, so the fp32 key copies are extra, the bf16 value copies are what it saves."""
    amp = BF16.replace(precision="amp-bf16")
    terms = attention_terms(LLAMA.replace(returns_kv_cache=True), amp, masked=False, cache=True)
    assert terms.kv_cache == (4 + 2) * LLAMA.kv_size
    assert terms.kv_extra == 4 * LLAMA.kv_size


def test_latent_attention_caches_the_latent_and_the_shared_rotary_key() -> None:
    mla = ModelConfig(num_layers=2, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1408, mlp="swiglu",
                      norm="rmsnorm", position_embedding="rotary", vocab_size=4096, tied_embeddings=False,
                      mla={"kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64})
    terms = attention_terms(mla, BF16, masked=False, cache=True)
    assert terms.kv_cache == 2 * (256 + 32)
    assert terms.kv_extra == 2 * 32  # kv_b_proj saves the latent it expands; the rotary key copy is extra


def test_sandwich_norms_add_two_saved_post_norms() -> None:
    sandwich = GEMMA.replace(norm_placement="sandwich")
    post = norm_bytes(sandwich, BF16, 0)
    h = GEMMA.hidden_size
    assert post == 4 * h + 4 + 4 * h  # GemmaRMSNorm in bf16: x.float(), rsqrt, the fp32 product x * rsqrt
    assert float(_layer(sandwich, BF16).dense) - float(_layer(GEMMA, BF16).dense) == 2 * post * TOKENS


def test_qk_norm_under_autocast_copies_the_bf16_projection_once_to_fp32() -> None:
    """Qwen3's q_norm / k_norm read the bf16 projection: an fp32 copy (pow), rsqrt per head and the bf16 copy of
    the normalised vector (the weight multiply), 4 + 2 bytes per element."""
    amp = BF16.replace(precision="amp-bf16")
    normed = attention_terms(LLAMA.replace(qk_norm=True), amp, masked=False, cache=False).outside
    plain = attention_terms(LLAMA, amp, masked=False, cache=False).outside
    q, kv, a = LLAMA.q_size, LLAMA.kv_size, LLAMA.num_attention_heads
    assert normed - plain == 6 * (q + kv) + 4 * (a + LLAMA.num_kv_heads)


def test_mlp_backward_temporaries_of_a_gated_mlp() -> None:
    """While a SwiGLU MLP runs its backward, the product's gradient and the two it splits into exist beside the
    saved tensors the down projection freed: two widths (plus the residual gradients, 2 x stream x h)."""
    layer = _layer(LLAMA, BF16)
    assert float(layer.mlp_grad) == TOKENS * (2 * 2 * LLAMA.ffn_hidden_size + 2 * 2 * LLAMA.hidden_size)


def test_eager_softmax_backward_of_bf16_scores_runs_in_fp32() -> None:
    """softmax(dtype=float32) of bf16 scores casts them and back-propagates in fp32: the probabilities' and the
    scores' fp32 gradients beside the saved softmax, the bf16 copy the value matmul saved freed first."""
    eager = BF16.replace(attention="eager")
    terms = attention_terms(LLAMA, eager, masked=False, cache=False)
    assert terms.score_grad == LLAMA.num_attention_heads * (4 + 4 - 2)
