"""Floating-point operations of a transformer's training step, term by term.

Generalises Narayanan et al. (SC21, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", appendix): a GPT layer's forward pass costs 24 b s h^2 (1 + s / 6h) and the LM head 2 b s h V;
the backward pass costs twice the forward; full recompute adds one more forward of the layers. Here each GEMM
is counted separately, so grouped-query attention, gated MLPs, MoE experts (top-k active), encoders and
causal-attention kernels that skip masked blocks are covered too. A multiply-add counts as 2 FLOPs.
"""

from __future__ import annotations

from frenzy_core.config.model import ArchKind, ModelConfig
from frenzy_core.config.training import Attention, Recompute

__all__ = [
    "BACKWARD_TO_FORWARD",
    "FUSED_ATTENTION_BACKWARD_TO_FORWARD",
    "attention_flops_per_token",
    "causal_fraction",
    "head_flops_per_token",
    "linear_flops_per_token",
    "mlp_flops_per_token",
    "training_flops",
]

BACKWARD_TO_FORWARD = 2.0
"""Backward GEMMs compute both input and weight gradients: twice the forward FLOPs (Narayanan et al. SC21)."""

FUSED_ATTENTION_BACKWARD_TO_FORWARD = 2.5
"""Flash-style attention kernels recompute the scores in the backward pass: 5 matmuls against the forward's 2
(Dao 2023, FlashAttention-2, section 4.1). Executed work only; model FLOPs keep the factor 2."""


def mlp_flops_per_token(model: ModelConfig, ffn_hidden_size: int) -> float:
    """Forward FLOPs of one MLP of the model's kind per token: 2 h f per matrix, 3 matrices when gated."""
    matrices = 3 if model.mlp.gated else 2
    return 2.0 * matrices * model.hidden_size * ffn_hidden_size


def linear_flops_per_token(model: ModelConfig) -> float:
    """Forward GEMM FLOPs per token of the average layer: QKV and output projections, MLP or routed experts.

    MoE layers count their top-k routed experts, shared experts and router; the average is over all layers.
    """
    h = model.hidden_size
    attention = 2.0 * h * (model.q_size + 2 * model.kv_size) + 2.0 * model.q_size * h
    dense_mlp = mlp_flops_per_token(model, model.ffn_hidden_size)
    moe = model.moe
    if moe is None:
        return attention + dense_mlp
    moe_mlp = moe.top_k * mlp_flops_per_token(model, moe.expert_ffn_hidden_size) + 2.0 * h * moe.num_experts
    if moe.shared_expert_ffn_hidden_size:
        moe_mlp += mlp_flops_per_token(model, moe.shared_expert_ffn_hidden_size)
    n_moe = model.num_moe_layers
    mean_mlp = (n_moe * moe_mlp + (model.num_layers - n_moe) * dense_mlp) / model.num_layers
    return attention + mean_mlp


def causal_fraction(model: ModelConfig, attention: Attention) -> float:
    """Share of the s x s score matrix a kernel computes: 1/2 for causal flash/SDPA kernels, else all of it."""
    # Flash and memory-efficient kernels skip fully masked blocks (Dao 2023); eager attention computes every score.
    return 0.5 if model.causal and attention is not Attention.EAGER else 1.0


def attention_flops_per_token(model: ModelConfig, seq_len: int, fraction: float = 1.0) -> float:
    """Forward FLOPs per token of one layer's attention core: Q K^T and P V, 2 s q each, times ``fraction``."""
    return 4.0 * seq_len * model.q_size * fraction


def head_flops_per_token(model: ModelConfig) -> float:
    """Forward FLOPs per token of the output head: logits 2 h V (BERT adds its h x h transform)."""
    h = model.hidden_size
    flops = 2.0 * h * model.vocab_size
    if model.arch is ArchKind.ENCODER:
        flops += 2.0 * h * h
    return flops


def training_flops(model: ModelConfig, seq_len: int, num_samples: int, recompute: Recompute = Recompute.NONE,
                   attention_fraction: float = 1.0) -> float:
    """FLOPs of forward + backward (+ recompute) over ``num_samples`` sequences.

    With ``attention_fraction=1`` (all scores, as Narayanan et al. count) and a GPT layer this is
    72 B s l h^2 (1 + s/6h + V/(12 l h)) without recompute and 96 B s l h^2 (1 + s/6h + V/(16 l h)) with
    full recompute. Selective recompute repeats the attention core's forward only (Korthikanti et al. 2022).
    """
    tokens = float(num_samples) * seq_len
    layer = linear_flops_per_token(model) + attention_flops_per_token(model, seq_len, attention_fraction)
    passes = 1.0 + BACKWARD_TO_FORWARD
    per_token = model.num_layers * layer * passes + head_flops_per_token(model) * passes
    if recompute is Recompute.FULL:
        per_token += model.num_layers * layer
    elif recompute is Recompute.SELECTIVE:
        per_token += model.num_layers * attention_flops_per_token(model, seq_len, attention_fraction)
    return tokens * per_token
