"""Rotary decoders with LayerNorm: StableLM, Phi (Phi-1/1.5/2) and Starcoder2."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import ArchKind, MLPKind, NormKind, NormPlacement, PositionEmbedding, QKNormScope
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.source import Fields, HFSource, gated_mlp, plain_mlp, rotary_fraction, sliding_window

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES"]


def _layernorm_rotary(src: HFSource, *, tied_default: bool) -> Fields:
    """Sizes every family here spells alike; head_dim = hidden / heads in all three."""
    hidden, heads = src.req_int("hidden_size"), src.req_int("num_attention_heads")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": src.req_layers("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": src.get_int("num_key_value_heads", heads),
        "ffn_hidden_size": src.req_int("intermediate_size"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.get_int("max_position_embeddings", 2048),
        "position_embedding": PositionEmbedding.ROTARY,
        "tied_embeddings": src.get_bool("tie_word_embeddings", tied_default),
        "attention_dropout": src.get_float("attention_dropout", 0.0),
    }


def _sizes(model: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads,
        "intermediate_size": model.ffn_hidden_size,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "tie_word_embeddings": model.tied_embeddings,
        "attention_dropout": model.attention_dropout,
    }


def _read_stablelm(src: HFSource, lm_head: bool) -> Fields:
    # StableLmAttention: q/k/v with use_qkv_bias, o_proj without; partial rotary (0.25 by default); qk_layernorm:
    # a bias-free LayerNorm per head; StableLmMLP: SwiGLU without biases; use_parallel_residual: one input norm.
    parallel = src.get_bool("use_parallel_residual", False)
    qk_norm = src.get_bool("qk_layernorm", False)
    return {
        **_layernorm_rotary(src, tied_default=False),
        "mlp": gated_mlp(src, "hidden_act", "silu"),
        "partial_rotary_factor": rotary_fraction(src, 0.25),
        "qkv_bias": src.get_bool("use_qkv_bias", False),
        "qk_norm": qk_norm,
        "qk_norm_scope": QKNormScope.EACH_HEAD if qk_norm else QKNormScope.HEAD,
        "parallel_block": parallel,
        "norm_placement": NormPlacement.SHARED if parallel else NormPlacement.PRE,
        "hidden_dropout": src.get_float("hidden_dropout", 0.0),
    }


def _write_stablelm(model: ModelConfig) -> dict[str, Any]:
    return {**_sizes(model), "hidden_act": "gelu" if model.mlp is MLPKind.GEGLU else "silu",
            "partial_rotary_factor": model.partial_rotary_factor, "use_qkv_bias": model.qkv_bias,
            "qk_layernorm": model.qk_norm, "use_parallel_residual": model.parallel_block,
            "hidden_dropout": model.hidden_dropout}


def _read_phi(src: HFSource, lm_head: bool) -> Fields:
    # PhiDecoderLayer: one input_layernorm feeding attention and MLP in parallel, resid_pdrop on both; PhiAttention:
    # q/k/v and dense with biases, partial rotary (0.5 by default), qk_layernorm: LayerNorm(head_dim) for q and k;
    # PhiMLP: fc1/fc2 with biases; PhiForCausalLM: lm_head with a bias.
    return {
        **_layernorm_rotary(src, tied_default=False),
        "mlp": plain_mlp(src, "hidden_act", "gelu_new"),
        "partial_rotary_factor": rotary_fraction(src, 0.5),
        "qkv_bias": True,
        "linear_bias": True,
        "qk_norm": src.get_bool("qk_layernorm", False),
        "parallel_block": True,
        "norm_placement": NormPlacement.SHARED,
        "lm_head_bias": lm_head,
        "hidden_dropout": src.get_float("resid_pdrop", 0.0),
    }


def _write_phi(model: ModelConfig) -> dict[str, Any]:
    return {**_sizes(model), "hidden_act": "relu" if model.mlp is MLPKind.RELU else "gelu_new",
            "partial_rotary_factor": model.partial_rotary_factor, "qk_layernorm": model.qk_norm,
            "resid_pdrop": model.hidden_dropout, "embd_pdrop": model.hidden_dropout}


def _read_starcoder2(src: HFSource, lm_head: bool) -> Fields:
    # Starcoder2Attention: q/k/v/o with use_bias, config.sliding_window on every layer; Starcoder2MLP: c_fc/c_proj
    # with use_bias; residual_dropout after attention and MLP.
    bias = src.get_bool("use_bias", True)
    fields = {
        **_layernorm_rotary(src, tied_default=True),
        "mlp": plain_mlp(src, "hidden_act", "gelu_pytorch_tanh"),
        "qkv_bias": bias,
        "linear_bias": bias,
        "hidden_dropout": src.get_float("residual_dropout", 0.0),
    }
    return {**fields, **sliding_window(src, fields["num_layers"], enabled=True, per_layer=False)}


def _write_starcoder2(model: ModelConfig) -> dict[str, Any]:
    return {**_sizes(model), "hidden_act": "relu" if model.mlp is MLPKind.RELU else "gelu_pytorch_tanh",
            "use_bias": model.linear_bias, "sliding_window": model.sliding_window,
            "residual_dropout": model.hidden_dropout, "embedding_dropout": model.hidden_dropout}


FAMILIES = (
    HFFamily("stablelm", "StableLmForCausalLM", "StableLmModel", ModuleLayout.LLAMA, _read_stablelm, _write_stablelm),
    HFFamily("phi", "PhiForCausalLM", "PhiModel", ModuleLayout.LLAMA, _read_phi, _write_phi),
    HFFamily("starcoder2", "Starcoder2ForCausalLM", "Starcoder2Model", ModuleLayout.LLAMA, _read_starcoder2,
             _write_starcoder2),
)
"""The LayerNorm rotary decoders, in the order ``to_hf_config`` prefers them."""
