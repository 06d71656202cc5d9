"""Costs of collectives and point-to-point sends (alpha-beta model, ring algorithms), vectorised with numpy.

A ring all-reduce of S bytes over n ranks moves 2 (n - 1) / n x S per rank; reduce-scatter, all-gather and
all-to-all move (n - 1) / n x S (Thakur et al. 2005, "Optimization of Collective Communication Operations in
MPICH"; NCCL's bus-bandwidth convention). Time = bytes moved / bandwidth + a fixed latency; nothing for n = 1.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from frenzy_core import _limits as limits
from frenzy_core.errors import ConfigError, require_number
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpu import GPUSpec, Links

__all__ = ["group_bandwidth", "link_rows", "links_for", "ring_all_reduce_s", "ring_latency_s", "ring_one_way_s",
           "send_s", "take_links"]

FloatArray = npt.NDArray[np.float64]


def links_for(gpu: GPUSpec, cluster: Cluster | Links | None = None) -> Links:
    """Node size and links of a job on ``gpu``: the type's typical node, given ``Links``, or what a cluster's
    nodes of the type give (:meth:`Cluster.links`: largest node, slowest links)."""
    if cluster is None:
        return gpu.links
    if isinstance(cluster, Links):
        _check_link("cluster.gpus_per_node", cluster.gpus_per_node, 1, limits.GPUS_PER_NODE.high, integer=True)
        for name in ("intra_node_bytes_per_s", "inter_node_bytes_per_s"):
            _check_link(f"cluster.{name}", getattr(cluster, name), limits.MIN_BYTES_PER_S, limits.BYTES_PER_S.high)
        return cluster
    if isinstance(cluster, Cluster):
        return cluster.links(gpu.id)
    raise ConfigError(f"cluster must be a Cluster or Links, got {type(cluster).__name__}", field="cluster",
                      hint="pass frenzy_core.Cluster.from_dict({...}) or leave it out for the GPU's typical node")


def _check_link(field: str, value: object, low: float, high: float, integer: bool = False) -> None:
    """A number of ``Links`` in [low, high] (whole with ``integer``); the planner's per-layout arrays element-wise."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        require_number(field, value, low=low, high=high, integer=integer)
        return
    ok = arr.dtype.kind in ("iu" if integer else "iuf") and arr.size > 0
    if ok:
        with np.errstate(invalid="ignore"):
            ok = bool(np.all(np.isfinite(arr)) and np.all(arr >= low) and np.all(arr <= high))
    if not ok:
        raise ConfigError(f"{field} must hold {'integers' if integer else 'numbers'} in [{low:g}, {high:g}]",
                          field=field)


def link_rows(links: Links, shape: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """A number per layout naming its links (all 0 when ``links`` holds scalars; ``Links`` may hold arrays with
    one entry per layout, as the planner passes them), so per-shape terms are computed once per distinct links."""
    key = np.zeros(shape, dtype=np.int64)
    for field in links:
        if np.ndim(field) == 0:
            continue
        values, ids = np.unique(np.asarray(field), return_inverse=True)
        key = key * len(values) + ids.reshape(shape)
    return np.asarray(np.unique(key, return_inverse=True)[1], dtype=np.int64).reshape(shape)


def take_links(links: Links, index: npt.NDArray[np.intp]) -> Links:
    """The links of the layouts at ``index`` (scalar links as they are)."""
    fields = [f if np.ndim(f) == 0 else np.asarray(f)[index] for f in links]
    return Links(*fields)  # type: ignore[arg-type]  # per-layout arrays, as link_rows describes


def group_bandwidth(span: FloatArray, stride: FloatArray, links: Links, efficiency: float | FloatArray) -> FloatArray:
    """Achieved per-rank bandwidth of a group of ranks ``stride`` apart within ``span`` consecutive GPUs.

    Inside one node: the intra-node link. Across nodes, NCCL runs one ring per NIC, so a group with k members
    per node reaches k NICs' worth (each GPU has its own NIC; the groups that share a node split them), capped by
    the intra-node link (NCCL's hierarchical and multi-channel algorithms; NVIDIA DGX reference architectures).
    """
    gpn = links.gpus_per_node
    members_per_node = np.maximum(1.0, np.floor(gpn / np.maximum(stride, 1.0)))
    inter = np.minimum(links.inter_node_bytes_per_s * members_per_node, links.intra_node_bytes_per_s)
    raw = np.where(span <= gpn, links.intra_node_bytes_per_s, inter)
    return np.asarray(raw * efficiency, dtype=np.float64)


def ring_latency_s(n: FloatArray, span: FloatArray, links: Links, base_s: float | FloatArray,
                   step_s: float | FloatArray, net_step_s: float | FloatArray, steps_per_rank: float = 1.0) -> FloatArray:
    """Latency of one ring collective over ``n`` ranks within ``span`` consecutive GPUs, as NCCL's own tuning
    model has it (src/graph/tuning.cc): a base plus one hop per ring step, n - 1 steps for a reduce-scatter or
    all-gather (``steps_per_rank`` 2 for an all-reduce), each a network hop when the ring spans nodes."""
    hop = np.where(span > links.gpus_per_node, net_step_s, step_s)
    return np.asarray(base_s + steps_per_rank * np.maximum(n - 1.0, 0.0) * hop, dtype=np.float64)


def ring_all_reduce_s(nbytes: FloatArray, n: FloatArray, bandwidth: FloatArray,
                      latency_s: FloatArray | float) -> FloatArray:
    """One ring all-reduce: 2 (n-1)/n x bytes / bandwidth + latency (0 when n = 1)."""
    return np.where(n > 1, 2.0 * (n - 1) / n * nbytes / bandwidth + latency_s, 0.0)


def ring_one_way_s(nbytes: FloatArray, n: FloatArray, bandwidth: FloatArray,
                   latency_s: FloatArray | float) -> FloatArray:
    """One reduce-scatter, all-gather or all-to-all of ``nbytes`` per rank: (n-1)/n x bytes / bw + latency."""
    return np.where(n > 1, (n - 1) / n * nbytes / bandwidth + latency_s, 0.0)


def send_s(nbytes: FloatArray, bandwidth: FloatArray, latency_s: FloatArray | float) -> FloatArray:
    """One point-to-point send of ``nbytes``."""
    return np.asarray(nbytes / bandwidth + latency_s, dtype=np.float64)
