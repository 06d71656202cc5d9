"""The memory model of one pipeline stage as array arithmetic: shared by the scalar and batch estimators."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.config.training import Framework, Recompute, RecomputeMethod, TrainingConfig
from frenzy_core.memory.activations import edge_activations, layer_activations, logit_bytes
from frenzy_core.memory.overhead import workspace_bytes
from frenzy_core.memory.recipe import StateBytes, state_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES
from frenzy_core.memory.shards import StageParams, StageShape, layer_constants, stage_params, stage_shape

__all__ = ["PHASES", "StageArrays", "stage_arrays"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "backward", "backward", "backward")
"""Label of each candidate peak: end of forward (loss), start of backward (loss gradient), optimizer step, late
backward (torch with one micro-batch: gradients almost all written when the first layer is recomputed), the top
layer's backward (head gradient written, recompute working set live), and the end of backward (every gradient
written; a tied head's buffered contribution meets the embedding's). The two backward moments of a layer are each
the larger of its MLP's backward and its attention's (the MLP's gradients written, the probabilities' gradients
live)."""


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


@dataclass(frozen=True)
class _Modes:
    """The recompute mode and pipeline schedule of each layout, as masks."""

    full: BoolArray
    selective: BoolArray
    gpipe: BoolArray
    interleaved: BoolArray

    @classmethod
    def of(cls, layouts: LayoutArrays) -> _Modes:
        return cls(full=layouts.recompute == Recompute.FULL.code,
                   selective=layouts.recompute == Recompute.SELECTIVE.code,
                   gpipe=layouts.schedule == PipelineSchedule.GPIPE.code,
                   interleaved=layouts.schedule == PipelineSchedule.INTERLEAVED.code)


def _inflight(stage: IntArray, lay: LayoutArrays, modes: _Modes) -> FloatArray:
    """Micro-batches of the stage's layers live at its peak (interleaved: chunk-micro-batches / vpp)."""
    pp, m, vpp = lay.pp, lay.num_microbatches, lay.vpp
    one_f_one_b = np.minimum(pp - stage, m)
    # Megatron schedules.py, interleaved: warm-up (pp - rank - 1) * 2 + (vpp - 1) * pp chunk-micro-batches,
    # plus the one forward before the first backward; capped by all m * vpp of them.
    inter = np.minimum(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp) / vpp
    out = np.where(modes.interleaved, inter, np.where(modes.gpipe, m, one_f_one_b))
    return np.asarray(np.where(pp == 1, 1, out), dtype=np.float64)


@dataclass(frozen=True)
class _Activations:
    """Activation terms of one stage (bytes per rank)."""

    forward: FloatArray
    """Live at the end of the forward (autocast weight copies, the masks and KV cache of the running micro-batch)."""
    backward: FloatArray
    """Saved tensors of every in-flight micro-batch at the start of backward."""
    work: FloatArray
    """Backward working set: what recomputation rebuilds for one layer/chunk."""
    top: FloatArray
    """Working set while the top layer runs its MLP's backward: ``work`` plus the MLP's gradient temporaries."""
    top_attention: FloatArray
    """While it runs its attention's backward: ``work`` less the MLP's freed tensors, plus the probabilities'
    gradients."""
    late: FloatArray
    """When the stage's first layer runs its MLP's backward: other micro-batches' tensors, this one's first layer
    (as saved, or rebuilt) and the MLP's gradient temporaries."""
    late_attention: FloatArray
    """When it runs its attention's backward: as ``late`` with the MLP's tensors freed and the probabilities'
    gradients instead."""
    inflight: FloatArray
    kv_cache: FloatArray
    """The KV cache the stage's layers fill in one forward (torch, a model that returns one, no checkpointing)."""
    kv_extra: FloatArray
    """Of that cache, what the layers do not also save for backward."""
    kv_first: FloatArray
    """Of the cache, what the first layer also saves for backward (alive anyway while it runs its backward)."""


def _activations(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, modes: _Modes, shape: StageShape,
                 held: StageParams, stage: IntArray) -> _Activations:
    """Saved activations, recompute working set and autocast copies of one stage (docs/memory-model.md, 3)."""
    megatron = training.framework is Framework.MEGATRON
    tp = lay.tp.astype(np.float64)
    kw = {"tp": lay.tp, "sp": lay.active_sequence_parallel, "cp": lay.cp, "seq_len": lay.seq_len,
          "micro_batch_size": lay.micro_batch_size}
    layer = layer_activations(model, training, **kw)
    edge = edge_activations(model, training, **kw)
    n = shape.num_layers.astype(np.float64)
    n_moe = shape.num_moe_layers.astype(np.float64)
    n_dense = n - n_moe
    inflight = _inflight(stage, lay, modes)
    # Checkpointed layers run with use_cache=False (Transformers turns the cache off for gradient checkpointing).
    no_cache = np.where(modes.full, layer.cache_delta, 0.0)
    dense, moe = layer.dense - no_cache, layer.moe - no_cache
    full_layers = n_dense * dense + n_moe * moe
    biggest_layer = layer.kind_excess + np.where(
        n_moe > 0, np.maximum(moe, np.where(n_dense > 0, dense, 0.0)), dense)
    k = lay.recompute_num_layers.astype(np.float64)
    if training.recompute_method is RecomputeMethod.BLOCK:
        recomputed = np.where(k > 0, np.minimum(k * lay.vpp, n), n)
        avg = np.where(n > 0, full_layers / np.maximum(n, 1), 0.0)
        full_saved = recomputed * layer.layer_input + (n - recomputed) * avg
        full_work = np.where(recomputed > 0, biggest_layer - layer.layer_input, 0.0)
    else:
        k_eff = np.where(k > 0, k, 1.0)
        full_saved = np.ceil(n / k_eff) * layer.layer_input
        full_work = np.minimum(k_eff, n) * biggest_layer - layer.layer_input
    saved_layers = np.where(modes.full, full_saved,
                            np.where(modes.selective, full_layers - n * layer.core_dense, full_layers))
    work = np.where(modes.full, full_work, np.where(modes.selective, layer.core_dense, 0.0))
    work = np.where(n > 0, np.maximum(work, 0.0), 0.0)
    # MoE dispatcher buffers exist while an MoE layer runs, forward or backward.
    dispatch = np.where(n_moe > 0, layer.dispatch, 0.0)
    work = np.maximum(work, dispatch)
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    acts = inflight * (saved_layers + first * edge.embedding + last * edge.head)
    # torch: the attention masks the model builds once per forward live through it; checkpointed layers keep them
    # as inputs until their recomputation (one set per micro-batch in flight).
    acts = acts + np.where(modes.full, inflight, 0.0) * layer.masks
    acts_fwd = acts + np.where(modes.full, 0.0, layer.masks) + dispatch
    kv_layer = np.where(modes.full, 0.0, layer.kv_cache)
    kv_extra = np.where(modes.full, 0.0, layer.kv_extra)
    acts_fwd = acts_fwd + n * kv_extra  # the cache this forward fills, beyond what its layers save
    if training.precision.is_amp:
        # autocast caches a half copy of every weight a matmul casts until the forward ends; saved tensors keep
        # them until each layer's backward. With full recomputation a layer saves nothing, so at the start of
        # backward only the head's copy is live, and each recomputed chunk re-casts its own during backward.
        vh = model.vocab_size * model.hidden_size if model.lm_head else 0
        same_stage_tied = first * last * (vh if model.tied_embeddings else 0)
        emb = first * model.vocab_size * model.hidden_size
        cast = (held.split - emb + same_stage_tied) / tp + (held.experts / (tp * lay.ep) if megatron else 0.0)
        head_cast = last * vh / tp
        per_layer = np.where(n > 0, (cast - head_cast) / np.maximum(n, 1), 0.0)
        chunk = np.minimum(np.where(lay.recompute_num_layers > 0, lay.recompute_num_layers, 1), n)
        acts_fwd = acts_fwd + 2.0 * cast
        acts = acts + 2.0 * np.where(modes.full, head_cast, cast)
        work = work + np.where(modes.full, 2.0 * chunk * per_layer, 0.0)

    one_mb = saved_layers + last * edge.head
    # The first layer while it runs its backward: rebuilt (its chunk's input and working set) or as saved.
    per_layer_saved = np.where(n > 0, saved_layers / np.maximum(n, 1), 0.0)
    first_layer = np.where(modes.full, np.minimum(layer.layer_input, saved_layers), per_layer_saved) + work
    # While a layer runs its backward, its MLP's gradient temporaries exist beside its saved tensors, and then,
    # its MLP's saved tensors freed, eager attention's probability gradients.
    mlp_temps = np.where(n > 0, layer.mlp_grad, 0.0)
    attn_temps = np.where(n > 0, layer.score_grad - layer.freed_before_core, 0.0)
    late = acts - one_mb + first_layer + mlp_temps
    late_attn = acts - one_mb + first_layer + attn_temps
    top = work + mlp_temps
    top_attn = work + attn_temps
    kv_first = np.where(n > 0, kv_layer - kv_extra, 0.0)
    return _Activations(forward=acts_fwd, backward=acts, work=work, top=top, top_attention=top_attn,
                        late=np.maximum(late, 0.0),
                        late_attention=np.maximum(late_attn, 0.0),
                        inflight=inflight, kv_cache=n * kv_layer, kv_extra=n * kv_extra, kv_first=kv_first)


@dataclass(frozen=True)
class _States:
    """Model states of one rank (bytes), after tensor, expert and ZeRO sharding."""

    params: FloatArray
    grads: FloatArray
    master: FloatArray
    optimizer: FloatArray
    temporaries: FloatArray
    """Optimizer-step temporaries."""
    num_params: FloatArray
    """Parameters the rank holds before ZeRO sharding."""
    dense: FloatArray
    """Of those, the dense (non-expert) ones."""


def _model_states(per_param: StateBytes, lay: LayoutArrays, held: StageParams, tp: FloatArray,
                  replicas: FloatArray) -> _States:
    """Weights, gradients, master weights, optimizer states and step temporaries, ZeRO-sharded over the
    ``replicas`` (dp x cp) from the stage each one starts being sharded at."""
    expert_replicas = replicas / lay.ep
    dense = held.split / tp + held.replicated
    experts = held.experts / (tp * lay.ep)
    zero = lay.effective_zero_stage

    def shard(from_stage: int) -> FloatArray:
        return np.asarray(np.where(zero >= from_stage, dense / replicas + experts / expert_replicas, dense + experts))

    temporaries = per_param.step_temp_local * shard(1) + per_param.step_temp_largest * held.largest_tensor
    return _States(params=per_param.param * shard(3), grads=per_param.grad * shard(2),
                   master=per_param.master * shard(1), optimizer=per_param.states * shard(1),
                   temporaries=temporaries, num_params=dense + experts, dense=dense)


@dataclass(frozen=True)
class _LayerParams:
    """Parameters one rank holds of one layer."""

    dense: FloatArray
    moe: FloatArray
    """An MoE layer without its routed experts."""
    experts: FloatArray
    """The routed experts of an MoE layer."""
    attention: FloatArray
    """The attention part of a layer (with its norms)."""


def _layer_params(model: ModelConfig, lay: LayoutArrays, tp: FloatArray) -> _LayerParams:
    lc = layer_constants(model)
    attention = lc.attn_split / tp + lc.attn_replicated
    dense = attention + lc.mlp_split / tp + lc.mlp_replicated
    moe = attention + lc.moe_shared_split / tp + lc.moe_shared_replicated + lc.moe_router
    return _LayerParams(dense=dense, moe=moe, experts=lc.moe_experts / (tp * lay.ep), attention=attention)


def _comm_buffers(per_param: StateBytes, megatron: bool, lay: LayoutArrays, shape: StageShape, states: _States,
                  layer: _LayerParams, replicas: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Communication buffers during the passes and at the optimizer step."""
    zero = lay.effective_zero_stage
    layer_local = np.where(shape.num_moe_layers > 0, np.maximum(layer.moe + layer.experts, layer.dense), layer.dense)
    edge_local = states.dense - (shape.num_layers - shape.num_moe_layers) * layer.dense \
        - shape.num_moe_layers * layer.moe
    ddp = (zero <= 1) & (replicas > 1) & (not megatron)
    # torch DDP keeps bucket buffers as large as all gradients (gradient_as_bucket_view=False, the default).
    passes = np.where(ddp, per_param.grad * states.num_params, 0.0)
    step = passes
    # ZeRO-2: one FSDP unit's unsharded gradients before its reduce-scatter; ZeRO-3: that plus the current and
    # prefetched units' gathered parameters, and the root unit (embeddings, head) gathered for the whole pass.
    passes = np.where(zero == 2, per_param.grad * layer_local, passes)
    passes = np.where(zero == 3, (2 * per_param.param + per_param.grad) * layer_local
                      + per_param.param * edge_local * (1 - 1 / replicas), passes)
    return passes, step


@dataclass(frozen=True)
class _Gradients:
    """Gradients live at each moment of the passes (bytes per rank)."""

    passes: FloatArray
    """While activations are live."""
    top: FloatArray
    """While the top layer runs its MLP's backward (the head's gradient written)."""
    top_attention: FloatArray
    """While it runs its attention's backward (its MLP's gradients written too)."""
    late: FloatArray
    """While the stage's first layer runs its MLP's backward."""
    late_attention: FloatArray
    """While the stage's first layer runs its attention's backward."""
    tied_buffer: FloatArray
    """torch's autograd input buffer of a tied head and embedding on one stage."""


def _gradients(model: ModelConfig, megatron: bool, per_param: StateBytes, lay: LayoutArrays, shape: StageShape,
               states: _States, layer: _LayerParams, tp: FloatArray, replicas: FloatArray) -> _Gradients:
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    n = shape.num_layers.astype(np.float64)
    grads = states.grads
    # Megatron's grad buffer always exists; torch's .grad tensors once a backward has run in this step (zero_grad
    # sets them to None): with gradient accumulation (m > 1) the later micro-batches run with them (a stage whose
    # peak precedes its first backward is overestimated by them).
    passes = grads if megatron else np.where(lay.num_microbatches > 1, grads, 0.0)
    # Once the loss gradient is through the head, its weight gradient exists (torch creates it then) while the
    # top layer runs its backward (and, with recomputation, its working set).
    head_grad = last * per_param.grad * (model.vocab_size * model.hidden_size / tp if model.lm_head else 0.0)
    # torch, tied head and embedding on one stage: the weight's gradient node has two inputs, so autograd holds the
    # head's contribution in its input buffer (torch/csrc/autograd/input_buffer.cpp) and writes .grad only when the
    # embedding's arrives at the very end of backward: one V x h gradient while the layers run their backward, in
    # the buffer, and two at the end (the buffered one and the embedding's).
    tied = not megatron and model.tied_embeddings and model.lm_head
    tied_buffer = first * head_grad * (1.0 if tied else 0.0)
    head_written = head_grad - tied_buffer
    top = np.maximum(passes, head_written)
    # Late backward: the stage's first layer is being recomputed; its own gradients and the embeddings' are not
    # written yet.
    emb_grad = model.vocab_size * model.hidden_size / tp
    if model.position_embedding is PositionEmbedding.LEARNED:
        emb_grad = emb_grad + model.max_position_embeddings * model.hidden_size
    emb_grad = emb_grad + model.type_vocab_size * model.hidden_size
    k_late = np.minimum(np.where(lay.recompute_num_layers > 0, lay.recompute_num_layers, 1), n)
    # (the first layer's kind is known only when the stage's layers are all of one kind; else the smaller)
    n_moe = shape.num_moe_layers
    first_layer = np.where(n_moe == shape.num_layers, layer.moe + layer.experts,
                           np.where(n_moe > 0, np.minimum(layer.dense, layer.moe + layer.experts), layer.dense))
    not_yet = k_late * first_layer + first * emb_grad
    sharded = lay.effective_zero_stage >= 2
    late = np.maximum(top, grads - per_param.grad * np.where(sharded, not_yet / replicas, not_yet)) + tied_buffer
    # By the time the first layer's attention runs its backward, its MLP's gradients are written too.
    not_yet_attn = np.minimum(not_yet, layer.attention + (k_late - 1) * layer.dense + first * emb_grad)
    late_attn = np.maximum(top, grads - per_param.grad * np.where(sharded, not_yet_attn / replicas, not_yet_attn)
                           ) + tied_buffer
    mlp_layer = np.where(n_moe == shape.num_layers, layer.moe + layer.experts, layer.dense) - layer.attention
    top_attn = np.maximum(passes, np.minimum(head_written + per_param.grad * np.where(sharded, mlp_layer / replicas,
                                                                                   mlp_layer), grads))
    return _Gradients(passes=passes, top=top, top_attention=np.where(n > 0, top_attn, top), late=late,
                      late_attention=late_attn, tied_buffer=tied_buffer)


def _logits(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, modes: _Modes, shape: StageShape
            ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Logits and loss on the last stage: of the other live micro-batches, at the forward peak, at the backward
    peak, and what the model output holds. One micro-batch at a time, except GPipe holding all of them."""
    last = shape.is_last.astype(np.float64)
    logits = logit_bytes(model, training, tp=lay.tp, cp=lay.cp, seq_len=lay.seq_len,
                         micro_batch_size=lay.micro_batch_size)
    logit_inflight = np.where(modes.gpipe & (lay.pp > 1), lay.num_microbatches, 1).astype(np.float64)
    others = last * (logit_inflight - 1) * logits.saved
    return others, others + last * logits.forward_peak, others + last * logits.backward_peak, last * logits.returned


@dataclass(frozen=True)
class _Outputs:
    """What a loop that keeps the model output (``keep_outputs``) holds beyond the framework loop, per moment."""

    logits: FloatArray
    """The output's logits (or last hidden state), at every moment from its forward to the next one's end."""
    forward: FloatArray
    """At the next forward's end: the previous output's whole KV cache (the name is rebound after it returns)."""
    passes: FloatArray
    """While the saved tensors are live: the cache beyond them."""
    late: FloatArray
    """While the first layer runs its backward: the other layers' caches and the first's beyond its saved tensors."""
    step: FloatArray
    """At the optimizer step and the end of backward: the whole cache."""


def _outputs(training: TrainingConfig, act: _Activations, returned: FloatArray) -> _Outputs:
    keep = 1.0 if training.keep_outputs else 0.0
    return _Outputs(logits=keep * returned, forward=keep * act.kv_cache, passes=keep * act.kv_extra,
                    late=keep * (act.kv_cache - act.kv_first), step=keep * act.kv_cache)


def _whole(value: FloatArray, shape: tuple[int, ...]) -> IntArray:
    """Bytes rounded to whole bytes, as int64 of ``shape``."""
    return np.broadcast_to(np.rint(value).astype(np.int64), shape)


def _peak(phases: list[dict[str, FloatArray]], shape: tuple[int, ...]) -> tuple[IntArray, IntArray, dict[str, IntArray]]:
    """The largest phase total of each row, its index and its categories, every category rounded to whole bytes
    (so a breakdown sums to its peak). Categories equal in every phase are rounded once."""
    memo: dict[int, FloatArray] = {}

    def rint(v: FloatArray) -> FloatArray:
        if id(v) not in memo:
            memo[id(v)] = np.rint(v)
        return memo[id(v)]

    rounded = [{cat: rint(ph[cat]) for cat in MEMORY_CATEGORIES} for ph in phases]
    totals = np.stack([np.broadcast_to(sum(ph.values()), shape) for ph in rounded])
    phase = np.argmax(totals, axis=0)
    breakdown = {}
    for cat in MEMORY_CATEGORIES:
        values = [ph[cat] for ph in rounded]
        others = [i for i, v in enumerate(values) if v is not values[0]]
        if not others:
            chosen = values[0]
        elif all(values[i] is values[others[0]] for i in others):  # two values: one where, not a choose
            in_others = phase == others[0] if len(others) == 1 else np.isin(phase, others)
            chosen = np.where(in_others, values[others[0]], values[0])
        else:
            chosen = np.choose(phase, [np.broadcast_to(v, shape) for v in values])
        breakdown[cat] = np.broadcast_to(np.asarray(chosen).astype(np.int64), shape)
    return np.max(totals, axis=0).astype(np.int64), phase, breakdown


def _either(grads_a: FloatArray, acts_a: FloatArray, grads_b: FloatArray, acts_b: FloatArray
            ) -> dict[str, FloatArray]:
    """Gradients and activations of whichever of two moments holds more."""
    pick_b = grads_b + acts_b > grads_a + acts_a
    return {"gradients": np.where(pick_b, grads_b, grads_a), "activations": np.where(pick_b, acts_b, acts_a)}


def stage_arrays(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, stage: IntArray) -> StageArrays:
    """Memory of pipeline stage ``stage`` for each layout in ``lay`` (training gives the fixed recipe)."""
    modes = _Modes.of(lay)
    per_param = state_bytes(training)
    megatron = training.framework is Framework.MEGATRON
    shape = stage_shape(model, stage, lay.pp, lay.vpp)
    held = stage_params(model, shape, lay.tp)
    tp = lay.tp.astype(np.float64)
    replicas = (lay.dp * lay.cp).astype(np.float64)
    states = _model_states(per_param, lay, held, tp, replicas)
    layer = _layer_params(model, lay, tp)
    comm_passes, comm_step = _comm_buffers(per_param, megatron, lay, shape, states, layer, replicas)
    grads = _gradients(model, megatron, per_param, lay, shape, states, layer, tp, replicas)
    act = _activations(model, training, lay, modes, shape, held, stage)
    logits_others, logits_fwd, logits_bwd, returned = _logits(model, training, lay, modes, shape)
    out = _outputs(training, act, returned)
    acts = act.backward
    # Megatron: the grad buffer is always there, so the late moments are never above the others.
    acts_late = 0.0 * acts if megatron else act.late
    acts_late_attn = 0.0 * acts if megatron else act.late_attention

    common = {"parameters": states.params, "master_weights": states.master, "optimizer_states": states.optimizer,
              "workspaces": np.full(np.shape(states.params), float(workspace_bytes(model, training)))}
    zero = 0.0 * acts
    phases = [
        {**common, "gradients": grads.passes, "activations": act.forward + out.forward,
         "logits_loss": logits_fwd + out.logits, "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": grads.passes, "activations": acts + out.passes, "logits_loss": logits_bwd + out.logits,
         "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": states.grads, "activations": out.step, "logits_loss": out.logits,
         "optimizer_temporaries": states.temporaries, "comm_buffers": comm_step},
        {**common, **_either(grads.late, acts_late + out.late, grads.late_attention, acts_late_attn + out.late),
         "logits_loss": logits_others + out.logits, "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, **_either(grads.top + grads.tied_buffer, acts + act.top + out.passes,
                             grads.top_attention + grads.tied_buffer, acts + act.top_attention + out.passes),
         "logits_loss": logits_others + out.logits, "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": states.grads + grads.tied_buffer, "activations": out.step, "logits_loss": out.logits,
         "optimizer_temporaries": zero, "comm_buffers": comm_passes},
    ]
    shape_all = np.broadcast(stage, lay.tp, lay.pp, lay.dp, lay.seq_len, lay.micro_batch_size).shape
    peak, phase, breakdown = _peak(phases, shape_all)
    communicators = sum((np.asarray(x) > 1).astype(np.int64) for x in (lay.dp * lay.cp, lay.tp, lay.pp, lay.cp, lay.ep))
    step = phases[2]
    states_total = np.sum([_whole(step[cat], shape_all) for cat in ("parameters", "gradients", "master_weights",
                                                                     "optimizer_states")], axis=0)
    act_peak = np.broadcast_to(np.rint(np.maximum(act.forward, acts + act.work)).astype(np.int64), shape_all)
    return StageArrays(breakdown=breakdown, peak_bytes=peak, phase=phase,
                       model_state_bytes=states_total, activation_bytes=act_peak,
                       num_layers=np.broadcast_to(shape.num_layers, shape_all),
                       num_params=np.broadcast_to(states.num_params, shape_all),
                       inflight=np.broadcast_to(act.inflight, shape_all),
                       communicators=np.broadcast_to(communicators, shape_all))
