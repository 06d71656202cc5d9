"""Pipeline stages that differ (own GPU type, own tp, own layer count; issue 12, form a): each stage timed on
its own type, and the 1F1B step from the stages' unequal micro-batch times.

Stage i's micro-batch (forward and backward over its layers, the head on the last stage, its exposed tensor-
parallel traffic and stage sends) comes from the same terms as the homogeneous model (timing/stage.py), with the
sends over the slowest link to its neighbours. The pipeline's step, for micro-batch times t_i and m micro-batches:

    pipeline_s = sum_i t_i + (m - 1) max_i t_i

the latency of a pipeline with unequal stages that Alpa uses to balance its stages (Zheng et al., OSDI'22, eq. 2)
and Metis's cost model takes over (Um et al., USENIX ATC'24): the first micro-batch crosses every stage forward
and the last one every stage backward (sum_i t_i), and in between the slowest stage runs its other m - 1
micro-batches back to back. With equal stages it is (m + pp - 1) t, the homogeneous model's bubble of pp - 1 slots
(Narayanan et al. SC21); against the 1F1B timeline simulated with the same lengths (timing/pipeline.py) it is
never below and equal for equal stages (tests/test_timing_stages.py), so it is an upper bound where stages differ.
The bubble is pipeline_s - m max_i t_i = sum_i t_i - max_i t_i. After the pipeline each stage all-reduces its own
gradients over its dp replicas on its own type (hidden behind its backward and its idle half of the pipeline,
(pipeline_s - m t_i) / 2) and steps its optimizer; the step ends with the slowest of these tails.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core._base import FrozenModel
from frenzy_core._distinct import distinct
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.layout import validate_layout
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.params import ParamCounts, count_parameters
from frenzy_core.config.training import OffloadDevice, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError, require_instance
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.timing.comm import link_rows, take_links
from frenzy_core.timing.estimator import (
    _data_parallel,
    _dequantize_s,
    _fp8_weight_cast_s,
    _optimizer_s,
    _stage_params,
    _trained_params,
)
from frenzy_core.timing.flops import training_flops
from frenzy_core.timing.gpu_rows import GpuTable, gpu_table, peak_flops
from frenzy_core.timing.params import TimeModelParams, default_time_model_params
from frenzy_core.timing.result import TIME_CATEGORIES, TimeEstimate
from frenzy_core.timing.stage import StageTerms, recomputed_layers, stage_terms

__all__ = ["PipelineStage", "PipelineTime", "StageMicrobatch", "estimate_pipeline_time", "pipeline_step_s",
           "stage_microbatch_batch", "stage_tail_batch"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@functools.lru_cache(maxsize=64)
def _counts(model: ModelConfig) -> ParamCounts:
    """Parameter counts of a model (hashable and frozen), once per model: the search times many stages."""
    return count_parameters(model)


def pipeline_step_s(microbatch_s: npt.ArrayLike, m: npt.ArrayLike) -> FloatArray:
    """``sum_i t_i + (m - 1) max_i t_i`` over the last axis of ``microbatch_s`` (one row per pipeline)."""
    t = np.asarray(microbatch_s, dtype=np.float64)
    return np.asarray(t.sum(axis=-1) + (np.asarray(m, dtype=np.float64) - 1.0) * t.max(axis=-1))


class StageMicrobatch(NamedTuple):
    """One micro-batch on one stage of each layout: its terms, the fp8 weight cast and the exposed length."""

    terms: StageTerms
    fp8_cast_s: FloatArray
    microbatch_s: FloatArray
    layers: IntArray


def _table(model: ModelConfig, training: TrainingConfig, gpu: GPUSpec, params: TimeModelParams | None) -> GpuTable:
    """The figures of ``gpu`` with ``params`` (default: its own), as a one-type table."""
    require_instance("gpu", gpu, GPUSpec)
    return gpu_table(training, [gpu], [params if params is not None else default_time_model_params(gpu)],
                     model.causal)


def stage_microbatch_batch(model: ModelConfig, training: TrainingConfig, gpu: GPUSpec, layouts: LayoutArrays,
                           stage: npt.ArrayLike, links: Links, *, params: TimeModelParams | None = None
                           ) -> StageMicrobatch:
    """One micro-batch of pipeline stage ``stage`` of each layout (its own tp and layer count from the row) on
    ``gpu``: the stage's layers, the head where it is the last stage, sends over ``links.inter_node_bytes_per_s``
    (the slowest link to its neighbours). 1F1B only (no virtual chunks)."""
    table = _table(model, training, gpu, params)
    lay = layouts
    st = np.broadcast_to(np.asarray(stage, dtype=np.int64), lay.pp.shape)
    mem_bw = table.rates.memory[np.zeros(lay.pp.shape, dtype=np.int64)]
    tp, pp, cp, ep, mb, rc = lay.tp, lay.pp, lay.cp, lay.ep, lay.micro_batch_size, lay.recompute
    sp = lay.sequence_parallel.astype(bool) & (tp > 1)
    layers = lay.stage_layer_count(model.num_layers, st)
    redo = recomputed_layers(training, layers)
    world = lay.dp * tp * pp * cp
    head = (st == pp - 1).astype(np.int64)
    link_id = link_rows(links, world.shape)
    first, inverse = distinct(mb, cp, tp, ep, sp, pp, rc, world > links.gpus_per_node, link_id, layers, head)
    tokens = (mb * training.seq_len / cp).astype(np.float64)
    terms = stage_terms(
        model, training, table.at(np.zeros(first.shape, dtype=np.int64)), take_links(links, first),
        tokens=tokens[first],
        tp=tp[first].astype(np.float64), cp=cp[first].astype(np.float64), ep=ep[first].astype(np.float64),
        sp=sp[first], layers=layers[first],
        redo=np.where(rc == Recompute.FULL.code, redo, 0)[first].astype(np.float64),
        selective=(rc == Recompute.SELECTIVE.code)[first], chunks=np.ones(first.size),
        pp=pp[first], p2p_span=world[first].astype(np.float64), head=head[first].astype(np.float64),
    ).take(inverse)
    m = (lay.global_batch_size // (mb * lay.dp)).astype(np.float64)
    fp8 = (_fp8_weight_cast_s(model, _counts(model), training, layers, tp.astype(np.float64), m, mem_bw)
           + _dequantize_s(model, training, layers, tp.astype(np.float64), rc == Recompute.FULL.code, mem_bw))
    return StageMicrobatch(terms, np.asarray(fp8, dtype=np.float64), terms.stage + fp8, layers)


def stage_tail_batch(model: ModelConfig, training: TrainingConfig, gpu: GPUSpec, layouts: LayoutArrays,
                     stage: npt.ArrayLike, micro: StageMicrobatch, cooldown_s: npt.ArrayLike, links: Links, *,
                     params: TimeModelParams | None = None) -> tuple[FloatArray, FloatArray, FloatArray]:
    """After the pipeline: stage ``stage``'s gradient synchronisation over its dp replicas on ``links`` (its own
    type's), before overlap and the seconds its backward and ``cooldown_s`` of idle time hide, and its optimizer
    step: ``(data_parallel_s, hidden_s, optimizer_s)``."""
    table = _table(model, training, gpu, params)
    lay = layouts
    st = np.broadcast_to(np.asarray(stage, dtype=np.int64), lay.pp.shape)
    code = np.zeros(lay.pp.shape, dtype=np.int64)
    mem_bw = table.rates.memory[code]
    counts = _counts(model)
    tp, pp, cp, dp, ep = lay.tp, lay.pp, lay.cp, lay.dp, lay.ep
    first_stage, last_stage = st == 0, st == pp - 1
    tpf = tp.astype(np.float64)
    held = (*_stage_params(model, counts, pp, micro.layers, tpf, ep, first_stage, last_stage),
            (counts.layers - counts.experts) / model.num_layers / tpf)
    trained = _trained_params(model, training, micro.layers, tpf, held)
    m = (lay.global_batch_size // (lay.micro_batch_size * dp)).astype(np.float64)
    link_id = link_rows(links, dp.shape)
    ends = first_stage.astype(np.int64) + 2 * last_stage.astype(np.int64)
    dp_s, hidden = _data_parallel(model, training, table.p, code, links, link_id, held, trained, micro.layers, tp, cp,
                                  dp, ep, pp, lay.effective_zero_stage, m, micro.terms.fwd_window,
                                  micro.terms.bwd_window, np.asarray(cooldown_s, dtype=np.float64), ends)
    optimizer = _optimizer_s(training, trained[0], trained[1], (dp * cp).astype(np.float64), ep,
                             lay.effective_zero_stage, mem_bw)
    keep = (1.0 - table.comm_share[code]) * table.p.data_parallel_overlap[code]
    return dp_s, keep * hidden, np.asarray(optimizer, dtype=np.float64)


class PipelineStage(NamedTuple):
    """One stage of a pipeline of unequal stages: its GPU type, tensor-parallel degree and links (node size and
    intra-node link of its own type, ``inter_node_bytes_per_s`` of its own NICs for its gradient sync), and the
    slowest link it sends activations over (``p2p_bytes_per_s``)."""

    gpu: GPUSpec
    tp: int
    links: Links
    p2p_bytes_per_s: float


class PipelineTime(FrozenModel):
    """A step of a pipeline of unequal stages: the job's estimate and each stage's part in it."""

    time: TimeEstimate
    microbatch_s: tuple[float, ...]
    """Per stage: one micro-batch forward and backward, exposed traffic included."""
    tail_s: tuple[float, ...]
    """Per stage: exposed gradient synchronisation and the optimizer step after the pipeline."""
    pipeline_s: float
    """``sum_i t_i + (m - 1) max_i t_i``."""

    @property
    def slowest_stage(self) -> int:
        """The stage that sets the pace (the first of equals)."""
        return int(np.argmax(self.microbatch_s))


def _stage_layout(training: TrainingConfig, parallel: ParallelConfig, tp: int) -> LayoutArrays:
    return LayoutArrays.from_configs(training, parallel.replace(tp=tp))


def estimate_pipeline_time(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig,
                           stages: Sequence[PipelineStage], *, params: Sequence[TimeModelParams | None] | None = None
                           ) -> PipelineTime:
    """Seconds per step of ``parallel`` (dp replicas, pp = len(stages), ``stage_layers``, 1F1B) when stage i runs
    on ``stages[i]`` with its own tp: the module docstring's formula. ``params``: per stage (default: each
    type's defaults)."""
    require_instance("model", model, ModelConfig)
    require_instance("training", training, TrainingConfig)
    require_instance("parallel", parallel, ParallelConfig)
    if len(stages) != parallel.pp or parallel.vpp != 1 or parallel.schedule is not PipelineSchedule.ONE_F_ONE_B:
        raise ConfigError(f"{len(stages)} stages for pp={parallel.pp}: a pipeline of unequal stages needs one "
                          "stage per pipeline rank, vpp=1 and the 1f1b schedule", field="stages",
                          hint="give one PipelineStage per pipeline stage")
    if training.offload_optimizer is not OffloadDevice.NONE or training.offload_params is not OffloadDevice.NONE:
        raise ConfigError("a pipeline of unequal stages is timed without offload (the planner searches it without)",
                          field="training.offload_optimizer", value=training.offload_optimizer.value,
                          hint="set offload_optimizer and offload_params to 'none', or time one GPU type with "
                               "estimate_iteration_time")
    per = list(params) if params is not None else [None] * len(stages)
    for s in stages:
        validate_layout(model, training.replace(sequence_parallel=training.sequence_parallel and s.tp > 1),
                        parallel.replace(tp=s.tp))
    micro, lays = [], []
    for i, s in enumerate(stages):
        lay = _stage_layout(training, parallel, s.tp)
        p2p = min(s.p2p_bytes_per_s, s.links.inter_node_bytes_per_s)
        micro.append(stage_microbatch_batch(model, training, s.gpu, lay, i, s.links._replace(
            inter_node_bytes_per_s=p2p), params=per[i]))
        lays.append(lay)
    t = np.array([float(mc.microbatch_s[0]) for mc in micro])
    m = training.global_batch_size // (training.micro_batch_size * parallel.dp) if training.global_batch_size \
        else 1
    pipe = float(pipeline_step_s(t, m))
    tails = []
    for i, s in enumerate(stages):
        dp_s, hidden, opt = stage_tail_batch(model, training, s.gpu, lays[i], i, micro[i], (pipe - m * t[i]) / 2.0,
                                             s.links, params=per[i])
        tails.append((float(dp_s[0]), float(hidden[0]), float(opt[0])))
    tail = [d - h + o for d, h, o in tails]
    return PipelineTime(time=_estimate(model, training, parallel, stages, micro, t, tails, pipe, m),
                        microbatch_s=tuple(float(x) for x in t), tail_s=tuple(tail), pipeline_s=pipe)


def _estimate(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, stages: Sequence[PipelineStage],
              micro: list[StageMicrobatch], t: FloatArray, tails: list[tuple[float, float, float]], pipe: float,
              m: int) -> TimeEstimate:
    """The job's :class:`TimeEstimate`: the slowest stage's micro-batch categories m times, the bubble, and the
    data-parallel and optimizer seconds of the stage with the longest tail (categories less overlap = step)."""
    k = int(np.argmax(t))
    j = max(range(len(tails)), key=lambda i: tails[i][0] - tails[i][1] + tails[i][2])
    terms = micro[k].terms
    per_mb = {"compute": terms.compute, "recompute": terms.recompute,
              "elementwise": terms.elementwise + micro[k].fp8_cast_s, "kernel_launch": terms.launch,
              "tensor_parallel": terms.tensor_parallel, "context_parallel": terms.context_parallel,
              "expert_parallel": terms.expert_parallel, "pipeline_p2p": terms.pipeline_p2p}
    breakdown = {name: m * float(v[0]) for name, v in per_mb.items()}
    breakdown.update(pipeline_bubble=pipe - m * float(t[k]), data_parallel=tails[j][0], optimizer=tails[j][2],
                     offload=0.0)
    assert set(breakdown) == set(TIME_CATEGORIES)
    overlapped = m * float(terms.hidden[0]) + tails[j][1]
    iteration = pipe + tails[j][0] - tails[j][1] + tails[j][2]
    gbs = m * training.micro_batch_size * parallel.dp
    world = sum(parallel.dp * s.tp * parallel.cp for s in stages)
    peak_sum = sum(parallel.dp * s.tp * parallel.cp * peak_flops(s.gpu, training.precision) for s in stages)
    flops = training_flops(model, training.seq_len, 1) * gbs
    return TimeEstimate(
        iteration_s=iteration, breakdown={c: breakdown[c] for c in TIME_CATEGORIES}, overlapped_s=overlapped,
        tokens_per_s=gbs * training.seq_len / iteration, samples_per_s=gbs / iteration,
        mfu=flops / (iteration * peak_sum), model_tflops_per_gpu=flops / (iteration * world) / 1e12,
        num_microbatches=m, global_batch_size=gbs, world_size=world)
