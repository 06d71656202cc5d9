"""Bytes moved by memory-bound (non-GEMM) kernels and by the optimizer step.

Counted kernel by kernel for Megatron-style fused kernels (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4, lists the same tensors): each elementwise kernel reads its
inputs and writes its output once; the backward kernel of each reads the output gradient and the saved input and
writes the input gradient, about twice the forward traffic.
"""

from __future__ import annotations

from typing import NamedTuple

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import Optimizer, Precision

__all__ = [
    "BACKWARD_TRAFFIC_TO_FORWARD",
    "EAGER_SCORE_BYTES",
    "LOGIT_BYTES",
    "ElementwiseElements",
    "elementwise_elements_per_token",
    "grad_reduce_bytes",
    "optimizer_bytes_per_param",
]

# Per token and layer, forward, in activation elements: two norms (read + write: 2 h each) and two fused
# bias-dropout-add kernels (read output and residual, write the sum, 1-byte mask: ~3.5 h each) = 11 h. These run
# on the full hidden state on every tensor-parallel rank unless sequence parallelism shards them.
_REPLICATED_PER_HIDDEN = 11.0

BACKWARD_TRAFFIC_TO_FORWARD = 2.0
"""Backward elementwise kernels read the output gradient and the saved input and write the input gradient."""

EAGER_SCORE_BYTES = 11.0
"""Forward bytes per attention score with unfused (eager) attention: write scores (2), fused scale-mask-softmax
read + write (4), dropout read + write + mask (5); the P V matmul's read is GEMM traffic (Korthikanti et al. 2022
count 5 saved bytes per score, of the same tensors)."""

LOGIT_BYTES = 52.0
"""Bytes per logit, forward and backward, of an unfused vocab cross-entropy (Megatron's
vocab_parallel_cross_entropy, torch's F.cross_entropy): bf16 -> fp32 cast (2 + 4), max (4), subtract (4 + 4),
exp (4 + 4), sum (4), softmax gradient (4 + 4), scale by the loss gradient (4 + 4), cast to bf16 (4 + 2)."""


class ElementwiseElements(NamedTuple):
    """Forward elements read + written per token by one (average) layer's memory-bound kernels."""

    replicated: float
    """Norms and residual adds: on the full hidden state of every TP rank (sharded by sequence parallelism)."""
    sharded: float
    """Head reshapes and the MLP activation: split across TP ranks."""


def elementwise_elements_per_token(model: ModelConfig) -> ElementwiseElements:
    """Elements the memory-bound kernels of one average layer move per token in the forward pass."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    # Q, K, V split into heads (read + write) and the attention output merged back (read + write).
    heads = 2.0 * (q + 2 * kv) + 2.0 * q
    # Activation function: bias-GeLU reads f, writes f; gated units read 2 f, write f.
    per_f = 3.0 if model.mlp.gated else 2.0
    dense = per_f * model.ffn_hidden_size
    moe = model.moe
    if moe is None:
        mlp = dense
    else:
        moe_mlp = per_f * (moe.top_k * moe.expert_ffn_hidden_size + moe.shared_expert_ffn_hidden_size)
        # Token permutation to and from the experts: read + write top_k copies of h, twice.
        moe_mlp += 4.0 * moe.top_k * h
        n_moe = model.num_moe_layers
        mlp = (n_moe * moe_mlp + (model.num_layers - n_moe) * dense) / model.num_layers
    return ElementwiseElements(replicated=_REPLICATED_PER_HIDDEN * h, sharded=heads + mlp)


def grad_reduce_bytes(precision: Precision) -> int:
    """Bytes per gradient element as reduced across data-parallel ranks: fp32 main grads except pure half."""
    # Megatron-LM's arguments.py forces accumulate_allreduce_grads_in_fp32 for bf16 ("bfloat16 requires gradient
    # accumulation and all-reduce to be done in fp32") unless --grad-reduce-in-bf16; DDP with AMP and fp32
    # training reduce fp32 gradients.
    return 2 if precision.is_pure_half else 4


def optimizer_bytes_per_param(precision: Precision, optimizer: Optimizer) -> float:
    """HBM bytes one parameter's optimizer step reads and writes (a memory-bound, fused update)."""
    master = 2 if precision.is_pure_half else 4
    state = {Optimizer.ADAMW: 2 * master, Optimizer.ADAM: 2 * master, Optimizer.SGD: 0,
             Optimizer.SGD_MOMENTUM: master, Optimizer.ADAM_8BIT: 2}[optimizer]
    grad = grad_reduce_bytes(precision)
    # Read + write the master weight and the states, read the gradient, write the half copy (mixed precision).
    return 2.0 * master + 2.0 * state + grad + (2.0 if precision.is_mixed else 0.0)
