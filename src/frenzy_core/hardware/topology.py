"""Where GPUs sit: a networkx graph (GPU - node - switch) for placement questions, and a numpy summary of free
GPUs per type and per node for the planner's inner loop (built in O(nodes) once, then O(1) per query).

Convention: on a node with ``free_gpus = f``, GPUs ``0 .. f-1`` are the free ones; GPU ``j`` belongs to fast-link
domain ``j // link_domain_gpus``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np
import numpy.typing as npt

from frenzy_core.errors import UnknownNameError
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.hardware.gpus import get_gpu_spec

if TYPE_CHECKING:
    from frenzy_core.hardware.cluster import Cluster

__all__ = ["ClusterSummary", "build_topology", "free_gpus_per_node", "link_domains"]

IntArray = npt.NDArray[np.int64]


def _frozen(array: IntArray) -> IntArray:
    """``array`` made read-only, so cached summaries can be handed out without copies."""
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class ClusterSummary:
    """Free and total GPUs per type and per node, as numpy arrays indexed by node (nodes in cluster order,
    each shape repeated ``count`` times) and dicts keyed by GPU type id."""

    gpu_types: tuple[str, ...]
    node_type: IntArray
    """Index into ``gpu_types`` of each node's GPU type."""
    node_shape: IntArray
    """Index into ``Cluster.nodes`` of each node's shape."""
    node_gpus: IntArray
    node_free: IntArray
    node_domain: IntArray
    """GPUs per fast-link domain on each node."""
    _total: dict[str, int] = field(repr=False)
    _free: dict[str, int] = field(repr=False)
    _largest_block: dict[str, int] = field(repr=False)
    _largest_domain_block: dict[str, int] = field(repr=False)
    _nodes: dict[str, IntArray] = field(repr=False)
    _free_sorted: dict[str, IntArray] = field(repr=False)
    _histogram: dict[str, IntArray] = field(repr=False)
    _specs: dict[str, GPUSpec] = field(repr=False)

    @classmethod
    def build(cls, cluster: Cluster) -> ClusterSummary:
        """All per-type figures in one pass over the node shapes (vectorised over nodes)."""
        types = tuple(cluster.gpu_types)
        index = {t: i for i, t in enumerate(types)}
        counts = np.array([n.count for n in cluster.nodes], dtype=np.int64)
        per_shape = {
            "type": np.array([index[n.gpu] for n in cluster.nodes], dtype=np.int64),
            "gpus": np.array([n.gpus_per_node for n in cluster.nodes], dtype=np.int64),
            "free": np.array([n.free_gpus or 0 for n in cluster.nodes], dtype=np.int64),
            "domain": np.array([n.link_domain_gpus or 1 for n in cluster.nodes], dtype=np.int64),
        }
        node_shape = _frozen(np.repeat(np.arange(len(cluster.nodes), dtype=np.int64), counts))
        node_type, node_gpus = _frozen(per_shape["type"][node_shape]), _frozen(per_shape["gpus"][node_shape])
        node_free, node_domain = _frozen(per_shape["free"][node_shape]), _frozen(per_shape["domain"][node_shape])
        total = np.bincount(node_type, weights=node_gpus, minlength=len(types))
        free = np.bincount(node_type, weights=node_free, minlength=len(types))
        domain_free = np.minimum(node_free, node_domain)
        largest, largest_domain, nodes, free_sorted, histogram = {}, {}, {}, {}, {}
        for i, gpu in enumerate(types):
            members = np.flatnonzero(node_type == i)
            order = np.argsort(-node_free[members], kind="stable")
            nodes[gpu] = _frozen(members[order])
            free_sorted[gpu] = _frozen(node_free[members[order]])
            largest[gpu] = int(node_free[members].max())
            largest_domain[gpu] = int(domain_free[members].max())
            histogram[gpu] = _frozen(np.bincount(node_free[members], minlength=int(node_gpus[members].max()) + 1))
        return cls(types, node_type, node_shape, node_gpus, node_free, node_domain,
                   {t: int(total[i]) for i, t in enumerate(types)}, {t: int(free[i]) for i, t in enumerate(types)},
                   largest, largest_domain, nodes, free_sorted, histogram, {t: cluster.gpu_spec(t) for t in types})

    def _key(self, gpu: str) -> str:
        if gpu in self._total:
            return gpu
        try:
            return get_gpu_spec(gpu, self._specs).id
        except UnknownNameError:
            raise UnknownNameError("GPU type in this cluster", gpu, self.gpu_types) from None

    @property
    def num_nodes(self) -> int:
        """Nodes in the cluster."""
        return int(self.node_type.shape[0])

    def total_gpus(self, gpu: str | None = None) -> int:
        """GPUs of type ``gpu`` (all types when None)."""
        return sum(self._total.values()) if gpu is None else self._total[self._key(gpu)]

    def free_gpus(self, gpu: str | None = None) -> int:
        """Free GPUs of type ``gpu`` (all types when None)."""
        return sum(self._free.values()) if gpu is None else self._free[self._key(gpu)]

    def free_by_type(self) -> dict[str, int]:
        """Free GPUs per type id."""
        return dict(self._free)

    def largest_free_block(self, gpu: str) -> int:
        """Most free GPUs of type ``gpu`` on one node."""
        return self._largest_block[self._key(gpu)]

    def largest_free_link_block(self, gpu: str) -> int:
        """Most free GPUs of type ``gpu`` inside one fast-link (NVLink/Infinity Fabric) domain."""
        return self._largest_domain_block[self._key(gpu)]

    def nodes_of_type(self, gpu: str) -> IntArray:
        """Indices of the nodes with GPUs of type ``gpu``, most free first (ties: cluster order); read-only."""
        return self._nodes[self._key(gpu)]

    def free_per_node(self, gpu: str) -> IntArray:
        """Free GPUs on each node of type ``gpu``, in the order of :meth:`nodes_of_type`; read-only."""
        return self._free_sorted[self._key(gpu)]

    def free_histogram(self, gpu: str) -> IntArray:
        """``h[k]`` = number of nodes of type ``gpu`` with exactly ``k`` free GPUs; read-only."""
        return self._histogram[self._key(gpu)]


def _switch_of(graph: nx.Graph, rack: str | None, zone: str | None) -> str:
    """The switch a node hangs from, adding zone and rack switches on first use."""
    parent = "switch"
    if zone is not None:
        parent_zone = f"zone:{zone}"
        if parent_zone not in graph:
            graph.add_node(parent_zone, kind="switch", level="zone")
            graph.add_edge(parent_zone, "switch", kind="network")
        parent = parent_zone
    if rack is not None:
        rack_name = f"rack:{zone}/{rack}" if zone is not None else f"rack:{rack}"
        if rack_name not in graph:
            graph.add_node(rack_name, kind="switch", level="rack")
            graph.add_edge(rack_name, parent, kind="network")
        parent = rack_name
    return parent


def build_topology(cluster: Cluster) -> nx.Graph:
    """GPUs (``gpu:<node>:<j>``) joined to their node (``node:<i>``) by the intra-node link, nodes joined to a
    rack, zone or the root ``switch`` by their NICs. Attributes: ``kind``; GPUs have ``gpu_type``, ``node``,
    ``local_index``, ``free`` and ``domain``; edges have ``link`` and ``bytes_per_s`` (per direction; a node's
    uplink carries ``inter_node_bytes_per_s`` times its GPUs)."""
    graph = nx.Graph(name=cluster.name)
    graph.add_node("switch", kind="switch", level="root")
    index = 0
    for shape_index, shape in enumerate(cluster.nodes):
        free = shape.free_gpus or 0
        domain = shape.link_domain_gpus or 1
        nic = (shape.inter_node_bytes_per_s or 0.0) * shape.gpus_per_node
        for _ in range(shape.count):
            name = f"node:{index}"
            graph.add_node(name, kind="node", gpu_type=shape.gpu, shape=shape_index, gpus=shape.gpus_per_node,
                           free=free, rack=shape.rack, zone=shape.zone)
            graph.add_edge(name, _switch_of(graph, shape.rack, shape.zone), kind="network", bytes_per_s=nic)
            for j in range(shape.gpus_per_node):
                gpu = f"gpu:{index}:{j}"
                graph.add_node(gpu, kind="gpu", gpu_type=shape.gpu, node=index, local_index=j, free=j < free,
                               domain=j // domain)
                graph.add_edge(gpu, name, kind="intra", link=str(shape.intra_node_link.value if shape.intra_node_link
                                                                 else ""),
                               bytes_per_s=shape.intra_node_bytes_per_s)
            index += 1
    return graph


def link_domains(graph: nx.Graph, only_free: bool = False) -> list[list[str]]:
    """GPU names grouped by fast-link domain (same node, same ``domain``), in node order; PCIe-only GPUs form
    domains of one. ``only_free`` keeps free GPUs only (dropping empty groups)."""
    groups: dict[tuple[int, int], list[str]] = defaultdict(list)
    for name, data in graph.nodes(data=True):
        if data.get("kind") == "gpu" and (data["free"] or not only_free):
            groups[(data["node"], data["domain"])].append(name)
    return [sorted(groups[key], key=lambda n: graph.nodes[n]["local_index"]) for key in sorted(groups)]


def free_gpus_per_node(graph: nx.Graph, gpu_type: str | None = None) -> dict[str, int]:
    """Free GPUs on each node (of ``gpu_type`` when given), keyed by node name, nodes without free GPUs left out."""
    return {name: data["free"] for name, data in graph.nodes(data=True)
            if data.get("kind") == "node" and data["free"] > 0 and (gpu_type is None or data["gpu_type"] == gpu_type)}
