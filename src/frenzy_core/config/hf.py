"""Hugging Face ``config.json`` <-> :class:`ModelConfig`, without importing ``transformers``.

Each supported ``model_type`` has a reader (config dict -> ModelConfig fields) following the module layout of
that family in ``transformers`` 5.x (``models/<family>/modeling_<family>.py``); every family but mistral (written
as llama) has a writer for the inverse. A writer's output is read back and compared with the model, so
:func:`to_hf_config` never returns a config that builds a different model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from frenzy_core.config.hf_rope_norm import read_rope_norm, write_rope_norm
from frenzy_core.config.model import ArchKind, MLPKind, ModelConfig, MoEConfig, NormKind, PositionEmbedding
from frenzy_core.errors import ConfigError

__all__ = ["SUPPORTED_HF_FAMILIES", "model_from_hf_config", "to_hf_config"]

# OPTLearnedPositionalEmbedding allocates max_position_embeddings + 2 rows (transformers models/opt).
_OPT_POSITION_OFFSET = 2


class _HFConfig:
    """A config.json dict plus where it came from, so missing keys are reported with the file."""

    def __init__(self, data: dict[str, Any], origin: str, folder_name: str | None = None):
        self.data = data
        self.origin = origin
        self.folder_name = folder_name

    def req(self, key: str) -> Any:
        """A key the config must have."""
        if self.data.get(key) is None:
            raise self.fail(f"required key {key!r} is missing (model_type {self.data.get('model_type')!r})",
                            field=key, value=None, hint=f"add {key!r} as in the model's published config.json")
        return self.data[key]

    def get(self, key: str, default: Any) -> Any:
        """An optional key; ``default`` is transformers' default for the family when absent or null."""
        value = self.data.get(key)
        return default if value is None else value

    def req_int(self, key: str) -> int:
        """A whole number the config must have."""
        return self._int(key, self.req(key))

    def get_int(self, key: str, default: int) -> int:
        """An optional whole number (``default`` when absent or null)."""
        return self._int(key, self.get(key, default))

    def _int(self, key: str, value: Any) -> int:
        # bool is an int subclass and 2.7 would truncate silently: both are mistakes in a config.json.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
            raise self.fail(f"{key}={value!r} is not a whole number", field=key, value=value,
                            hint=f"give {key} as an integer")
        return int(value)

    def architecture(self, default: str) -> str:
        """The model class named by ``architectures`` (its first entry), or the family's usual one."""
        archs = self.data.get("architectures") or [default]
        if isinstance(archs, str):
            archs = [archs]
        if not isinstance(archs, list) or not archs:
            raise self.fail(f"architectures={archs!r} is not a list of class names", field="architectures",
                            value=archs, hint='e.g. "architectures": ["LlamaForCausalLM"]')
        return str(archs[0])

    def fail(self, message: str, *, field: str, value: object, hint: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {message}", field=field, value=value, hint=hint)


def _head(cfg: _HFConfig, family_prefix: str, lm_suffixes: tuple[str, ...], default: str) -> bool:
    """Whether the named class has a language-model head (``...ForCausalLM``) or is the bare ``...Model``."""
    arch = cfg.architecture(default)
    if arch == f"{family_prefix}Model":
        return False
    if any(arch == f"{family_prefix}{suffix}" for suffix in lm_suffixes):
        return True
    known = [f"{family_prefix}Model"] + [f"{family_prefix}{s}" for s in lm_suffixes]
    raise cfg.fail(f"architecture {arch!r} is not supported", field="architectures", value=arch,
                   hint=f"use one of {known} (other heads add parameters this library does not model)")


def _gated_mlp(cfg: _HFConfig, key: str, default: str) -> MLPKind:
    act = str(cfg.get(key, default))
    if act in ("silu", "swish"):
        return MLPKind.SWIGLU
    if act.startswith("gelu"):
        return MLPKind.GEGLU
    raise cfg.fail(f"{key}={act!r} is not supported for a gated MLP", field=key, value=act,
                   hint="use 'silu' (SwiGLU) or a 'gelu' variant (GeGLU)")


def _plain_mlp(cfg: _HFConfig, key: str, default: str) -> MLPKind:
    act = str(cfg.get(key, default))
    if act.startswith("gelu"):
        return MLPKind.GELU
    if act == "relu":
        return MLPKind.RELU
    raise cfg.fail(f"{key}={act!r} is not supported", field=key, value=act, hint="use a 'gelu' variant or 'relu'")


def _rotary_decoder(cfg: _HFConfig, *, default_arch: str, prefix: str, mlp: MLPKind, qkv_bias: bool,
                    linear_bias: bool, tied_default: bool, head_dim: int | None = None,
                    hidden_dropout: float = 0.0) -> dict[str, Any]:
    """Fields shared by the Llama-like families: RMSNorm, rotary positions, gated MLP."""
    hidden = cfg.req_int("hidden_size")
    heads = cfg.req_int("num_attention_heads")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": cfg.req_int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": cfg.get_int("num_key_value_heads", heads),
        "head_dim": cfg.get_int("head_dim", head_dim or (hidden // heads if heads > 0 else 0)),
        "ffn_hidden_size": cfg.req_int("intermediate_size"),
        "mlp": mlp,
        "norm": NormKind.RMSNORM,
        "vocab_size": cfg.req_int("vocab_size"),
        "max_position_embeddings": cfg.get_int("max_position_embeddings", 2048),
        "position_embedding": PositionEmbedding.ROTARY,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", tied_default)),
        "qkv_bias": qkv_bias,
        "linear_bias": linear_bias,
        "lm_head": _head(cfg, prefix, ("ForCausalLM",), default_arch),
        "hidden_dropout": hidden_dropout,
        "attention_dropout": float(cfg.get("attention_dropout", 0.0)),
    }


# ---- readers: one per model_type ------------------------------------------------------------------


def _read_llama(cfg: _HFConfig) -> dict[str, Any]:
    # LlamaAttention: attention_bias on q, k, v and o; LlamaMLP: mlp_bias on gate, up and down.
    attention_bias = bool(cfg.get("attention_bias", False))
    mlp_bias = bool(cfg.get("mlp_bias", False))
    if attention_bias != mlp_bias:
        raise cfg.fail(f"attention_bias={attention_bias} with mlp_bias={mlp_bias} is not supported",
                       field="mlp_bias", value=mlp_bias,
                       hint="this library puts output-projection and MLP biases under one switch; set both equal")
    return _rotary_decoder(cfg, default_arch="LlamaForCausalLM", prefix="Llama",
                           mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=attention_bias,
                           linear_bias=attention_bias, tied_default=False)


def _read_mistral(cfg: _HFConfig) -> dict[str, Any]:
    # MistralAttention and MistralMLP have no biases.
    return _rotary_decoder(cfg, default_arch="MistralForCausalLM", prefix="Mistral",
                           mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                           tied_default=False)


def _read_qwen2(cfg: _HFConfig) -> dict[str, Any]:
    # Qwen2Attention: bias on q, k, v only.
    return _rotary_decoder(cfg, default_arch="Qwen2ForCausalLM", prefix="Qwen2",
                           mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=True, linear_bias=False,
                           tied_default=False)


def _read_qwen3(cfg: _HFConfig) -> dict[str, Any]:
    # Qwen3Attention: attention_bias on q, k, v and o; q_norm and k_norm of head_dim; head_dim defaults to 128.
    bias = bool(cfg.get("attention_bias", False))
    if bias:
        raise cfg.fail("attention_bias=True is not supported for qwen3", field="attention_bias", value=bias,
                       hint="it adds an output-projection bias without MLP biases; set attention_bias false")
    fields = _rotary_decoder(cfg, default_arch="Qwen3ForCausalLM", prefix="Qwen3",
                             mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                             tied_default=False, head_dim=128)
    fields["qk_norm"] = True
    return fields


def _read_phi3(cfg: _HFConfig) -> dict[str, Any]:
    # Phi3Attention: fused qkv_proj without bias; Phi3MLP: fused gate_up_proj without bias; head_dim = h / heads.
    return _rotary_decoder(cfg, default_arch="Phi3ForCausalLM", prefix="Phi3",
                           mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                           tied_default=False, hidden_dropout=float(cfg.get("resid_pdrop", 0.0)))


def _read_gemma(cfg: _HFConfig) -> dict[str, Any]:
    # GemmaMLP is always gated (GeLU-tanh); GemmaAttention: attention_bias on q, k, v and o; head_dim 256.
    bias = bool(cfg.get("attention_bias", False))
    if bias:
        raise cfg.fail("attention_bias=True is not supported for gemma", field="attention_bias", value=bias,
                       hint="it adds an output-projection bias without MLP biases; set attention_bias false")
    return _rotary_decoder(cfg, default_arch="GemmaForCausalLM", prefix="Gemma", mlp=MLPKind.GEGLU,
                           qkv_bias=False, linear_bias=False, tied_default=True, head_dim=256)


def _read_mixtral(cfg: _HFConfig) -> dict[str, Any]:
    # MixtralSparseMoeBlock: a bias-free router (hidden x experts) and SwiGLU experts of intermediate_size.
    fields = _rotary_decoder(cfg, default_arch="MixtralForCausalLM", prefix="Mixtral",
                             mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                             tied_default=False)
    fields["moe"] = MoEConfig(num_experts=cfg.get_int("num_local_experts", 8),
                              top_k=cfg.get_int("num_experts_per_tok", 2),
                              expert_ffn_hidden_size=fields["ffn_hidden_size"])
    return fields


def _sparse_layers(cfg: _HFConfig, num_layers: int) -> tuple[int, int] | None:
    """Qwen-MoE's sparse layers as (first_dense_layers, layer_interval); None when every layer is dense.

    A layer is sparse when it is not in ``mlp_only_layers`` and ``(layer + 1) % decoder_sparse_step == 0``
    (Qwen2MoeDecoderLayer); :class:`MoEConfig` expresses the patterns "every k-th layer after the first n".
    """
    step = cfg.get_int("decoder_sparse_step", 1)
    dense = {int(i) for i in cfg.get("mlp_only_layers", [])}
    if step < 1:
        raise cfg.fail(f"decoder_sparse_step={step} is not positive", field="decoder_sparse_step", value=step,
                       hint="use 1 for every layer, k for every k-th layer")
    sparse = [i for i in range(num_layers) if i not in dense and (i + 1) % step == 0]
    if not sparse:
        return None
    first = sparse[0]
    interval = sparse[1] - first if len(sparse) > 1 else num_layers
    if sparse != list(range(first, num_layers, interval)):
        raise cfg.fail(f"sparse layers {sparse} (mlp_only_layers={sorted(dense)}, decoder_sparse_step={step}) "
                       "are not evenly spaced", field="mlp_only_layers", value=sorted(dense),
                       hint="only 'every k-th layer after the first n' is modelled")
    return first, interval


def _read_qwen_moe(cfg: _HFConfig, *, prefix: str, qkv_bias: bool, shared: bool,
                   head_dim: int | None) -> dict[str, Any]:
    fields = _rotary_decoder(cfg, default_arch=f"{prefix}ForCausalLM", prefix=prefix,
                             mlp=_gated_mlp(cfg, "hidden_act", "silu"), qkv_bias=qkv_bias, linear_bias=False,
                             tied_default=False, head_dim=head_dim)
    layers = _sparse_layers(cfg, fields["num_layers"])
    if layers is None:
        return fields  # every layer is a dense MLP of intermediate_size
    shared_size = cfg.get_int("shared_expert_intermediate_size", 0) if shared else 0
    fields["moe"] = MoEConfig(
        num_experts=cfg.req_int("num_experts"),
        top_k=cfg.req_int("num_experts_per_tok"),
        expert_ffn_hidden_size=cfg.req_int("moe_intermediate_size"),
        num_shared_experts=1 if shared_size else 0,
        shared_expert_ffn_hidden_size=shared_size,
        shared_expert_gate=shared,  # Qwen2MoeSparseMoeBlock builds the gate even for a zero-size shared expert
        first_dense_layers=layers[0],
        layer_interval=layers[1],
    )
    return fields


def _read_qwen2_moe(cfg: _HFConfig) -> dict[str, Any]:
    # Qwen2MoeSparseMoeBlock: router, experts, one shared expert and its sigmoid gate (hidden -> 1, no bias).
    return _read_qwen_moe(cfg, prefix="Qwen2Moe", qkv_bias=bool(cfg.get("qkv_bias", True)), shared=True,
                          head_dim=None)


def _read_qwen3_moe(cfg: _HFConfig) -> dict[str, Any]:
    # Qwen3MoeSparseMoeBlock: router and experts, no shared expert; attention as in Qwen3 (q/k norms).
    bias = bool(cfg.get("attention_bias", False))
    if bias:
        raise cfg.fail("attention_bias=True is not supported for qwen3_moe", field="attention_bias", value=bias,
                       hint="it adds an output-projection bias without MLP biases; set attention_bias false")
    fields = _read_qwen_moe(cfg, prefix="Qwen3Moe", qkv_bias=False, shared=False, head_dim=128)
    fields["qk_norm"] = True
    return fields


def _read_gpt2(cfg: _HFConfig) -> dict[str, Any]:
    # GPT2Attention: fused c_attn and c_proj with biases; GPT2MLP: c_fc and c_proj with biases.
    hidden = cfg.req_int("n_embd")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": cfg.req_int("n_layer"),
        "hidden_size": hidden,
        "num_attention_heads": cfg.req_int("n_head"),
        "ffn_hidden_size": cfg.get_int("n_inner", 4 * hidden),
        "mlp": _plain_mlp(cfg, "activation_function", "gelu_new"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": cfg.req_int("vocab_size"),
        "max_position_embeddings": cfg.req_int("n_positions"),
        "position_embedding": PositionEmbedding.LEARNED,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "qkv_bias": True,
        "linear_bias": True,
        "lm_head": _head(cfg, "GPT2", ("LMHeadModel",), "GPT2LMHeadModel"),
        "hidden_dropout": float(cfg.get("resid_pdrop", 0.1)),
        "attention_dropout": float(cfg.get("attn_pdrop", 0.1)),
    }


def _read_gpt_neox(cfg: _HFConfig) -> dict[str, Any]:
    # GPTNeoXAttention: attention_bias on query_key_value and dense; GPTNeoXMLP always has biases.
    bias = bool(cfg.get("attention_bias", True))
    if not bias:
        raise cfg.fail("attention_bias=False is not supported for gpt_neox", field="attention_bias", value=bias,
                       hint="its MLP keeps biases while attention loses them; set attention_bias true")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": cfg.req_int("num_hidden_layers"),
        "hidden_size": cfg.req_int("hidden_size"),
        "num_attention_heads": cfg.req_int("num_attention_heads"),
        "ffn_hidden_size": cfg.req_int("intermediate_size"),
        "mlp": _plain_mlp(cfg, "hidden_act", "gelu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": cfg.req_int("vocab_size"),
        "max_position_embeddings": cfg.get_int("max_position_embeddings", 2048),
        "position_embedding": PositionEmbedding.ROTARY,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "qkv_bias": True,
        "linear_bias": True,
        "parallel_block": bool(cfg.get("use_parallel_residual", True)),
        "lm_head": _head(cfg, "GPTNeoX", ("ForCausalLM",), "GPTNeoXForCausalLM"),
        "hidden_dropout": float(cfg.get("hidden_dropout", 0.0)),
        "attention_dropout": float(cfg.get("attention_dropout", 0.0)),
    }


def _read_opt(cfg: _HFConfig) -> dict[str, Any]:
    # OPTDecoder: learned positions with 2 extra rows; project_in/out when word_embed_proj_dim != hidden_size.
    hidden = cfg.req_int("hidden_size")
    proj = cfg.get_int("word_embed_proj_dim", hidden)
    if proj != hidden:
        raise cfg.fail(f"word_embed_proj_dim={proj} differs from hidden_size={hidden}", field="word_embed_proj_dim",
                       value=proj, hint="embedding projections (OPT-350m) are not modelled; use equal sizes")
    if not bool(cfg.get("layer_norm_elementwise_affine", True)):
        raise cfg.fail("layer_norm_elementwise_affine=False is not supported",
                       field="layer_norm_elementwise_affine", value=False, hint="norms without weights are not modelled")
    bias = bool(cfg.get("enable_bias", True))
    final_norm = bool(cfg.get("do_layer_norm_before", True)) and not bool(cfg.get("_remove_final_layer_norm", False))
    return {
        "arch": ArchKind.DECODER,
        "num_layers": cfg.req_int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": cfg.req_int("num_attention_heads"),
        "ffn_hidden_size": cfg.req_int("ffn_dim"),
        "mlp": _plain_mlp(cfg, "activation_function", "relu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": cfg.req_int("vocab_size"),
        "max_position_embeddings": cfg.get_int("max_position_embeddings", 2048) + _OPT_POSITION_OFFSET,
        "position_embedding": PositionEmbedding.LEARNED,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "qkv_bias": bias,
        "linear_bias": bias,
        "final_norm": final_norm,
        "lm_head": _head(cfg, "OPT", ("ForCausalLM",), "OPTForCausalLM"),
        "hidden_dropout": float(cfg.get("dropout", 0.1)),
        "attention_dropout": float(cfg.get("attention_dropout", 0.0)),
    }


def _read_bert(cfg: _HFConfig) -> dict[str, Any]:
    # BertForMaskedLM: BertModel without pooler plus the MLM head; BertModel: with pooler, no head.
    lm_head = _head(cfg, "Bert", ("ForMaskedLM",), "BertForMaskedLM")
    return {
        "arch": ArchKind.ENCODER,
        "num_layers": cfg.req_int("num_hidden_layers"),
        "hidden_size": cfg.req_int("hidden_size"),
        "num_attention_heads": cfg.req_int("num_attention_heads"),
        "ffn_hidden_size": cfg.req_int("intermediate_size"),
        "mlp": _plain_mlp(cfg, "hidden_act", "gelu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": cfg.req_int("vocab_size"),
        "max_position_embeddings": cfg.get_int("max_position_embeddings", 512),
        "position_embedding": PositionEmbedding.LEARNED,
        "type_vocab_size": cfg.get_int("type_vocab_size", 2),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "qkv_bias": True,
        "linear_bias": True,
        "embedding_norm": True,
        "final_norm": False,
        "pooler": not lm_head,
        "lm_head": lm_head,
        "hidden_dropout": float(cfg.get("hidden_dropout_prob", 0.1)),
        "attention_dropout": float(cfg.get("attention_probs_dropout_prob", 0.1)),
    }


_READERS: dict[str, Callable[[_HFConfig], dict[str, Any]]] = {
    "bert": _read_bert,
    "gemma": _read_gemma,
    "gpt2": _read_gpt2,
    "gpt_neox": _read_gpt_neox,
    "llama": _read_llama,
    "mistral": _read_mistral,
    "mixtral": _read_mixtral,
    "opt": _read_opt,
    "phi3": _read_phi3,
    "qwen2": _read_qwen2,
    "qwen2_moe": _read_qwen2_moe,
    "qwen3": _read_qwen3,
    "qwen3_moe": _read_qwen3_moe,
}

SUPPORTED_HF_FAMILIES: tuple[str, ...] = tuple(sorted(_READERS))
"""``model_type`` values :func:`model_from_hf_config` reads."""


def _load(config: dict[str, Any] | str | Path) -> _HFConfig:
    if isinstance(config, dict):
        return _HFConfig(config, "config dict")
    if not isinstance(config, (str, os.PathLike)):
        raise ConfigError(f"a Hugging Face config must be a dict or a path, got {type(config).__name__}",
                          field="config", value=config, hint="pass a config.json file, a folder holding one, or a dict")
    path = Path(config)
    folder_name = None
    if path.is_dir():
        folder_name = path.resolve().name
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"no Hugging Face config at {path}", field="config", value=str(config),
                          hint="pass a config.json file, a folder holding one, or the parsed dict")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"{path}: invalid JSON (or unreadable file): {exc}", field="config", value=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}", field="config",
                          value=str(path))
    return _HFConfig(data, str(path), folder_name)


def model_from_hf_config(config: dict[str, Any] | str | Path) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face config (dict, ``config.json`` path, or its folder).

    ``model_type`` picks the family, ``architectures`` the head (``...ForCausalLM``/``BertForMaskedLM`` or the
    bare ``...Model``). Nothing is downloaded and no remote code runs.
    """
    cfg = _load(config)
    family = str(cfg.req("model_type"))
    reader = _READERS.get(family)
    if reader is None:
        raise cfg.fail(f"unsupported model_type {family!r}", field="model_type", value=family,
                       hint=f"supported: {', '.join(SUPPORTED_HF_FAMILIES)}")
    fields = reader(cfg)
    fields |= read_rope_norm(cfg.data, fields.get("position_embedding", PositionEmbedding.LEARNED), cfg.origin)
    name = cfg.data.get("_name_or_path") or cfg.folder_name
    try:
        return ModelConfig(name=name, **fields)
    except ConfigError as exc:
        raise cfg.fail(f"{family} config is not a valid model: {exc}", field=exc.field or "config", value=exc.value,
                       hint="check the sizes against the published config.json") from None


# ---- writers: ModelConfig -> config dict ------------------------------------------------------------


def _rotary_common(model: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "intermediate_size": model.ffn_hidden_size,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "tie_word_embeddings": model.tied_embeddings,
        "attention_dropout": model.attention_dropout,
        "hidden_act": "gelu_pytorch_tanh" if model.mlp is MLPKind.GEGLU else "silu",
    }


def _write_llama(model: ModelConfig) -> dict[str, Any]:
    return {**_rotary_common(model), "attention_bias": model.qkv_bias, "mlp_bias": model.linear_bias}


def _write_qwen2(model: ModelConfig) -> dict[str, Any]:
    return _rotary_common(model)


def _write_qwen3(model: ModelConfig) -> dict[str, Any]:
    return {**_rotary_common(model), "attention_bias": False}


def _write_phi3(model: ModelConfig) -> dict[str, Any]:
    d = _rotary_common(model)
    del d["head_dim"]  # Phi3 derives it from hidden_size / heads
    # Phi3Config's pad_token_id defaults to 32000, which must index the embedding: none is needed here.
    return {**d, "resid_pdrop": model.hidden_dropout, "embd_pdrop": model.hidden_dropout, "pad_token_id": None}


def _write_gemma(model: ModelConfig) -> dict[str, Any]:
    return {**_rotary_common(model), "attention_bias": False}


def _write_mixtral(model: ModelConfig) -> dict[str, Any]:
    assert model.moe is not None
    d = _rotary_common(model)
    d.update(intermediate_size=model.moe.expert_ffn_hidden_size, num_local_experts=model.moe.num_experts,
             num_experts_per_tok=model.moe.top_k)
    return d


def _write_qwen_moe(model: ModelConfig) -> dict[str, Any]:
    moe = model.moe
    assert moe is not None
    d = _rotary_common(model)
    # Qwen-MoE layer rule: sparse iff (layer + 1) % decoder_sparse_step == 0 and layer not in mlp_only_layers.
    if moe.first_dense_layers == moe.layer_interval - 1:
        step, mlp_only = moe.layer_interval, []
    else:
        step, mlp_only = 1, [i for i in range(model.num_layers) if not model.is_moe_layer(i)]
    d.update(num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
             moe_intermediate_size=moe.expert_ffn_hidden_size, decoder_sparse_step=step, mlp_only_layers=mlp_only)
    return d


def _write_qwen2_moe(model: ModelConfig) -> dict[str, Any]:
    assert model.moe is not None
    return {**_write_qwen_moe(model), "qkv_bias": model.qkv_bias,
            "shared_expert_intermediate_size": model.moe.shared_expert_ffn_hidden_size}


def _write_qwen3_moe(model: ModelConfig) -> dict[str, Any]:
    return {**_write_qwen_moe(model), "attention_bias": False}


def _write_gpt2(model: ModelConfig) -> dict[str, Any]:
    return {
        "n_embd": model.hidden_size,
        "n_layer": model.num_layers,
        "n_head": model.num_attention_heads,
        "n_inner": model.ffn_hidden_size,
        "activation_function": "relu" if model.mlp is MLPKind.RELU else "gelu_new",
        "vocab_size": model.vocab_size,
        "n_positions": model.max_position_embeddings,
        "tie_word_embeddings": model.tied_embeddings,
        "resid_pdrop": model.hidden_dropout,
        "embd_pdrop": model.hidden_dropout,
        "attn_pdrop": model.attention_dropout,
    }


def _write_gpt_neox(model: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "intermediate_size": model.ffn_hidden_size,
        "hidden_act": "relu" if model.mlp is MLPKind.RELU else "gelu",
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "tie_word_embeddings": model.tied_embeddings,
        "use_parallel_residual": model.parallel_block,
        "attention_bias": model.qkv_bias,
        "hidden_dropout": model.hidden_dropout,
        "attention_dropout": model.attention_dropout,
    }


def _write_opt(model: ModelConfig) -> dict[str, Any]:
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


def _write_bert(model: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "intermediate_size": model.ffn_hidden_size,
        "hidden_act": "relu" if model.mlp is MLPKind.RELU else "gelu",
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "type_vocab_size": model.type_vocab_size,
        "tie_word_embeddings": model.tied_embeddings,
        "hidden_dropout_prob": model.hidden_dropout,
        "attention_probs_dropout_prob": model.attention_dropout,
    }


# family -> (writer, head class, bare backbone class)
_WRITERS: dict[str, tuple[Callable[[ModelConfig], dict[str, Any]], str, str]] = {
    "bert": (_write_bert, "BertForMaskedLM", "BertModel"),
    "gemma": (_write_gemma, "GemmaForCausalLM", "GemmaModel"),
    "gpt2": (_write_gpt2, "GPT2LMHeadModel", "GPT2Model"),
    "gpt_neox": (_write_gpt_neox, "GPTNeoXForCausalLM", "GPTNeoXModel"),
    "llama": (_write_llama, "LlamaForCausalLM", "LlamaModel"),
    "mixtral": (_write_mixtral, "MixtralForCausalLM", "MixtralModel"),
    "opt": (_write_opt, "OPTForCausalLM", "OPTModel"),
    "phi3": (_write_phi3, "Phi3ForCausalLM", "Phi3Model"),
    "qwen2": (_write_qwen2, "Qwen2ForCausalLM", "Qwen2Model"),
    "qwen2_moe": (_write_qwen2_moe, "Qwen2MoeForCausalLM", "Qwen2MoeModel"),
    "qwen3": (_write_qwen3, "Qwen3ForCausalLM", "Qwen3Model"),
    "qwen3_moe": (_write_qwen3_moe, "Qwen3MoeForCausalLM", "Qwen3MoeModel"),
}


def _closest_family(model: ModelConfig) -> str:
    """The Hugging Face family whose modules match the architecture best (checked afterwards)."""
    if model.arch is ArchKind.ENCODER:
        return "bert"
    if model.moe is not None:
        moe = model.moe
        if model.qk_norm:
            return "qwen3_moe"
        plain = (moe.num_shared_experts == 0 and not moe.shared_expert_gate and moe.layer_interval == 1
                 and moe.first_dense_layers == 0 and not model.qkv_bias)
        return "mixtral" if plain else "qwen2_moe"
    if model.parallel_block:
        return "gpt_neox"
    if model.mlp.gated:
        if model.qk_norm:
            return "qwen3"
        if model.qkv_bias and not model.linear_bias:
            return "qwen2"
        if model.hidden_dropout > 0:
            return "phi3"
        if model.mlp is MLPKind.GEGLU and not model.qkv_bias:
            return "gemma"
        return "llama"  # LlamaMLP gates with any hidden_act, GeLU included
    if model.position_embedding is PositionEmbedding.ROTARY:
        return "gpt_neox"
    return "opt" if model.mlp is MLPKind.RELU else "gpt2"


def _canonical(model: ModelConfig) -> dict[str, Any]:
    """The fields that shape the model's modules: no name, MoE layers as a per-layer pattern, and no dense MLP
    size when every layer is MoE (nothing uses it)."""
    d = model.model_dump(mode="json", exclude={"name"})
    if model.moe is not None:
        for key in ("first_dense_layers", "layer_interval"):
            del d["moe"][key]
        d["moe_layers"] = [model.is_moe_layer(i) for i in range(model.num_layers)]
        if all(d["moe_layers"]):
            del d["ffn_hidden_size"]
    return d


def to_hf_config(model: ModelConfig) -> dict[str, Any]:
    """A Hugging Face config dict (with ``model_type`` and ``architectures``) for the same architecture.

    ``transformers.AutoConfig.for_model(**d)`` then builds a model with exactly ``model.num_params()``
    parameters. Raises :class:`ConfigError` naming the fields no Hugging Face family can express.
    """
    family = _closest_family(model)
    writer, head_class, bare_class = _WRITERS[family]
    d: dict[str, Any] = {"model_type": family, "architectures": [head_class if model.lm_head else bare_class]}
    if model.name:
        d["_name_or_path"] = model.name
    d.update(writer(model))
    d.update(write_rope_norm(model, family))
    try:
        back = model_from_hf_config(d)
    except ConfigError as exc:
        raise ConfigError(f"no Hugging Face family expresses this model; closest is {family!r}, which rejects it: "
                          f"{exc}", field=exc.field, value=exc.value,
                          hint=f"change the model to fit {family!r}") from None
    ours, theirs = _canonical(model), _canonical(back)
    differ = {k: (ours.get(k), theirs.get(k)) for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    if differ:
        shown = ", ".join(f"{k}={differ[k][0]!r} (would be {differ[k][1]!r})" for k in sorted(differ))
        first = sorted(differ)[0]
        raise ConfigError(f"no Hugging Face family expresses this model; closest is {family!r}, which differs in "
                          f"{shown}", field=first, value=ours.get(first),
                          hint=f"change those fields to the {family!r} values to export it")
    return d
