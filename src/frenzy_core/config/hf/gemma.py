"""Gemma, Gemma 2 and Gemma 3 (text-only and with its SigLIP vision tower)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import MLPKind, NormPlacement
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.llama import no_attention_bias
from frenzy_core.config.hf.source import Fields, HFSource, gated_mlp, rotary_decoder, sliding_window
from frenzy_core.config.hf.writing import rotary_keys, sliding_keys

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES"]

# Gemma3TextConfig's defaults (transformers 5 models/gemma3/configuration_gemma3.py): published multimodal Gemma 3
# configs leave most of text_config to them.
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072, "sliding_window": 4096,
}
# SiglipVisionConfig's defaults (transformers 5 models/siglip/configuration_siglip.py).
_SIGLIP_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3, "image_size": 224,
    "patch_size": 16, "vision_use_head": True,
}


def _read_gemma(src: HFSource, lm_head: bool) -> Fields:
    # GemmaMLP is always gated (GeLU-tanh); GemmaAttention: attention_bias on q, k, v and o; head_dim 256.
    no_attention_bias(src, "gemma")
    return rotary_decoder(src, mlp=MLPKind.GEGLU, qkv_bias=False, linear_bias=False, tied_default=True, head_dim=256)


def _write_gemma(model: ModelConfig) -> dict[str, Any]:
    return {**rotary_keys(model), "attention_bias": False}


def _gemma2_like(src: HFSource, *, attn_cap: float | None, final_cap: float | None) -> Fields:
    """Gemma 2 and 3 text stacks: sandwich norms, GeGLU of ``hidden_activation``, soft-capping (null: none)."""
    no_attention_bias(src, str(src.data.get("model_type")))
    if src.get_bool("use_bidirectional_attention", False):
        raise src.fail("use_bidirectional_attention=True is not supported", field="use_bidirectional_attention",
                       value=True, hint="only causal Gemma decoders are modelled")
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_activation", "gelu_pytorch_tanh"), qkv_bias=False,
                            linear_bias=False, tied_default=True, head_dim=256)
    fields.update(norm_placement=NormPlacement.SANDWICH,
                  attn_logit_softcapping=src.opt_float("attn_logit_softcapping", attn_cap),
                  final_logit_softcapping=src.opt_float("final_logit_softcapping", final_cap))
    return fields


def _read_gemma2(src: HFSource, lm_head: bool) -> Fields:
    # Gemma2DecoderLayer: input, post-attention, pre- and post-feedforward RMSNorms; Gemma2Config defaults: attention
    # scores capped at 50, logits at 30, a 4096-token window on the even layers (layer_types).
    fields = _gemma2_like(src, attn_cap=50.0, final_cap=30.0)
    n = fields["num_layers"]
    local = [(i + 1) % 2 == 1 for i in range(n)]
    return {**fields, **sliding_window(src, n, enabled=True, default_local=local, default_window=4096)}


def _write_gemma2(model: ModelConfig) -> dict[str, Any]:
    d = rotary_keys(model)
    d["hidden_activation"] = d.pop("hidden_act")
    return {**d, "attention_bias": False,
            "attn_logit_softcapping": model.attn_logit_softcapping,
            "final_logit_softcapping": model.final_logit_softcapping, **sliding_keys(model, per_layer=True)}


def _read_gemma3_text(src: HFSource, lm_head: bool) -> Fields:
    # Gemma3Attention: as Gemma 2 plus q_norm and k_norm of head_dim; no capping by default; five local layers in
    # every six (sliding_window_pattern, or layer_types). The local and global rope bases change no tensor size.
    fields = _gemma2_like(src, attn_cap=None, final_cap=None)
    n = fields["num_layers"]
    pattern = src.get_int("sliding_window_pattern", 6)
    local = [(i + 1) % pattern != 0 for i in range(n)]
    window = sliding_window(src, n, enabled=True, default_local=local, default_window=4096)
    return {**fields, "qk_norm": True, **window}


def _siglip_parameters(src: HFSource) -> int:
    """SiglipVisionModel's parameters (patch and position embeddings, encoder, post-norm, optional pooling head)."""
    h, i = src.get_int("hidden_size", 0), src.get_int("intermediate_size", 0)
    patch, image = src.get_int("patch_size", 0), src.get_int("image_size", 0)
    if min(h, i, patch, image) <= 0:
        raise src.fail("vision_config sizes must be positive", field="vision_config", value=src.data,
                       hint="give hidden_size, intermediate_size, patch_size and image_size as in config.json")
    mlp = h * i + i + i * h + h
    layer = 2 * (2 * h) + 4 * (h * h + h) + mlp  # layer_norm1/2, q/k/v/out projections, fc1/fc2
    n = src.get_int("num_channels", 3) * patch * patch * h + h + (image // patch) ** 2 * h
    n += src.get_int("num_hidden_layers", 0) * layer + 2 * h  # encoder, post_layernorm
    if src.get_bool("vision_use_head", True):  # SiglipMultiheadAttentionPoolingHead: probe, attention, norm, mlp
        n += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + mlp
    return n


def _read_gemma3(src: HFSource, lm_head: bool) -> Fields:
    # Gemma3ForConditionalGeneration: Gemma3Model (SigLIP vision tower, multi-modal projector, Gemma3TextModel) and
    # an lm_head tied to the text embeddings.
    text = src.sub("text_config", _GEMMA3_TEXT_DEFAULTS)
    fields = _read_gemma3_text(text, lm_head)
    vision = src.sub("vision_config", _SIGLIP_DEFAULTS)
    projector = vision.get_int("hidden_size", 0) * fields["hidden_size"] + vision.get_int("hidden_size", 0)
    fields.update(tied_embeddings=src.get_bool("tie_word_embeddings", True), returns_kv_cache=text.get_bool(
        "use_cache", True), vision_tower_params=_siglip_parameters(vision) + projector)
    return fields


FAMILIES = (
    HFFamily("gemma", "GemmaForCausalLM", "GemmaModel", ModuleLayout.GEMMA, _read_gemma, _write_gemma),
    HFFamily("gemma2", "Gemma2ForCausalLM", "Gemma2Model", ModuleLayout.GEMMA, _read_gemma2, _write_gemma2,
             sdpa=False),
    HFFamily("gemma3_text", "Gemma3ForCausalLM", "Gemma3TextModel", ModuleLayout.GEMMA, _read_gemma3_text,
             _write_gemma2),
    HFFamily("gemma3", "Gemma3ForConditionalGeneration", "Gemma3Model", ModuleLayout.GEMMA, _read_gemma3, None),
)
"""The Gemma families, in the order ``to_hf_config`` prefers them (multimodal Gemma 3 is read only: a parameter
count cannot be written back as a vision tower)."""
