"""Parameter counts of a :class:`ModelConfig`, by component and per layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from frenzy_core._base import FrozenModel
from frenzy_core.config.architecture import ArchKind, MLAConfig, NormKind, PositionEmbedding, QKNormScope

if TYPE_CHECKING:  # ModelConfig counts itself through this module
    from frenzy_core.config.model import ModelConfig

__all__ = [
    "LayerParams",
    "ParamCounts",
    "count_parameters",
    "embedding_parameters",
    "head_parameters",
    "latent_projection_shapes",
    "layer_parameters",
    "mlp_parameters",
    "norm_parameters",
    "qk_norm_parameters",
]


class LayerParams(FrozenModel):
    """Parameters of one transformer layer."""

    attention: int
    """Q, K, V and output projections (with their biases and any q/k norms; latent attention's projections and
    norms)."""
    mlp: int
    """Dense MLP, or the shared experts of an MoE layer."""
    experts: int
    """Routed experts of an MoE layer (0 for dense layers)."""
    router: int
    """MoE router (and shared-expert gate)."""
    norms: int
    """The layer's norms of the model width (two; one in a shared-norm parallel block; four in a sandwich)."""

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.experts + self.router + self.norms


class ParamCounts(FrozenModel):
    """Whole-model parameter counts by component; ``total`` counts tied weights once."""

    embedding: int
    """Word, position and token-type embeddings, plus an embedding norm."""
    vision: int
    """A vision tower and its projector held beside the language model (Gemma 3)."""
    layers: int
    """All transformer layers together."""
    experts: int
    """Routed-expert share of ``layers``."""
    final_norm: int
    head: int
    """Untied LM head (and its bias), or BERT's MLM head (transform, norm, output bias) and pooler."""
    total: int
    active: int
    """Parameters one token passes through (routed experts: top-k of them)."""


def norm_parameters(model: ModelConfig, width: int | None = None) -> int:
    """One norm layer of ``width`` (default: hidden size): LayerNorm has weight and bias, RMSNorm a weight."""
    n = model.hidden_size if width is None else width
    return 2 * n if model.norm is NormKind.LAYERNORM else n


def mlp_parameters(model: ModelConfig, ffn_hidden_size: int) -> int:
    """One MLP of the model's kind with the given intermediate size."""
    h, f = model.hidden_size, ffn_hidden_size
    if model.mlp.gated:
        weights, biases = 3 * h * f, 2 * f + h
    else:
        weights, biases = 2 * h * f, f + h
    return weights + (biases if model.linear_bias else 0)


def qk_norm_parameters(model: ModelConfig) -> int:
    """The query and key norms of one layer (0 without ``qk_norm``)."""
    if not model.qk_norm:
        return 0
    d = model.head_dim
    if model.qk_norm_scope is QKNormScope.ALL_HEADS:  # OLMo 2: RMSNorm(q_size), RMSNorm(kv_size)
        return norm_parameters(model, model.q_size) + norm_parameters(model, model.kv_size)
    if model.qk_norm_scope is QKNormScope.EACH_HEAD:  # StableLM: a bias-free LayerNorm(head_dim) per q and k head
        return (model.num_attention_heads + model.num_kv_heads) * d
    return 2 * norm_parameters(model, d)  # Qwen3, Gemma 3: one norm of head_dim each, shared by all heads


def latent_projection_shapes(model: ModelConfig, mla: MLAConfig) -> tuple[tuple[int, int], ...]:
    """(in, out) of each matmul of multi-head latent attention (DeepseekV2Attention): q_proj, or q_a_proj and
    q_b_proj; kv_a_proj_with_mqa (the latent plus the decoupled rotary key); kv_b_proj; o_proj."""
    h, heads = model.hidden_size, model.num_attention_heads
    q_out = heads * mla.qk_head_dim
    query = ((h, q_out),) if mla.q_lora_rank is None else ((h, mla.q_lora_rank), (mla.q_lora_rank, q_out))
    kv = ((h, mla.kv_lora_rank + mla.qk_rope_head_dim),
          (mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim)))
    return (*query, *kv, (model.v_size, h))


def _latent_attention_parameters(model: ModelConfig, mla: MLAConfig) -> int:
    # the projections' weights, the latent RMSNorms of their rank (q_a_layernorm, kv_a_layernorm) and o_proj's
    # bias; no other biases (attention_bias false)
    weights = sum(n_in * n_out for n_in, n_out in latent_projection_shapes(model, mla))
    norms = (mla.q_lora_rank or 0) + mla.kv_lora_rank
    return weights + norms + (model.hidden_size if model.linear_bias else 0)


def _attention_parameters(model: ModelConfig) -> int:
    if model.mla is not None:
        return _latent_attention_parameters(model, model.mla)
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    weights = h * (q + 2 * kv) + q * h
    bias = (q + 2 * kv if model.qkv_bias else 0) + (h if model.linear_bias else 0)
    return weights + bias + qk_norm_parameters(model)


def layer_parameters(model: ModelConfig, layer: int) -> LayerParams:
    """Parameters of 0-based ``layer`` (dense or MoE)."""
    attention = _attention_parameters(model)
    norms = model.norm_placement.norms_per_layer * norm_parameters(model)
    moe = model.moe
    if moe is None or not model.is_moe_layer(layer):
        return LayerParams(attention=attention, mlp=mlp_parameters(model, model.ffn_hidden_size), experts=0,
                           router=0, norms=norms)
    shared = mlp_parameters(model, moe.shared_expert_ffn_hidden_size) if moe.shared_expert_ffn_hidden_size else 0
    router = model.hidden_size * moe.num_experts + (model.hidden_size if moe.shared_expert_gate else 0)
    experts = moe.num_experts * mlp_parameters(model, moe.expert_ffn_hidden_size)
    return LayerParams(attention=attention, mlp=shared, experts=experts, router=router, norms=norms)


def embedding_parameters(model: ModelConfig) -> int:
    """Input embeddings: words, learned positions, token types, embedding norm."""
    h = model.hidden_size
    n = model.vocab_size * h
    if model.position_embedding is PositionEmbedding.LEARNED:
        n += model.max_position_embeddings * h
    n += model.type_vocab_size * h
    if model.embedding_norm:
        n += norm_parameters(model)
    return n


def head_parameters(model: ModelConfig) -> int:
    """Output-side parameters beyond the final norm (tied weights not counted again)."""
    h = model.hidden_size
    n = 0
    if model.pooler:
        n += h * h + h
    if not model.lm_head:
        return n
    if model.arch is ArchKind.ENCODER:
        # BERT MLM head: dense h x h + bias, a norm, and an output bias per vocabulary row.
        n += h * h + h + norm_parameters(model) + model.vocab_size
    if not model.tied_embeddings:
        n += model.vocab_size * h
        if model.arch is ArchKind.ENCODER:
            n += model.vocab_size  # untied BertLMPredictionHead: decoder.bias is no longer tied to its bias
    if model.lm_head_bias:
        n += model.vocab_size
    return n


def count_parameters(model: ModelConfig) -> ParamCounts:
    """Every parameter of ``model``, grouped by component."""
    kinds: dict[bool, tuple[LayerParams, int]] = {}  # layers differ only in being MoE or dense: one count each
    for i in range(model.num_layers):
        params, n = kinds.get(model.is_moe_layer(i)) or (layer_parameters(model, i), 0)
        kinds[model.is_moe_layer(i)] = (params, n + 1)
    layers = sum(p.total * n for p, n in kinds.values())
    experts = sum(p.experts * n for p, n in kinds.values())
    embedding = embedding_parameters(model)
    final_norm = norm_parameters(model) if model.final_norm else 0
    head = head_parameters(model)
    vision = model.vision_tower_params
    total = embedding + vision + layers + final_norm + head
    active = total - vision  # text tokens do not pass through the vision tower
    if model.moe is not None:
        inactive_share = 1 - model.moe.top_k / model.moe.num_experts
        active -= round(experts * inactive_share)
    return ParamCounts(embedding=embedding, vision=vision, layers=layers, experts=experts, final_norm=final_norm, head=head,
                       total=total, active=active)
