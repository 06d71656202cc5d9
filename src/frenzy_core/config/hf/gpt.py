"""GPT-2, GPT-NeoX, OPT and Falcon: LayerNorm decoders with two-matrix MLPs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import ArchKind, MLPKind, NormKind, NormPlacement, PositionEmbedding
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.source import Fields, HFSource, plain_mlp, rotary_fraction
from frenzy_core.config.hf.writing import Unwritable

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES"]

# OPTLearnedPositionalEmbedding allocates max_position_embeddings + 2 rows (transformers models/opt).
_OPT_POSITION_OFFSET = 2


def _plain_act(model: ModelConfig, gelu: str) -> str:
    return "relu" if model.mlp is MLPKind.RELU else gelu


def _read_gpt2(src: HFSource, lm_head: bool) -> Fields:
    # GPT2Attention: one fused c_attn and c_proj with biases; GPT2MLP: c_fc and c_proj with biases.
    hidden = src.req_int("n_embd")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": src.req_layers("n_layer"),
        "hidden_size": hidden,
        "num_attention_heads": src.req_int("n_head"),
        "ffn_hidden_size": src.get_int("n_inner", 4 * hidden),
        "mlp": plain_mlp(src, "activation_function", "gelu_new"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.req_int("n_positions"),
        "position_embedding": PositionEmbedding.LEARNED,
        "tied_embeddings": src.get_bool("tie_word_embeddings", True),
        "qkv_bias": True,
        "linear_bias": True,
        "fused_qkv": True,
        "hidden_dropout": src.get_float("resid_pdrop", 0.1),
        "attention_dropout": src.get_float("attn_pdrop", 0.1),
    }


def _write_gpt2(model: ModelConfig) -> dict[str, Any]:
    return {
        "n_embd": model.hidden_size,
        "n_layer": model.num_layers,
        "n_head": model.num_attention_heads,
        "n_inner": model.ffn_hidden_size,
        "activation_function": _plain_act(model, "gelu_new"),
        "vocab_size": model.vocab_size,
        "n_positions": model.max_position_embeddings,
        "tie_word_embeddings": model.tied_embeddings,
        "resid_pdrop": model.hidden_dropout,
        "embd_pdrop": model.hidden_dropout,
        "attn_pdrop": model.attention_dropout,
    }


def _read_gpt_neox(src: HFSource, lm_head: bool) -> Fields:
    # GPTNeoXAttention: one fused query_key_value and dense, both with attention_bias; partial rotary (rotary_pct,
    # 0.25 by default); GPTNeoXMLP always has biases; use_parallel_residual: both branches read the layer input.
    if not src.get_bool("attention_bias", True):
        raise src.fail("attention_bias=False is not supported for gpt_neox", field="attention_bias", value=False,
                       hint="its MLP keeps biases while attention loses them; set attention_bias true")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": src.req_layers("num_hidden_layers"),
        "hidden_size": src.req_int("hidden_size"),
        "num_attention_heads": src.req_int("num_attention_heads"),
        "ffn_hidden_size": src.req_int("intermediate_size"),
        "mlp": plain_mlp(src, "hidden_act", "gelu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.get_int("max_position_embeddings", 2048),
        "position_embedding": PositionEmbedding.ROTARY,
        "partial_rotary_factor": rotary_fraction(src, 0.25),
        "tied_embeddings": src.get_bool("tie_word_embeddings", False),
        "qkv_bias": True,
        "linear_bias": True,
        "fused_qkv": True,
        "parallel_block": src.get_bool("use_parallel_residual", True),
        "hidden_dropout": src.get_float("hidden_dropout", 0.0),
        "attention_dropout": src.get_float("attention_dropout", 0.0),
    }


def _write_gpt_neox(model: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "intermediate_size": model.ffn_hidden_size,
        "hidden_act": _plain_act(model, "gelu"),
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "rotary_pct": model.partial_rotary_factor,
        "tie_word_embeddings": model.tied_embeddings,
        "use_parallel_residual": model.parallel_block,
        "attention_bias": model.qkv_bias,
        "hidden_dropout": model.hidden_dropout,
        "attention_dropout": model.attention_dropout,
    }


def _read_opt(src: HFSource, lm_head: bool) -> Fields:
    # OPTDecoder: learned positions with 2 extra rows; project_in/out when word_embed_proj_dim != hidden_size.
    hidden = src.req_int("hidden_size")
    proj = src.get_int("word_embed_proj_dim", hidden)
    if proj != hidden:
        raise src.fail(f"word_embed_proj_dim={proj} differs from hidden_size={hidden}", field="word_embed_proj_dim",
                       value=proj, hint="embedding projections (OPT-350m) are not modelled; use equal sizes")
    if not src.get_bool("layer_norm_elementwise_affine", True):
        raise src.fail("layer_norm_elementwise_affine=False is not supported",
                       field="layer_norm_elementwise_affine", value=False, hint="norms without weights are not modelled")
    bias = src.get_bool("enable_bias", True)
    final_norm = src.get_bool("do_layer_norm_before", True) and not src.get_bool("_remove_final_layer_norm", False)
    return {
        "arch": ArchKind.DECODER,
        "num_layers": src.req_layers("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": src.req_int("num_attention_heads"),
        "ffn_hidden_size": src.req_int("ffn_dim"),
        "mlp": plain_mlp(src, "activation_function", "relu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.get_int("max_position_embeddings", 2048) + _OPT_POSITION_OFFSET,
        "position_embedding": PositionEmbedding.LEARNED,
        "tied_embeddings": src.get_bool("tie_word_embeddings", True),
        "qkv_bias": bias,
        "linear_bias": bias,
        "final_norm": final_norm,
        "hidden_dropout": src.get_float("dropout", 0.1),
        "attention_dropout": src.get_float("attention_dropout", 0.0),
    }


def _write_opt(model: ModelConfig) -> dict[str, Any]:
    if model.max_position_embeddings <= _OPT_POSITION_OFFSET:
        raise Unwritable("OPT's position table has 2 extra rows", field="max_position_embeddings",
                         value=model.max_position_embeddings)
    return {
        "hidden_size": model.hidden_size,
        "word_embed_proj_dim": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "ffn_dim": model.ffn_hidden_size,
        "activation_function": "gelu" if model.mlp is MLPKind.GELU else "relu",
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings - _OPT_POSITION_OFFSET,
        "tie_word_embeddings": model.tied_embeddings,
        "enable_bias": model.linear_bias,
        "do_layer_norm_before": True,
        "_remove_final_layer_norm": not model.final_norm,
        "dropout": model.hidden_dropout,
        "attention_dropout": model.attention_dropout,
    }


def _falcon_blocks(src: HFSource, heads: int) -> Fields:
    """FalconDecoderLayer's norms and FalconAttention's key/value heads from the architecture switches."""
    new_arch = src.get_bool("new_decoder_architecture", False)
    parallel = src.get_bool("parallel_attn", True)
    norms = src.opt_int("num_ln_in_parallel_attn")
    norms = 2 if norms is None and new_arch else norms
    if new_arch and not parallel:
        raise src.fail("new_decoder_architecture=True with parallel_attn=False does not build in transformers",
                       field="parallel_attn", value=False, hint="set parallel_attn true")
    if parallel and norms == 2 and not new_arch:
        raise src.fail("num_ln_in_parallel_attn=2 needs new_decoder_architecture=True", value=2,
                       field="num_ln_in_parallel_attn", hint="leave num_ln_in_parallel_attn unset")
    if new_arch:
        kv = src.get_int("num_kv_heads", heads)
    else:
        kv = 1 if src.get_bool("multi_query", True) else heads
    placement = NormPlacement.PRE if (not parallel or norms == 2) else NormPlacement.SHARED
    return {"num_kv_heads": kv, "parallel_block": parallel, "norm_placement": placement}


def _read_falcon(src: HFSource, lm_head: bool) -> Fields:
    # FalconAttention: one fused query_key_value ((heads + 2 kv) x head_dim) and dense, FalconMLP dense_h_to_4h and
    # dense_4h_to_h, all with config.bias; rotary unless alibi; head_dim = hidden / heads; no head bias.
    # FalconConfig still takes the old n_embed for hidden_size.
    hidden = src.req_int("n_embed") if src.data.get("n_embed") is not None else src.req_int("hidden_size")
    heads = src.req_int("num_attention_heads")
    bias = src.get_bool("bias", False)
    alibi = src.get_bool("alibi", False)
    return {
        "arch": ArchKind.DECODER,
        "num_layers": src.req_layers("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        **_falcon_blocks(src, heads),
        "ffn_hidden_size": src.get_int("ffn_hidden_size", 4 * hidden),
        "mlp": plain_mlp(src, "activation", "gelu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.get_int("max_position_embeddings", 2048),
        "position_embedding": PositionEmbedding.NONE if alibi else PositionEmbedding.ROTARY,
        "tied_embeddings": src.get_bool("tie_word_embeddings", True),
        "qkv_bias": bias,
        "linear_bias": bias,
        "fused_qkv": True,
        "hidden_dropout": src.get_float("hidden_dropout", 0.0),
        "attention_dropout": src.get_float("attention_dropout", 0.0),
    }


def _write_falcon(model: ModelConfig) -> dict[str, Any]:
    heads, kv = model.num_attention_heads, model.num_kv_heads
    # The old decoder builds MHA or MQA only; the new one any GQA, with one or two norms in its parallel block.
    new_arch = model.parallel_block and (model.norm_placement is NormPlacement.PRE or kv not in (1, heads))
    d: dict[str, Any] = {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": heads,
        "num_kv_heads": kv,
        "new_decoder_architecture": new_arch,
        "multi_query": kv == 1 and not new_arch,
        "parallel_attn": model.parallel_block,
        "ffn_hidden_size": model.ffn_hidden_size,
        "activation": _plain_act(model, "gelu"),
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "alibi": model.position_embedding is PositionEmbedding.NONE,
        "tie_word_embeddings": model.tied_embeddings,
        "bias": model.linear_bias,
        "hidden_dropout": model.hidden_dropout,
        "attention_dropout": model.attention_dropout,
    }
    if new_arch:
        d["num_ln_in_parallel_attn"] = 2 if model.norm_placement is NormPlacement.PRE else 1
    return d


FAMILIES = (
    HFFamily("gpt2", "GPT2LMHeadModel", "GPT2Model", ModuleLayout.GPT2, _read_gpt2, _write_gpt2),
    HFFamily("opt", "OPTForCausalLM", "OPTModel", ModuleLayout.LLAMA, _read_opt, _write_opt),
    HFFamily("gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXModel", ModuleLayout.LLAMA, _read_gpt_neox, _write_gpt_neox),
    HFFamily("falcon", "FalconForCausalLM", "FalconModel", ModuleLayout.FALCON, _read_falcon, _write_falcon),
)
"""The LayerNorm decoders with two-matrix MLPs, in the order ``to_hf_config`` prefers them."""
