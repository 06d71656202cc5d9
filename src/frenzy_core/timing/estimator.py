"""Seconds per training iteration of a layout on one GPU type: compute, communication, bubble, optimizer.

The busiest GPU sets the pace: the last pipeline stage (its layers plus the head) or the stage with the most
layers before it, each with the layer counts the layout's split gives it (``ParallelConfig.stage_layers``, or
the even split with the first stages one layer longer). One micro-batch on
it (timing/stage.py, per layer timing/layer.py) runs its GEMMs at the GPU's sustained matmul rate times their
shape factor and its attention at the measured speed of the framework's kernel (timing/efficiency.py),
memory-bound kernels counted per framework at a share of HBM bandwidth, and tensor-, context- and
expert-parallel traffic on the links its groups span, partly hidden behind the GEMMs and attention steps next to
it (timing/overlap.py); the pipeline adds (pp - 1) / vpp idle micro-batch slots (Narayanan et al. SC21) and
stage-boundary sends; data-parallel traffic (DDP buckets, ZeRO, FSDP layer by layer) hides behind what compute
it can, and the optimizer step closes the iteration (on the host CPU where it is offloaded, with the host-link
copies of offloaded states: timing/offload.py). Formulas and sources: docs/time-model.md.
The vectorised function is the implementation; the scalar one validates its configs and calls it. One call of
the vectorised function may cover layouts on several GPU types, each row's figures gathered from a table with one
entry per type (timing/gpu_rows.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from frenzy_core._distinct import distinct
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.finetune import nf4_bytes_per_param
from frenzy_core.config.layout import BOUND_RULES, layout_rule, require_rows, validate_layout
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.params import (
    ParamCounts,
    count_parameters,
    embedding_parameters,
    head_parameters,
    norm_parameters,
)
from frenzy_core.config.trainable import adapter_params_per_layer, matmul_weights
from frenzy_core.config.training import Framework, OffloadDevice, Precision, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError, require_instance
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.timing.comm import (
    group_bandwidth,
    link_rows,
    links_for,
    ring_all_reduce_s,
    ring_latency_s,
    ring_one_way_s,
    take_links,
)
from frenzy_core.timing.flops import training_flops
from frenzy_core.timing.gpu_rows import GpuTable, ParamRows, gpu_table
from frenzy_core.timing.offload import OffloadTerms, offload_terms
from frenzy_core.timing.overlap import data_parallel_exposure, fsdp_exposure, pipelined_hidden
from frenzy_core.timing.params import TimeModelParams, default_time_model_params
from frenzy_core.timing.result import TIME_CATEGORIES, TimeEstimate, TimeEstimateBatch
from frenzy_core.timing.stage import StageTerms, recomputed_layers, stage_terms
from frenzy_core.timing.traffic import FP8_CAST_BYTES, grad_reduce_bytes, optimizer_bytes_per_param

__all__ = [
    "estimate_iteration_time",
    "estimate_iteration_time_batch",
    "resolve_gpu",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike
BoolArray = npt.NDArray[np.bool_]


def resolve_gpu(gpu: GPUSpec | str) -> GPUSpec:
    """A GPUSpec as given, or looked up by id or alias in the GPU catalogue."""
    if isinstance(gpu, GPUSpec):
        return gpu
    return get_gpu_spec(gpu)


def _stage_params(model: ModelConfig, counts: ParamCounts, pp: IntArray, layers_stage: IntArray, tp: FloatArray,
                  ep: IntArray, first: BoolArray, last: BoolArray) -> tuple[FloatArray, FloatArray]:
    """Dense and expert parameters held by one GPU of the busiest stage (after tp and ep sharding); ``first`` and
    ``last``: whether that stage holds the embedding and the head."""
    dense_per_layer = (counts.layers - counts.experts) / model.num_layers
    expert_per_layer = counts.experts / model.num_layers
    embed = embedding_parameters(model)
    final = norm_parameters(model) if model.final_norm else 0
    head_side = head_parameters(model) + final + (model.vocab_size * model.hidden_size
                                                  if model.tied_embeddings else 0)
    # One stage holds the embedding and the head; otherwise each end its own (a tied head keeps its own copy).
    ends = np.where(pp == 1, embed + head_parameters(model) + final,
                    np.where(first, embed, 0) + np.where(last, head_side, 0))
    dense = (layers_stage * dense_per_layer + ends) / tp
    experts = layers_stage * expert_per_layer / (tp * ep)
    return dense, experts


_Params = tuple[FloatArray, FloatArray, FloatArray]
"""(dense, expert) parameters on one GPU of the stage, and the dense parameters of one of its layers."""


def _trained_params(model: ModelConfig, training: TrainingConfig, layers_stage: IntArray, tp: FloatArray,
                    held: _Params) -> _Params:
    """The parameters of the stage that train (their gradients are reduced and the optimizer updates them): all
    it ``held``, or with LoRA only the adapters. Partial freezing without LoRA (frozen embeddings, the last k
    layers) is charged as full training here (docs/time-model.md)."""
    if training.lora is None:
        return held
    per_layer = np.asarray(adapter_params_per_layer(model, training.lora, tp), dtype=np.float64)  # type: ignore[arg-type]
    return layers_stage * per_layer, 0.0 * held[1], per_layer


def _dequantize_s(model: ModelConfig, training: TrainingConfig, layers_stage: IntArray, tp: FloatArray,
                  full_recompute: BoolArray, mem_bw: FloatArray) -> FloatArray:
    """Per micro-batch: QLoRA's dequantisation of the stage's 4-bit layer weights, once per forward (and its
    recomputation) and once per backward (bitsandbytes ``MatMul4Bit``: ``dequantize_4bit`` in both), each reading
    the packed codes with their absmax and writing the compute-dtype copy the GEMM then reads."""
    lora = training.lora
    if lora is None or not lora.quantized:
        return tp * 0.0
    shared = model.moe.shared_expert_ffn_hidden_size if model.moe is not None else 0
    n_moe = model.num_moe_layers if model.moe is not None else 0
    per_layer = ((model.num_layers - n_moe) * matmul_weights(model, model.ffn_hidden_size)
                 + n_moe * matmul_weights(model, shared)) / model.num_layers
    passes = 2.0 + full_recompute.astype(np.float64)
    moved = nf4_bytes_per_param(lora) + training.precision.activation_bytes
    return np.asarray(layers_stage * per_layer / tp * moved * passes / mem_bw, dtype=np.float64)


def _stage_candidates(model: ModelConfig, lay: LayoutArrays) -> tuple[IntArray, IntArray, IntArray]:
    """Layers of the last pipeline stage, the most layers any earlier stage holds, and which stage that is (the
    first one on a tie; 0 where pp = 1). Worked out once per distinct (pp, vpp, split), then gathered: a
    batch holds few of them, and per row it was a fifth of the batch estimator's time."""
    flat = lay.flat()
    first, inverse = distinct(flat.pp, flat.vpp, flat.stage_split)
    few = flat.take(first)
    pp = few.pp
    last = few.stage_layer_count(model.num_layers, pp - 1)
    mid, where = np.zeros_like(last), np.zeros_like(last)
    for stage in range(int(np.max(pp, initial=1)) - 1):
        count = np.where(stage < pp - 1, few.stage_layer_count(model.num_layers, np.full_like(pp, stage)), -1)
        where = np.where(count > mid, stage, where)
        mid = np.maximum(mid, count)
    shape = np.atleast_1d(lay.pp).shape
    return last[inverse].reshape(shape), mid[inverse].reshape(shape), where[inverse].reshape(shape)


_CHECKED_RULES = (*BOUND_RULES, *(layout_rule(name) for name in (
    "global_batch_splits_into_microbatches", "layers_cover_pipeline_chunks", "stage_layers_one_per_chunk")))
"""What the batch estimator checks: values in range, whole micro-batches, and no more pipeline chunks than layers
(or than a split lists): the busiest-stage search visits every stage, so pp = 2^20 on a 32-layer model was
minutes of work (the fuzz campaign). The other layout rules are the caller's to apply, e.g. with
:func:`frenzy_core.config.layout.layout_mask`."""


def estimate_iteration_time_batch(
    model: ModelConfig,
    training: TrainingConfig,
    gpu: GPUSpec | str | Sequence[GPUSpec | str],
    layouts: LayoutArrays | Mapping[str, ArrayLike],
    *,
    gpu_index: ArrayLike | None = None,
    cluster: Cluster | Links | None = None,
    params: TimeModelParams | Sequence[TimeModelParams | None] | None = None,
) -> TimeEstimateBatch:
    """Iteration time of many layouts of one model and recipe at once (numpy broadcasting over the arrays).

    ``layouts``: a :class:`LayoutArrays` (one entry per :meth:`~LayoutArrays.flat` row), or a mapping of its
    columns (missing ones take ``training``'s value; ``recompute``/``schedule`` take members, names or codes;
    default schedule: interleaved where vpp > 1).
    ``gpu``: one GPU type, or several with ``gpu_index`` giving each layout's (an index into them), so one call
    times layouts on several types; ``params`` then holds one entry per type (None: the type's defaults), and
    ``cluster``, where a :class:`Cluster`, gives each type its own links.
    Layout rules (:func:`validate_layout`) are not checked here, except that values are in range, the global
    batch splits into whole micro-batches and every pipeline chunk holds a layer (ConfigError naming the first
    candidate that breaks them).
    """
    require_instance("model", model, ModelConfig, "use ModelConfig.preset(name) or ModelConfig(...)")
    require_instance("training", training, TrainingConfig)
    gpus = _gpu_list(gpu)
    ps = _param_list(params, gpus)
    type_links = [links_for(g, cluster) for g in (gpus[:1] if isinstance(cluster, Links) else gpus)]
    table = gpu_table(training, gpus, ps, model.causal)
    lay = (layouts if isinstance(layouts, LayoutArrays) else LayoutArrays.from_columns(layouts, training)).flat()
    require_rows(model, lay, _CHECKED_RULES)
    dp_, tp_, pp_, vpp_, cp_, ep_, mb, gbs, rc, sched, zero = (np.atleast_1d(a) for a in (
        lay.dp, lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.micro_batch_size, lay.global_batch_size, lay.recompute,
        lay.schedule, lay.effective_zero_stage))
    code = _gpu_codes(gpu_index, len(gpus), dp_.shape)
    links = _row_links(type_links, code)
    return _estimate(model, training, table, code, links, lay, (dp_, tp_, pp_, vpp_, cp_, ep_, mb, gbs, rc, sched,
                                                                zero))


def _gpu_list(gpu: GPUSpec | str | Sequence[GPUSpec | str]) -> list[GPUSpec]:
    """The GPU types of a call: one, or a non-empty sequence of them (specs, ids or aliases)."""
    if isinstance(gpu, (GPUSpec, str)):
        return [resolve_gpu(gpu)]
    if not isinstance(gpu, Sequence) or not gpu:
        raise ConfigError(f"gpu must be a GPUSpec, a GPU id or a non-empty sequence of them, got {gpu!r}",
                          field="gpu", hint="pass e.g. 'h100-sxm' or ['h100-sxm', 'a100-80gb'] with gpu_index")
    return [resolve_gpu(g) for g in gpu]


def _gpu_codes(gpu_index: ArrayLike | None, n_types: int, shape: tuple[int, ...]) -> IntArray:
    """Each layout's GPU type (an index into the call's types): ``gpu_index`` checked, or all 0 for one type."""
    if gpu_index is None:
        if n_types > 1:
            raise ConfigError(f"{n_types} GPU types given without gpu_index", field="gpu_index",
                              hint="pass gpu_index, one index into gpu per layout")
        return np.zeros(shape, dtype=np.int64)
    idx = np.asarray(gpu_index)
    ok = idx.dtype.kind in "iu" and idx.shape in ((), shape)
    if ok and idx.size:
        ok = bool(idx.min() >= 0 and idx.max() < n_types)
    if not ok:
        raise ConfigError(f"gpu_index must hold one integer in [0, {n_types}) per layout ({shape[0]} layouts), "
                          f"got {idx.dtype} values of shape {idx.shape}", field="gpu_index",
                          hint="index each layout's GPU type in the gpu sequence")
    return np.asarray(np.broadcast_to(idx, shape), dtype=np.int64)


def _param_list(params: TimeModelParams | Sequence[TimeModelParams | None] | None,
                gpus: list[GPUSpec]) -> list[TimeModelParams]:
    """Each type's parameters: given, or its defaults (:func:`default_time_model_params`)."""
    if params is None or isinstance(params, TimeModelParams):
        if params is not None and len(gpus) > 1:
            raise ConfigError("one TimeModelParams given for several GPU types", field="params",
                              hint="pass one per type in a list (None for a type's defaults)")
        given: list[TimeModelParams | None] = [params] * len(gpus)
    elif isinstance(params, Sequence) and len(params) == len(gpus):
        given = list(params)
    else:
        raise ConfigError(f"params must be a TimeModelParams or a list of one per GPU type ({len(gpus)})",
                          field="params", hint="pass None for each type's defaults")
    for entry in given:
        if entry is not None:
            require_instance("params", entry, TimeModelParams)
    return [p if p is not None else default_time_model_params(g) for p, g in zip(given, gpus, strict=True)]


def _row_links(type_links: list[Links], code: IntArray) -> Links:
    """The links each layout is timed with, from its type's (:func:`links_for`; one entry where given ``Links``
    apply to every type): those ``Links`` where all types share them, else ``Links`` of one entry per layout."""
    if all(e == type_links[0] for e in type_links):
        return type_links[0]
    cols = np.array(type_links, dtype=np.float64)[code]
    return Links(cols[..., 0].astype(np.int64), cols[..., 1], cols[..., 2])  # type: ignore[arg-type]


_Columns = tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray,
                 IntArray]
"""dp, tp, pp, vpp, cp, ep, micro-batch, global batch, recompute, schedule and effective ZeRO stage, per layout."""


def _estimate(model: ModelConfig, training: TrainingConfig, table: GpuTable, code: IntArray, links: Links,
              lay: LayoutArrays, columns: _Columns) -> TimeEstimateBatch:
    """The estimate of checked layouts, each on GPU type ``code`` of ``table``, with ``links``."""
    dp_, tp_, pp_, vpp_, cp_, ep_, mb, gbs, rc, sched, zero = columns
    sp = np.atleast_1d(lay.sequence_parallel).astype(bool)
    m = gbs // (mb * dp_)
    world = dp_ * tp_ * pp_ * cp_
    sp = sp & (tp_ > 1)
    peak, mem_bw, share = table.peak[code], table.rates.memory[code], table.comm_share[code]

    s = training.seq_len
    tokens = mb * s / cp_  # tokens one GPU processes per micro-batch (before tensor-parallel sharding)
    tpf = tp_.astype(np.float64)
    mf = m.astype(np.float64)

    # ---- one micro-batch on the busiest stage, once per distinct stage shape (timing/stage.py, timing/layer.py)
    interleaved = sched == PipelineSchedule.INTERLEAVED.code
    chunks_i = np.where(interleaved, vpp_, 1)
    link_id = link_rows(links, world.shape)  # per-layout links (the planner's placements) or one for all
    st, layers_stage, holds_embedding, pick_mid = _busiest_stage(
        model, training, table, code, links, link_id, lay, tokens=tokens, mb=mb, cp=cp_, tp=tp_, ep=ep_, sp=sp,
        pp=pp_, rc=rc, chunks=chunks_i, world=world)
    chunks = chunks_i.astype(np.float64)
    counts = count_parameters(model)
    elementwise_mb = (st.elementwise + _fp8_weight_cast_s(model, counts, training, layers_stage, tpf, mf, mem_bw)
                      + _dequantize_s(model, training, layers_stage, tpf, rc == Recompute.FULL.code, mem_bw))
    bubble = (pp_ - 1) / chunks * (st.stage + elementwise_mb - st.elementwise)

    # ---- data parallel: gradient reduction and ZeRO gathers over dp x cp replicas (timing/overlap.py)
    held = (*_stage_params(model, counts, pp_, layers_stage, tpf, ep_, holds_embedding, ~pick_mid),
            (counts.layers - counts.experts) / model.num_layers / tpf)
    trained = _trained_params(model, training, layers_stage, tpf, held)
    dp_s, hidden_dp = _data_parallel(model, training, table.p, code, links, link_id, held, trained, layers_stage,
                                     tp_, cp_, dp_, ep_, pp_, zero, mf, st.fwd_window, st.bwd_window, bubble / 2.0,
                                     holds_embedding.astype(np.int64) + 2 * (~pick_mid).astype(np.int64))
    hidden_dp = (1.0 - share) * table.p.data_parallel_overlap[code] * hidden_dp

    optimizer_s, off = _step_and_offload(training, table.host_link_bytes_per_s[code], trained, held,
                                         (dp_ * cp_).astype(np.float64), ep_, zero, layers_stage,
                                         np.minimum(world, links.gpus_per_node).astype(np.float64), mf, st, mem_bw)

    breakdown = {
        "compute": mf * st.compute, "recompute": mf * st.recompute, "elementwise": mf * elementwise_mb,
        "kernel_launch": mf * st.launch, "tensor_parallel": mf * st.tensor_parallel,
        "context_parallel": mf * st.context_parallel, "expert_parallel": mf * st.expert_parallel,
        "pipeline_p2p": mf * st.pipeline_p2p, "pipeline_bubble": bubble, "data_parallel": dp_s,
        "optimizer": optimizer_s, "offload": off.transfer_s,
    }
    assert tuple(breakdown) == TIME_CATEGORIES
    breakdown = {k: np.asarray(v, dtype=np.float64) * np.ones_like(mf) for k, v in breakdown.items()}
    overlapped = mf * st.hidden + hidden_dp + off.hidden_s
    return _batch_result(model, s, breakdown, overlapped, m, gbs, world, peak)


def _busiest_stage(model: ModelConfig, training: TrainingConfig, table: GpuTable, code: IntArray, links: Links,
                   link_id: IntArray, lay: LayoutArrays, *, tokens: FloatArray, mb: IntArray, cp: IntArray,
                   tp: IntArray, ep: IntArray, sp: BoolArray, pp: IntArray, rc: IntArray, chunks: IntArray,
                   world: IntArray) -> tuple[StageTerms, IntArray, BoolArray, BoolArray]:
    """One micro-batch's terms on the busiest stage: the last stage (with the head) or the longest stage before
    it, whichever takes longer; with that stage's layers, whether it holds the embedding, and whether it is the
    earlier one. Each distinct stage shape on each GPU type is computed once."""
    last_layers, mid_layers, mid_stage = _stage_candidates(model, lay)
    full = rc == Recompute.FULL.code
    selective = rc == Recompute.SELECTIVE.code
    inter = world > links.gpus_per_node  # stage boundaries cross nodes
    tpf, cpf = tp.astype(np.float64), cp.astype(np.float64)

    def on_stage(layers: IntArray, head: float) -> StageTerms:
        redo = recomputed_layers(training, layers)
        first, inverse = distinct(mb, cp, tp, ep, sp, pp, rc, chunks, inter, link_id, layers, code)
        return stage_terms(
            model, training, table.at(code[first]), take_links(links, first), tokens=tokens[first], tp=tpf[first],
            cp=cpf[first], ep=ep[first].astype(np.float64), sp=sp[first], layers=layers[first],
            redo=np.where(full, redo, 0)[first].astype(np.float64), selective=selective[first],
            chunks=chunks[first].astype(np.float64), pp=pp[first], p2p_span=world[first].astype(np.float64),
            head=head + 0.0 * tpf[first],
        ).take(inverse)

    st_last = on_stage(last_layers, 1.0)
    st_mid = on_stage(mid_layers, 0.0)
    pick_mid = (pp > 1) & (st_mid.stage > st_last.stage)
    st = StageTerms(*(np.where(pick_mid, a, b) for a, b in zip(st_mid, st_last, strict=True)))
    layers_stage = np.where(pick_mid, mid_layers, last_layers)
    holds_embedding = np.where(pick_mid, mid_stage == 0, pp == 1)
    return st, layers_stage, holds_embedding, pick_mid


def _batch_result(model: ModelConfig, seq_len: int, breakdown: dict[str, FloatArray], overlapped: FloatArray,
                  m: IntArray, gbs: IntArray, world: IntArray, peak: FloatArray) -> TimeEstimateBatch:
    """The step time (the categories less what overlaps) and the rates derived from it."""
    iteration_s = sum(breakdown.values()) - overlapped
    model_flops = training_flops(model, seq_len, 1) * gbs
    gbs_f = gbs.astype(np.float64)
    return TimeEstimateBatch(
        iteration_s=iteration_s, breakdown=breakdown, overlapped_s=overlapped,
        tokens_per_s=gbs_f * seq_len / iteration_s, samples_per_s=gbs_f / iteration_s,
        mfu=model_flops / (iteration_s * world * peak), model_tflops_per_gpu=model_flops / (iteration_s * world) / 1e12,
        num_microbatches=m, global_batch_size=gbs, world_size=world,
    )


def _step_and_offload(training: TrainingConfig, host_link: FloatArray, trained: _Params, held: _Params,
                      replicas: FloatArray, ep: IntArray, zero: IntArray, layers_stage: IntArray,
                      ranks_per_node: FloatArray, m: FloatArray, st: StageTerms,
                      mem_bw: FloatArray) -> tuple[FloatArray, OffloadTerms]:
    """The optimizer step (on the GPU, or on the host where it is offloaded) and offload's terms
    (timing/offload.py; ``host_link``: each layout's GPU's host link)."""
    off = offload_terms(training, host_link, stepped=_sharded(trained[0], trained[1], replicas, ep, zero, 1),
                        held=_sharded(held[0], held[1], replicas, ep, zero, 3), zero_stage=zero,
                        layers=layers_stage.astype(np.float64), ranks_per_node=ranks_per_node, m=m,
                        fwd_window=st.fwd_window, bwd_window=st.bwd_window)
    if training.offload_optimizer is not OffloadDevice.NONE:
        return off.host_step_s, off
    return _optimizer_s(training, trained[0], trained[1], replicas, ep, zero, mem_bw), off


def _sharded(dense: FloatArray, experts: FloatArray, replicas: FloatArray, ep: IntArray, zero: IntArray,
             stage: int) -> FloatArray:
    """This GPU's share of parameters that ZeRO shards over ``replicas`` from ``stage`` on (experts over
    ``replicas / ep``)."""
    sharded = zero >= stage
    return np.asarray(dense / np.where(sharded, replicas, 1.0) + experts / np.where(sharded, replicas / ep, 1.0))


def _optimizer_s(training: TrainingConfig, dense: FloatArray, experts: FloatArray, replicas: FloatArray,
                 ep: IntArray, zero: IntArray, mem_bw: FloatArray) -> FloatArray:
    """The optimizer step: memory-bound over this GPU's (ZeRO-sharded over ``replicas``) parameters."""
    local = _sharded(dense, experts, replicas, ep, zero, 1)
    return np.asarray(local * optimizer_bytes_per_param(training.precision, training.optimizer) / mem_bw)


def _fp8_weight_cast_s(model: ModelConfig, counts: ParamCounts, training: TrainingConfig, layers_stage: IntArray,
                       tp: FloatArray, m: FloatArray, mem_bw: FloatArray) -> FloatArray:
    """Per micro-batch: quantising the layers' weights to fp8 (fp8 recipes). Transformer Engine under Megatron
    casts them once per step (is_first_microbatch caching); torch casts them every micro-batch."""
    if training.precision is not Precision.FP8_MIXED:
        return tp * 0.0
    weights = counts.layers / model.num_layers * layers_stage / tp
    per_step = 1.0 if training.framework is Framework.MEGATRON else 0.0
    per_mb = weights * FP8_CAST_BYTES[training.fp8_recipe] / mem_bw
    return np.asarray(np.where(per_step > 0, per_mb / m, per_mb), dtype=np.float64)


def _data_parallel(model: ModelConfig, training: TrainingConfig, p: ParamRows, code: IntArray,
                   links: Links, link_id: IntArray, held: _Params, trained: _Params,
                   layers_stage: IntArray, tp: IntArray, cp: IntArray,
                   dp: IntArray, ep: IntArray, pp: IntArray, zero: IntArray, m: FloatArray, fwd_window: FloatArray,
                   bwd_window: FloatArray, cooldown: FloatArray, ends: IntArray) -> tuple[FloatArray, FloatArray]:
    """Data-parallel seconds per step before overlap, and those compute can hide (before the overlap share).

    Per-micro-batch traffic hides behind that micro-batch's forward (``fwd_window``) and backward
    (``bwd_window``); the once-per-step gradient reduction also behind the pipeline's cooldown (``cooldown``,
    the stage's idle half of the bubble). ``ends``: which of the embedding (1) and the head (2) the stage holds.
    ``p``: the GPU types' parameters, ``code``: each layout's type.

    Gradients are reduced over the dp x cp replicas (routed experts over dp x cp / ep), layer by layer: ZeRO 0
    all-reduces once per step, ZeRO 1 reduce-scatters and all-gathers once, ZeRO 2 reduce-scatters every
    micro-batch and gathers once, ZeRO 3 (FSDP) gathers each layer before its forward and backward and
    reduce-scatters after it, every micro-batch. Gathers move the parameters the stage ``held``, reductions the
    gradients of those ``trained`` (a frozen base has none).
    """
    first, inverse = distinct(dp, cp, tp, pp, ep, link_id, layers_stage, ends, code)
    p_first = ParamRows(*(a[code[first]] for a in p))

    def costs(params: _Params) -> list[FloatArray]:
        dense, experts, per_layer = (np.broadcast_to(a, dp.shape)[first] for a in params)
        out = _dp_collectives(model, training, p_first, take_links(links, first), dense, experts, per_layer,
                              layers_stage[first], tp[first].astype(np.float64), (dp * cp)[first].astype(np.float64),
                              ep[first].astype(np.float64))
        return [c[inverse] for c in out]

    ag_l, _, _, ag_e, _, _ = held_costs = costs(held)
    _, rs_l, ar_l, _, rs_e, ar_e = held_costs if trained is held else costs(trained)
    n_layers = layers_stage.astype(np.float64)
    ag, rs, ar = n_layers * ag_l + ag_e, n_layers * rs_l + rs_e, n_layers * ar_l + ar_e
    z3 = fsdp_exposure(ag_l, rs_l, ag_e, rs_e, n_layers, fwd_window, bwd_window, p.fsdp_prefetch_layers[code])
    z2_hidden = m * pipelined_hidden(rs, rs_l, bwd_window, 1.0) + pipelined_hidden(ag, ag_l, fwd_window, 1.0)
    z1 = data_parallel_exposure(rs, ag, rs_l, ag_l, fwd_window, bwd_window + cooldown)
    z0 = data_parallel_exposure(ar, 0.0 * ar, ar_l, 0.0 * ar, fwd_window, bwd_window + cooldown)
    comm = np.select([zero == 0, zero == 1, zero == 2], [z0.comm, z1.comm, m * rs + ag], m * z3.comm)
    hidden = np.select([zero == 0, zero == 1, zero == 2], [z0.hidden, z1.hidden, z2_hidden], m * z3.hidden)
    return np.asarray(comm, dtype=np.float64), np.asarray(hidden, dtype=np.float64)


def _dp_collectives(model: ModelConfig, training: TrainingConfig, p: ParamRows, links: Links,
                    dense: FloatArray, experts: FloatArray, dense_layer: FloatArray, layers_stage: IntArray,
                    tp: FloatArray, replicas: FloatArray, ep: FloatArray) -> tuple[FloatArray, ...]:
    """Seconds of one layer's gather, reduce-scatter and all-reduce over the replicas, and the same for the
    embedding and head on the stage: (ag_layer, rs_layer, ar_layer, ag_ends, rs_ends, ar_ends); ``p``: each
    row's parameters."""
    gb, pb = float(grad_reduce_bytes(training.precision)), float(training.precision.param_bytes)
    span = tp * replicas
    bw = group_bandwidth(span, span / replicas, links, p.collective_efficiency)
    n_layers = layers_stage.astype(np.float64)
    expert_layer = experts / np.maximum(n_layers, 1.0)
    ends = dense - n_layers * dense_layer  # embedding and head on this stage

    def one(n_params: FloatArray, group: FloatArray, nbytes: float, one_way: bool) -> FloatArray:
        ring, steps = (ring_one_way_s, 1.0) if one_way else (ring_all_reduce_s, 2.0)
        lat = ring_latency_s(group, span, links, p.collective_latency_s, p.ring_step_latency_s,
                             p.network_step_latency_s, steps)
        return np.where(n_params > 0, ring(n_params * nbytes, group, bw, lat), 0.0)

    def both(nbytes: float, one_way: bool) -> tuple[FloatArray, FloatArray]:
        layer = one(dense_layer + 0.0 * tp, replicas, nbytes, one_way) + one(expert_layer, replicas / ep, nbytes,
                                                                              one_way)
        return layer, one(ends, replicas, nbytes, one_way)

    (ag_l, ag_e), (rs_l, rs_e), (ar_l, ar_e) = both(pb, True), both(gb, True), both(gb, False)
    return ag_l, rs_l, ar_l, ag_e, rs_e, ar_e


def _check_cluster_holds(parallel: ParallelConfig, gpu: GPUSpec, cluster: Cluster | Links | None) -> None:
    """A cluster must have at least ``world_size`` GPUs of the type (free or not)."""
    if not isinstance(cluster, Cluster):
        return
    total = sum(n.gpus_per_node * n.count for n in cluster.nodes if n.gpu == gpu.id)
    if 0 < total < parallel.world_size:
        raise ConfigError(
            f"the layout needs {parallel.world_size} GPUs (dp x tp x pp x cp) but the cluster has {total} {gpu.id}",
            field="parallel", value=parallel.world_size, hint=f"use a layout of at most {total} GPUs")


def estimate_iteration_time(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig,
                            gpu: GPUSpec | str, *, cluster: Cluster | Links | None = None,
                            params: TimeModelParams | None = None) -> TimeEstimate:
    """Seconds per optimizer step of ``model`` trained with ``training`` laid out as ``parallel`` on ``gpu``.

    Without ``cluster`` the job is packed on nodes of ``gpu.gpus_per_node`` GPUs with the GPU's typical links;
    a :class:`Cluster` gives its own (:meth:`Cluster.links`: its largest node of the type, the slowest links),
    and :class:`Links` give them directly.
    ``params`` defaults to :func:`default_time_model_params` of the GPU.
    """
    require_instance("model", model, ModelConfig, "use ModelConfig.preset(name) or ModelConfig(...)")
    require_instance("training", training, TrainingConfig)
    require_instance("parallel", parallel, ParallelConfig)
    validate_layout(model, training, parallel)
    _check_cluster_holds(parallel, resolve_gpu(gpu), cluster)
    batch = estimate_iteration_time_batch(model, training, gpu, LayoutArrays.from_configs(training, parallel),
                                          cluster=cluster, params=params)
    result = batch.at(0)
    assert math.isfinite(result.iteration_s)
    return result
