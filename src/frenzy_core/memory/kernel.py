"""The memory model of one pipeline stage as array arithmetic: shared by the scalar and batch estimators."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.training import Attention, Framework, RecomputeMethod, TrainingConfig
from frenzy_core.memory.activations import edge_activations, layer_activations, logit_bytes
from frenzy_core.memory.overhead import workspace_bytes
from frenzy_core.memory.recipe import state_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES
from frenzy_core.memory.shards import StageParams, StageShape, layer_constants, stage_params, stage_shape

__all__ = ["PHASES", "RECOMPUTE_CODES", "SCHEDULE_CODES", "ConfigArrays", "StageArrays", "stage_arrays"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "backward", "backward")
"""Label of each candidate peak: end of forward (loss), start of backward (loss gradient), optimizer step, late
backward (torch with one micro-batch: gradients almost all written when the first layer is recomputed), and the
top layer's backward (head gradient written, recompute working set live)."""
SCHEDULE_CODES = {"1f1b": 0, "interleaved": 1, "gpipe": 2}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}


@dataclass(frozen=True)
class ConfigArrays:
    """Per-configuration integers (arrays broadcasting together). Codes: see SCHEDULE_CODES, RECOMPUTE_CODES."""

    dp: IntArray
    tp: IntArray
    pp: IntArray
    vpp: IntArray
    cp: IntArray
    ep: IntArray
    micro_batch_size: IntArray
    seq_len: IntArray
    num_microbatches: IntArray
    zero_stage: IntArray
    """Effective ZeRO stage (Megatron's distributed optimizer counts as 1)."""
    recompute: IntArray
    recompute_num_layers: IntArray
    """0: the default (1 layer per chunk for uniform, all layers for block)."""
    sequence_parallel: IntArray
    schedule: IntArray


@dataclass(frozen=True)
class StageArrays:
    """Bytes per category at the peak phase of each stage/config, plus facts for reporting."""

    breakdown: dict[str, IntArray]
    peak_bytes: IntArray
    phase: IntArray
    """Index into PHASES."""
    num_layers: IntArray
    num_params: FloatArray
    inflight: FloatArray
    communicators: IntArray
    model_state_bytes: IntArray
    """Parameters, gradients, master weights and optimizer states as held at the optimizer step."""
    activation_bytes: IntArray
    """Largest activations (saved tensors plus the backward working set) at any moment of the passes."""


def _inflight(stage: IntArray, c: ConfigArrays) -> FloatArray:
    """Micro-batches of the stage's layers live at its peak (interleaved: chunk-micro-batches / vpp)."""
    pp, m, vpp = c.pp, c.num_microbatches, c.vpp
    one_f_one_b = np.minimum(pp - stage, m)
    # Megatron schedules.py, interleaved: warm-up (pp - rank - 1) * 2 + (vpp - 1) * pp chunk-micro-batches,
    # plus the one forward before the first backward; capped by all m * vpp of them.
    inter = np.minimum(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp) / vpp
    out = np.where(c.schedule == 1, inter, np.where(c.schedule == 2, m, one_f_one_b))
    return np.asarray(np.where(pp == 1, 1, out), dtype=np.float64)


@dataclass(frozen=True)
class _Activations:
    """Activation terms of one stage (bytes per rank)."""

    forward: FloatArray
    """Live at the end of the forward (autocast weight copies, the eager mask of the running micro-batch)."""
    backward: FloatArray
    """Saved tensors of every in-flight micro-batch at the start of backward."""
    work: FloatArray
    """Backward working set: what recomputation rebuilds for one layer/chunk."""
    top: FloatArray
    """Working set while the top layer runs its backward: ``work`` plus the gradient temporaries."""
    late: FloatArray
    """When the stage's first layer runs its backward: other micro-batches' tensors, this one's input, the work."""
    inflight: FloatArray


def _activations(model: ModelConfig, training: TrainingConfig, c: ConfigArrays, shape: StageShape,
                 prm: StageParams, stage: IntArray) -> _Activations:
    """Saved activations, recompute working set and autocast copies of one stage (docs/memory-model.md, 3)."""
    megatron = training.framework is Framework.MEGATRON
    tp = c.tp.astype(np.float64)
    kw = {"tp": c.tp, "sp": c.sequence_parallel, "cp": c.cp, "seq_len": c.seq_len,
          "micro_batch_size": c.micro_batch_size}
    la = layer_activations(model, training, **kw)
    ea = edge_activations(model, training, **kw)
    n = shape.num_layers.astype(np.float64)
    nm = shape.num_moe_layers.astype(np.float64)
    nd = n - nm
    inflight = _inflight(stage, c)
    full_layers = nd * la.dense + nm * la.moe
    biggest_layer = np.where(nm > 0, np.maximum(la.moe, np.where(nd > 0, la.dense, 0.0)), la.dense)
    k = c.recompute_num_layers.astype(np.float64)
    if training.recompute_method is RecomputeMethod.BLOCK:
        recomputed = np.where(k > 0, np.minimum(k * c.vpp, n), n)
        avg = np.where(n > 0, full_layers / np.maximum(n, 1), 0.0)
        full_saved = recomputed * la.layer_input + (n - recomputed) * avg
        full_ws = np.where(recomputed > 0, biggest_layer - la.layer_input, 0.0)
    else:
        k_eff = np.where(k > 0, k, 1.0)
        full_saved = np.ceil(n / k_eff) * la.layer_input
        full_ws = np.minimum(k_eff, n) * biggest_layer - la.layer_input
    saved_layers = np.where(c.recompute == 2, full_saved,
                            np.where(c.recompute == 1, full_layers - n * la.core_dense, full_layers))
    work = np.where(c.recompute == 2, full_ws, np.where(c.recompute == 1, la.core_dense, 0.0))
    work = np.where(n > 0, np.maximum(work, 0.0), 0.0)
    # MoE dispatcher buffers exist while an MoE layer runs, forward or backward.
    dispatch = np.where(nm > 0, la.dispatch, 0.0)
    work = np.maximum(work, dispatch)
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    acts = inflight * (saved_layers + first * ea.embedding + last * ea.head)
    if not megatron and training.attention is Attention.EAGER and model.causal:
        # HF builds one additive (b, 1, s, s) causal mask in the model's dtype per forward, shared by the layers;
        # checkpointed layers keep it as an input until their recomputation.
        mask = c.micro_batch_size * (c.seq_len / c.cp) * c.seq_len * float(training.precision.param_bytes)
        acts = acts + np.where(c.recompute == 2, inflight, 0.0) * mask
        acts_fwd = acts + np.where(c.recompute == 2, 0.0, mask)
    else:
        acts_fwd = acts
    acts_fwd = acts_fwd + dispatch
    if training.precision.is_amp:
        # autocast caches a half copy of every weight a matmul casts until the forward ends; saved tensors keep
        # them until each layer's backward. With full recomputation a layer saves nothing, so at the start of
        # backward only the head's copy is live, and each recomputed chunk re-casts its own during backward.
        vh = model.vocab_size * model.hidden_size if model.lm_head else 0
        same_stage_tied = first * last * (vh if model.tied_embeddings else 0)
        emb = first * model.vocab_size * model.hidden_size
        cast = (prm.split - emb + same_stage_tied) / tp + (prm.experts / (tp * c.ep) if megatron else 0.0)
        head_cast = last * vh / tp
        per_layer = np.where(n > 0, (cast - head_cast) / np.maximum(n, 1), 0.0)
        chunk = np.minimum(np.where(c.recompute_num_layers > 0, c.recompute_num_layers, 1), n)
        full = c.recompute == 2
        acts_fwd = acts_fwd + 2.0 * cast
        acts = acts + 2.0 * np.where(full, head_cast, cast)
        work = work + np.where(full, 2.0 * chunk * per_layer, 0.0)

    one_mb = saved_layers + last * ea.head
    late = acts - one_mb + np.minimum(la.layer_input, saved_layers) + work
    # While a layer runs its backward, eager attention's probability gradient exists beside its saved tensors.
    top = work + np.where(n > 0, la.score_grad, 0.0)
    return _Activations(forward=acts_fwd, backward=acts, work=work, top=top, late=np.maximum(late, 0.0),
                        inflight=inflight)


def stage_arrays(model: ModelConfig, training: TrainingConfig, c: ConfigArrays, stage: IntArray) -> StageArrays:
    """Memory of pipeline stage ``stage`` for each configuration in ``c`` (training gives the fixed recipe)."""
    sb = state_bytes(training)
    megatron = training.framework is Framework.MEGATRON
    shape = stage_shape(model, stage, c.pp, c.vpp)
    prm = stage_params(model, shape, c.tp)
    tp = c.tp.astype(np.float64)
    dpc = (c.dp * c.cp).astype(np.float64)
    dpe = dpc / c.ep
    dense_local = prm.split / tp + prm.replicated
    exp_local = prm.experts / (tp * c.ep)
    z = c.zero_stage

    def shard(from_stage: int) -> FloatArray:
        return np.asarray(np.where(z >= from_stage, dense_local / dpc + exp_local / dpe, dense_local + exp_local))

    n_params = dense_local + exp_local
    params = sb.param * shard(3)
    grads = sb.grad * shard(2)
    master = sb.master * shard(1)
    states = sb.states * shard(1)
    temps = sb.step_temp_local * shard(1) + sb.step_temp_largest * prm.largest_tensor

    # Communication buffers.
    lc = layer_constants(model)
    dense_layer = (lc.attn_split + lc.mlp_split) / tp + lc.attn_replicated + lc.mlp_replicated
    moe_layer = (lc.attn_split + lc.moe_shared_split) / tp + lc.attn_replicated + lc.moe_shared_replicated \
        + lc.moe_router
    moe_experts = lc.moe_experts / (tp * c.ep)
    layer_local = np.where(shape.num_moe_layers > 0, np.maximum(moe_layer + moe_experts, dense_layer), dense_layer)
    edge_local = dense_local - (shape.num_layers - shape.num_moe_layers) * dense_layer \
        - shape.num_moe_layers * moe_layer
    ddp = (z <= 1) & (dpc > 1) & (not megatron)
    # torch DDP keeps bucket buffers as large as all gradients (gradient_as_bucket_view=False, the default).
    comm_fb = np.where(ddp, sb.grad * n_params, 0.0)
    comm_step = comm_fb
    # ZeRO-2: one FSDP unit's unsharded gradients before its reduce-scatter; ZeRO-3: that plus the current and
    # prefetched units' gathered parameters, and the root unit (embeddings, head) gathered for the whole pass.
    comm_fb = np.where(z == 2, sb.grad * layer_local, comm_fb)
    comm_fb = np.where(z == 3, (2 * sb.param + sb.grad) * layer_local + sb.param * edge_local * (1 - 1 / dpc),
                       comm_fb)

    act = _activations(model, training, c, shape, prm, stage)
    acts_fwd, acts, work, inflight = act.forward, act.backward, act.work, act.inflight
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    lb = logit_bytes(model, training, tp=c.tp, cp=c.cp, seq_len=c.seq_len, micro_batch_size=c.micro_batch_size)
    n = shape.num_layers.astype(np.float64)

    # Logits/loss on the last stage: one micro-batch at a time, except GPipe holding all of them.
    logit_inflight = np.where((c.schedule == 2) & (c.pp > 1), c.num_microbatches, 1).astype(np.float64)
    logits_others = last * (logit_inflight - 1) * lb.saved
    logits_fwd = logits_others + last * lb.forward_peak
    logits_bwd = logits_others + last * lb.backward_peak

    # Gradients present while activations are live: Megatron's grad buffer always; torch's .grad tensors once a
    # backward has run in this step (zero_grad sets them to None): with gradient accumulation (m > 1) the later
    # micro-batches run with them (a stage whose peak precedes its first backward is overestimated by them).
    grads_fb = grads if megatron else np.where(c.num_microbatches > 1, grads, 0.0)
    # Once the loss gradient is through the head, its weight gradient exists (torch creates it then) while the
    # top layer runs its backward (and, with recomputation, its working set).
    head_grad = last * sb.grad * (model.vocab_size * model.hidden_size / tp if model.lm_head else 0.0)
    grads_top = np.maximum(grads_fb, head_grad)
    # torch, tied head and embedding on one stage: the weight's gradient node has two inputs, so autograd holds the
    # head's contribution in an input buffer until the embedding's arrives at the very end of backward
    # (torch/csrc/autograd/input_buffer.cpp) - a second V x h gradient while the layers run their backward.
    tied = not megatron and model.tied_embeddings and model.lm_head
    tied_buffer = first * head_grad * (1.0 if tied else 0.0)

    # Late backward: the stage's first layer is being recomputed; its own gradients and the embeddings' are not
    # written yet.
    emb_grad = model.vocab_size * model.hidden_size / tp * (1.0 - (last if model.tied_embeddings else 0.0))
    if model.position_embedding is PositionEmbedding.LEARNED:
        emb_grad = emb_grad + model.max_position_embeddings * model.hidden_size
    emb_grad = emb_grad + model.type_vocab_size * model.hidden_size
    k_late = np.minimum(np.where(c.recompute_num_layers > 0, c.recompute_num_layers, 1), n)
    not_yet = k_late * np.where(shape.num_moe_layers > 0, np.minimum(dense_layer, moe_layer + moe_experts),
                                dense_layer) + first * emb_grad
    grads_late = np.maximum(grads_top, grads - sb.grad * np.where(c.zero_stage >= 2, not_yet / dpc, not_yet)) \
        + tied_buffer
    acts_late = 0.0 * acts if megatron else act.late  # Megatron: the grad buffer is always there

    common = {"parameters": params, "master_weights": master, "optimizer_states": states,
              "workspaces": np.full(np.shape(params), float(workspace_bytes(model, training)))}
    zero = 0.0 * acts
    phases = [
        {**common, "gradients": grads_fb, "activations": acts_fwd, "logits_loss": logits_fwd,
         "optimizer_temporaries": zero, "comm_buffers": comm_fb},
        {**common, "gradients": grads_fb, "activations": acts, "logits_loss": logits_bwd,
         "optimizer_temporaries": zero, "comm_buffers": comm_fb},
        {**common, "gradients": grads, "activations": zero, "logits_loss": zero,
         "optimizer_temporaries": temps, "comm_buffers": comm_step},
        {**common, "gradients": grads_late, "activations": acts_late, "logits_loss": logits_others,
         "optimizer_temporaries": zero, "comm_buffers": comm_fb},
        {**common, "gradients": grads_top + tied_buffer, "activations": acts + act.top, "logits_loss": logits_others,
         "optimizer_temporaries": zero, "comm_buffers": comm_fb},
    ]
    shape_all = np.broadcast(stage, c.tp, c.pp, c.dp, c.seq_len, c.micro_batch_size).shape
    rounded = [{k2: np.broadcast_to(np.rint(v).astype(np.int64), shape_all) for k2, v in ph.items()}
               for ph in phases]
    totals = np.stack([sum(ph[cat] for cat in MEMORY_CATEGORIES) for ph in rounded])
    phase = np.argmax(totals, axis=0)
    breakdown = {cat: np.choose(phase, [ph[cat] for ph in rounded]) for cat in MEMORY_CATEGORIES}
    communicators = sum((np.asarray(x) > 1).astype(np.int64) for x in (c.dp * c.cp, c.tp, c.pp, c.cp, c.ep))
    states_total = np.sum([rounded[2][cat] for cat in ("parameters", "gradients", "master_weights",
                                                       "optimizer_states")], axis=0)
    act_peak = np.broadcast_to(np.rint(np.maximum(acts_fwd, acts + work)).astype(np.int64), shape_all)
    return StageArrays(breakdown=breakdown, peak_bytes=np.max(totals, axis=0), phase=phase,
                       model_state_bytes=states_total, activation_bytes=act_peak,
                       num_layers=np.broadcast_to(shape.num_layers, shape_all),
                       num_params=np.broadcast_to(n_params, shape_all), inflight=np.broadcast_to(inflight, shape_all),
                       communicators=np.broadcast_to(communicators, shape_all))
