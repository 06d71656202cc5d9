"""What communication hides behind which compute: tensor-parallel collectives next to their GEMMs, ring-attention
sends behind attention steps, FSDP/ZeRO-3 gathers and reduce-scatters layer by layer, DDP buckets behind the last
micro-batch. Hidden communication still costs the overlapped kernels the SMs it runs on.

Pure numpy functions over arrays of candidates; formulas and sources: docs/time-model.md ("Overlap").
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["Exposure", "chunked_hidden", "data_parallel_exposure", "fsdp_exposure", "pipelined_hidden"]

FloatArray = npt.NDArray[np.float64]


class Exposure(NamedTuple):
    """Communication seconds before overlap, and the seconds of it that compute hides."""

    comm: FloatArray
    hidden: FloatArray


def chunked_hidden(comm: FloatArray, gemm: FloatArray, chunks: FloatArray) -> FloatArray:
    """Seconds of a collective hidden when it is split into ``chunks`` pieces pipelined with the GEMM that
    produces or consumes it (Megatron/TE --tp-comm-overlap, torch async TP, Wang et al. 2023 "Overlap
    communication with dependent computation via decomposition"): every piece but the first (or last) runs
    under a GEMM piece, at most the GEMM's length."""
    return np.asarray(np.minimum(comm * (1.0 - 1.0 / chunks), gemm), dtype=np.float64)


def pipelined_hidden(comm_total: FloatArray, fill: FloatArray, window: FloatArray,
                     prefetch: FloatArray | float) -> FloatArray:
    """Seconds of a stream of per-layer collectives hidden behind ``window`` seconds of compute: the first
    (``fill``) cannot be, the rest can up to the window; ``prefetch`` in [0, 1] scales the window (0: the
    collectives wait for the compute and nothing hides)."""
    return np.asarray(np.clip(np.minimum(comm_total - fill, window * np.minimum(prefetch, 1.0)), 0.0, None),
                      dtype=np.float64)


def fsdp_exposure(gather_layer: FloatArray, scatter_layer: FloatArray, gather_ends: FloatArray,
                  scatter_ends: FloatArray, layers: FloatArray, fwd_window: FloatArray, bwd_window: FloatArray,
                  prefetch: FloatArray | float) -> Exposure:
    """One micro-batch of ZeRO-3/FSDP: each layer's parameters are gathered before its forward and again
    before its backward, and its gradients reduce-scattered after it (``*_ends``: the embedding and head).
    With prefetch the next layer's gather runs under the current layer's compute; the first gather of each
    pass and the last reduce-scatter stay exposed."""
    fwd = layers * gather_layer + gather_ends
    bwd = layers * (gather_layer + scatter_layer) + gather_ends + scatter_ends
    hidden = (pipelined_hidden(fwd, gather_layer, fwd_window, prefetch)
              + pipelined_hidden(bwd, scatter_layer, bwd_window, prefetch))
    return Exposure(comm=np.asarray(fwd + bwd, dtype=np.float64), hidden=hidden)


def data_parallel_exposure(reduce_s: FloatArray, gather_s: FloatArray, reduce_fill: FloatArray,
                           gather_fill: FloatArray, fwd_window: FloatArray, bwd_window: FloatArray) -> Exposure:
    """Once-per-step gradient reduction (DDP all-reduce or ZeRO-1/2 reduce-scatter) issued bucket by bucket in
    the last micro-batch's backward, and a parameter all-gather (ZeRO-1/2) overlapped with the next step's first
    forward (Li et al. 2020, "PyTorch Distributed"; Megatron --overlap-grad-reduce / --overlap-param-gather).
    The last bucket of each (``*_fill``) stays exposed."""
    hidden = (np.clip(np.minimum(reduce_s - reduce_fill, bwd_window), 0.0, None)
              + np.clip(np.minimum(gather_s - gather_fill, fwd_window), 0.0, None))
    return Exposure(comm=np.asarray(reduce_s + gather_s, dtype=np.float64), hidden=np.asarray(hidden))
