"""Bytes moved by memory-bound (non-GEMM) kernels, by fp8 quantisation and by the optimizer step.

Counted kernel by kernel for Megatron-style fused kernels (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4, lists the same tensors): each elementwise kernel reads its
inputs and writes its output once; the backward kernel of each reads the output gradient and the saved input and
writes the input gradient, about twice the forward traffic. Eager PyTorch runs some of these as chains of
separate ops (Hugging Face's RMSNorm, rotary embedding and SwiGLU), each reading and writing its tensors;
torch.compile fuses such chains back into one kernel each (Ansel et al. 2024, "PyTorch 2", Inductor's pointwise
fusion), so compiled models are counted as fused.
"""

from __future__ import annotations

from typing import NamedTuple

from frenzy_core.config.model import ModelConfig, NormKind, PositionEmbedding
from frenzy_core.config.training import Fp8Recipe, Optimizer, Precision

__all__ = [
    "BACKWARD_TRAFFIC_TO_FORWARD",
    "EAGER_DROPOUT_SCORE_BYTES",
    "EAGER_SCORE_BYTES",
    "FP8_CAST_BYTES",
    "LOGIT_BYTES",
    "ElementwiseElements",
    "elementwise_elements_per_token",
    "fp8_elements_per_token",
    "grad_reduce_bytes",
    "optimizer_bytes_per_param",
]

# Per token and layer, forward, in activation elements: two norms (read + write: 2 h each) and two fused
# bias-dropout-add kernels (read output and residual, write the sum: 3 h each, plus a 1-byte dropout mask, 0.5 h,
# when hidden_dropout > 0) = 10 h (11 h with dropout). These run on the full hidden state on every
# tensor-parallel rank unless sequence parallelism shards them.
_REPLICATED_PER_HIDDEN = 10.0
_DROPOUT_MASK_PER_HIDDEN = 1.0

BACKWARD_TRAFFIC_TO_FORWARD = 2.0
"""Backward elementwise kernels read the output gradient and the saved input and write the input gradient."""

EAGER_SCORE_BYTES = 4.0
"""Forward bytes per attention score of unfused (eager) attention beyond its two batched GEMMs: the fused
scale-mask-softmax reads the scores and writes the probabilities (2 + 2); writing the scores and reading the
probabilities are the GEMMs' own traffic (Korthikanti et al. 2022 count the same tensors)."""

EAGER_DROPOUT_SCORE_BYTES = 5.0
"""Attention dropout on the probabilities: read (2), write (2) and a 1-byte mask, when ``attention_dropout`` > 0."""

LOGIT_BYTES = 52.0
"""Bytes per logit, forward and backward, of an unfused vocab cross-entropy (Megatron's
vocab_parallel_cross_entropy, torch's F.cross_entropy): bf16 -> fp32 cast (2 + 4), max (4), subtract (4 + 4),
exp (4 + 4), sum (4), softmax gradient (4 + 4), scale by the loss gradient (4 + 4), cast to bf16 (4 + 2)."""


# Eager PyTorch's extra traffic over the fused kernels, forward elements per token and layer (Hugging Face
# Transformers' modules, op by op). RMSNorm: to(fp32) (read h, write 2h), pow (4h), mean (2h), mul by rsqrt (4h),
# to(bf16) (3h), mul by the weight (2h) = 18 h against a fused kernel's 2 h. Rotary embedding on q (and k):
# rotate_half (neg + cat, 3 q), x cos (2 q), x sin (2 q), add (3 q) = 10 q against a fused kernel's 2 q. SwiGLU /
# GeGLU: act(gate) (2 f) then x up (3 f) = 5 f against a fused kernel's 3 f.
_EAGER_RMSNORM_EXTRA = 16.0
_EAGER_ROTARY_EXTRA = 8.0
_EAGER_GATED_EXTRA = 2.0
# Eager residual add without dropout: read two, write one (3 h) against the fused bias-dropout-add's 3.5 h;
# dropout as its own op: read h, write h and a 1-byte mask (2.5 h).
_EAGER_ADD = 3.0
_EAGER_DROPOUT = 2.5

FP8_CAST_BYTES: dict[Fp8Recipe, float] = {Fp8Recipe.DELAYED: 4.0, Fp8Recipe.CURRENT: 6.0, Fp8Recipe.ROWWISE: 10.0}
"""HBM bytes per element to quantise one GEMM input to fp8. Delayed scaling: one fused cast-transpose reads the
bf16 tensor (2) and writes it and its transpose in fp8 (1 + 1) (Transformer Engine cast_transpose, scale from the
amax history); current scaling first reads the tensor for its amax (+2); rowwise scaling quantises along each
axis separately, amax and cast for rows and for columns (2 x (2 + 2 + 1))."""


class ElementwiseElements(NamedTuple):
    """Forward elements read + written per token by one (average) layer's memory-bound kernels."""

    replicated: float
    """Norms and residual adds: on the full hidden state of every TP rank (sharded by sequence parallelism)."""
    sharded: float
    """Head reshapes and the MLP activation: split across TP ranks."""


def elementwise_elements_per_token(model: ModelConfig, fused: bool = True) -> ElementwiseElements:
    """Elements the memory-bound kernels of one average layer move per token in the forward pass.

    ``fused``: Megatron/Transformer Engine kernels or torch.compile; False: eager PyTorch ops.
    """
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
    if fused:
        mask = _DROPOUT_MASK_PER_HIDDEN if model.hidden_dropout > 0 else 0.0
        return ElementwiseElements(replicated=(_REPLICATED_PER_HIDDEN + mask) * h, sharded=heads + mlp)
    norms = 2.0 * (2.0 + (_EAGER_RMSNORM_EXTRA if model.norm is NormKind.RMSNORM else 0.0))
    adds = 2.0 * (_EAGER_ADD + (_EAGER_DROPOUT if model.hidden_dropout > 0 else 0.0))
    rotary = _EAGER_ROTARY_EXTRA * (q + kv) if model.position_embedding is PositionEmbedding.ROTARY else 0.0
    gated = _EAGER_GATED_EXTRA * model.ffn_hidden_size if model.mlp.gated else 0.0
    return ElementwiseElements(replicated=(norms + adds) * h, sharded=heads + mlp + rotary + gated)


def fp8_elements_per_token(model: ModelConfig) -> tuple[ElementwiseElements, ElementwiseElements]:
    """Elements quantised to fp8 per token and layer, (forward, backward): the inputs of the four projections
    (QKV, attention output, MLP up/gate, MLP down) in the forward pass, the gradients of their outputs in the
    backward pass. Hidden-sized tensors are replicated across TP ranks unless sequence parallel."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    moe = model.moe
    f_in = moe.top_k * moe.expert_ffn_hidden_size if moe is not None else model.ffn_hidden_size
    f_out = f_in * (2 if model.mlp.gated else 1)
    return (ElementwiseElements(replicated=2.0 * h, sharded=q + f_in),
            ElementwiseElements(replicated=2.0 * h, sharded=q + 2 * kv + f_out))


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
