"""``ModelConfig``: the architecture of a transformer, enough to count its parameters and activations."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel

__all__ = ["ArchKind", "MLPKind", "MoEConfig", "ModelConfig", "NormKind", "PositionEmbedding", "RopeScaling"]


class ArchKind(str, enum.Enum):
    """Which stack and head the model has."""

    DECODER = "decoder"
    """Causal decoder-only language model (GPT, Llama, ...); its head, if any, predicts the next token."""
    ENCODER = "encoder"
    """Bidirectional encoder-only model (BERT-style); its head, if any, is a masked-language-model head."""


class MLPKind(str, enum.Enum):
    """Feed-forward block: plain two-matrix MLPs or gated three-matrix ones."""

    GELU = "gelu"
    """fc1 -> GeLU -> fc2 (GPT-2, BERT, GPT-NeoX)."""
    RELU = "relu"
    """fc1 -> ReLU -> fc2 (OPT)."""
    SQUARED_RELU = "squared-relu"
    """fc1 -> ReLU^2 -> fc2 (Nemotron, Primer)."""
    SWIGLU = "swiglu"
    """(SiLU(gate) * up) -> down (Llama, Mistral, Qwen)."""
    GEGLU = "geglu"
    """(GeLU(gate) * up) -> down (Gemma)."""

    @property
    def gated(self) -> bool:
        """Whether the block has a third (gate) matrix."""
        return self in (MLPKind.SWIGLU, MLPKind.GEGLU)


class NormKind(str, enum.Enum):
    """Normalisation layer."""

    LAYERNORM = "layernorm"
    """LayerNorm with weight and bias."""
    RMSNORM = "rmsnorm"
    """RMSNorm, weight only."""


class PositionEmbedding(str, enum.Enum):
    """How positions enter the model."""

    LEARNED = "learned"
    """A learned absolute position table of ``max_position_embeddings`` rows."""
    ROTARY = "rotary"
    """Rotary embeddings (RoPE): no parameters."""
    NONE = "none"
    """No position information in parameters (ALiBi and similar)."""


class MoEConfig(FrozenModel):
    """Mixture-of-experts feed-forward layers."""

    num_experts: int = Field(gt=1, description="Routed experts per MoE layer.")
    top_k: int = Field(ge=1, description="Experts each token is routed to.")
    expert_ffn_hidden_size: int = Field(gt=0, description="Intermediate size of one routed expert.")
    num_shared_experts: int = Field(default=0, ge=0, description="Always-on shared experts per MoE layer.")
    shared_expert_ffn_hidden_size: int = Field(
        default=0, ge=0, description="Intermediate size of all shared experts together (0: none)."
    )
    shared_expert_gate: bool = Field(default=False, description="A sigmoid gate (hidden -> 1) on the shared expert (Qwen2-MoE).")
    layer_interval: int = Field(default=1, ge=1, description="Every k-th layer is MoE (1: all).")
    first_dense_layers: int = Field(default=0, ge=0, description="The first n layers are dense.")
    capacity_factor: float | None = Field(
        default=None, gt=0, description="Token capacity per expert as a multiple of the fair share; None: dropless."
    )

    @model_validator(mode="after")
    def _check(self) -> MoEConfig:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}; use top_k <= num_experts")
        if self.num_shared_experts > 0 and self.shared_expert_ffn_hidden_size == 0:
            raise ValueError("num_shared_experts > 0 needs shared_expert_ffn_hidden_size > 0")
        return self


class RopeScaling(FrozenModel):
    """How rotary frequencies are stretched for contexts longer than pre-training (no memory effect; launchers
    that build the model, e.g. Megatron-LM, need it to reproduce the model)."""

    kind: Literal["linear", "dynamic", "yarn", "llama3", "longrope"] = Field(description=(
        "Transformers' rope_type: linear (position interpolation), dynamic (NTK), yarn, llama3, longrope."))
    factor: float | None = Field(default=None, gt=0, description="Context extension factor (longrope: none).")
    low_freq_factor: float | None = Field(default=None, gt=0, description="llama3: low-frequency wavelength factor.")
    high_freq_factor: float | None = Field(default=None, gt=0, description="llama3: high-frequency wavelength factor.")
    original_max_position_embeddings: int | None = Field(default=None, gt=0, description=(
        "Context the rotary base was trained for (llama3, yarn, longrope)."))


def _megatron_swiglu_ffn(hidden_size: int) -> int:
    # Megatron-LM arguments.py: with --swiglu and no --ffn-hidden-size,
    # ffn_hidden_size = int((4 * hidden_size * 2 / 3) / 64) * 64.
    return int((4 * hidden_size * 2 / 3) / 64) * 64


class ModelConfig(FrozenModel):
    """A transformer language model's architecture.

    Unset derived sizes are filled in on validation: ``num_kv_heads`` = heads (MHA),
    ``head_dim`` = hidden / heads, ``ffn_hidden_size`` = 4 x hidden (2/3 of that, rounded down to
    a multiple of 64, for gated MLPs, as Megatron-LM does).
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
    qk_norm: bool = Field(default=False, description="A norm over each head's queries and keys (Qwen3).")
    hidden_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Residual/MLP dropout probability.")
    attention_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Attention-probability dropout.")
    moe: MoEConfig | None = Field(default=None, description="Mixture-of-experts layers, if any.")
    # RoFormer (Su et al. 2021) and Megatron-LM's --rotary-base default: 10,000.
    rope_theta: float = Field(default=10000.0, gt=0, description="Rotary base (theta) of rotary embeddings.")
    rope_scaling: RopeScaling | None = Field(default=None, description="Rotary frequency scaling, if any.")
    # Megatron-LM's --norm-epsilon and torch.nn.LayerNorm's default: 1e-5.
    norm_eps: float = Field(default=1e-5, gt=0, lt=1, description="Epsilon of every LayerNorm/RMSNorm.")

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
            if not data.get("head_dim") and isinstance(hidden, int) and hidden > 0 and hidden % heads == 0:
                data["head_dim"] = hidden // heads
        if not data.get("ffn_hidden_size") and isinstance(hidden, int) and hidden > 0:
            mlp = data.get("mlp", MLPKind.GELU)
            try:
                gated = MLPKind(mlp).gated
            except ValueError:
                gated = False  # the field validator reports the bad value
            data["ffn_hidden_size"] = _megatron_swiglu_ffn(hidden) if gated else 4 * hidden
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

    def num_params(self) -> int:
        """Total parameters (unique; tied embeddings counted once)."""
        from frenzy_core.config.params import count_parameters

        return count_parameters(self).total

    def num_active_params(self) -> int:
        """Parameters a token passes through (MoE: top-k routed experts only)."""
        from frenzy_core.config.params import count_parameters

        return count_parameters(self).active

    # ---- constructors ----------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> ModelConfig:
        """A built-in model by name (``gpt2``, ``llama-3.1-8b``, ...); see :meth:`presets`."""
        from frenzy_core.config.presets import load_model_preset

        return load_model_preset(name)

    @classmethod
    def presets(cls) -> list[str]:
        """Names of the built-in models."""
        from frenzy_core.config.presets import model_preset_names

        return model_preset_names()

    @classmethod
    def from_hf_config(cls, config: dict[str, Any] | str | Path) -> ModelConfig:
        """Read a Hugging Face ``config.json`` (a dict or a path); no network, no remote code."""
        from frenzy_core.config.hf import model_from_hf_config

        return model_from_hf_config(config)

    def to_hf_config(self) -> dict[str, Any]:
        """The closest Hugging Face ``config.json`` dict, building a model with exactly these parameters."""
        from frenzy_core.config.hf import to_hf_config

        return to_hf_config(self)
