"""Dense Llama-like families: Llama, Mistral, Qwen2, Qwen3, Phi-3, OLMo 2 (RMSNorm, rotary, gated MLP)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import NormPlacement, QKNormScope
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.source import Fields, HFSource, gated_mlp, rotary_decoder, rotary_fraction, sliding_window
from frenzy_core.config.hf.writing import rotary_keys, sliding_keys

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES", "no_attention_bias"]


def no_attention_bias(src: HFSource, family: str) -> None:
    """Families whose ``attention_bias`` puts biases on q, k, v and o but none in the MLP: only false is modelled."""
    if src.get_bool("attention_bias", False):
        raise src.fail(f"attention_bias=True is not supported for {family}", field="attention_bias", value=True,
                       hint="it adds an output-projection bias without MLP biases; set attention_bias false")


def _qwen_sliding_window(src: HFSource, num_layers: int) -> Fields:
    """Qwen2/Qwen3: a window only with ``use_sliding_window``; without ``layer_types``, layers from
    ``max_window_layers`` on are local (Qwen2Config.__post_init__)."""
    first = src.get_int("max_window_layers", 28)
    return sliding_window(src, num_layers, enabled=src.get_bool("use_sliding_window", False),
                          default_local=[i >= first for i in range(num_layers)])


def _read_llama(src: HFSource, lm_head: bool) -> Fields:
    # LlamaAttention: attention_bias on q, k, v and o; LlamaMLP: mlp_bias on gate, up and down.
    attention_bias = src.get_bool("attention_bias", False)
    mlp_bias = src.get_bool("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise src.fail(f"attention_bias={attention_bias} with mlp_bias={mlp_bias} is not supported",
                       field="mlp_bias", value=mlp_bias,
                       hint="this library puts output-projection and MLP biases under one switch; set both equal")
    return rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=attention_bias,
                          linear_bias=attention_bias, tied_default=False)


def _write_llama(model: ModelConfig) -> dict[str, Any]:
    return {**rotary_keys(model), "attention_bias": model.qkv_bias, "mlp_bias": model.linear_bias}


def _read_mistral(src: HFSource, lm_head: bool) -> Fields:
    # MistralAttention and MistralMLP have no biases; every layer uses config.sliding_window (layer_types ignored).
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                            tied_default=False)
    return {**fields, **sliding_window(src, fields["num_layers"], enabled=True, per_layer=False)}


def _write_mistral(model: ModelConfig) -> dict[str, Any]:
    return {**rotary_keys(model), "sliding_window": model.sliding_window}


def _read_qwen2(src: HFSource, lm_head: bool) -> Fields:
    # Qwen2Attention: bias on q, k, v only.
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=True, linear_bias=False,
                            tied_default=False)
    return {**fields, **_qwen_sliding_window(src, fields["num_layers"])}


def _write_qwen2(model: ModelConfig) -> dict[str, Any]:
    return {**rotary_keys(model), **sliding_keys(model, per_layer=True, switch="use_sliding_window")}


def _read_qwen3(src: HFSource, lm_head: bool) -> Fields:
    # Qwen3Attention: attention_bias on q, k, v and o; q_norm and k_norm of head_dim; head_dim defaults to 128.
    no_attention_bias(src, "qwen3")
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                            tied_default=False, head_dim=128)
    return {**fields, "qk_norm": True, **_qwen_sliding_window(src, fields["num_layers"])}


def _write_qwen3(model: ModelConfig) -> dict[str, Any]:
    return {**rotary_keys(model), "attention_bias": False,
            **sliding_keys(model, per_layer=True, switch="use_sliding_window")}


def _read_phi3(src: HFSource, lm_head: bool) -> Fields:
    # Phi3Attention: one qkv_proj without bias, partial rotary, config.sliding_window on every layer; Phi3MLP: one
    # gate_up_proj chunked in two; resid_pdrop after attention and after the MLP.
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                            tied_default=False, hidden_dropout=src.get_float("resid_pdrop", 0.0))
    fields.update(fused_qkv=True, fused_gate_up=True, partial_rotary_factor=rotary_fraction(src, 1.0))
    return {**fields, **sliding_window(src, fields["num_layers"], enabled=True, per_layer=False)}


def _write_phi3(model: ModelConfig) -> dict[str, Any]:
    d = rotary_keys(model)
    # Phi3Config's pad_token_id defaults to 32000, which must index the embedding: none is needed here.
    return {**d, "resid_pdrop": model.hidden_dropout, "embd_pdrop": model.hidden_dropout, "pad_token_id": None,
            "partial_rotary_factor": model.partial_rotary_factor, "sliding_window": model.sliding_window}


def _read_olmo2(src: HFSource, lm_head: bool) -> Fields:
    # Olmo2DecoderLayer: post_attention_layernorm and post_feedforward_layernorm on the branch outputs, none
    # before; Olmo2Attention: q_norm, k_norm over the whole q and k projections; attention_bias on q, k, v, o.
    no_attention_bias(src, "olmo2")
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                            tied_default=False)
    return {**fields, "qk_norm": True, "qk_norm_scope": QKNormScope.ALL_HEADS, "norm_placement": NormPlacement.POST}


def _write_olmo2(model: ModelConfig) -> dict[str, Any]:
    return {**rotary_keys(model), "attention_bias": False}


FAMILIES = (
    HFFamily("llama", "LlamaForCausalLM", "LlamaModel", ModuleLayout.LLAMA, _read_llama, _write_llama),
    HFFamily("mistral", "MistralForCausalLM", "MistralModel", ModuleLayout.LLAMA, _read_mistral, _write_mistral),
    HFFamily("qwen2", "Qwen2ForCausalLM", "Qwen2Model", ModuleLayout.LLAMA, _read_qwen2, _write_qwen2),
    HFFamily("qwen3", "Qwen3ForCausalLM", "Qwen3Model", ModuleLayout.LLAMA, _read_qwen3, _write_qwen3),
    HFFamily("phi3", "Phi3ForCausalLM", "Phi3Model", ModuleLayout.LLAMA, _read_phi3, _write_phi3),
    HFFamily("olmo2", "Olmo2ForCausalLM", "Olmo2Model", ModuleLayout.OLMO2, _read_olmo2, _write_olmo2),
)
"""The dense Llama-lineage families, in the order ``to_hf_config`` prefers them."""
