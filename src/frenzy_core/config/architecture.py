"""The parts a :class:`~frenzy_core.config.model.ModelConfig` is made of: kinds of stack, MLP, norm and positions,
where norms sit, and the mixture-of-experts and multi-head latent attention sub-configs.

They live apart from ``ModelConfig`` so that the modules ``ModelConfig`` builds on (parameter counts, the Hugging
Face family records) can use them without importing the model class itself.
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel

__all__ = [
    "ArchKind",
    "MLAConfig",
    "MLPKind",
    "MoEConfig",
    "NormKind",
    "NormPlacement",
    "PositionEmbedding",
    "QKNormScope",
    "RopeScaling",
]


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


class NormPlacement(str, enum.Enum):
    """Where a layer's norms sit relative to its attention and MLP branches."""

    PRE = "pre"
    """One norm before attention and one before the MLP (GPT-2, Llama; in GPT-NeoX's parallel block both read the
    layer input). Two norms per layer."""
    SHARED = "shared"
    """One norm whose output both branches of a parallel block read (Phi-2, Falcon-7B). One norm per layer."""
    SANDWICH = "sandwich"
    """The pre-norms plus a norm on each branch's output before the residual add (Gemma 2, Gemma 3). Four norms."""
    POST = "post"
    """Only a norm on each branch's output before the residual add; branches read the raw residual stream
    (OLMo 2). Two norms per layer."""

    @property
    def norms_per_layer(self) -> int:
        """How many norms of the model width one layer holds."""
        return {NormPlacement.PRE: 2, NormPlacement.SHARED: 1, NormPlacement.SANDWICH: 4, NormPlacement.POST: 2}[self]


class QKNormScope(str, enum.Enum):
    """What one query/key norm normalises (with ``qk_norm``)."""

    HEAD = "head"
    """Each head's vector, with one weight of head_dim shared by all heads (Qwen3, Gemma 3, Phi-2's
    qk_layernorm)."""
    ALL_HEADS = "all-heads"
    """The whole projection output, all heads together: weights of q_size and kv_size (OLMo 2)."""
    EACH_HEAD = "each-head"
    """Each head's vector with a weight of its own, LayerNorm without bias (StableLM 2's LayerNormPerHead)."""


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


class MLAConfig(FrozenModel):
    """Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass through low-rank projections.

    Queries: ``hidden -> q_lora_rank -> RMSNorm -> heads x (qk_nope + qk_rope)`` (or one ``hidden -> heads x
    (qk_nope + qk_rope)`` projection when ``q_lora_rank`` is None). Keys/values: ``hidden -> kv_lora_rank + qk_rope``
    (the rotary part is one key shared by all heads), RMSNorm on the latent, ``kv_lora_rank -> heads x (qk_nope +
    v_head_dim)``; output ``heads x v_head_dim -> hidden`` (transformers models/deepseek_v2, DeepseekV2Attention).
    """

    q_lora_rank: int | None = Field(default=None, gt=0, description="Rank of the query compression; None: none.")
    kv_lora_rank: int = Field(gt=0, description="Rank of the joint key/value compression (the latent).")
    qk_nope_head_dim: int = Field(gt=0, description="Per-head query/key width without rotary embedding.")
    qk_rope_head_dim: int = Field(gt=0, description="Per-head query/key width with rotary embedding (decoupled).")
    v_head_dim: int = Field(gt=0, description="Per-head value width.")

    @property
    def qk_head_dim(self) -> int:
        """Width of one query (or key) head: the non-rotary and rotary parts together."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


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
