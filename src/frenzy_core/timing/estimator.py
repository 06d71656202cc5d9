"""Seconds per training iteration of a layout on one GPU type: compute, communication, bubble, optimizer.

The busiest GPU (last pipeline stage: ceil(layers / pp) layers plus the head) sets the pace. Per micro-batch it
spends GEMM and attention FLOPs at ``peak x efficiency``, memory-bound kernels at ``HBM bandwidth x efficiency``
and tensor-, context- and expert-parallel collectives on the links its groups span; the pipeline adds
(pp - 1) / vpp idle micro-batch slots (Narayanan et al. SC21) and stage-boundary sends; data-parallel gradient
reduction and the optimizer step close the iteration. Formulas and sources: docs/time-model.md.
The vectorised function is the implementation; the scalar one validates its configs and calls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.layout import BOUND_RULES, layout_rule, require_rows, validate_layout
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.params import count_parameters, embedding_parameters, head_parameters, norm_parameters
from frenzy_core.config.training import Attention, Precision, Recompute, RecomputeMethod, TrainingConfig
from frenzy_core.errors import ConfigError, require_instance
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.timing.comm import group_bandwidth, links_for, ring_all_reduce_s, ring_one_way_s, send_s
from frenzy_core.timing.flops import (
    BACKWARD_TO_FORWARD,
    FUSED_ATTENTION_BACKWARD_TO_FORWARD,
    attention_flops_per_token,
    causal_fraction,
    head_flops_per_token,
    linear_flops_per_token,
    training_flops,
)
from frenzy_core.timing.params import TimeModelParams, default_time_model_params
from frenzy_core.timing.result import TIME_CATEGORIES, TimeEstimate, TimeEstimateBatch
from frenzy_core.timing.traffic import (
    BACKWARD_TRAFFIC_TO_FORWARD,
    EAGER_SCORE_BYTES,
    LOGIT_BYTES,
    elementwise_elements_per_token,
    grad_reduce_bytes,
    optimizer_bytes_per_param,
)

__all__ = [
    "estimate_iteration_time",
    "estimate_iteration_time_batch",
    "peak_dtype",
    "resolve_gpu",
]

_PEAK_DTYPE = {
    Precision.FP32: "fp32", Precision.BF16: "bf16", Precision.AMP_BF16: "bf16", Precision.BF16_MIXED: "bf16",
    Precision.FP16: "fp16", Precision.AMP_FP16: "fp16", Precision.FP16_MIXED: "fp16", Precision.FP8_MIXED: "fp8",
}
# Tensor-parallel collectives per layer and micro-batch (Megatron, Shoeybi et al. 2019): two in the forward
# pass (after attention and after the MLP), two in the backward pass; full recompute repeats the forward two.
_TP_COLLECTIVES_FWD = 2
_TP_COLLECTIVES_BWD = 2

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike


def peak_dtype(precision: Precision) -> str:
    """The ``GPUSpec.peak_tflops`` key the matmuls of ``precision`` run at."""
    return _PEAK_DTYPE[precision]


def resolve_gpu(gpu: GPUSpec | str) -> GPUSpec:
    """A GPUSpec as given, or looked up by id or alias in the GPU catalogue."""
    if isinstance(gpu, GPUSpec):
        return gpu
    return get_gpu_spec(gpu)


def _peak_flops(gpu: GPUSpec, precision: Precision) -> float:
    key = peak_dtype(precision)
    if key not in gpu.peak_tflops:
        raise ConfigError(f"{gpu.id} lists no {key} peak (has {sorted(gpu.peak_tflops)}), needed by "
                          f"precision={precision.value!r}", field="training.precision", value=precision.value,
                          hint=f"use a precision whose dtype {gpu.id} supports")
    return gpu.peak_tflops[key] * 1e12


def _stage_params(model: ModelConfig, pp: IntArray, layers_stage: IntArray, tp: FloatArray,
                  ep: IntArray) -> tuple[FloatArray, FloatArray]:
    """Dense and expert parameters held by one GPU of the busiest stage (after tp and ep sharding)."""
    counts = count_parameters(model)
    dense_per_layer = (counts.layers - counts.experts) / model.num_layers
    expert_per_layer = counts.experts / model.num_layers
    embed = embedding_parameters(model)
    final = norm_parameters(model) if model.final_norm else 0
    head_side = head_parameters(model) + final + (model.vocab_size * model.hidden_size
                                                  if model.tied_embeddings else 0)
    # One stage holds the embedding and the head; otherwise the bigger end (a tied head keeps its own copy).
    ends = np.where(pp == 1, embed + head_parameters(model) + final, max(embed, head_side))
    dense = (layers_stage * dense_per_layer + ends) / tp
    experts = layers_stage * expert_per_layer / (tp * ep)
    return dense, experts


_CHECKED_RULES = (*BOUND_RULES, layout_rule("global_batch_splits_into_microbatches"))
"""What the batch estimator checks: values in range and whole micro-batches (the other layout rules are the
caller's to apply, e.g. with :func:`frenzy_core.config.layout.layout_mask`)."""


def estimate_iteration_time_batch(
    model: ModelConfig,
    training: TrainingConfig,
    gpu: GPUSpec | str,
    layouts: LayoutArrays | Mapping[str, ArrayLike],
    *,
    cluster: Cluster | Links | None = None,
    params: TimeModelParams | None = None,
) -> TimeEstimateBatch:
    """Iteration time of many layouts of one model and recipe at once (numpy broadcasting over the arrays).

    ``layouts``: a :class:`LayoutArrays`, or a mapping of its columns (missing ones take ``training``'s value;
    ``recompute``/``schedule`` take members, names or codes; default schedule: interleaved where vpp > 1).
    Layout rules (:func:`validate_layout`) are not checked here, except that values are in range and the global
    batch splits into whole micro-batches (ConfigError naming the first candidate that breaks them).
    """
    gpu = resolve_gpu(gpu)
    p = params if params is not None else default_time_model_params(gpu)
    links = links_for(gpu, cluster)
    peak = _peak_flops(gpu, training.precision)
    mem_bw = gpu.memory_bandwidth_bytes_per_s * p.memory_efficiency
    act = float(training.precision.activation_bytes)

    lay = layouts if isinstance(layouts, LayoutArrays) else LayoutArrays.from_columns(layouts, training)
    require_rows(model, lay, _CHECKED_RULES)
    dp_, tp_, pp_, vpp_, cp_, ep_, mb, gbs, rc, sched, zero = (np.atleast_1d(a) for a in (
        lay.dp, lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.micro_batch_size, lay.global_batch_size, lay.recompute,
        lay.schedule, lay.effective_zero_stage))
    sp = np.atleast_1d(lay.sequence_parallel).astype(bool)
    per_step = mb * dp_
    m = gbs // per_step
    world = dp_ * tp_ * pp_ * cp_
    sp = sp & (tp_ > 1)
    full = rc == Recompute.FULL.code
    selective = rc == Recompute.SELECTIVE.code

    s = training.seq_len
    h = model.hidden_size
    layers_stage = -(-model.num_layers // pp_)  # ceil: the busiest stage
    tokens = mb * s / cp_  # tokens one GPU processes per micro-batch (before tensor-parallel sharding)
    tpf = tp_.astype(np.float64)

    # ---- compute: GEMMs and attention core, forward + backward (docs/time-model.md, "Compute")
    mm_rate = peak * p.matmul_efficiency
    attn_rate = peak * p.attention_efficiency
    layer_gemm_s = tokens * linear_flops_per_token(model) / tpf / mm_rate
    layer_attn_s = tokens * attention_flops_per_token(model, s, causal_fraction(model, training.attention)) / tpf \
        / attn_rate
    head_s = tokens * head_flops_per_token(model) / tpf / mm_rate
    passes = 1.0 + BACKWARD_TO_FORWARD
    eager = training.attention is Attention.EAGER
    attn_passes = 1.0 + (BACKWARD_TO_FORWARD if eager else FUSED_ATTENTION_BACKWARD_TO_FORWARD)
    compute_mb = layers_stage * (passes * layer_gemm_s + attn_passes * layer_attn_s) + passes * head_s

    # ---- memory-bound kernels ("Elementwise")
    elems = elementwise_elements_per_token(model)
    layer_bytes = tokens * act * (elems.replicated / np.where(sp, tpf, 1.0) + elems.sharded / tpf)
    score_bytes = tokens * EAGER_SCORE_BYTES * model.num_attention_heads * s / tpf if eager else tokens * 0.0
    layer_elem_s = (layer_bytes + score_bytes) / mem_bw
    logits_s = tokens * LOGIT_BYTES * model.vocab_size / tpf / mem_bw
    elementwise_mb = (1.0 + BACKWARD_TRAFFIC_TO_FORWARD) * layers_stage * layer_elem_s + logits_s

    # ---- recompute: one more forward of the recomputed layers, or of the attention core only
    if training.recompute_method is RecomputeMethod.BLOCK and training.recompute_num_layers is not None:
        recomputed_layers = np.minimum(layers_stage, training.recompute_num_layers)
    else:
        recomputed_layers = layers_stage
    recompute_mb = np.where(full, recomputed_layers * (layer_gemm_s + layer_attn_s + layer_elem_s),
                            np.where(selective, layers_stage * (layer_attn_s + score_bytes / mem_bw), 0.0))

    # ---- tensor parallel: all-reduce, or reduce-scatter + all-gather with sequence parallelism
    lat = p.collective_latency_s
    eff = p.collective_efficiency
    tp_bw = group_bandwidth(tpf, np.ones_like(tpf), links, eff)
    tp_bytes = tokens * h * act
    tp_one = np.where(sp, 2.0 * ring_one_way_s(tp_bytes, tpf, tp_bw, lat), ring_all_reduce_s(tp_bytes, tpf, tp_bw, lat))
    n_tp = _TP_COLLECTIVES_FWD + _TP_COLLECTIVES_BWD + np.where(full, _TP_COLLECTIVES_FWD, 0) * recomputed_layers \
        / layers_stage
    tp_mb = layers_stage * n_tp * tp_one

    # ---- context parallel: ring attention passes K and V around cp ranks (backward also dK, dV)
    cpf = cp_.astype(np.float64)
    cp_bw = group_bandwidth(tpf * cpf, tpf, links, eff)
    kv_bytes = 2.0 * tokens * model.kv_size / tpf * act
    cp_passes = 1.0 + 2.0 + np.where(full, recomputed_layers / layers_stage, 0.0)
    cp_mb = np.where(cp_ > 1, layers_stage * cp_passes * (cpf - 1) * send_s(kv_bytes, cp_bw, lat), 0.0)

    # ---- expert parallel: dispatch and combine all-to-alls per MoE layer and pass
    if model.moe is not None:
        epf = ep_.astype(np.float64)
        ep_bw = group_bandwidth(tpf * epf, tpf, links, eff)
        moe_layers = layers_stage * model.num_moe_layers / model.num_layers
        a2a_bytes = tokens * model.moe.top_k * h * act / np.where(sp, tpf, 1.0)
        ep_passes = 2.0 + np.where(full, recomputed_layers / layers_stage, 0.0)
        ep_mb = moe_layers * ep_passes * 2.0 * ring_one_way_s(a2a_bytes, epf, ep_bw, lat)
    else:
        ep_mb = tokens * 0.0

    # ---- pipeline: activations forward and gradients backward across each chunk boundary
    interleaved = sched == PipelineSchedule.INTERLEAVED.code
    chunks = np.where(interleaved, vpp_, 1).astype(np.float64)
    pp_bw = group_bandwidth(world.astype(np.float64), world.astype(np.float64), links, eff)
    p2p_bytes = tokens * h * act / tpf  # scatter-gather (Narayanan et al. SC21) or sequence-parallel shards
    p2p_mb = np.where(pp_ > 1, 2.0 * chunks * send_s(p2p_bytes, pp_bw, lat), 0.0)

    busy_mb = compute_mb + recompute_mb + elementwise_mb
    comm_mb = tp_mb + cp_mb + ep_mb + p2p_mb
    hidden_mb = np.minimum(p.tensor_parallel_overlap * tp_mb + p.context_parallel_overlap * cp_mb
                           + p.expert_parallel_overlap * ep_mb + p.pipeline_p2p_overlap * p2p_mb, busy_mb)
    stage_mb = busy_mb + comm_mb - hidden_mb
    bubble = (pp_ - 1) / chunks * stage_mb

    # ---- data parallel: gradient reduction (and ZeRO gathers) over dp x cp replicas
    dense, experts = _stage_params(model, pp_, layers_stage, tpf, ep_)
    gb = float(grad_reduce_bytes(training.precision))
    pb = float(training.precision.param_bytes)
    replicas = (dp_ * cp_).astype(np.float64)
    dp_bw = group_bandwidth(tpf * replicas, tpf * cpf, links, eff)
    mf = m.astype(np.float64)

    def _dp_comm(n_params: FloatArray, n: FloatArray) -> FloatArray:
        rs = ring_one_way_s(n_params * gb, n, dp_bw, lat)
        ag = ring_one_way_s(n_params * pb, n, dp_bw, lat)
        return np.select([zero == 0, zero == 1, zero == 2],
                         [ring_all_reduce_s(n_params * gb, n, dp_bw, lat), rs + ag, mf * rs + ag],
                         mf * (rs + 2.0 * ag))

    dp_s = _dp_comm(dense, replicas) + _dp_comm(experts, replicas / ep_)
    window = busy_mb * np.where(zero >= 2, mf, 1.0)
    hidden_dp = np.minimum(p.data_parallel_overlap * dp_s, window)

    # ---- optimizer step: memory-bound over the (ZeRO-sharded) parameters of this GPU
    local = dense / np.where(zero >= 1, replicas, 1.0) + experts / np.where(zero >= 1, replicas / ep_, 1.0)
    optimizer_s = local * optimizer_bytes_per_param(training.precision, training.optimizer) / mem_bw

    breakdown = {
        "compute": mf * compute_mb, "recompute": mf * recompute_mb, "elementwise": mf * elementwise_mb,
        "tensor_parallel": mf * tp_mb, "context_parallel": mf * cp_mb, "expert_parallel": mf * ep_mb,
        "pipeline_p2p": mf * p2p_mb, "pipeline_bubble": bubble, "data_parallel": dp_s, "optimizer": optimizer_s,
    }
    assert tuple(breakdown) == TIME_CATEGORIES
    breakdown = {k: np.asarray(v, dtype=np.float64) * np.ones_like(mf) for k, v in breakdown.items()}
    overlapped = mf * hidden_mb + hidden_dp
    iteration_s = sum(breakdown.values()) - overlapped
    model_flops = training_flops(model, s, 1) * gbs
    gbs_f = gbs.astype(np.float64)
    return TimeEstimateBatch(
        iteration_s=iteration_s, breakdown=breakdown, overlapped_s=overlapped,
        tokens_per_s=gbs_f * s / iteration_s, samples_per_s=gbs_f / iteration_s,
        mfu=model_flops / (iteration_s * world * peak), model_tflops_per_gpu=model_flops / (iteration_s * world) / 1e12,
        num_microbatches=m, global_batch_size=gbs, world_size=world,
    )


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
