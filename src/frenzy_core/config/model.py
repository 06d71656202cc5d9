"""``ModelConfig``: the architecture of a transformer, enough to count its parameters and activations."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.config.architecture import (
    ArchKind,
    MLAConfig,
    MLPKind,
    MoEConfig,
    NormKind,
    NormPlacement,
    PositionEmbedding,
    QKNormScope,
    RopeScaling,
)
from frenzy_core.config.hf.registry import read_model, write_hf_config
from frenzy_core.config.params import count_parameters
from frenzy_core.config.preset_files import model_preset_file, model_preset_names

__all__ = ["ArchKind", "MLAConfig", "MLPKind", "MoEConfig", "ModelConfig", "NormKind", "NormPlacement",
           "PositionEmbedding", "QKNormScope"]


def _megatron_swiglu_ffn(hidden_size: int) -> int:
    # Megatron-LM arguments.py: with --swiglu and no --ffn-hidden-size,
    # ffn_hidden_size = int((4 * hidden_size * 2 / 3) / 64) * 64.
    return int((4 * hidden_size * 2 / 3) / 64) * 64


class ModelConfig(FrozenModel):
    """A transformer language model's architecture.

    Unset derived sizes are filled in on validation: ``num_kv_heads`` = heads (MHA),
    ``head_dim`` = hidden / heads (with ``mla``: qk_nope + qk_rope), ``ffn_hidden_size`` = 4 x hidden (2/3 of
    that, rounded down to a multiple of 64, for gated MLPs, as Megatron-LM does), and with a ``sliding_window``
    but no ``sliding_window_layers``, every layer is local (a list of every layer is stored as None).
    """

    name: str | None = Field(default=None, description="Display name (a preset name or a Hugging Face id).")
    arch: ArchKind = Field(default=ArchKind.DECODER, description="Decoder-only (causal LM) or encoder-only (MLM).")
    num_layers: int = Field(gt=0, description="Transformer layers.")
    hidden_size: int = Field(gt=0, description="Model (residual stream) width.")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_kv_heads: int = Field(default=0, ge=0, description="Key/value heads (MHA: = heads; GQA: fewer; MQA: 1). 0: = heads.")
    head_dim: int = Field(default=0, ge=0, description="Width of one head. 0: hidden_size / num_attention_heads.")
    ffn_hidden_size: int = Field(default=0, ge=0, description="Dense MLP intermediate size. 0: Megatron's default.")
    mlp: MLPKind = Field(default=MLPKind.GELU, description="Feed-forward kind.")
    norm: NormKind = Field(default=NormKind.LAYERNORM, description="Normalisation kind.")
    vocab_size: int = Field(gt=0, description="Vocabulary size (embedding rows, as stored, padding included).")
    max_position_embeddings: int = Field(default=2048, gt=0, description="Rows of a learned position table.")
    position_embedding: PositionEmbedding = Field(default=PositionEmbedding.LEARNED, description="Position scheme.")
    type_vocab_size: int = Field(default=0, ge=0, description="Token-type (segment) embedding rows (BERT: 2).")
    tied_embeddings: bool = Field(default=True, description="Output head shares the input embedding matrix.")
    qkv_bias: bool = Field(default=False, description="Biases on the query/key/value projections.")
    linear_bias: bool = Field(default=False, description="Biases on the attention output and MLP projections.")
    parallel_block: bool = Field(default=False, description="Attention and MLP read the same input (GPT-J/NeoX).")
    embedding_norm: bool = Field(default=False, description="A norm after the embeddings (BERT).")
    final_norm: bool = Field(default=True, description="A norm before the head.")
    pooler: bool = Field(default=False, description="BERT pooler (hidden x hidden dense on the first token).")
    lm_head: bool = Field(
        default=True,
        description="The language-model head (decoder: output projection; encoder: MLM head). False: bare backbone.",
    )
    qk_norm: bool = Field(default=False, description="A norm over the queries and keys (Qwen3, OLMo 2, Gemma 3).")
    hidden_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Residual/MLP dropout probability.")
    attention_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Attention-probability dropout.")
    moe: MoEConfig | None = Field(default=None, description="Mixture-of-experts layers, if any.")
    # RoFormer (Su et al. 2021) and Megatron-LM's --rotary-base default: 10,000.
    rope_theta: float = Field(default=10000.0, gt=0, description="Rotary base (theta) of rotary embeddings.")
    rope_scaling: RopeScaling | None = Field(default=None, description="Rotary frequency scaling, if any.")
    # Megatron-LM's --norm-epsilon and torch.nn.LayerNorm's default: 1e-5.
    norm_eps: float = Field(default=1e-5, gt=0, lt=1, description="Epsilon of every LayerNorm/RMSNorm.")
    # ---- structure beyond the sizes: the module layout the memory terms and parameter counts follow ----
    fused_qkv: bool = Field(default=False, description=(
        "One fused query/key/value projection whose single output is split (GPT-2 c_attn, GPT-NeoX and Falcon "
        "query_key_value, Phi-3 qkv_proj); False: separate q, k and v projections. Megatron-Core always fuses."))
    fused_gate_up: bool = Field(default=False, description=(
        "One fused gate/up projection in a gated MLP whose output is chunked in two (Phi-3 gate_up_proj)."))
    norm_placement: NormPlacement = Field(default=NormPlacement.PRE, description="Where each layer's norms sit.")
    qk_norm_scope: QKNormScope = Field(default=QKNormScope.HEAD, description=(
        "What the query/key norms normalise (only with qk_norm)."))
    partial_rotary_factor: float = Field(default=1.0, gt=0.0, le=1.0, description=(
        "Share of each head's dimensions rotary embeddings rotate, int(head_dim x factor) of them, the rest passed "
        "through (GPT-NeoX rotary_pct 0.25, Phi-2 0.4, StableLM 0.25); only with rotary positions."))
    sliding_window: int | None = Field(default=None, gt=0, description=(
        "Tokens a local (sliding-window) attention layer attends to, itself included, as Transformers' "
        "sliding_window; None: every layer attends to the whole sequence."))
    sliding_window_layers: tuple[int, ...] | None = Field(default=None, description=(
        "0-based layers that use the sliding window (Gemma 2: the even layers; Gemma 3: five of every six); None "
        "with a window: every layer (Mistral, Phi-3, Starcoder2)."))
    attn_logit_softcapping: float | None = Field(default=None, gt=0.0, description=(
        "Attention scores become cap x tanh(scores / cap) before the softmax (Gemma 2: 50); None: no capping."))
    final_logit_softcapping: float | None = Field(default=None, gt=0.0, description=(
        "Logits become cap x tanh(logits / cap) before the loss (Gemma 2: 30); None: no capping."))
    mla: MLAConfig | None = Field(default=None, description=(
        "Multi-head latent attention (DeepSeek-V2/V3) instead of plain q/k/v projections."))
    lm_head_bias: bool = Field(default=False, description="A bias on the output head, one per vocabulary row (Phi-2).")
    vision_tower_params: int = Field(default=0, ge=0, description=(
        "Parameters of a vision encoder and its projector held beside the language model (Gemma 3's SigLIP tower): "
        "stored, trained and optimised with it; text tokens do not pass through them."))
    returns_kv_cache: bool = Field(default=False, description=(
        "The forward returns a KV cache (one K and one V per layer) even in training, as Hugging Face decoders do "
        "while their config leaves use_cache on (the Transformers default). Gradient checkpointing turns it off "
        "(Transformers sets use_cache=False when checkpointing in training). It matters when the loop keeps the "
        "model output alive."))

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        heads = data.get("num_attention_heads")
        hidden = data.get("hidden_size")
        if isinstance(heads, int) and heads > 0:
            if not data.get("num_kv_heads"):
                data["num_kv_heads"] = heads
            mla = data.get("mla")
            if not data.get("head_dim") and isinstance(mla, (dict, MLAConfig)):
                mla_dims = mla if isinstance(mla, dict) else mla.model_dump()
                if isinstance(mla_dims.get("qk_nope_head_dim"), int) and isinstance(mla_dims.get("qk_rope_head_dim"), int):
                    data["head_dim"] = mla_dims["qk_nope_head_dim"] + mla_dims["qk_rope_head_dim"]
            if not data.get("head_dim") and isinstance(hidden, int) and hidden > 0 and hidden % heads == 0:
                data["head_dim"] = hidden // heads
        if not data.get("ffn_hidden_size") and isinstance(hidden, int) and hidden > 0:
            mlp = data.get("mlp", MLPKind.GELU)
            try:
                gated = MLPKind(mlp).gated
            except ValueError:
                gated = False  # the field validator reports the bad value
            data["ffn_hidden_size"] = _megatron_swiglu_ffn(hidden) if gated else 4 * hidden
        local, layers = data.get("sliding_window_layers"), data.get("num_layers")
        if isinstance(local, (list, tuple)) and isinstance(layers, int) and list(local) == list(range(layers)):
            data["sliding_window_layers"] = None  # every layer: one spelling, so equal models compare equal
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.head_dim == 0:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}; set head_dim explicitly"
            )
        if self.ffn_hidden_size == 0:
            raise ValueError(
                f"the default ffn_hidden_size for hidden_size={self.hidden_size} and mlp={self.mlp.value!r} "
                "rounds down to 0; set ffn_hidden_size explicitly"
            )
        if self.num_attention_heads % self.num_kv_heads != 0:
            divisors = [d for d in range(1, self.num_attention_heads + 1) if self.num_attention_heads % d == 0]
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} does not divide num_attention_heads="
                f"{self.num_attention_heads}; use one of {divisors}"
            )
        if self.moe is not None and self.moe.first_dense_layers >= self.num_layers:
            raise ValueError(
                f"moe.first_dense_layers={self.moe.first_dense_layers} leaves no MoE layer in "
                f"num_layers={self.num_layers}"
            )
        _check_layout_fields(self)
        _check_attention_fields(self)
        return self

    # ---- derived facts -------------------------------------------------
    @property
    def causal(self) -> bool:
        """Whether attention is causal (decoders) or bidirectional (encoders)."""
        return self.arch is ArchKind.DECODER

    @property
    def q_size(self) -> int:
        """Width of all query heads together."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of all key (or value) heads together."""
        return self.num_kv_heads * self.head_dim

    def is_moe_layer(self, layer: int) -> bool:
        """Whether 0-based ``layer`` has a mixture-of-experts MLP."""
        if self.moe is None or layer < self.moe.first_dense_layers:
            return False
        return (layer - self.moe.first_dense_layers) % self.moe.layer_interval == 0

    @property
    def num_moe_layers(self) -> int:
        """How many layers are MoE."""
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    def default_seq_len(self, preferred: int = 2048) -> int:
        """``preferred`` tokens per sample (2048: GPT-3's and Llama 1's context), capped by a learned position
        table (GPT-2: 1024, BERT: 512) so that the default recipe always runs."""
        if self.position_embedding is PositionEmbedding.LEARNED:
            return min(preferred, self.max_position_embeddings)
        return preferred

    @property
    def v_size(self) -> int:
        """Width of all value heads together (latent attention: heads x v_head_dim)."""
        return self.num_kv_heads * (self.mla.v_head_dim if self.mla is not None else self.head_dim)

    @property
    def rotary_dim(self) -> int:
        """Dimensions of each head that rotary embeddings rotate (0 without rotary positions)."""
        if self.position_embedding is not PositionEmbedding.ROTARY:
            return 0
        if self.mla is not None:
            return self.mla.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)  # as transformers: int(head_dim * factor)

    def is_sliding_window_layer(self, layer: int) -> bool:
        """Whether 0-based ``layer`` attends within the sliding window only."""
        if self.sliding_window is None:
            return False
        return self.sliding_window_layers is None or layer in self.sliding_window_layers

    def num_params(self) -> int:
        """Total parameters (unique; tied embeddings counted once)."""
        return count_parameters(self).total

    def num_active_params(self) -> int:
        """Parameters a token passes through (MoE: top-k routed experts only)."""
        return count_parameters(self).active

    # ---- constructors ----------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> ModelConfig:
        """A built-in model by name (``gpt2``, ``llama-3.1-8b``, ...); see :meth:`presets`."""
        return _preset_model(model_preset_file(name).name)

    @classmethod
    def presets(cls) -> list[str]:
        """Names of the built-in models."""
        return model_preset_names()

    @classmethod
    def from_hf_config(cls, config: dict[str, Any] | str | Path) -> ModelConfig:
        """Read a Hugging Face ``config.json`` (a dict or a path); no network, no remote code."""
        model: ModelConfig = read_model(cls, config)
        return model

    def to_hf_config(self) -> dict[str, Any]:
        """The Hugging Face ``config.json`` dict of the family that builds exactly this model (its own class)."""
        return write_hf_config(self)


@functools.cache
def _preset_model(name: str) -> ModelConfig:
    return ModelConfig.model_validate(model_preset_file(name).fields)


def _check_layout_fields(model: ModelConfig) -> None:
    """The module-layout fields agree with the rest of the architecture."""
    if model.fused_gate_up and not model.mlp.gated:
        raise ValueError(f"fused_gate_up=True needs a gated MLP, got mlp={model.mlp.value!r}; set fused_gate_up false")
    if model.norm_placement is NormPlacement.SHARED and not model.parallel_block:
        raise ValueError("norm_placement='shared' (one norm feeding both branches) needs parallel_block=True")
    if model.qk_norm_scope is not QKNormScope.HEAD and not model.qk_norm:
        raise ValueError(f"qk_norm_scope={model.qk_norm_scope.value!r} without qk_norm; set qk_norm true or leave "
                         "qk_norm_scope at 'head'")
    if model.partial_rotary_factor != 1.0 and model.position_embedding is not PositionEmbedding.ROTARY:
        raise ValueError(f"partial_rotary_factor={model.partial_rotary_factor} needs rotary positions, got "
                         f"position_embedding={model.position_embedding.value!r}")
    if model.lm_head_bias and (not model.lm_head or model.arch is ArchKind.ENCODER):
        raise ValueError("lm_head_bias=True needs a decoder with its lm_head (BERT's MLM head has its own bias)")
    if model.returns_kv_cache and model.arch is ArchKind.ENCODER:
        raise ValueError("returns_kv_cache=True for an encoder: only decoders return a KV cache")


def _check_attention_fields(model: ModelConfig) -> None:
    """Sliding windows, soft-capping and latent attention are consistent."""
    layers = model.sliding_window_layers
    if layers is not None:
        if model.sliding_window is None:
            raise ValueError(f"sliding_window_layers={list(layers)} without a sliding_window; give the window "
                             "in tokens")
        if not layers or list(layers) != sorted(set(layers)) or any(not 0 <= i < model.num_layers for i in layers):
            raise ValueError(f"sliding_window_layers={list(layers)} must be increasing 0-based layer indices below "
                             f"num_layers={model.num_layers} (at least one; None: every layer)")
    mla = model.mla
    if mla is None:
        return
    if model.head_dim != mla.qk_head_dim:
        raise ValueError(f"head_dim={model.head_dim} differs from mla.qk_nope_head_dim + mla.qk_rope_head_dim = "
                         f"{mla.qk_head_dim}; leave head_dim unset with mla")
    if model.num_kv_heads != model.num_attention_heads:
        raise ValueError(f"num_kv_heads={model.num_kv_heads} with mla: latent attention expands keys and values to "
                         f"all {model.num_attention_heads} heads; leave num_kv_heads unset")
    if model.position_embedding is not PositionEmbedding.ROTARY or model.fused_qkv or model.qkv_bias or model.qk_norm:
        raise ValueError("mla needs rotary positions and no fused_qkv, qkv_bias or qk_norm (its projections and "
                         "norms are described by mla itself)")
