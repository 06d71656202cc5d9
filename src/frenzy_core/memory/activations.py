"""Saved activations of one transformer layer per micro-batch, term by term, for eager torch and Megatron-Core.

Every function takes arrays (one entry per configuration) and returns bytes on one rank for one micro-batch.
The derivation of each term is in docs/memory-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.hf import module_layout
from frenzy_core.config.model import ArchKind, ModelConfig, NormKind, PositionEmbedding
from frenzy_core.config.training import Attention, Framework, Precision, TrainingConfig
from frenzy_core.memory.torch_attention import FP32, MASK_BYTES
from frenzy_core.memory.torch_layers import norm_bytes, torch_layer

__all__ = [
    "EdgeActivations",
    "LayerActivations",
    "LogitBytes",
    "edge_activations",
    "layer_activations",
    "logit_bytes",
]

FloatArray = npt.NDArray[np.float64]

@dataclass(frozen=True)
class LayerActivations:
    """Bytes one layer keeps for backward for one micro-batch, on one rank."""

    dense: FloatArray
    """A dense layer without recomputation."""
    moe: FloatArray
    """An MoE layer without recomputation."""
    core_dense: FloatArray
    """The attention-core part of ``dense`` that selective recomputation drops (and rebuilds in backward)."""
    layer_input: FloatArray
    """The layer input: all full recomputation keeps per checkpointed chunk."""
    dispatch: FloatArray
    """Transient token-dispatcher buffers of one MoE layer (Megatron all-to-all output and its sorted copy)."""
    score_grad: FloatArray
    """Eager attention's backward: the gradient of the s x s probabilities (in the softmax's dtype) that exists
    beside the saved tensors while a layer runs its backward; 0 for fused kernels."""
    kind_excess: FloatArray
    """torch: how much the largest kind of layer (local or global attention) exceeds the average ``dense``, so that
    a recomputed layer's working set is the largest one's."""
    cache_delta: FloatArray
    """torch: what ``dense`` and ``moe`` hold more because the forward fills a KV cache (0 for checkpointed layers,
    which run with ``use_cache=False``)."""
    kv_cache: FloatArray
    """torch: the key/value copies the returned KV cache holds for one layer (0 when the model returns none)."""
    kv_extra: FloatArray
    """Of ``kv_cache``, what the layer does not also save for backward."""
    mlp_grad: FloatArray
    """torch: gradient temporaries beyond the saved tensors while a layer's MLP runs its backward."""
    freed_before_core: FloatArray
    """torch: what the MLP side of a layer saves, freed by its backward before the attention's backward runs."""
    masks: FloatArray
    """torch: attention masks the model builds once per forward (kept by each checkpointed micro-batch)."""


def _bytes(training: TrainingConfig) -> tuple[int, int, int]:
    """(residual stream, matmul output, saved linear input) bytes per element."""
    p = training.precision
    if p is Precision.FP32:
        return 4, 4, 4
    if p.is_amp:
        return 4, 2, 2  # autocast: fp32 residual stream and norms, bf16/fp16 matmuls
    lin = 1 if (p is Precision.FP8_MIXED and training.framework is Framework.MEGATRON) else 2
    return 2, 2, lin


def _megatron_layer(model: ModelConfig, training: TrainingConfig, tp: FloatArray, rep: FloatArray,
                    s_keys: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Megatron-Core + Transformer Engine (Korthikanti et al. 2022, section 4.1, generalised)."""
    h, q, kv, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    a = model.num_attention_heads
    _, b, lin = _bytes(training)
    p_h, p_a = model.hidden_dropout > 0, model.attention_dropout > 0
    # TE LayerNorm saves input, mean and rsigma (fp32); RMSNorm input and rsigma.
    ln = b * h + (2 * FP32 if model.norm is NormKind.LAYERNORM else FP32)
    mask = MASK_BYTES * h if p_h else 0
    attn = (ln + lin * h + mask) * rep + b * (q + 2 * kv) / tp + lin * q / tp
    if model.qk_norm:
        # TE q/k layernorm: input and rsigma (fp32) per head
        attn = attn + (b * (q + kv) + FP32 * (a + model.num_kv_heads)) / tp
    if training.attention is Attention.EAGER:
        # softmax output 2as^2b, dropout mask as^2b, dropout output 2as^2b (all / t)
        core = a / tp * s_keys * (b + ((MASK_BYTES + b) if p_a else 0))
    else:
        core = FP32 * a / tp + 0 * s_keys  # fused attention saves its output and the softmax statistics
    f_in = 2 * f if model.mlp.gated else f

    def body(width: int, width_in: int) -> float:
        return b * width_in + lin * width  # activation input, fc2 input (both / t)

    dense = (ln + lin * h + mask) * rep + body(f, f_in) / tp
    moe_mlp = np.asarray(0.0)
    if model.moe is not None:
        m = model.moe
        routed = m.top_k * (m.capacity_factor or 1.0)
        fe = m.expert_ffn_hidden_size
        fe_in = 2 * fe if model.mlp.gated else fe
        fs = m.shared_expert_ffn_hidden_size
        shared = body(fs, 2 * fs if model.mlp.gated else fs) / tp if fs else 0.0
        # router logits and probabilities (fp32); per routed token (gathered over etp = tp): permuted input,
        # expert activation input and fc2 input (/ etp), unpermute input kept for the probability gradient.
        moe_mlp = (ln + b * h + mask + 2 * FP32 * m.num_experts) * rep + shared + routed * (
            lin * h + body(fe, fe_in) / tp + b * h)
    layer_in = b * h * rep
    return attn + core + dense, attn + core + moe_mlp, np.asarray(core), np.asarray(layer_in)


def layer_activations(model: ModelConfig, training: TrainingConfig, *, tp: npt.ArrayLike, sp: npt.ArrayLike,
                      cp: npt.ArrayLike, seq_len: npt.ArrayLike, micro_batch_size: npt.ArrayLike
                      ) -> LayerActivations:
    """Saved bytes of one layer for one micro-batch on one rank (arrays broadcast together)."""
    tp_a = np.asarray(tp, dtype=np.float64)
    s_loc = np.asarray(seq_len, dtype=np.float64) / np.asarray(cp, dtype=np.float64)
    tokens = s_loc * np.asarray(micro_batch_size, dtype=np.float64)
    if training.framework is Framework.TORCH:
        t = torch_layer(model, training, tp_a, s_loc, np.asarray(micro_batch_size, dtype=np.float64))
        return LayerActivations(dense=tokens * t.dense, moe=tokens * t.moe, core_dense=tokens * t.core,
                                dispatch=np.zeros_like(tokens), score_grad=tokens * t.score_grad,
                                layer_input=tokens * t.layer_input, kind_excess=tokens * t.kind_excess,
                                cache_delta=tokens * t.cache_delta, kv_cache=tokens * t.kv_cache,
                                kv_extra=tokens * t.kv_extra, mlp_grad=tokens * t.mlp_grad,
                                freed_before_core=tokens * t.freed_before_core, masks=tokens * t.masks)
    rep = np.where(np.asarray(sp, dtype=bool), 1.0 / tp_a, 1.0)
    dense, moe, core, inp = _megatron_layer(model, training, tp_a, rep, s_loc)
    dispatch = np.zeros_like(tokens)
    if model.moe is not None:
        # token_dispatcher.py: the all-to-all output and sort_chunks_by_idxs' copy live together within the layer
        # (forward and backward); their backward needs only indices, so neither is saved.
        routed = model.moe.top_k * (model.moe.capacity_factor or 1.0)
        dispatch = 2.0 * _bytes(training)[1] * model.hidden_size * routed * tokens
    score_grad = np.zeros_like(tokens)
    if training.attention is Attention.EAGER:
        softmax_bytes = FP32 if training.precision.is_amp else _bytes(training)[1]
        score_grad = model.num_attention_heads / tp_a * s_loc * softmax_bytes * tokens
    zero = np.zeros_like(tokens)
    dense_t, moe_t = tokens * dense, tokens * moe
    return LayerActivations(dense=dense_t, moe=moe_t, core_dense=tokens * core, dispatch=dispatch,
                            score_grad=score_grad, layer_input=tokens * inp, kind_excess=zero, cache_delta=zero,
                            kv_cache=zero, kv_extra=zero, mlp_grad=zero, freed_before_core=zero, masks=zero)


@dataclass(frozen=True)
class EdgeActivations:
    """Saved bytes of the embedding (first stage) and final norm / head input (last stage) per micro-batch."""

    embedding: FloatArray
    head: FloatArray


def edge_activations(model: ModelConfig, training: TrainingConfig, *, tp: npt.ArrayLike, sp: npt.ArrayLike,
                     cp: npt.ArrayLike, seq_len: npt.ArrayLike, micro_batch_size: npt.ArrayLike
                     ) -> EdgeActivations:
    """Embedding lookups (token ids, dropout mask) and the final norm plus the head's saved input."""
    h = model.hidden_size
    tp_a = np.asarray(tp, dtype=np.float64)
    tokens = np.asarray(seq_len, dtype=np.float64) / np.asarray(cp) * np.asarray(micro_batch_size)
    bs, bm, _ = _bytes(training)
    mask = MASK_BYTES * h if model.hidden_dropout > 0 else 0
    ids = 8 * (2 if model.position_embedding is PositionEmbedding.LEARNED else 1)  # int64 ids saved by lookups
    if training.framework is Framework.MEGATRON:
        rep = np.where(np.asarray(sp, dtype=bool), 1.0 / tp_a, 1.0)
        ln = bm * h + (2 * FP32 if model.norm is NormKind.LAYERNORM else FP32)
        head: FloatArray = (ln + bm * h) * rep if model.final_norm else bm * h * rep
        if model.arch is ArchKind.ENCODER:
            head = head + 3 * bm * h * rep + 2 * FP32  # LM-head dense input, GeLU input, norm input
        return EdgeActivations(embedding=tokens * (mask * rep + ids), head=tokens * head)
    # the final norm, its output saved by the head (autocast: the head's cast copy)
    if model.final_norm:
        head_t = norm_bytes(model, training, 1 if model.lm_head else 0)
    else:
        head_t = (2 * h if training.precision.is_amp else bs * h) if model.lm_head else 0
    if model.arch is ArchKind.ENCODER and model.lm_head:
        head_t += bm * h + 2 * bm * h + bs * h + 2 * FP32  # transform dense in, gelu in/out, norm
    return EdgeActivations(embedding=tokens * (mask + ids) + 0 * tp_a, head=tokens * head_t + 0 * tp_a)


@dataclass(frozen=True)
class LogitBytes:
    """Logits and loss tensors of one micro-batch on the last stage."""

    saved: FloatArray
    """Kept from the loss forward to its backward."""
    forward_peak: FloatArray
    """Live while the loss is computed."""
    backward_peak: FloatArray
    """Live while the loss and the head's gradient are computed."""
    returned: FloatArray
    """What the model output holds (the logits; a bare backbone's last hidden state): live beyond the loss only in a
    loop that keeps the output (``keep_outputs``)."""


def logit_bytes(model: ModelConfig, training: TrainingConfig, *, tp: npt.ArrayLike, cp: npt.ArrayLike,
                seq_len: npt.ArrayLike, micro_batch_size: npt.ArrayLike) -> LogitBytes:
    """Logits, their fp32 copy, the softmax and its gradient (vocabulary split over tp in Megatron)."""
    tp_a = np.asarray(tp, dtype=np.float64)
    tokens = np.asarray(seq_len, dtype=np.float64) / np.asarray(cp) * np.asarray(micro_batch_size)
    bs, bm, _ = _bytes(training)
    v = model.vocab_size / tp_a * tokens * (1 if model.lm_head else 0)  # a bare backbone has no logits
    if training.framework is Framework.MEGATRON:
        # vocab_parallel_cross_entropy: logits.float() then exp/normalise in place; the fp32 softmax is saved and
        # turned into the gradient in place; the head's input gradient is cast back to the activation dtype.
        up = FP32 if bm != FP32 else 0
        return LogitBytes(saved=FP32 * v, forward_peak=(bm + up) * v, backward_peak=(FP32 + (bm if up else 0)) * v,
                          returned=0.0 * v)
    # The output holds the head's logits in the matmul dtype (no family returns an upcast copy in Transformers 5).
    returned = bm * v if model.lm_head else bs * model.hidden_size * tokens + 0 * tp_a
    # Gemma 2's final soft-capping: logits / cap -> tanh (its output saved) -> * cap, before the loss.
    capped = bm * v if model.final_logit_softcapping is not None else 0.0 * v
    if not module_layout(model).loss_upcasts_logits:
        if training.precision.is_amp:
            # BertForMaskedLM's CrossEntropyLoss under CUDA autocast: log_softmax in the logits' dtype (cross_entropy
            # passes it, so the fp32 policy does not apply) and nll_loss (fp32 list) on an fp32 copy it saves; the
            # backward peak is that copy, the nll gradient and the saved log_softmax output.
            return LogitBytes(saved=(bm + FP32) * v, forward_peak=(2 * bm + FP32) * v,
                              backward_peak=(bm + 2 * FP32) * v, returned=returned)
        # BertForMaskedLM applies CrossEntropyLoss to the logits as they are (no fp32 upcast).
        return LogitBytes(saved=bm * v, forward_peak=2 * bm * v, backward_peak=3 * bm * v, returned=returned)
    # HF ForCausalLMLoss: logits.float() (a copy unless already fp32), log_softmax output saved by nll_loss; the
    # framework loop keeps only the loss (HF Trainer.compute_loss drops the output), so the logits are freed once the
    # loss exists. Backward: the nll gradient and the log_softmax input gradient, both fp32, beside the saved output.
    upcast = FP32 if bm != FP32 else 0
    return LogitBytes(saved=FP32 * v + capped, forward_peak=(bm + upcast + FP32) * v + capped,
                      backward_peak=3 * FP32 * v + capped, returned=returned)
