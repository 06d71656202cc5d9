"""Saved activations of one transformer layer per micro-batch, term by term, for eager torch and Megatron-Core.

Every function takes arrays (one entry per configuration) and returns bytes on one rank for one micro-batch.
The derivation of each term is in docs/memory-model.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.finetune import LoRATarget
from frenzy_core.config.hf import ModuleLayout, module_layout
from frenzy_core.config.model import ArchKind, MLPKind, ModelConfig, NormKind, NormPlacement, PositionEmbedding
from frenzy_core.config.trainable import adapter_counts, fp32_adapters, projection_shapes
from frenzy_core.config.training import Attention, Framework, Precision, RecomputeModule, TrainingConfig
from frenzy_core.memory.torch_attention import FP32, MASK_BYTES
from frenzy_core.memory.torch_layers import norm_bytes, torch_layer

__all__ = [
    "EdgeActivations",
    "ExpertShard",
    "FrozenActivations",
    "LayerActivations",
    "LogitBytes",
    "edge_activations",
    "expert_shard",
    "frozen_activations",
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
    """What selective recomputation drops from ``dense`` (the attention core; Megatron: every module of
    ``recompute_modules``) and rebuilds in backward."""
    core_moe: FloatArray
    """The same for ``moe``."""
    work_dense: FloatArray
    """The most a dense layer's selective recomputation rebuilds at once (one module at a time)."""
    work_moe: FloatArray
    """The same for an MoE layer."""
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


@dataclass(frozen=True)
class ExpertShard:
    """How one rank's routed experts see the tokens: routed (token, expert) pairs they compute per token of the
    layer's sequence shard, and the expert tensor-parallel split of their widths."""

    routed: FloatArray
    etp: FloatArray


def expert_shard(model: ModelConfig, training: TrainingConfig, tp: npt.ArrayLike, etp: npt.ArrayLike | None = None,
                 ep: npt.ArrayLike = 1) -> ExpertShard:
    """Routed pairs per token: top-k, times the busiest rank's load over its fair share, times etp / tp (the
    dispatcher gathers tokens over the etp ranks that split an expert).

    The load factor is ``moe_load_imbalance`` capped by the capacity factor (tokens beyond capacity are dropped)
    where experts are spread over ep > 1 ranks; a rank holding every expert computes every routed pair, padded to
    capacity when there is a capacity factor. Default imbalance: the capacity factor, or 1.0 (docs/memory-model.md,
    section 11)."""
    tp_a = np.asarray(tp, dtype=np.float64)
    etp_a = tp_a if etp is None else np.where(np.asarray(etp) > 0, np.asarray(etp, dtype=np.float64), tp_a)
    moe = model.moe
    if moe is None:
        return ExpertShard(routed=0.0 * tp_a, etp=etp_a)
    cap = moe.capacity_factor
    imbalance = training.moe_load_imbalance if training.moe_load_imbalance is not None else (cap or 1.0)
    spread = min(imbalance, cap) if cap is not None else imbalance
    factor = np.where(np.asarray(ep) > 1, spread, cap or 1.0)
    return ExpertShard(routed=np.asarray(moe.top_k * factor * etp_a / tp_a), etp=etp_a)


def _bytes(training: TrainingConfig) -> tuple[int, int, int]:
    """(residual stream, matmul output, saved linear input) bytes per element."""
    p = training.precision
    if p is Precision.FP32:
        return 4, 4, 4
    if p.is_amp:
        return 4, 2, 2  # autocast: fp32 residual stream and norms, bf16/fp16 matmuls
    lin = 1 if (p is Precision.FP8_MIXED and training.framework is Framework.MEGATRON) else 2
    return 2, 2, lin


@dataclass(frozen=True)
class _MegatronLayer:
    """Per token, on one rank: what a dense and an MoE layer save, and what selective recompute drops from each
    and rebuilds at most at once in backward."""

    dense: FloatArray
    moe: FloatArray
    drop_dense: FloatArray
    drop_moe: FloatArray
    work_dense: FloatArray
    work_moe: FloatArray
    layer_input: FloatArray


def _mla_attention(model: ModelConfig, training: TrainingConfig, tp: FloatArray, rep: FloatArray,
                   stats: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Latent attention before its core (Megatron-Core ``MLASelfAttention.get_query_key_value_tensors``, TE spec
    with the latent norms fused into the up projections): (saved, dropped by ``mla_up_proj``, dropped by
    ``layernorm``). The input norm is a module of its own (``input_layernorm``); its output is the one input of
    both down projections. Each latent is saved by its up projection (input, statistics, normalised output); the
    key/value latent is a view that pins the down projection's whole output (latent + rotary key). The cores'
    query and key are concatenated copies, the value a contiguous copy. Under ``mla_up_proj`` the up projections
    run without grad (``CheckpointWithoutOutput``) and q, k, v are freed after the core: the latents and the
    rotary key (a gathered copy under sp) stay as the checkpoint's inputs."""
    mla = model.mla
    assert mla is not None
    h, a = model.hidden_size, model.num_attention_heads
    _, b, lin = _bytes(training)
    latents = (mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim
    norms = 2 if mla.q_lora_rank is not None else 1
    up = (b * latents + norms * stats + lin * ((mla.q_lora_rank or 0) + mla.kv_lora_rank)) * rep
    qkv = b * a * (2 * mla.qk_head_dim + mla.v_head_dim) / tp
    saved = (b * h + stats + lin * h) * rep + up + qkv + lin * a * mla.v_head_dim / tp
    # the rotary key the checkpoint keeps is a new tensor only when gathered over the sequence (sp, tp > 1); else
    # it is a view of the down projection's output, pinned anyway
    gathered_key = np.where(rep < 1, b * mla.qk_rope_head_dim, 0.0)
    up_drop = (norms * stats + lin * ((mla.q_lora_rank or 0) + mla.kv_lora_rank)) * rep + qkv - gathered_key
    return saved, up_drop, (stats + lin * h) * rep


def _megatron_layer(model: ModelConfig, training: TrainingConfig, tp: FloatArray, rep: FloatArray,
                    s_keys: FloatArray, ex: ExpertShard) -> _MegatronLayer:
    """Megatron-Core + Transformer Engine (Korthikanti et al. 2022, section 4.1, generalised), with what each of
    ``training.recompute_modules`` drops under selective recompute (docs/memory-model.md, section 3)."""
    h, q, kv, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    a = model.num_attention_heads
    _, b, lin = _bytes(training)
    p_h, p_a = model.hidden_dropout > 0, model.attention_dropout > 0
    # TE LayerNorm saves input, mean and rsigma (fp32); RMSNorm input and rsigma.
    stats = 2 * FP32 if model.norm is NormKind.LAYERNORM else FP32
    ln = b * h + stats
    mask = MASK_BYTES * h if p_h else 0
    zero = 0.0 * tp
    if model.mla is not None:
        mla_saved, up_drop, norm_drop = _mla_attention(model, training, tp, rep, stats)
        attn = mla_saved + mask * rep
    else:
        # the input norm is fused into linear_qkv (TE LayerNormColumnParallelLinear): no module to recompute
        attn = (ln + lin * h + mask) * rep + b * (q + 2 * kv) / tp + lin * q / tp
        up_drop, norm_drop = zero, zero
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

    # dense MLP: pre-MLP norm fused into linear_fc1; mlp recompute keeps the checkpoint's input (the norm's input)
    mlp_drop = (stats + lin * h) * rep + body(f, f_in) / tp
    dense = attn + core + (ln + lin * h + mask) * rep + body(f, f_in) / tp
    moe = 0.0 * tp
    act_drop = moe_norm_drop = zero
    if model.moe is not None:
        m = model.moe
        routed = ex.routed
        fe = m.expert_ffn_hidden_size
        fe_in = 2 * fe if model.mlp.gated else fe
        fs = m.shared_expert_ffn_hidden_size
        shared = body(fs, 2 * fs if model.mlp.gated else fs) / tp if fs else 0.0
        # router logits and probabilities (fp32); per routed token (gathered over etp): permuted input,
        # expert activation input and fc2 input (/ etp), unpermute input kept for the probability gradient.
        moe = attn + core + (ln + b * h + mask + 2 * FP32 * m.num_experts) * rep + shared + routed * (
            lin * h + body(fe, fe_in) / ex.etp + b * h)
        # moe_act (experts.py, TEGroupedMLP): the activation runs without grad and its output, fc2's input, is
        # freed after fc2; its input (fc1's output) stays as the checkpoint's input.
        act_drop = routed * lin * fe / ex.etp
        # layernorm: the MoE layer's pre_mlp_layernorm is a module of its own (router and shared expert read it)
        moe_norm_drop = (stats + b * h) * rep
    chosen = set(training.recompute_modules)
    M = RecomputeModule  # noqa: N806 (short alias)
    parts_dense = {M.CORE_ATTN: core + zero, M.LAYERNORM: norm_drop, M.MLA_UP_PROJ: up_drop, M.MLP: mlp_drop}
    parts_moe = {M.CORE_ATTN: core + zero, M.LAYERNORM: norm_drop + moe_norm_drop, M.MLA_UP_PROJ: up_drop,
                 M.MOE_ACT: act_drop}

    def dropped(parts: dict[RecomputeModule, FloatArray]) -> tuple[FloatArray, FloatArray]:
        """What the chosen modules drop together, and the largest one module rebuilds (one at a time)."""
        picked = [np.asarray(v) for k, v in parts.items() if k in chosen]
        total = sum(picked, zero)
        return np.asarray(total), np.asarray(functools.reduce(np.maximum, picked, zero))

    drop_d, work_d = dropped(parts_dense)
    drop_m, work_m = dropped(parts_moe)
    return _MegatronLayer(dense=np.asarray(dense), moe=np.asarray(moe), drop_dense=drop_d, drop_moe=drop_m,
                          work_dense=work_d, work_moe=work_m, layer_input=np.asarray(b * h * rep))


def layer_activations(model: ModelConfig, training: TrainingConfig, *, tp: npt.ArrayLike, sp: npt.ArrayLike,
                      cp: npt.ArrayLike, seq_len: npt.ArrayLike, micro_batch_size: npt.ArrayLike,
                      etp: npt.ArrayLike | None = None, ep: npt.ArrayLike = 1) -> LayerActivations:
    """Saved bytes of one layer for one micro-batch on one rank (arrays broadcast together); ``etp`` (0 or
    None: = tp) and ``ep`` place the routed experts (Megatron; torch runs its experts whole)."""
    tp_a = np.asarray(tp, dtype=np.float64)
    s_loc = np.asarray(seq_len, dtype=np.float64) / np.asarray(cp, dtype=np.float64)
    tokens = s_loc * np.asarray(micro_batch_size, dtype=np.float64)
    rep = np.where(np.asarray(sp, dtype=bool), 1.0 / tp_a, 1.0)
    if training.framework is Framework.TORCH:
        t = torch_layer(model, training, tp_a, s_loc, np.asarray(micro_batch_size, dtype=np.float64), rep)
        core_t = tokens * t.core
        return LayerActivations(dense=tokens * t.dense, moe=tokens * t.moe, core_dense=core_t, core_moe=core_t,
                                work_dense=core_t, work_moe=core_t,
                                dispatch=np.zeros_like(tokens), score_grad=tokens * t.score_grad,
                                layer_input=tokens * t.layer_input, kind_excess=tokens * t.kind_excess,
                                cache_delta=tokens * t.cache_delta, kv_cache=tokens * t.kv_cache,
                                kv_extra=tokens * t.kv_extra, mlp_grad=tokens * t.mlp_grad,
                                freed_before_core=tokens * t.freed_before_core, masks=tokens * t.masks)
    ex = expert_shard(model, training, tp_a, etp, ep)
    mg = _megatron_layer(model, training, tp_a, rep, s_loc, ex)
    dispatch = np.zeros_like(tokens)
    if model.moe is not None:
        # token_dispatcher.py: the all-to-all output and sort_chunks_by_idxs' copy live together within the layer
        # (forward and backward); their backward needs only indices, so neither is saved.
        dispatch = 2.0 * _bytes(training)[1] * model.hidden_size * ex.routed * tokens
    score_grad = np.zeros_like(tokens)
    if training.attention is Attention.EAGER:
        softmax_bytes = FP32 if training.precision.is_amp else _bytes(training)[1]
        score_grad = model.num_attention_heads / tp_a * s_loc * softmax_bytes * tokens
    zero = np.zeros_like(tokens)
    return LayerActivations(dense=tokens * mg.dense, moe=tokens * mg.moe, core_dense=tokens * mg.drop_dense,
                            core_moe=tokens * mg.drop_moe, work_dense=tokens * mg.work_dense,
                            work_moe=tokens * mg.work_moe, dispatch=dispatch, score_grad=score_grad,
                            layer_input=tokens * mg.layer_input, kind_excess=zero, cache_delta=zero,
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
    # the final norm, its output saved by the head (autocast: the head's cast copy); under sequence parallelism
    # the norm's own tensors are the rank's shard and the head saves the gathered output
    head_t: FloatArray | float
    if model.final_norm:
        own = norm_bytes(model, training, 0)
        seq_shard = np.where(np.asarray(sp, dtype=bool), 1.0 / tp_a, 1.0)
        head_t = norm_bytes(model, training, 1 if model.lm_head else 0) - own * (1.0 - seq_shard)
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
                seq_len: npt.ArrayLike, micro_batch_size: npt.ArrayLike, sp: npt.ArrayLike = False) -> LogitBytes:
    """Logits, their fp32 copy, the softmax and its gradient (vocabulary split over tp; torch with sequence
    parallelism: torchtitan's ``loss_parallel``)."""
    tp_a = np.asarray(tp, dtype=np.float64)
    tokens = np.asarray(seq_len, dtype=np.float64) / np.asarray(cp) * np.asarray(micro_batch_size)
    bs, bm, _ = _bytes(training)
    v = model.vocab_size / tp_a * tokens * (1 if model.lm_head else 0)  # a bare backbone has no logits
    if training.framework is Framework.MEGATRON:
        # vocab_parallel_cross_entropy: logits.float() then exp/normalise in place; the fp32 softmax is saved and
        # turned into the gradient in place; the head's input gradient is cast back to the activation dtype.
        up = FP32 if bm != FP32 else 0
        # --cross-entropy-loss-fusion (fused_cross_entropy.py, native): the same steps under torch.compile
        # (jit_fuser); the compiled gradient (calculate_gradients) functionalises the in-place index_put on the
        # saved softmax into one more fp32 buffer of its size before the bf16 cast (inductor's generated code).
        fused = FP32 if training.cross_entropy_fusion else 0
        return LogitBytes(saved=FP32 * v, forward_peak=(bm + up) * v,
                          backward_peak=(FP32 + fused + (bm if up else 0)) * v, returned=0.0 * v)
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
    hf = LogitBytes(saved=FP32 * v + capped, forward_peak=(bm + upcast + FP32) * v + capped,
                    backward_peak=3 * FP32 * v + capped, returned=returned)
    parallel = np.asarray(sp, dtype=bool)
    if not np.any(parallel):
        return hf
    # torchtitan's TP runs cross_entropy under loss_parallel (torch/distributed/tensor/parallel/loss.py) on the
    # vocabulary-sharded fp32 logits: _log_softmax is the decomposition (x - max, exp summed, then shifted -
    # logsumexp), so the shifted copy and the result (saved by nll_loss) live together; its backward
    # (_nll_loss_and_log_softmax_backward) makes zeros_like(x), exp(x), their sum and the product with the loss
    # gradient beside the saved result: four fp32 tensors.
    return LogitBytes(saved=np.where(parallel, FP32 * v, hf.saved),
                      forward_peak=np.where(parallel, (bm + upcast + 2 * FP32) * v, hf.forward_peak),
                      backward_peak=np.where(parallel, 4 * FP32 * v, hf.backward_peak), returned=returned)


def _hf_style(model: ModelConfig) -> tuple[ModuleLayout, bool]:
    """The module lineage the eager-torch terms follow (the family :func:`frenzy_core.config.hf.to_hf_config`
    builds and the probe measures, or the closest) and whether q/k/v come from one fused projection with rotary
    positions (GPT-NeoX, Phi-3: the fused output stays saved beside the rotated copies)."""
    layout = module_layout(model)
    fused_rope = (model.fused_qkv and model.position_embedding is PositionEmbedding.ROTARY
                  and layout not in (ModuleLayout.GPT2, ModuleLayout.BERT))
    return layout, fused_rope


@dataclass(frozen=True)
class FrozenActivations:
    """What frozen weights change in the tensors one layer saves for one micro-batch on one rank (bytes;
    positive: released). A linear whose weight is frozen does not save its input (its input gradient needs the
    weight only; autograd saves ``self`` of ``mm`` only when the weight's gradient is computed); LoRA adapters
    save their own input (or dropped copy) and their rank-r intermediate. Docs: memory-model.md, section 9."""

    frozen_dense: FloatArray
    """A dense layer whose weights are all frozen while a gradient flows through it."""
    frozen_moe: FloatArray
    adapted_dense: FloatArray
    """A dense layer with LoRA adapters (released minus what the adapters save)."""
    adapted_moe: FloatArray
    head: FloatArray
    """The head's saved input, when the head is frozen."""
    dequant: FloatArray
    """QLoRA: one dequantized weight in the compute dtype while a layer runs (forward and backward)."""


_HALF_UNDER_AUTOCAST = (LoRATarget.O, LoRATarget.DOWN)
"""Projections whose input is a half-precision matmul output under autocast (the attention output, the MLP's
activation product); the others read an fp32 norm output."""


def _released(group: float, consumers: list[bool], per_consumer: float, amp: bool) -> float:
    """Bytes of one linear-input tensor released: without autocast the consumers share it (released when none
    keeps it); under autocast each consumer saves its own cast copy."""
    if amp:
        return per_consumer * sum(not keep for keep in consumers)
    return group if not any(consumers) else 0.0


def frozen_activations(model: ModelConfig, training: TrainingConfig, *, tp: npt.ArrayLike, sp: npt.ArrayLike,
                       cp: npt.ArrayLike, seq_len: npt.ArrayLike, micro_batch_size: npt.ArrayLike,
                       etp: npt.ArrayLike | None = None, ep: npt.ArrayLike = 1) -> FrozenActivations:
    """Bytes frozen weights release from a layer's saved tensors (arrays broadcast together)."""
    tp_a = np.asarray(tp, dtype=np.float64)
    rep = np.where(np.asarray(sp, dtype=bool), 1.0 / tp_a, 1.0)
    tokens = np.asarray(seq_len, dtype=np.float64) / np.asarray(cp) * np.asarray(micro_batch_size)
    h, f = model.hidden_size, model.ffn_hidden_size
    bs, bm, _ = _bytes(training)
    megatron = training.framework is Framework.MEGATRON
    amp = training.precision.is_amp and not megatron
    lora = training.lora
    upcast = fp32_adapters(training)
    shared = model.moe.shared_expert_ffn_hidden_size if model.moe is not None else 0
    ex = expert_shard(model, training, tp_a, etp, ep)

    def adapted(ffn: int) -> tuple[dict[LoRATarget, bool], FloatArray]:
        """Which projections' adapters save their input, and what else the adapters save (per token)."""
        if lora is None:
            return {}, 0.0 * tp_a
        keep: dict[LoRATarget, bool] = {}
        added = 0.0 * tp_a
        mask = MASK_BYTES if lora.dropout > 0 else 0
        for target, n_in, _, r in adapter_counts(model, lora, ffn).projections:
            width = n_in / tp_a if target.row_parallel else n_in * (rep if megatron else 1.0)
            if upcast:
                # PEFT casts the input to fp32 for each adapter (its own copy): lora_A saves it (or its dropped
                # copy beside the mask), lora_B saves A's fp32 output; the base's input is not kept for them
                keep[target] = False
                added = added + FP32 * r + width * (FP32 + mask)
                continue
            if amp and target in _HALF_UNDER_AUTOCAST:
                # PEFT casts this half input to the fp32 adapters' dtype and lora_A's autocast casts that back: a
                # copy of its own (the attention output is no longer shared with the attention kernel's output)
                keep[target] = False
                added = added + bm * r + width * (bm + mask)
                continue
            keep[target] = lora.dropout == 0 or amp  # under autocast lora_A saves its cast (dropped) input
            dropped = width * (mask + (0 if amp else bm)) if lora.dropout > 0 else 0.0
            added = added + bm * r + dropped  # A's output, saved by B; the dropout mask and dropped input
        return keep, added

    keep_d, add_d = adapted(f)
    keep_m, add_m = adapted(shared)
    dequant = 0.0 * tp_a
    if lora is not None and lora.quantized:
        largest = max(n_in * n_out for n_in, n_out in projection_shapes(model, f).values())
        dequant = bm * largest / tp_a + 0.0 * tokens
    head_in = (bm * h * rep if megatron else (2 * h if amp else bs * h)) if model.lm_head else 0
    # (torch sequence parallelism: a norm's own tensors are the rank's sequence shard, rep = 1/tp)
    norm = _frozen_norm(model, training) * rep
    norms = norm * {NormPlacement.SHARED: 1, NormPlacement.SANDWICH: 4}.get(model.norm_placement, 2)
    head_norm = norm if (lora is not None and model.final_norm) else 0.0 * rep  # LoRA freezes the final norm too
    return FrozenActivations(
        frozen_dense=tokens * (_linear_inputs(model, training, {}, f, None, tp_a, rep) + norms),
        frozen_moe=tokens * (_linear_inputs(model, training, {}, shared, ex, tp_a, rep) + norms),
        adapted_dense=tokens * (_linear_inputs(model, training, keep_d, f, None, tp_a, rep) + norms - add_d),
        adapted_moe=tokens * (_linear_inputs(model, training, keep_m, shared, ex, tp_a, rep) + norms - add_m),
        head=tokens * (head_in + head_norm), dequant=np.asarray(dequant))


def _frozen_norm(model: ModelConfig, training: TrainingConfig) -> float:
    """Per token, what one frozen HF RMSNorm does not save: ``weight * y`` keeps the normalised ``y`` only for the
    weight's gradient (LlamaRMSNorm and its lineage); a LayerNorm saves its input, mean and rstd either way, and
    Transformer Engine's norms save the same tensors whether or not their weights train."""
    if training.framework is Framework.MEGATRON or model.norm is not NormKind.RMSNORM:
        return 0.0
    stream = _bytes(training)[0]
    fp32_product = stream == FP32 or module_layout(model).norm_product_fp32
    return float((FP32 if fp32_product else stream) * model.hidden_size)


def _linear_inputs(model: ModelConfig, training: TrainingConfig, keep: dict[LoRATarget, bool], ffn: int,
                   moe: ExpertShard | None, tp: FloatArray, rep: FloatArray) -> FloatArray:
    """Per token: the saved inputs of a layer's frozen linears that no adapter keeps (an MoE layer: its router,
    routed experts and a shared MLP of width ``ffn``)."""
    T = LoRATarget  # noqa: N806 (short alias)
    h, q = model.hidden_size, model.q_size
    bs, bm, lin = _bytes(training)
    megatron = training.framework is Framework.MEGATRON
    amp = training.precision.is_amp and not megatron
    kept = {t: keep.get(t, False) for t in T}
    if model.fused_qkv:
        kept[T.K] = kept[T.V] = kept[T.Q]
    up = [kept[T.GATE], kept[T.UP]] if model.mlp.gated and not model.fused_gate_up else [kept[T.GATE] or kept[T.UP]]
    if megatron:
        attn = (0.0 if (kept[T.Q] or kept[T.K] or kept[T.V]) else lin * h * rep) + (0.0 if kept[T.O] else lin * q / tp)
        mlp_in = 0.0 if any(up) and ffn else lin * h * rep  # also the router's input in an MoE layer
        down_bytes = lin
    else:
        layout, fused_rope = _hf_style(model)
        separate = layout not in (ModuleLayout.GPT2, ModuleLayout.BERT) and not fused_rope
        attn = _released(bs * h, [kept[T.Q], kept[T.K], kept[T.V]] if separate else [kept[T.Q]], 2 * h, amp) \
            + np.where(training.attention is Attention.EAGER and not kept[T.O], bm * q / tp, 0.0)
        consumers = ([False] if moe is not None else []) + (up if ffn else [])  # an MoE layer's router reads the norm too
        mlp_in = _released(bs * h, consumers, 2 * h, amp)
        down_bytes = bm
    down = 0.0 if (kept[T.DOWN] or model.mlp is MLPKind.RELU or not ffn) else down_bytes * ffn / tp
    out = attn + mlp_in + down
    if moe is not None and model.moe is not None:
        # routed experts (frozen, never adapted): the gathered input of their first matmul and their down input
        ex = moe
        be = lin if megatron else (bs if training.precision.is_amp else bm)
        fe = 0 if model.mlp is MLPKind.RELU else model.moe.expert_ffn_hidden_size
        out = out + ex.routed * be * (h + fe / ex.etp)
    return np.asarray(out)
