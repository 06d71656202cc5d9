"""One micro-batch through one average transformer layer (and the output head) on one GPU, vectorised over
layout shapes: GEMMs by shape, the attention kernel, memory-bound kernels, fp8 quantisation, the kernel-launch
floor, and the tensor-, context- and expert-parallel traffic with what of it hides behind which compute.

The estimator evaluates this on the distinct (micro-batch tokens, tp, cp, ep, sequence-parallel) shapes of its
candidates and scales by layers and micro-batches. Formulas and sources: docs/time-model.md.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core.config.finetune import LoRAConfig
from frenzy_core.config.model import ArchKind, ModelConfig, NormKind, PositionEmbedding
from frenzy_core.config.trainable import adapter_counts, trains
from frenzy_core.config.training import Attention, Fp8Recipe, Framework, Precision, TrainingConfig
from frenzy_core.hardware.gpu import Links
from frenzy_core.timing.comm import group_bandwidth, ring_all_reduce_s, ring_latency_s, ring_one_way_s, send_s
from frenzy_core.timing.efficiency import GemmHardware, gemm_s, kernel_rate
from frenzy_core.timing.flops import BACKWARD_TO_FORWARD, FUSED_ATTENTION_BACKWARD_TO_FORWARD, causal_fraction
from frenzy_core.timing.gpu_rows import GpuTable, ParamRows, Rates
from frenzy_core.timing.overlap import chunked_hidden
from frenzy_core.timing.traffic import (
    BACKWARD_TRAFFIC_TO_FORWARD,
    EAGER_DROPOUT_SCORE_BYTES,
    EAGER_SCORE_BYTES,
    FP8_CAST_BYTES,
    LOGIT_BYTES,
    elementwise_elements_per_token,
    fp8_elements_per_token,
)

__all__ = ["LayerTerms", "fuses_all_gathers", "is_fused", "kernels_per_layer", "layer_terms"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class LayerTerms(NamedTuple):
    """Seconds of one micro-batch: per average layer (``*_fwd``/``*_bwd``), and for the head and loss."""

    gemm_fwd: FloatArray
    gemm_bwd: FloatArray
    attn_fwd: FloatArray
    attn_bwd: FloatArray
    elem_fwd: FloatArray
    elem_bwd: FloatArray
    score_fwd: FloatArray
    launch_fwd: FloatArray
    launch_bwd: FloatArray
    tp_fwd: FloatArray
    tp_bwd: FloatArray
    tp_hidden_fwd: FloatArray
    tp_hidden_bwd: FloatArray
    cp_fwd: FloatArray
    cp_bwd: FloatArray
    cp_hidden_fwd: FloatArray
    cp_hidden_bwd: FloatArray
    ep_fwd: FloatArray
    ep_bwd: FloatArray
    ep_hidden_fwd: FloatArray
    ep_hidden_bwd: FloatArray
    head_fwd: FloatArray
    head_bwd: FloatArray
    logits: FloatArray

    def take(self, index: npt.NDArray[np.intp]) -> LayerTerms:
        """The terms of candidates ``index`` (gathering from the distinct shapes)."""
        return LayerTerms(*(np.asarray(a)[index] for a in self))


def is_fused(training: TrainingConfig) -> bool:
    """Whether elementwise chains run as fused kernels: Megatron/Transformer Engine, or torch.compile."""
    return training.framework is Framework.MEGATRON or training.compile


def kernels_per_layer(model: ModelConfig, fused: bool) -> float:
    """GPU kernels one layer's forward pass launches (the backward launches about twice as many).

    Fused (Megatron/TE, compiled): 4 GEMMs, 2 norms, rotary, attention, activation, 2 residual adds. Eager
    (Hugging Face modules, op by op): separate Q, K and V GEMMs, RMSNorm as 6 ops, rotary as 10, the gated
    activation as 2, attention with its layout copies as 3, plus dropouts.
    """
    rotary = model.position_embedding is PositionEmbedding.ROTARY
    gemms = 4 + (1 if model.mlp.gated else 0)
    if fused:
        return float(gemms + 2 + (1 if rotary else 0) + 1 + 1 + 2)
    norms = 2 * (6 if model.norm is NormKind.RMSNORM else 1)
    dropouts = 2 if model.hidden_dropout > 0 else 0
    return float(gemms + 2 + norms + (10 if rotary else 0) + 3 + (2 if model.mlp.gated else 1) + 2 + dropouts)


class _Gemm(NamedTuple):
    n: float
    k: float
    shard_n: bool  # column-parallel (output split across TP ranks) or row-parallel (input split)
    token_share: float  # rows per token of the micro-batch (routed experts: their share of the tokens)
    copies: float  # GEMMs of this shape (routed experts on one rank)
    weight: float  # share of the layers that have it
    fp8: bool


def _layer_gemms(model: ModelConfig, fp8: bool, ep: float) -> dict[str, list[_Gemm]]:
    """The layer's GEMMs by role (qkv, proj, fc1, fc2, router), averaged over dense and MoE layers."""
    h, q, kv = float(model.hidden_size), float(model.q_size), float(model.kv_size)
    gate = 2.0 if model.mlp.gated else 1.0
    moe = model.moe
    moe_share = model.num_moe_layers / model.num_layers if moe is not None else 0.0
    out: dict[str, list[_Gemm]] = {
        "qkv": [_Gemm(q + 2 * kv, h, True, 1.0, 1.0, 1.0, fp8)],
        "proj": [_Gemm(h, q, False, 1.0, 1.0, 1.0, fp8)],
        "fc1": [_Gemm(gate * model.ffn_hidden_size, h, True, 1.0, 1.0, 1.0 - moe_share, fp8)],
        "fc2": [_Gemm(h, float(model.ffn_hidden_size), False, 1.0, 1.0, 1.0 - moe_share, fp8)],
        "router": [],
    }
    if moe is not None:
        local = moe.num_experts / ep
        share = moe.top_k / local  # balanced routing: each local expert gets top_k / local of the rank's tokens
        fe = float(moe.expert_ffn_hidden_size)
        out["fc1"].append(_Gemm(gate * fe, h, True, share, local, moe_share, fp8))
        out["fc2"].append(_Gemm(h, fe, False, share, local, moe_share, fp8))
        if moe.shared_expert_ffn_hidden_size:
            fs = float(moe.shared_expert_ffn_hidden_size)
            out["fc1"].append(_Gemm(gate * fs, h, True, 1.0, 1.0, moe_share, fp8))
            out["fc2"].append(_Gemm(h, fs, False, 1.0, 1.0, moe_share, fp8))
        out["router"].append(_Gemm(float(moe.num_experts), h, False, 1.0, 1.0, moe_share, False))
    return out


class _GemmTimes(NamedTuple):
    fwd: FloatArray
    dgrad: FloatArray
    wgrad: FloatArray
    fwd_chunked: FloatArray  # the forward GEMM split into tp row blocks (chunked TP overlap)
    dgrad_chunked: FloatArray


def _gemm_times(gemms: list[_Gemm], tokens: FloatArray, tp: FloatArray, rates: Rates, in_bytes: float,
                hw: GemmHardware, chunk: BoolArray | bool) -> _GemmTimes:
    """Forward, input- and weight-gradient seconds of ``gemms``; the tp-chunked forms where ``chunk`` (per row)."""
    zero = tokens * 0.0
    chunked = bool(np.any(chunk))
    fwd, dgrad, wgrad, fwd_c, dgrad_c = zero, zero, zero, zero, zero
    for g in gemms:
        m = tokens * g.token_share
        n = g.n / tp if g.shard_n else g.n + zero
        k = g.k + zero if g.shard_n else g.k / tp
        rate, nbytes = (rates.fp8_matmul, 1.0) if g.fp8 else (rates.matmul, in_bytes)
        w, b = g.weight, g.copies  # routed experts run as one grouped GEMM
        fwd = fwd + w * gemm_s(m, n, k, rate, rates.memory, nbytes, hw, b)
        dgrad = dgrad + w * gemm_s(m, k, n, rate, rates.memory, nbytes, hw, b)
        wgrad = wgrad + w * gemm_s(k, n, m, rate, rates.memory, nbytes, hw, b)
        if chunked:  # tp row blocks one after another (torch async TP)
            fwd_c = fwd_c + w * tp * gemm_s(m / tp, n, k, rate, rates.memory, nbytes, hw, b)
            dgrad_c = dgrad_c + w * tp * gemm_s(m / tp, k, n, rate, rates.memory, nbytes, hw, b)
    if not chunked:
        return _GemmTimes(fwd, dgrad, wgrad, fwd, dgrad)
    return _GemmTimes(fwd, dgrad, wgrad, np.where(chunk, fwd_c, fwd), np.where(chunk, dgrad_c, dgrad))


def _adapter_kernels(model: ModelConfig, training: TrainingConfig) -> float:
    """Kernels the LoRA adapters add to a layer's forward: ``result + lora_B(lora_A(dropout(x))) * scaling`` (PEFT
    ``lora.Linear.forward``): two GEMMs, the scaling and the add, and the dropout where it is on."""
    lora = training.lora
    if lora is None:
        return 0.0
    per_adapter = 4.0 + (1.0 if lora.dropout > 0 else 0.0)
    return per_adapter * len(adapter_counts(model, lora, model.ffn_hidden_size).projections)


def _frozen(t: _GemmTimes) -> _GemmTimes:
    """A frozen weight's GEMMs: no weight gradient (autograd computes only the input's, ``mm``'s backward)."""
    return t._replace(wgrad=0.0 * t.wgrad)


def _adapters(model: ModelConfig, lora: LoRAConfig, tokens: FloatArray, tp: FloatArray, rates: Rates,
              in_bytes: float, hw: GemmHardware) -> _GemmTimes:
    """The LoRA adapters' GEMMs of the average layer, x A then (x A) B per adapted projection, each with its input
    and weight gradients; A and B split over tp as their projection (config/trainable.py, ``adapter_counts``)."""
    zero = tokens * 0.0
    fwd, dgrad, wgrad = zero, zero, zero
    shared = model.moe.shared_expert_ffn_hidden_size if model.moe is not None else 0
    moe_share = model.num_moe_layers / model.num_layers if model.moe is not None else 0.0
    for share, ffn in ((1.0 - moe_share, model.ffn_hidden_size), (moe_share, shared)):
        if share == 0.0:
            continue
        for target, n_in, n_out, r in adapter_counts(model, lora, ffn).projections:
            a_in = n_in / tp if target.row_parallel else n_in + zero  # A: r x in, its columns split when row-parallel
            b_out = n_out + zero if target.row_parallel else n_out / tp  # B: out x r, its rows split when column-par.
            for m_n_k in ((tokens, r + zero, a_in), (tokens, b_out, r + zero)):
                m, n, k = m_n_k
                fwd = fwd + share * gemm_s(m, n, k, rates.matmul, rates.memory, in_bytes, hw, 1.0)
                dgrad = dgrad + share * gemm_s(m, k, n, rates.matmul, rates.memory, in_bytes, hw, 1.0)
                wgrad = wgrad + share * gemm_s(k, n, m, rates.matmul, rates.memory, in_bytes, hw, 1.0)
    return _GemmTimes(fwd, dgrad, wgrad, fwd, dgrad)


def _attention(model: ModelConfig, training: TrainingConfig, g: GpuTable, tokens: FloatArray, tp: FloatArray,
               cp: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Forward and backward seconds of one layer's attention core, with each row's kernel (``g.attention``)."""
    s = float(training.seq_len)
    chunk = s / cp  # each ring step (or the whole sequence without CP) is one kernel call of this length
    causal = causal_fraction(model, training.attention)
    rates, a, hw = g.rates, g.attention, g.gemm
    eager = training.attention is Attention.EAGER
    flash: tuple[FloatArray, FloatArray] | None = None
    if not eager and a.flash.any():
        flops = tokens * 4.0 * s * model.q_size * causal / tp
        fwd_rate = kernel_rate(rates.attention_peak, g.p.attention_efficiency, a.scale, a.ratio_fwd, a.fwd_plateau,
                               a.fwd_half, chunk)
        bwd_rate = kernel_rate(rates.attention_peak, g.p.attention_efficiency, a.scale, a.ratio_bwd, a.bwd_plateau,
                               a.bwd_half, chunk)
        flash = flops / fwd_rate, FUSED_ATTENTION_BACKWARD_TO_FORWARD * flops / bwd_rate
        if a.flash.all():
            return flash
    # Q K^T and P V as batched GEMMs over sequences and heads. Eager: every score, written to and read from HBM
    # (the softmax's own traffic is counted with the memory-bound kernels). Memory-efficient kernels keep the
    # scores on chip, skip masked blocks and recompute them in the backward pass, as flash kernels do.
    d = float(model.head_dim) + 0.0 * chunk
    heads = tokens / chunk * model.num_attention_heads / tp
    mem_bw = rates.memory if eager else np.inf
    fwd = (gemm_s(chunk, s + 0.0 * chunk, d, rates.matmul, mem_bw, 2.0, hw, heads)
           + gemm_s(chunk, d, s + 0.0 * chunk, rates.matmul, mem_bw, 2.0, hw, heads))
    if eager:
        return fwd, BACKWARD_TO_FORWARD * fwd
    tiled = causal * fwd, FUSED_ATTENTION_BACKWARD_TO_FORWARD * causal * fwd
    if flash is None:
        return tiled
    return np.where(a.flash, flash[0], tiled[0]), np.where(a.flash, flash[1], tiled[1])


def layer_terms(model: ModelConfig, training: TrainingConfig, g: GpuTable, links: Links, tokens: FloatArray,
                tp: FloatArray, cp: FloatArray, ep: FloatArray, sp: BoolArray) -> LayerTerms:
    """Seconds of one micro-batch of ``tokens`` tokens per GPU (after CP) through one average layer and the head,
    each row on its own GPU (``g``: the rows' figures, :meth:`GpuTable.at`)."""
    act = float(training.precision.activation_bytes)
    fp8 = training.precision is Precision.FP8_MIXED
    megatron = training.framework is Framework.MEGATRON
    h = float(model.hidden_size)
    p, rates, hw, share = g.p, g.rates, g.gemm, g.comm_share
    rep = np.where(sp, tp, 1.0)  # divisor of hidden-sized, replicated tensors

    # ---- GEMMs by role (MoE: per distinct ep). Transformer Engine runs the chunk GEMMs of its userbuffer overlap
    # on several streams at once (their tiles fill the GPU together); torch async TP runs them one after another.
    chunk = (p.tensor_parallel_overlap > 0) & (not megatron)
    roles = {name: _gemm_times(g, tokens, tp, rates, act, hw, chunk)
             for name, g in _layer_gemms(model, fp8, 1.0).items()} if model.moe is None else \
        _moe_roles(model, fp8, tokens, tp, ep, rates, act, hw, chunk)
    if training.lora is not None:  # a frozen base: input gradients only; the adapters train (docs/time-model.md)
        roles = {name: _frozen(r) for name, r in roles.items()}
        roles["lora"] = _adapters(model, training.lora, tokens, tp, rates, act, hw)
    gemm_fwd = sum((r.fwd for r in roles.values()), tokens * 0.0)
    gemm_bwd = sum((r.dgrad + r.wgrad for r in roles.values()), tokens * 0.0)
    attn_fwd, attn_bwd = _attention(model, training, g, tokens, tp, cp)

    # ---- memory-bound kernels, fp8 casts, eager score traffic
    elems = elementwise_elements_per_token(model, is_fused(training))
    elem_bytes = act * (elems.replicated / rep + elems.sharded / tp)
    elem_fwd = tokens * elem_bytes / rates.memory
    elem_bwd = BACKWARD_TRAFFIC_TO_FORWARD * elem_fwd
    if fp8:
        cast = FP8_CAST_BYTES[training.fp8_recipe]
        q_fwd, q_bwd = fp8_elements_per_token(model)
        elem_fwd = elem_fwd + tokens * cast * (q_fwd.replicated / rep + q_fwd.sharded / tp) / rates.memory
        elem_bwd = elem_bwd + tokens * cast * (q_bwd.replicated / rep + q_bwd.sharded / tp) / rates.memory
    eager = training.attention is Attention.EAGER
    per_score = EAGER_SCORE_BYTES + (EAGER_DROPOUT_SCORE_BYTES if model.attention_dropout > 0 else 0.0)
    score_fwd = tokens * per_score * model.num_attention_heads * training.seq_len / tp / rates.memory \
        if eager else tokens * 0.0
    elem_fwd = elem_fwd + score_fwd
    elem_bwd = elem_bwd + BACKWARD_TRAFFIC_TO_FORWARD * score_fwd

    # ---- kernel-launch floor: a layer takes at least its kernels' launch time
    floor = (kernels_per_layer(model, is_fused(training)) + _adapter_kernels(model, training)) * p.kernel_launch_s
    launch_fwd = np.maximum(floor - (gemm_fwd + attn_fwd + elem_fwd), 0.0)
    launch_bwd = np.maximum(2.0 * floor - (gemm_bwd + attn_bwd + elem_bwd), 0.0)

    # ---- tensor parallel
    tp_fwd, tp_bwd, tp_hidden_fwd, tp_hidden_bwd = _tensor_parallel(
        roles, p, links, tokens * h * act, tp, sp, megatron, share, fuses_all_gathers(training))

    cp_fwd, cp_bwd, cp_hidden_fwd, cp_hidden_bwd = _context_parallel(model, p, links, tokens, tp, cp, act, attn_fwd,
                                                                      attn_bwd, share)
    ep_fwd, ep_bwd, ep_hidden_fwd, ep_hidden_bwd = _expert_parallel(model, p, links, roles, tokens, tp, ep, rep, act,
                                                                     share)

    # ---- output head (last stage) and the loss
    head_n = float(model.vocab_size)
    head = _gemm_times([_Gemm(head_n, h, True, 1.0, 1.0, 1.0, False)], tokens, tp, rates, act, hw, False)
    head_trains = trains(model, training)[1]
    head_fwd, head_bwd = head.fwd, head.dgrad + (head.wgrad if head_trains else 0.0)
    if model.arch is ArchKind.ENCODER:  # BERT's h x h transform before the MLM head
        transform = _gemm_times([_Gemm(h, h, True, 1.0, 1.0, 1.0, False)], tokens, tp, rates, act, hw, False)
        head_fwd = head_fwd + transform.fwd
        head_bwd = head_bwd + transform.dgrad + (transform.wgrad if head_trains else 0.0)
    logits = tokens * LOGIT_BYTES * model.vocab_size / tp / rates.memory
    return LayerTerms(gemm_fwd, gemm_bwd, attn_fwd, attn_bwd, elem_fwd, elem_bwd, score_fwd, launch_fwd, launch_bwd,
                      tp_fwd, tp_bwd, tp_hidden_fwd, tp_hidden_bwd, cp_fwd, cp_bwd, cp_hidden_fwd, cp_hidden_bwd,
                      ep_fwd, ep_bwd, ep_hidden_fwd, ep_hidden_bwd, head_fwd, head_bwd, logits)


def _moe_roles(model: ModelConfig, fp8: bool, tokens: FloatArray, tp: FloatArray, ep: FloatArray, rates: Rates,
               act: float, hw: GemmHardware, chunk: BoolArray) -> dict[str, _GemmTimes]:
    """GEMM times by role when the layout's ep varies: evaluated per distinct ep value."""
    out: dict[str, _GemmTimes] = {}
    for e in np.unique(ep):
        mask = ep == e
        for name, gemms in _layer_gemms(model, fp8, float(e)).items():
            t = _gemm_times(gemms, tokens, tp, rates, act, hw, chunk)
            prev = out.get(name)
            out[name] = t if prev is None else _GemmTimes(*(np.where(mask, a, b) for a, b in zip(t, prev)))
    return out


def fuses_all_gathers(training: TrainingConfig) -> bool:
    """Whether chunked TP overlap also pipelines the all-gather -> GEMM pairs, not only GEMM -> reduce-scatter.

    torch async TP with rowwise-scaled fp8 does not: its compiler pass fuses the scaled GEMM -> reduce-scatter
    pattern but leaves all-gather -> scaled GEMM unfused (pytorch/pytorch#149990, open; measured on torchtitan
    Llama 3 70B: async TP 1.04x over vanilla with rowwise, 1.16x with tensorwise scales). Transformer Engine's
    userbuffer overlap and tensorwise scales pipeline both.
    """
    return not (training.precision is Precision.FP8_MIXED and training.fp8_recipe is Fp8Recipe.ROWWISE
                and training.framework is not Framework.MEGATRON)


def _tensor_parallel(roles: dict[str, _GemmTimes], p: ParamRows, links: Links, nbytes: FloatArray,
                     tp: FloatArray, sp: BoolArray, megatron: bool, share: FloatArray, gathers_fused: bool
                     ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """TP collectives of one layer and pass, each next to the GEMM that produces or consumes it.

    Forward: with sequence parallelism an all-gather before QKV and MLP-up and a reduce-scatter after the
    attention output and MLP-down (Korthikanti et al. 2022), else two all-reduces. Backward: the mirror images,
    plus (Megatron) the re-gather of the inputs of QKV and MLP-up for their weight gradients. Megatron issues
    the backward collectives of column-parallel layers asynchronously, under the other backward GEMM
    (core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication); torch runs them in line.
    A ``tensor_parallel_overlap`` share runs as tp-chunked collective+GEMM pipelines instead, at the cost of
    GEMMs tp times smaller; with ``gathers_fused`` False only the GEMM -> reduce-scatter pairs do
    (:func:`fuses_all_gathers`), the all-gathers stay as without overlap.
    """
    bw = group_bandwidth(tp, np.ones_like(tp), links, p.collective_efficiency)
    lat = ring_latency_s(tp, tp, links, p.collective_latency_s, p.ring_step_latency_s, p.network_step_latency_s)
    one_way = ring_one_way_s(nbytes, tp, bw, lat)
    all_reduce = ring_all_reduce_s(nbytes, tp, bw, lat + (lat - p.collective_latency_s))
    overlap = np.where(sp, p.tensor_parallel_overlap, 0.0)
    gather_overlap = overlap if gathers_fused else 0.0 * overlap
    keep = 1.0 - share
    q, pr, f1, f2 = roles["qkv"], roles["proj"], roles["fc1"], roles["fc2"]

    def pairs(items: list[tuple[FloatArray, FloatArray, FloatArray, bool, bool]]) -> tuple[FloatArray, FloatArray]:
        comm, hidden = nbytes * 0.0, nbytes * 0.0
        for x, gemm, gemm_chunked, asynchronous, gather in items:
            o = gather_overlap if gather else overlap
            default = np.minimum(x, gemm) if asynchronous else 0.0 * x
            chunked = chunked_hidden(x, gemm_chunked, tp)
            comm = comm + x + o * (gemm_chunked - gemm)
            hidden = hidden + keep * ((1.0 - o) * default + o * chunked)
        return comm, hidden

    # (collective, GEMM beside it, that GEMM chunked, hidden by Megatron's async backward, all-gather -> GEMM)
    sp_fwd = pairs([(one_way, q.fwd, q.fwd_chunked, False, True), (one_way, pr.fwd, pr.fwd_chunked, False, False),
                    (one_way, f1.fwd, f1.fwd_chunked, False, True), (one_way, f2.fwd, f2.fwd_chunked, False, False)])
    ar_fwd = pairs([(all_reduce, pr.fwd, pr.fwd, False, False), (all_reduce, f2.fwd, f2.fwd, False, False)])
    sp_items = [(one_way, pr.dgrad, pr.dgrad_chunked, False, True), (one_way, f2.dgrad, f2.dgrad_chunked, False, True),
                (one_way, q.wgrad, q.wgrad, megatron, False), (one_way, f1.wgrad, f1.wgrad, megatron, False)]
    if megatron:
        sp_items += [(one_way, q.dgrad, q.dgrad_chunked, True, True), (one_way, f1.dgrad, f1.dgrad_chunked, True, True)]
    sp_bwd = pairs(sp_items)
    ar_bwd = pairs([(all_reduce, q.wgrad, q.wgrad, megatron, False), (all_reduce, f1.wgrad, f1.wgrad, megatron, False)])
    tp_fwd, hid_fwd = (np.where(sp, a, b) for a, b in zip(sp_fwd, ar_fwd))
    tp_bwd, hid_bwd = (np.where(sp, a, b) for a, b in zip(sp_bwd, ar_bwd))
    return tp_fwd, tp_bwd, hid_fwd, hid_bwd


def _context_parallel(model: ModelConfig, p: ParamRows, links: Links, tokens: FloatArray, tp: FloatArray,
                      cp: FloatArray, act: float, attn_fwd: FloatArray, attn_bwd: FloatArray, share: FloatArray
                      ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Ring attention: cp - 1 sends of the key/value block per layer and pass (backward: and their gradients),
    each hidden behind one ring step of attention: (forward, backward, hidden forward, hidden backward)."""
    lat = ring_latency_s(2.0 + 0.0 * cp, tp * cp, links, p.collective_latency_s, p.ring_step_latency_s,
                         p.network_step_latency_s)  # one send: base + one hop
    step = np.where(cp > 1, send_s(2.0 * tokens * model.kv_size / tp * act,
                                   group_bandwidth(tp * cp, tp, links, p.collective_efficiency), lat), 0.0)
    steps = cp - 1.0
    o = p.context_parallel_overlap * (1.0 - share)
    return (steps * step, steps * 2.0 * step, o * steps * np.minimum(step, attn_fwd / cp),
            o * steps * np.minimum(2.0 * step, attn_bwd / cp))


def _expert_parallel(model: ModelConfig, p: ParamRows, links: Links, roles: dict[str, _GemmTimes],
                     tokens: FloatArray, tp: FloatArray, ep: FloatArray, rep: FloatArray, act: float, share: FloatArray
                     ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Dispatch and combine all-to-alls per MoE layer and pass, a share hidden behind the expert GEMMs."""
    if model.moe is None:
        zero = tokens * 0.0
        return zero, zero, zero, zero
    lat = ring_latency_s(2.0 + 0.0 * ep, tp * ep, links, p.collective_latency_s, p.ring_step_latency_s,
                         p.network_step_latency_s)  # all-to-all: concurrent sends, one hop deep
    a2a = tokens * model.moe.top_k * model.hidden_size * act / rep
    per_pass = model.num_moe_layers / model.num_layers * 2.0 * ring_one_way_s(
        a2a, ep, group_bandwidth(tp * ep, tp, links, p.collective_efficiency), lat)
    o = p.expert_parallel_overlap * (1.0 - share)
    return (per_pass, per_pass, o * np.minimum(per_pass, roles["fc1"].fwd + roles["fc2"].fwd),
            o * np.minimum(per_pass, roles["fc1"].dgrad + roles["fc2"].dgrad))
