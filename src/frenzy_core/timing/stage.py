"""One micro-batch on one pipeline stage: its layers' terms (timing/layer.py) times the layer count, with
recompute, the head where the stage holds it, pipeline sends and what overlaps, for each distinct stage shape of a
batch of candidates.

Layouts that differ only in dp, ZeRO stage or global batch share their stage shape, so the estimator evaluates the
physics once per distinct shape (:func:`distinct`) and gathers the results.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import RecomputeMethod, TrainingConfig
from frenzy_core.hardware.gpu import Links
from frenzy_core.timing.comm import group_bandwidth, ring_latency_s, send_s
from frenzy_core.timing.gpu_rows import GpuTable
from frenzy_core.timing.layer import layer_terms

__all__ = ["StageTerms", "recomputed_layers", "stage_terms"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class StageTerms(NamedTuple):
    """Seconds of one micro-batch on a stage, by category (before overlap), the seconds hidden, and
    the forward and backward compute that data-parallel traffic can hide behind."""

    compute: FloatArray
    recompute: FloatArray
    elementwise: FloatArray
    launch: FloatArray
    tensor_parallel: FloatArray
    context_parallel: FloatArray
    expert_parallel: FloatArray
    pipeline_p2p: FloatArray
    hidden: FloatArray
    fwd_window: FloatArray
    bwd_window: FloatArray

    def take(self, index: npt.NDArray[np.intp]) -> StageTerms:
        """The terms of candidates ``index``."""
        return StageTerms(*(a[index] for a in self))

    @property
    def busy(self) -> FloatArray:
        """Compute, recompute, memory-bound kernels and launch gaps: what overlapped traffic hides behind."""
        return np.asarray(self.compute + self.recompute + self.elementwise + self.launch, dtype=np.float64)

    @property
    def stage(self) -> FloatArray:
        """The micro-batch's length on the stage, exposed traffic included (sets the pipeline bubble)."""
        return np.asarray(self.busy + self.tensor_parallel + self.context_parallel + self.expert_parallel
                          + self.pipeline_p2p - self.hidden, dtype=np.float64)


def recomputed_layers(training: TrainingConfig, layers: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Layers of a stage that full recompute re-runs: all of them, or at most ``recompute_num_layers`` under the
    block method (Megatron's ``--recompute-method block``)."""
    if training.recompute_method is RecomputeMethod.BLOCK and training.recompute_num_layers is not None:
        return np.minimum(layers, training.recompute_num_layers)
    return layers


def stage_terms(model: ModelConfig, training: TrainingConfig, g: GpuTable, links: Links, *, tokens: FloatArray,
                tp: FloatArray, cp: FloatArray, ep: FloatArray, sp: BoolArray, layers: IntArray, redo: FloatArray,
                selective: BoolArray, chunks: FloatArray, pp: IntArray, p2p_span: FloatArray,
                head: FloatArray) -> StageTerms:
    """One micro-batch over ``layers`` layers (``redo`` of them recomputed in full, or the attention core of all
    of them when ``selective``) and, where ``head`` is 1, the output head and logits, with ``chunks`` model chunks
    crossing stage boundaries; each row on its own GPU (``g``: the rows' figures, :meth:`GpuTable.at`)."""
    lt = layer_terms(model, training, g, links, tokens, tp, cp, ep, sp)
    p, share = g.p, g.comm_share
    head_fwd, head_bwd, logits = head * lt.head_fwd, head * lt.head_bwd, head * lt.logits
    n = layers.astype(np.float64)
    fwd_layer = lt.gemm_fwd + lt.attn_fwd + lt.elem_fwd
    compute = n * (lt.gemm_fwd + lt.gemm_bwd + lt.attn_fwd + lt.attn_bwd) + head_fwd + head_bwd
    recompute = redo * fwd_layer + np.where(selective, n * (lt.attn_fwd + lt.score_fwd), 0.0)
    elementwise = n * (lt.elem_fwd + lt.elem_bwd) + logits
    launch = n * (lt.launch_fwd + lt.launch_bwd) + redo * lt.launch_fwd
    tensor_parallel = n * (lt.tp_fwd + lt.tp_bwd) + redo * lt.tp_fwd
    context_parallel = n * (lt.cp_fwd + lt.cp_bwd) + redo * lt.cp_fwd
    expert_parallel = n * (lt.ep_fwd + lt.ep_bwd) + redo * lt.ep_fwd
    hidden = (n * (lt.tp_hidden_fwd + lt.tp_hidden_bwd + lt.cp_hidden_fwd + lt.cp_hidden_bwd + lt.ep_hidden_fwd
                   + lt.ep_hidden_bwd) + redo * (lt.tp_hidden_fwd + lt.cp_hidden_fwd + lt.ep_hidden_fwd))

    # Pipeline: the activation forward and its gradient backward across each chunk boundary, t h / tp elements
    # (Megatron's scatter-gather, Narayanan et al. SC21, or sequence-parallel shards), one send each.
    act = float(training.precision.activation_bytes)
    lat = ring_latency_s(2.0 + 0.0 * p2p_span, p2p_span, links, p.collective_latency_s, p.ring_step_latency_s,
                         p.network_step_latency_s)
    bw = group_bandwidth(p2p_span, p2p_span, links, p.collective_efficiency)
    p2p = np.where(pp > 1, 2.0 * chunks * send_s(tokens * model.hidden_size * act / tp, bw, lat), 0.0)
    busy = compute + recompute + elementwise + launch
    hidden = hidden + (1.0 - share) * p.pipeline_p2p_overlap * np.minimum(p2p, busy)
    fwd_window = n * fwd_layer + head_fwd
    bwd_window = n * (lt.gemm_bwd + lt.attn_bwd + lt.elem_bwd) + head_bwd + recompute
    return StageTerms(compute, recompute, elementwise, launch, tensor_parallel, context_parallel, expert_parallel,
                      p2p, hidden, fwd_window, bwd_window)
