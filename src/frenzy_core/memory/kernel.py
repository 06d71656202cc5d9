"""The memory model of one pipeline stage as array arithmetic: shared by the scalar and batch estimators."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.config.training import Attention, Framework, Recompute, RecomputeMethod, TrainingConfig
from frenzy_core.memory.activations import edge_activations, layer_activations, logit_bytes
from frenzy_core.memory.overhead import workspace_bytes
from frenzy_core.memory.recipe import StateBytes, state_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES
from frenzy_core.memory.shards import StageParams, StageShape, layer_constants, stage_params, stage_shape

__all__ = ["PHASES", "StageArrays", "stage_arrays"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "backward", "backward")
"""Label of each candidate peak: end of forward (loss), start of backward (loss gradient), optimizer step, late
backward (torch with one micro-batch: gradients almost all written when the first layer is recomputed), and the
top layer's backward (head gradient written, recompute working set live)."""


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
    full_layers = n_dense * layer.dense + n_moe * layer.moe
    biggest_layer = np.where(n_moe > 0, np.maximum(layer.moe, np.where(n_dense > 0, layer.dense, 0.0)), layer.dense)
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
    if not megatron and training.attention is Attention.EAGER and model.causal:
        # HF builds one additive (b, 1, s, s) causal mask in the model's dtype per forward, shared by the layers;
        # checkpointed layers keep it as an input until their recomputation.
        mask = lay.micro_batch_size * (lay.seq_len / lay.cp) * lay.seq_len * float(training.precision.param_bytes)
        acts = acts + np.where(modes.full, inflight, 0.0) * mask
        acts_fwd = acts + np.where(modes.full, 0.0, mask)
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
        cast = (held.split - emb + same_stage_tied) / tp + (held.experts / (tp * lay.ep) if megatron else 0.0)
        head_cast = last * vh / tp
        per_layer = np.where(n > 0, (cast - head_cast) / np.maximum(n, 1), 0.0)
        chunk = np.minimum(np.where(lay.recompute_num_layers > 0, lay.recompute_num_layers, 1), n)
        acts_fwd = acts_fwd + 2.0 * cast
        acts = acts + 2.0 * np.where(modes.full, head_cast, cast)
        work = work + np.where(modes.full, 2.0 * chunk * per_layer, 0.0)

    one_mb = saved_layers + last * edge.head
    late = acts - one_mb + np.minimum(layer.layer_input, saved_layers) + work
    # While a layer runs its backward, eager attention's probability gradient exists beside its saved tensors.
    top = work + np.where(n > 0, layer.score_grad, 0.0)
    return _Activations(forward=acts_fwd, backward=acts, work=work, top=top, late=np.maximum(late, 0.0),
                        inflight=inflight)


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


def _layer_params(model: ModelConfig, lay: LayoutArrays, tp: FloatArray) -> _LayerParams:
    lc = layer_constants(model)
    dense = (lc.attn_split + lc.mlp_split) / tp + lc.attn_replicated + lc.mlp_replicated
    moe = (lc.attn_split + lc.moe_shared_split) / tp + lc.attn_replicated + lc.moe_shared_replicated + lc.moe_router
    return _LayerParams(dense=dense, moe=moe, experts=lc.moe_experts / (tp * lay.ep))


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
    """While the top layer runs its backward (the head's gradient written)."""
    late: FloatArray
    """While the stage's first layer runs its backward."""
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
    top = np.maximum(passes, head_grad)
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
    k_late = np.minimum(np.where(lay.recompute_num_layers > 0, lay.recompute_num_layers, 1), n)
    not_yet = k_late * np.where(shape.num_moe_layers > 0, np.minimum(layer.dense, layer.moe + layer.experts),
                                layer.dense) + first * emb_grad
    late = np.maximum(top, grads - per_param.grad * np.where(lay.effective_zero_stage >= 2, not_yet / replicas,
                                                             not_yet)) + tied_buffer
    return _Gradients(passes=passes, top=top, late=late, tied_buffer=tied_buffer)


def _logits(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, modes: _Modes, shape: StageShape
            ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Logits and loss on the last stage: of the other live micro-batches, at the forward peak, at the backward
    peak. One micro-batch at a time, except GPipe holding all of them."""
    last = shape.is_last.astype(np.float64)
    logits = logit_bytes(model, training, tp=lay.tp, cp=lay.cp, seq_len=lay.seq_len,
                         micro_batch_size=lay.micro_batch_size)
    logit_inflight = np.where(modes.gpipe & (lay.pp > 1), lay.num_microbatches, 1).astype(np.float64)
    others = last * (logit_inflight - 1) * logits.saved
    return others, others + last * logits.forward_peak, others + last * logits.backward_peak


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
    logits_others, logits_fwd, logits_bwd = _logits(model, training, lay, modes, shape)
    acts = act.backward
    acts_late = 0.0 * acts if megatron else act.late  # Megatron: the grad buffer is always there

    common = {"parameters": states.params, "master_weights": states.master, "optimizer_states": states.optimizer,
              "workspaces": np.full(np.shape(states.params), float(workspace_bytes(model, training)))}
    zero = 0.0 * acts
    phases = [
        {**common, "gradients": grads.passes, "activations": act.forward, "logits_loss": logits_fwd,
         "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": grads.passes, "activations": acts, "logits_loss": logits_bwd,
         "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": states.grads, "activations": zero, "logits_loss": zero,
         "optimizer_temporaries": states.temporaries, "comm_buffers": comm_step},
        {**common, "gradients": grads.late, "activations": acts_late, "logits_loss": logits_others,
         "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": grads.top + grads.tied_buffer, "activations": acts + act.top,
         "logits_loss": logits_others, "optimizer_temporaries": zero, "comm_buffers": comm_passes},
    ]
    shape_all = np.broadcast(stage, lay.tp, lay.pp, lay.dp, lay.seq_len, lay.micro_batch_size).shape
    rounded = [{k: np.broadcast_to(np.rint(v).astype(np.int64), shape_all) for k, v in ph.items()} for ph in phases]
    totals = np.stack([sum(ph[cat] for cat in MEMORY_CATEGORIES) for ph in rounded])
    phase = np.argmax(totals, axis=0)
    breakdown = {cat: np.choose(phase, [ph[cat] for ph in rounded]) for cat in MEMORY_CATEGORIES}
    communicators = sum((np.asarray(x) > 1).astype(np.int64) for x in (lay.dp * lay.cp, lay.tp, lay.pp, lay.cp, lay.ep))
    states_total = np.sum([rounded[2][cat] for cat in ("parameters", "gradients", "master_weights",
                                                       "optimizer_states")], axis=0)
    act_peak = np.broadcast_to(np.rint(np.maximum(act.forward, acts + act.work)).astype(np.int64), shape_all)
    return StageArrays(breakdown=breakdown, peak_bytes=np.max(totals, axis=0), phase=phase,
                       model_state_bytes=states_total, activation_bytes=act_peak,
                       num_layers=np.broadcast_to(shape.num_layers, shape_all),
                       num_params=np.broadcast_to(states.num_params, shape_all),
                       inflight=np.broadcast_to(act.inflight, shape_all),
                       communicators=np.broadcast_to(communicators, shape_all))
