"""The memory model of one pipeline stage as array arithmetic: shared by the scalar and batch estimators."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core._limits import MAX_BYTES, bytes_in_range, to_int_bytes
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.hf import ModuleLayout, module_layout
from frenzy_core.config.model import ModelConfig, NormPlacement, PositionEmbedding
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.config.trainable import trains
from frenzy_core.config.training import Framework, Recompute, RecomputeMethod, TrainingConfig
from frenzy_core.memory.activations import (
    EdgeActivations,
    FrozenActivations,
    LayerActivations,
    LogitBytes,
    edge_activations,
    frozen_activations,
    layer_activations,
    logit_bytes,
)
from frenzy_core.memory.overhead import workspace_bytes
from frenzy_core.memory.recipe import state_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES
from frenzy_core.memory.shards import StageParams, StageShape, stage_params, stage_shape
from frenzy_core.memory.states import (
    Gradients,
    States,
    comm_buffers,
    gradients,
    layer_params,
    model_states,
    plus,
    sharding,
)

__all__ = ["PHASES", "TORCH_CP_REFUSAL", "TORCH_TP_REFUSAL", "Refusal", "StageArrays", "StateTerms", "TokenTerms",
           "refusal", "stage_arrays", "state_keys", "state_terms", "token_keys", "token_terms", "torch_sp_covered",
           "torch_sp_gap", "torch_sp_refusal",
           "unmodelled_rows"]

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
    host_bytes: IntArray
    """Host memory the rank's offloaded states and activations take (0 without offload)."""
    in_range: BoolArray
    """False where a total exceeds :data:`frenzy_core._limits.MAX_BYTES` (its byte counts then read 0)."""
    step_states: tuple[FloatArray, ...]
    """Parameters, gradients, master weights and optimizer states at the optimizer step (float bytes)."""
    act_total: FloatArray
    """Largest activations at any moment of the passes (float bytes)."""

    @functools.cached_property
    def model_state_bytes(self) -> IntArray:
        """Parameters, gradients, master weights and optimizer states as held at the optimizer step (rounded
        when read: the batch estimator never reads them)."""
        shape = self.in_range.shape
        return np.asarray(np.sum([_whole(v, shape, self.in_range) for v in self.step_states], axis=0))

    @functools.cached_property
    def activation_bytes(self) -> IntArray:
        """Largest activations (saved tensors plus the backward working set) at any moment of the passes."""
        return _whole(self.act_total, self.in_range.shape, self.in_range)


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


def _inflight(stage: IntArray, lay: LayoutArrays, modes: _Modes, shape: StageShape) -> FloatArray:
    """Micro-batches of the stage's layers live at its peak (interleaved: chunk-micro-batches weighted by their
    chunk's share of the stage's layers)."""
    pp, m = lay.pp, lay.num_microbatches
    one_f_one_b = np.minimum(pp - stage, m)
    out = np.where(modes.gpipe, m, one_f_one_b)
    if np.any(modes.interleaved):
        out = np.where(modes.interleaved, _interleaved_inflight(stage, lay, shape), out)
    return np.asarray(np.where(pp == 1, 1, out), dtype=np.float64)


def _interleaved_inflight(stage: IntArray, lay: LayoutArrays, shape: StageShape) -> FloatArray:
    """:func:`_inflight` of a row on the interleaved schedule."""
    pp, m, vpp = lay.pp, lay.num_microbatches, lay.vpp
    # Megatron schedules.py, interleaved: warm-up (pp - rank - 1) * 2 + (vpp - 1) * g chunk-micro-batches (g: the
    # micro-batch group per virtual stage, pp by default), plus the one forward before the first backward;
    # capped by all m * vpp of them. They run g at a time per model chunk, chunk 0 first, so with chunks of
    # unequal length the early chunks' layers hold more of them.
    g = lay.microbatch_group
    warm = np.minimum(2 * (pp - stage - 1) + (vpp - 1) * g + 1, m * vpp)
    cycles, rest = warm // np.maximum(g * vpp, 1), warm % np.maximum(g * vpp, 1)
    weighted = np.zeros(np.broadcast(stage, pp).shape, dtype=np.float64)
    layers = np.zeros_like(weighted)
    for j, size in enumerate(shape.chunk_sizes):
        weighted += (cycles * g + np.clip(rest - j * g, 0, g)) * size
        layers += size
    return np.asarray(np.where(layers > 0, weighted / np.maximum(layers, 1), warm / vpp))


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
    late: FloatArray | None
    """When the stage's first layer runs its MLP's backward: other micro-batches' tensors, this one's first layer
    (as saved, or rebuilt) and the MLP's gradient temporaries (None for Megatron: never above the other moments,
    its grad buffer being there throughout)."""
    late_attention: FloatArray | None
    """When it runs its attention's backward: as ``late`` with the MLP's tensors freed and the probabilities'
    gradients instead."""
    inflight: FloatArray
    kv_cache: FloatArray
    """The KV cache the stage's layers fill in one forward (torch, a model that returns one, no checkpointing)."""
    kv_extra: FloatArray
    """Of that cache, what the layers do not also save for backward."""
    kv_first: FloatArray
    """Of the cache, what the first layer also saves for backward (alive anyway while it runs its backward)."""
    host: FloatArray
    """Saved activations offloaded to host memory."""


@dataclass(frozen=True)
class _Layers:
    """The stage's layers by what they save for one micro-batch without recomputation."""

    saved: FloatArray
    """All of them together."""
    biggest: FloatArray
    """The largest single layer."""
    grad: FloatArray
    """How many a gradient flows through (the others, frozen behind a frozen embedding, save nothing)."""
    dequant: FloatArray | None
    """QLoRA's dequantized weight while a layer runs (None without QLoRA: 0)."""


def _layers(model: ModelConfig, training: TrainingConfig, shape: StageShape, dense: FloatArray, moe: FloatArray,
            frozen: FrozenActivations | None) -> _Layers:
    """Saved bytes of the stage's layers, each by its kind: trained, LoRA-adapted, or frozen with a gradient
    flowing through it (docs/memory-model.md, section 9); ``dense`` and ``moe``: ``layer``'s, as this layout's
    layers save them (less the KV cache under checkpointing)."""
    n = shape.num_layers.astype(np.float64)
    n_moe = shape.num_moe_layers.astype(np.float64)
    # (a dense model has no MoE layer: their count is 0, so that kind adds 0 and is left out)
    kinds = [(n - n_moe, dense), (n_moe, moe)] if model.moe is not None else [(n, dense)]
    grad: FloatArray = n
    dequant: FloatArray | None = None
    if training.lora is not None or training.freeze_embeddings or training.trainable_layers is not None:
        assert frozen is not None  # computed for these recipes (token_terms)
        n_train, n_train_moe = shape.num_trainable_layers.astype(np.float64), shape.num_trainable_moe_layers
        n_flow = n - shape.num_nograd_layers - n_train
        n_flow_moe = n_moe - shape.num_nograd_moe_layers - n_train_moe
        trained = (dense, moe) if training.lora is None else (dense - frozen.adapted_dense, moe - frozen.adapted_moe)
        kinds = [(n_train - n_train_moe, trained[0]), (n_train_moe.astype(np.float64), trained[1]),
                 (n_flow - n_flow_moe, dense - frozen.frozen_dense),
                 (n_flow_moe.astype(np.float64), moe - frozen.frozen_moe)]
        grad = n - shape.num_nograd_layers
        dequant = frozen.dequant + 0.0 * n if training.lora is not None and training.lora.quantized else None
    saved = sum((count * size for count, size in kinds), 0.0 * n)
    biggest = functools.reduce(np.maximum, [np.where(count > 0, size, 0.0) for count, size in kinds])
    return _Layers(saved=np.asarray(saved), biggest=np.asarray(biggest), grad=np.asarray(grad, dtype=np.float64),
                   dequant=dequant)


def _activations(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, modes: _Modes, shape: StageShape,
                 held: StageParams | None, inflight: FloatArray, tokens: TokenTerms) -> _Activations:
    """Saved activations, recompute working set and autocast copies of one stage (docs/memory-model.md, 3)
    with ``inflight`` micro-batches live (:func:`_inflight`)."""
    layer, edge = tokens.layer, tokens.edge
    n = shape.num_layers.astype(np.float64)
    # (Megatron's layers have none of the eager-torch terms: KV cache, masks, kinds of layer, MLP gradient
    # temporaries are 0 there and left out)
    torch = training.framework is Framework.TORCH
    dense, moe = layer.dense, layer.moe
    if torch:
        # Checkpointed layers run with use_cache=False (Transformers turns the cache off for gradient checkpointing).
        no_cache = np.where(modes.full, layer.cache_delta, 0.0)
        dense, moe = layer.dense - no_cache, layer.moe - no_cache
    layers = _layers(model, training, shape, dense, moe, tokens.frozen)
    full_layers, n_grad = layers.saved, layers.grad
    biggest_layer = layer.kind_excess + layers.biggest if torch else layers.biggest
    k = lay.recompute_num_layers.astype(np.float64)
    if training.recompute_method is RecomputeMethod.BLOCK:
        recomputed = np.where(k > 0, np.minimum(k * lay.vpp, n_grad), n_grad)
        avg = np.where(n_grad > 0, full_layers / np.maximum(n_grad, 1), 0.0)
        full_saved = recomputed * layer.layer_input + (n_grad - recomputed) * avg
        full_work = np.where(recomputed > 0, biggest_layer - layer.layer_input, 0.0)
    else:
        k_eff = np.where(k > 0, k, 1.0)
        full_saved = np.ceil(n_grad / k_eff) * layer.layer_input
        full_work = np.minimum(k_eff, n_grad) * biggest_layer - layer.layer_input
    # selective: each layer a gradient flows through drops what its kind's recomputed modules rebuild
    n_moe_grad = (shape.num_moe_layers - shape.num_nograd_moe_layers).astype(np.float64) if model.moe else 0.0 * n
    selective_saved = full_layers - (n_grad - n_moe_grad) * layer.core_dense - n_moe_grad * layer.core_moe
    # the largest module rebuilt at once, of the kinds of layer with a gradient (`mlp` is dense layers' only)
    selective_work = np.maximum(np.where(n_grad > n_moe_grad, layer.work_dense, 0.0),
                                np.where(n_moe_grad > 0, layer.work_moe, 0.0))
    saved_layers = np.where(modes.full, full_saved, np.where(modes.selective, selective_saved, full_layers))
    work = np.where(modes.full, full_work, np.where(modes.selective, selective_work, 0.0))
    work = np.where(n_grad > 0, np.maximum(work, 0.0), 0.0)
    if layers.dequant is not None:
        work = work + np.where(n_grad > 0, layers.dequant, 0.0)
    # MoE dispatcher buffers exist while an MoE layer runs, forward or backward (a dense model has none; the
    # working set is never negative, so a 0 would change nothing).
    dispatch = np.where(shape.num_moe_layers > 0, layer.dispatch, 0.0) if model.moe is not None else None
    if dispatch is not None:
        work = np.maximum(work, dispatch)
    first, last = shape.is_first.astype(np.float64), shape.is_last.astype(np.float64)
    saved_layers, offloaded = _offload(training, saved_layers, n_grad)
    embeddings_train, head_trains = trains(model, training)
    head = edge.head if head_trains or tokens.frozen is None else edge.head - tokens.frozen.head
    acts = inflight * (saved_layers + first * edge.embedding * float(embeddings_train) + last * head)
    acts_fwd = acts
    if torch:
        # the attention masks the model builds once per forward live through it; checkpointed layers keep them
        # as inputs until their recomputation (one set per micro-batch in flight).
        acts = acts + np.where(modes.full, inflight, 0.0) * layer.masks
        acts_fwd = acts + np.where(modes.full, 0.0, layer.masks)
    acts_fwd = plus(acts_fwd, dispatch)
    if layers.dequant is not None:
        acts_fwd = acts_fwd + np.where(n > 0, layers.dequant, 0.0)
    kv_cache = kv_total = kv_first = 0.0 * n  # (Megatron's layers fill no KV cache)
    if torch:
        kv_layer, kv_extra = np.where(modes.full, 0.0, layer.kv_cache), np.where(modes.full, 0.0, layer.kv_extra)
        kv_cache, kv_total, kv_first = n * kv_layer, n * kv_extra, np.where(n > 0, kv_layer - kv_extra, 0.0)
        acts_fwd = acts_fwd + kv_total  # the cache this forward fills, beyond what its layers save
    if training.precision.is_amp:
        assert held is not None  # kept under autocast (StateTerms.held)
        copies = _autocast_copies(model, training, lay, modes, shape, held, n_grad)
        acts_fwd, acts, work = acts_fwd + copies.forward, acts + copies.backward, work + copies.work

    # While a layer runs its backward, its MLP's gradient temporaries exist beside its saved tensors, and then,
    # its MLP's saved tensors freed, eager attention's probability gradients.
    attn_temps = np.where(n_grad > 0, layer.score_grad - layer.freed_before_core if torch else layer.score_grad, 0.0)
    top, late, late_attn = work, None, None  # Megatron: its grad buffer is always there, its late moments lower
    if torch:
        top, late, late_attn = _torch_late(layer, modes, n, n_grad, acts - (saved_layers + last * head),
                                           saved_layers, work, attn_temps)
    return _Activations(forward=acts_fwd, backward=acts, work=work, top=top, top_attention=work + attn_temps,
                        late=late, late_attention=late_attn, inflight=inflight, kv_cache=kv_cache,
                        kv_extra=kv_total, kv_first=kv_first, host=inflight * offloaded)


def _torch_late(layer: LayerActivations, modes: _Modes, n: FloatArray, n_grad: FloatArray, others: FloatArray,
                saved_layers: FloatArray, work: FloatArray, attn_temps: FloatArray
                ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(top, late, late attention) working sets of eager torch: ``others`` is what the other micro-batches
    keep while the stage's first layer runs its backward."""
    # The first layer while it runs its backward: rebuilt (its chunk's input and working set) or as saved (nothing
    # when no gradient reaches it).
    per_layer_saved = np.where(n_grad >= n, np.where(n > 0, saved_layers / np.maximum(n, 1), 0.0), 0.0)
    first_layer = np.where(modes.full, np.minimum(layer.layer_input, saved_layers), per_layer_saved) + work
    mlp_temps = np.where(n_grad > 0, layer.mlp_grad, 0.0)
    late = others + first_layer + mlp_temps
    late_attn = others + first_layer + attn_temps
    return work + mlp_temps, np.maximum(late, 0.0), np.maximum(late_attn, 0.0)


@dataclass(frozen=True)
class _Casts:
    """Autocast's cached half weights: live at the end of the forward, at the start of backward, and rebuilt by
    a recomputed chunk."""

    forward: FloatArray
    backward: FloatArray
    work: FloatArray


def _autocast_copies(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, modes: _Modes,
                     shape: StageShape, held: StageParams, n_grad: FloatArray) -> _Casts:
    """Autocast caches a half copy of every weight a matmul casts until the forward ends; saved tensors keep
    them until each layer's backward. With full recomputation a layer saves nothing, so at the start of backward
    only the head's copy is live, and each recomputed chunk re-casts its own during backward."""
    megatron = training.framework is Framework.MEGATRON
    tp = lay.tp.astype(np.float64)
    n = shape.num_layers.astype(np.float64)
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    vh = model.vocab_size * model.hidden_size if model.lm_head else 0
    same_stage_tied = first * last * (vh if model.tied_embeddings else 0)
    emb = first * model.vocab_size * model.hidden_size
    cast = (held.split - emb + same_stage_tied) / tp + (held.experts / (lay.expert_tp * lay.ep) if megatron else 0.0)
    if training.lora is not None and training.lora.quantized:
        cast = cast - held.matmul_split / tp  # 4-bit weights are dequantized, not cast (nor cached)
    head_cast = last * vh / tp
    per_layer = np.where(n > 0, (cast - head_cast) / np.maximum(n, 1), 0.0)
    # layers no gradient reaches save nothing, so their casts are freed at once
    cast = cast - per_layer * (n - n_grad)
    chunk = np.minimum(np.where(lay.recompute_num_layers > 0, lay.recompute_num_layers, 1), n)
    return _Casts(forward=2.0 * cast, backward=2.0 * np.where(modes.full, head_cast, cast),
                  work=np.where(modes.full, 2.0 * chunk * per_layer, 0.0))


def _offload(training: TrainingConfig, saved_layers: FloatArray, n_grad: FloatArray) -> tuple[FloatArray,
                                                                                               FloatArray]:
    """(saved on the device, saved on the host) per micro-batch when ``activation_offload_layers`` layers of the
    stage send their saved tensors to the host after their forward (torch ``save_on_cpu``, Megatron
    ``--cpu-offloading``): one layer's worth stays on the device, in transfer or prefetched for its backward."""
    k = float(training.activation_offload_layers)
    if k == 0:
        return saved_layers, 0.0 * saved_layers
    per_layer = np.where(n_grad > 0, saved_layers / np.maximum(n_grad, 1), 0.0)
    moved = np.minimum(k, n_grad) * per_layer
    staging = np.where(moved > 0, per_layer, 0.0)
    return saved_layers - moved + staging, moved


def _logits(lay: LayoutArrays, modes: _Modes, shape: StageShape, logits: LogitBytes
            ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Logits and loss on the last stage: of the other live micro-batches, at the forward peak, at the backward
    peak, and what the model output holds. One micro-batch at a time, except GPipe holding all of them."""
    last = shape.is_last.astype(np.float64)
    logit_inflight = (np.where(modes.gpipe & (lay.pp > 1), lay.num_microbatches, 1).astype(np.float64)
                      if np.any(modes.gpipe) else 1.0)
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


def _outputs(training: TrainingConfig, act: _Activations, returned: FloatArray) -> _Outputs | None:
    """What the kept output holds; None in the framework loop (nothing: no term to add)."""
    if not training.keep_outputs:
        return None
    return _Outputs(logits=returned, forward=act.kv_cache, passes=act.kv_extra, late=act.kv_cache - act.kv_first,
                    step=act.kv_cache)


def _whole(value: FloatArray, shape: tuple[int, ...], ok: BoolArray) -> IntArray:
    """Bytes rounded to whole bytes, as int64 of ``shape``; 0 where not ``ok`` (a total beyond ``MAX_BYTES``)."""
    if np.all(ok):  # as to_int_bytes, without its mask
        return np.broadcast_to(np.rint(np.asarray(value, dtype=np.float64)).astype(np.int64), shape)
    return np.broadcast_to(to_int_bytes(value, ok), shape)


def _sums(terms: list[list[FloatArray]]) -> list[FloatArray]:
    """Each phase's terms summed in their order (as ``sum``), the leading terms the phases share (the same arrays)
    added once: the same additions in the same order, so the same floats."""
    k = 0
    while k < len(terms[0]) and all(len(v) > k and v[k] is terms[0][k] for v in terms):
        k += 1
    prefix = _add(0.0, terms[0][:k])
    return [_add(prefix, v[k:]) for v in terms]


def _regrouped(terms: list[list[FloatArray]]) -> list[FloatArray]:
    """Each phase's terms summed, the arrays every phase holds (parameters, master weights, optimizer states,
    workspaces) added once for all of them: the same floats as :func:`_sums` where every term and partial sum is
    an integer below 2^53 (exact in float64, so the order of the additions cannot show)."""
    counts = [Counter(map(id, t)) for t in terms]
    common = functools.reduce(lambda a, b: a & b, counts)
    by_id = {id(v): v for t in terms for v in t}
    base = _add(0.0, [by_id[key] for key, times in common.items() for _ in range(times)])
    return [_add(base, [by_id[key] for key, times in (c - common).items() for _ in range(times)]) for c in counts]


def _add(start: FloatArray | float, terms: list[FloatArray]) -> FloatArray:
    """``start`` plus ``terms`` from left to right (as ``sum`` adds)."""
    total = start
    for t in terms:
        total = total + t
    return np.asarray(total)


def _peak(phases: list[dict[str, FloatArray]], shape: tuple[int, ...], ok: BoolArray, exact: bool
          ) -> tuple[IntArray, IntArray, dict[str, IntArray]]:
    """The largest phase total of each row, its index (the first such phase) and its categories, every category
    rounded to whole bytes (so a breakdown sums to its peak); 0 in rows not ``ok`` (a total beyond ``MAX_BYTES``,
    never cast to int64). Each distinct array is rounded once, and every array that is 0 throughout is one
    zero, left out of the sums (adding 0 changes no total but the sign of a zero, which no integer shows);
    ``exact`` (:func:`_in_range`: every sum an integer below 2^53): the terms every phase holds are added once."""
    memo: dict[int, FloatArray] = {}
    all_ok = bool(np.all(ok))
    zero = np.zeros(shape)

    def rint(v: FloatArray) -> FloatArray:
        if id(v) not in memo:
            memo[id(v)] = zero if not np.any(v) else np.rint(v if all_ok else np.where(ok, v, 0.0))
        return memo[id(v)]

    rounded = [{cat: rint(ph[cat]) for cat in MEMORY_CATEGORIES} for ph in phases]
    terms = [[v for v in ph.values() if v is not zero] for ph in rounded]
    totals = [np.broadcast_to(t, shape) for t in (_regrouped(terms) if exact and all_ok else _sums(terms))]
    # running maximum with a strict comparison: the first largest phase, as argmax (totals are finite where ok,
    # 0 elsewhere)
    peak, phase = totals[0], np.zeros(shape, dtype=np.int64)
    for i, t in enumerate(totals[1:], start=1):
        better = t > peak
        phase = np.where(better, i, phase)
        peak = np.maximum(peak, t)
    at: dict[int, BoolArray] = {}
    breakdown = {}
    for cat in MEMORY_CATEGORIES:
        values = [ph[cat] for ph in rounded]
        phases_of: dict[int, list[int]] = {}
        for i, v in enumerate(values):
            phases_of.setdefault(id(v), []).append(i)
        # the array most phases hold, then each other one where the peak is in a phase that holds it
        ids = sorted(phases_of, key=lambda key: -len(phases_of[key]))
        chosen = np.broadcast_to(values[phases_of[ids[0]][0]], shape)
        for key in ids[1:]:
            where = functools.reduce(np.logical_or, [at.setdefault(i, phase == i) for i in phases_of[key]])
            chosen = np.where(where, values[phases_of[key][0]], chosen)
        breakdown[cat] = np.broadcast_to(np.asarray(chosen).astype(np.int64), shape)
    return np.asarray(peak).astype(np.int64), phase, breakdown


def _in_range(act_total: FloatArray, phases: list[dict[str, FloatArray]], shape: tuple[int, ...]
              ) -> tuple[BoolArray, bool]:
    """:func:`bytes_in_range` of ``act_total`` and of each phase's summed magnitudes, and whether every phase's
    rounded terms and their partial sums, in any order, are integers below 2^53 (exact in float64). When even the
    sum of every distinct array's largest magnitude (times the most times one phase holds an array) is below half
    of ``MAX_BYTES`` (and ``act_total``'s too), every row is in range, whatever the order and rounding of the
    phases' sums: then only reductions run, no array of sums."""
    distinct = {id(v): np.asarray(v) for ph in phases for v in ph.values()}
    repeats = max(max(Counter(map(id, ph.values())).values()) for ph in phases)
    bound = repeats * sum(max(float(v.max()), -float(v.min())) for v in distinct.values())
    act_bound = max(float(np.max(act_total)), -float(np.min(act_total)))
    if bound <= MAX_BYTES / 2 and act_bound <= MAX_BYTES / 2:  # False for NaN
        # (rounding moves each of a phase's at most nine terms by 1/2: 2^52 leaves room for it below 2^53)
        return np.ones(shape, dtype=bool), bound <= 2.0**52
    magnitudes = {key: np.abs(v) for key, v in distinct.items()}  # each array once
    return np.broadcast_to(bytes_in_range(act_total, *_sums([[magnitudes[id(v)] for v in ph.values()]
                                                             for ph in phases])), shape), False


def _either(grads_a: FloatArray, acts_a: FloatArray, grads_b: FloatArray, acts_b: FloatArray
            ) -> dict[str, FloatArray]:
    """Gradients and activations of whichever of two moments holds more."""
    pick_b = grads_b + acts_b > grads_a + acts_a
    return {"gradients": np.where(pick_b, grads_b, grads_a), "activations": np.where(pick_b, acts_b, acts_a)}


TORCH_CP_REFUSAL = (
    "cp > 1 with framework 'torch' is not in the memory model: torch's context parallelism (context_parallel, "
    "ring attention over the cp ranks) keeps the rotating key/value buffers, the fp32 output and log-sum-exp "
    "accumulators of its _SDPAMerger and, in backward, rotating key/value gradient accumulators beside each "
    "layer's saved tensors; the eager-PyTorch terms count a layer's own sequence shard only")
"""Why the memory model refuses torch's context parallelism (it would count too little)."""

TORCH_TP_REFUSAL = (
    "tp > 1 with framework 'torch' and sequence_parallel=False is not in the memory model: its terms would keep "
    "Hugging Face's loss on V/tp logits, which no torch code runs (Transformers' tp_plan gathers the logits whole "
    "and keeps the embedding whole; torchtitan always pairs tensor parallelism with sequence parallelism and "
    "loss_parallel); measured 10.35 % under on llama-3.1-8b at tp 2 (docs/memory-model.md, section 3)")
"""Why the memory model refuses torch tensor parallelism without sequence parallelism (it would count too little)."""


def torch_sp_gap(model: ModelConfig) -> str | None:
    """The first check of :func:`torch_sp_covered` that ``model`` fails, as a phrase (None: it is covered)."""
    layout = module_layout(model)
    checks = [
        (layout is not ModuleLayout.LLAMA, f"its module lineage is {layout.value!r}, not Llama's"),
        (model.norm_placement is not NormPlacement.PRE,
         f"its norms are placed {model.norm_placement.value!r}, not before each block (pre)"),
        (model.parallel_block, "its attention and MLP run as one parallel block"),
        (model.moe is not None, "it has routed experts (MoE)"),
        (model.mla is not None, "it has latent attention (MLA)"),
        (model.fused_qkv, "its q/k/v projection is fused"),
        (model.fused_gate_up, "its gate/up projection is fused"),
        (model.tied_embeddings, "its head is tied to the word embedding"),
        (model.position_embedding is not PositionEmbedding.ROTARY,
         f"its positions are {model.position_embedding.value!r}, not rotary"),
        (not model.causal, "it is not a causal decoder"),
    ]
    return next((why for failed, why in checks if failed), None)


def torch_sp_covered(model: ModelConfig) -> bool:
    """Whether torchtitan's sequence-parallel plan covers ``model``'s layers as the memory model follows them:
    Llama-lineage pre-norm dense decoder layers with separate q/k/v and gate/up projections, rotary positions and
    an untied head (torchtitan shards the embedding and the head apart; docs/memory-model.md, section 3)."""
    return torch_sp_gap(model) is None


def torch_sp_refusal(model: ModelConfig) -> str:
    """Why the memory model refuses torch's sequence parallelism for ``model`` (outside :func:`torch_sp_covered`),
    naming the check it fails."""
    return ("sequence_parallel=True with framework 'torch' and tp > 1 is modelled for the layers torchtitan's plan "
            "parallelises (apply_tp: SequenceParallel norms, each block's input all-gathered before its colwise "
            "q/k/v and MLP projections): a Llama-lineage dense decoder with pre-norms, separate q/k/v and gate/up "
            "projections, rotary positions and an untied head; this model is outside that plan: "
            f"{torch_sp_gap(model)}")


class Refusal(NamedTuple):
    """A recipe and layout the memory model does not cover: the field to name, why, and what would work."""

    field: str
    message: str
    hint: str


_Rows = Callable[[ModelConfig, TrainingConfig, LayoutArrays], BoolArray]


def _torch_tp_refusal(model: ModelConfig) -> Refusal:
    """torch tp > 1 without sequence parallelism: turn it on where the plan covers the model, else tp = 1."""
    if torch_sp_covered(model):
        return Refusal("training.sequence_parallel", TORCH_TP_REFUSAL,
                       "set sequence_parallel=True (torchtitan's plan, modelled for this model), or tp=1, or "
                       "framework='megatron'")
    return Refusal("parallel.tp", TORCH_TP_REFUSAL,
                   f"set tp=1 (sequence parallelism, the modelled torch tensor parallelism, does not cover this "
                   f"model: {torch_sp_gap(model)}), or framework='megatron'")


_NO_ROWS: BoolArray = np.zeros((), dtype=bool)


_REFUSALS: tuple[tuple[Callable[[ModelConfig], Refusal], _Rows], ...] = (
    (lambda m: Refusal("training.sequence_parallel", torch_sp_refusal(m),
                       "set sequence_parallel=False with tp=1, or framework='megatron' for Megatron-LM's sequence "
                       "parallelism"),
     lambda m, t, lay: (np.asarray(lay.active_sequence_parallel, dtype=bool)
                        if t.framework is Framework.TORCH and not torch_sp_covered(m) else _NO_ROWS)),
    (_torch_tp_refusal,
     lambda m, t, lay: ((np.asarray(lay.tp) > 1) & (np.asarray(lay.active_sequence_parallel) == 0)
                        if t.framework is Framework.TORCH else _NO_ROWS)),
    (lambda m: Refusal("parallel.cp", TORCH_CP_REFUSAL,
                       "set cp=1 for framework 'torch' (split the sequence with tp and sequence_parallel instead), "
                       "or use framework='megatron', whose context-parallel terms are modelled"),
     lambda m, t, lay: (np.asarray(lay.cp) > 1 if t.framework is Framework.TORCH else _NO_ROWS)),
    (lambda m: Refusal("training.moe_load_imbalance",
                       "moe_load_imbalance with framework 'torch' and ep > 1 is not in the memory model: its eager "
                       "MoE terms give every rank its fair share of the routed tokens (a rank holding every expert "
                       "computes every routed pair whatever the balance, so at ep = 1 the factor has no effect)",
                       "leave moe_load_imbalance unset for framework 'torch', or use framework='megatron', whose "
                       "dispatcher terms follow the busiest expert-parallel rank"),
     lambda m, t, lay: (np.asarray(lay.ep) > 1) & (t.framework is Framework.TORCH and t.moe_load_imbalance is not None)),
    (lambda m: Refusal("training.tp_comm_overlap",
                       "tp_comm_overlap needs sequence parallelism over tp > 1: Megatron-LM switches sequence "
                       "parallelism off at tp = 1 and then refuses --tp-comm-overlap (validate_args), so no such run "
                       "allocates the workspaces",
                       "set tp_comm_overlap=False for tp = 1, or use tp > 1"),
     lambda m, t, lay: (~np.asarray(lay.active_sequence_parallel, dtype=bool) if t.tp_comm_overlap
                        else _NO_ROWS)),
)
"""What the memory model refuses: each refusal (built for the model: the field and fix depend on it) and the rows
it covers."""


def unmodelled_rows(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays) -> npt.NDArray[np.bool_]:
    """Rows the memory model does not cover (:func:`refusal` says why): the batch estimator marks them invalid,
    the scalar one raises a ConfigError."""
    out = np.zeros(lay.shape, dtype=bool)
    for _, rows in _REFUSALS:
        out |= np.broadcast_to(rows(model, training, lay), lay.shape)
    return out


def refusal(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays) -> Refusal | None:
    """Why the memory model does not cover the first row of ``lay`` (None: it does)."""
    return next((r(model) for r, rows in _REFUSALS if np.broadcast_to(rows(model, training, lay), lay.shape)[0]),
                None)


@dataclass(frozen=True)
class TokenTerms:
    """What one layer, the model's ends and the loss save for one micro-batch on one rank, and what frozen
    weights change in it: the terms that read only the columns of :func:`token_keys`."""

    layer: LayerActivations
    edge: EdgeActivations
    logits: LogitBytes
    frozen: FrozenActivations | None
    """Where weights are frozen (LoRA, frozen embeddings or layers, a frozen head), else None."""


def token_terms(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays) -> TokenTerms:
    """The :class:`TokenTerms` of each layout in ``lay``."""
    kw: dict[str, npt.ArrayLike] = {"tp": lay.tp, "sp": lay.active_sequence_parallel, "cp": lay.cp,
                                    "seq_len": lay.seq_len, "micro_batch_size": lay.micro_batch_size}
    frozen = (training.lora is not None or training.freeze_embeddings or training.trainable_layers is not None
              or not trains(model, training)[1])
    return TokenTerms(layer=layer_activations(model, training, **kw, etp=lay.etp, ep=lay.ep),
                      edge=edge_activations(model, training, **kw), logits=logit_bytes(model, training, **kw),
                      frozen=frozen_activations(model, training, **kw, etp=lay.etp, ep=lay.ep) if frozen else None)


def token_keys(lay: LayoutArrays) -> tuple[IntArray, ...]:
    """Every column :func:`token_terms` reads: tp, sequence parallelism where it acts, cp, the sequence, the
    micro-batch size and the expert split (etp, ep); layouts that differ only in other columns share them."""
    return (lay.tp, lay.active_sequence_parallel, lay.cp, lay.seq_len, lay.micro_batch_size, lay.etp, lay.ep)


@dataclass(frozen=True)
class StateTerms:
    """What a stage holds of the model and its states, when its gradients and buffers exist, and how many
    micro-batches are in flight: the terms that read only the columns of :func:`state_keys`."""

    shape: StageShape
    """The stage's layers (``chunk_sizes`` left empty: only ``inflight`` reads them)."""
    held: StageParams | None
    """Parameters the stage holds, where a term beyond these reads them (autocast's weight copies), else None."""
    states: States
    comm_passes: FloatArray
    comm_step: FloatArray
    grads: Gradients
    inflight: FloatArray


def state_terms(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, stage: IntArray) -> StateTerms:
    """The :class:`StateTerms` of stage ``stage`` of each layout in ``lay``."""
    per_param = state_bytes(training)
    shape = stage_shape(model, lay, stage, training)
    held = stage_params(model, shape, lay.tp, training)
    sh = sharding(lay)
    states = model_states(per_param, training, held, sh)
    layer = layer_params(model, training, sh)
    comm_passes, comm_step = comm_buffers(per_param, training, lay, shape, states, layer, sh)
    grads = gradients(model, training, per_param, lay, shape, states, layer, sh)
    inflight = _inflight(stage, lay, modes=_Modes.of(lay), shape=shape)
    # (what no later term reads is dropped: the batch estimator gathers every array left, row by row)
    return StateTerms(shape=dataclasses.replace(shape, chunk_sizes=()),
                      held=held if training.precision.is_amp else None, states=states, comm_passes=comm_passes,
                      comm_step=comm_step, grads=grads, inflight=inflight)


def state_keys(lay: LayoutArrays) -> tuple[IntArray | BoolArray, ...]:
    """Every column :func:`state_terms` reads of a layout besides the stage, or what of it it reads: layers per
    stage (pp, vpp, split), the tensor, expert and ZeRO sharding (etp 0 and the micro-batch group 0 stand for tp
    and pp, both in the key), whether there are data-parallel replicas (torch DDP's buckets), the micro-batches
    and their schedule, the recompute chunk. Layouts that differ only in
    micro-batch size, sequence, recompute mode, sequence or context parallelism beyond these share their terms."""
    return (lay.pp, lay.vpp, lay.stage_split, lay.tp, lay.etp, lay.ep, lay.shard_group, lay.effective_zero_stage,
            lay.dp * lay.cp > 1, lay.num_microbatches, lay.schedule, lay.microbatch_group_size,
            lay.recompute_num_layers)


def stage_arrays(model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, stage: IntArray,
                 terms: StateTerms | None = None, tokens: TokenTerms | None = None) -> StageArrays:
    """Memory of pipeline stage ``stage`` for each layout in ``lay`` (training gives the fixed recipe);
    ``terms`` and ``tokens``: its :func:`state_terms` and :func:`token_terms` where the caller has them
    (computed per distinct :func:`state_keys` and :func:`token_keys`)."""
    modes = _Modes.of(lay)
    t = state_terms(model, training, lay, stage) if terms is None else terms
    tok = token_terms(model, training, lay) if tokens is None else tokens
    shape, held, states, grads = t.shape, t.held, t.states, t.grads
    comm_passes, comm_step = t.comm_passes, t.comm_step
    act = _activations(model, training, lay, modes, shape, held, t.inflight, tok)
    logits_others, logits_fwd, logits_bwd, returned = _logits(lay, modes, shape, tok.logits)
    out = _outputs(training, act, returned)
    acts = act.backward
    # Megatron: the grad buffer is always there, so the late moments are never above the others.
    acts_late = 0.0 * acts if act.late is None else act.late
    acts_late_attn = 0.0 * acts if act.late_attention is None else act.late_attention

    common = {"parameters": states.params, "master_weights": states.master, "optimizer_states": states.optimizer,
              "workspaces": np.full(np.shape(states.params), float(workspace_bytes(model, training)))}
    zero = 0.0 * acts
    # the kept output's parts (None in the framework loop)
    o_logits, o_forward, o_passes, o_late, o_step = (None,) * 5 if out is None else (
        out.logits, out.forward, out.passes, out.late, out.step)
    step_acts = zero if o_step is None else o_step
    step_logits = zero if o_logits is None else o_logits
    tied = grads.tied_buffer
    phases = [
        {**common, "gradients": grads.passes, "activations": plus(act.forward, o_forward),
         "logits_loss": plus(logits_fwd, o_logits), "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": grads.passes, "activations": plus(acts, o_passes),
         "logits_loss": plus(logits_bwd, o_logits), "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": states.grads, "activations": step_acts, "logits_loss": step_logits,
         "optimizer_temporaries": states.temporaries, "comm_buffers": comm_step},
        {**common, **_either(grads.late, plus(acts_late, o_late), grads.late_attention, plus(acts_late_attn, o_late)),
         "logits_loss": plus(logits_others, o_logits), "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, **_either(plus(grads.top, tied), plus(acts + act.top, o_passes),
                             plus(grads.top_attention, tied), plus(acts + act.top_attention, o_passes)),
         "logits_loss": plus(logits_others, o_logits), "optimizer_temporaries": zero, "comm_buffers": comm_passes},
        {**common, "gradients": plus(states.grads, tied), "activations": step_acts, "logits_loss": step_logits,
         "optimizer_temporaries": zero, "comm_buffers": comm_passes},
    ]
    shape_all = np.broadcast(stage, lay.tp, lay.pp, lay.dp, lay.seq_len, lay.micro_batch_size).shape
    act_total = np.maximum(act.forward, acts + act.work)
    in_range, exact = _in_range(act_total, phases, shape_all)
    peak, phase, breakdown = _peak(phases, shape_all, in_range, exact)
    communicators = sum((np.asarray(x) > 1).astype(np.int64) for x in (lay.dp * lay.cp, lay.tp, lay.pp, lay.cp, lay.ep))
    step = phases[2]
    host_total = states.host + act.host
    # (nothing offloaded: 0 throughout, no rounding to do)
    host = (_whole(host_total, shape_all, bytes_in_range(host_total)) if np.any(host_total)
            else np.zeros(shape_all, dtype=np.int64))
    return StageArrays(breakdown=breakdown, peak_bytes=peak, phase=phase,
                       step_states=tuple(step[cat] for cat in ("parameters", "gradients", "master_weights",
                                                               "optimizer_states")),
                       act_total=act_total, host_bytes=host,
                       num_layers=np.broadcast_to(shape.num_layers, shape_all),
                       num_params=np.broadcast_to(states.num_params, shape_all),
                       inflight=np.broadcast_to(act.inflight, shape_all),
                       communicators=np.broadcast_to(communicators, shape_all), in_range=in_range)
