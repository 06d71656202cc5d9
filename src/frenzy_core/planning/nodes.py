"""The planner's view of a cluster: free GPUs per node, locality groups (NVLink domain, rack, zone), and nodes
grouped into classes of equal free count within a locality group."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from frenzy_core.errors import ConfigError
from frenzy_core.hardware.cluster import Cluster

__all__ = ["FreeNode", "Locality", "NodeClasses", "NodePool"]


class Locality(enum.IntEnum):
    """How far a job's GPUs may spread, tightest first; a placement is searched at the tightest that holds it."""

    DOMAIN = 0
    """One fast-link domain: one node, or the nodes of one multi-node NVLink domain (GB200 NVL72)."""
    RACK = 1
    """One rack: groups cross nodes over the nodes' NICs."""
    ZONE = 2
    """One zone: groups cross racks (the cluster's inter-rack link)."""
    CLUSTER = 3
    """Anywhere: groups may cross zones (the cluster's inter-zone link)."""


class FreeNode(NamedTuple):
    """One node: its name, GPU type, size, which of its GPUs are free, and where it sits (a named tuple: pools
    of thousands of nodes are built per request)."""

    name: str
    gpu_type: str
    gpus_per_node: int
    free_indices: tuple[int, ...]
    nvlink_domain: str | None = None
    """Label of the multi-node NVLink domain it belongs to (None: its own node is its domain)."""
    rack: str | None = None
    zone: str | None = None
    host_memory_bytes: int | None = None
    """Host memory the node's ranks share (None: unknown, not checked)."""

    @property
    def free(self) -> int:
        return len(self.free_indices)

    def group(self, level: Locality) -> Hashable:
        """The locality group this node is in at ``level``: nodes without a label share the unlabelled group,
        except at DOMAIN, where a node without a multi-node NVLink domain is a group of its own (None)."""
        if level is Locality.DOMAIN:
            return self.nvlink_domain
        if level is Locality.RACK:
            return (self.zone, self.rack)
        if level is Locality.ZONE:
            return self.zone
        return None


@dataclass(frozen=True)
class NodeClasses:
    """Nodes of one GPU type with at least one free GPU, grouped by (locality group, free, gpus_per_node).

    ``members[j]`` lists the node positions (into :attr:`NodePool.nodes`) of class ``j`` in cluster order, so
    a placement that says "use 3 nodes of class j" means its first three members; ``group[j]`` numbers the
    locality group of class ``j`` (0 .. groups - 1), or is -1 for a class of standalone nodes (at DOMAIN: nodes
    that are each a fast-link domain of their own, so a placement there uses one of them).
    """

    free: np.ndarray
    """Free GPUs on each node of the class."""
    size: np.ndarray
    """GPUs per node of the class (free + busy)."""
    count: np.ndarray
    """Nodes in the class."""
    members: tuple[tuple[int, ...], ...]
    group: np.ndarray
    """Locality group of each class (0 .. number of groups - 1; -1: standalone nodes)."""

    @property
    def num_groups(self) -> int:
        """Locality groups with more than standalone nodes."""
        return int(self.group.max()) + 1 if self.group.size else 0

    def blocks_per_node(self, tp: int) -> np.ndarray:
        """Whole tensor-parallel groups of ``tp`` GPUs one node of each class can hold."""
        return self.free // tp

    def free_blocks(self, tp: int) -> int:
        """Tensor-parallel groups of ``tp`` GPUs all nodes together can hold (each group inside one node)."""
        return int((self.blocks_per_node(tp) * self.count).sum())


@dataclass(frozen=True)
class NodePool:
    """All nodes of a cluster with what is free on them; built once per request."""

    nodes: tuple[FreeNode, ...]
    inter_rack_bytes_per_s: float | None = None
    """Per GPU, per direction, for groups that cross racks (None: the nodes' own NICs, a non-blocking fabric)."""
    inter_zone_bytes_per_s: float | None = None
    """Per GPU, per direction, for groups that cross zones (None: as across racks)."""

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"node names must be unique, repeated: {dup[:5]}", field="cluster.nodes")
        object.__setattr__(self, "_classes", {})
        object.__setattr__(self, "_levels", {})
        object.__setattr__(self, "_by_type", {})
        object.__setattr__(self, "_labels", {})
        object.__setattr__(self, "_stats", {})
        object.__setattr__(self, "_host", {})

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> NodePool:
        """Every node of a :class:`frenzy_core.hardware.Cluster`, shapes expanded by their counts.

        Names and free GPUs follow :mod:`frenzy_core.hardware.topology`: node ``node:<i>`` (i counts nodes in
        cluster order), and on a node with ``f`` free GPUs the free ones are ``0 .. f-1``.
        """
        nodes: list[FreeNode] = []
        for shape in cluster.nodes:
            free = tuple(range(shape.gpus_per_node if shape.free_gpus is None else shape.free_gpus))
            first = len(nodes)
            nodes.extend(FreeNode(f"node:{i}", shape.gpu, shape.gpus_per_node, free, shape.nvlink_domain, shape.rack,
                                  shape.zone, shape.host_memory_bytes) for i in range(first, first + shape.count))
        return cls(nodes=tuple(nodes), inter_rack_bytes_per_s=cluster.inter_rack_bytes_per_s,
                   inter_zone_bytes_per_s=cluster.inter_zone_bytes_per_s)

    def with_nodes(self, nodes: tuple[FreeNode, ...]) -> NodePool:
        """The same cluster-wide links with other nodes (the infeasibility diagnosis frees or adds nodes)."""
        return NodePool(nodes=nodes, inter_rack_bytes_per_s=self.inter_rack_bytes_per_s,
                        inter_zone_bytes_per_s=self.inter_zone_bytes_per_s)

    def host_limits(self, gpu_type: str, rank_host_bytes: int) -> tuple[tuple[int, int], ...]:
        """(host memory, ranks it holds) for each host memory size of ``gpu_type``'s nodes that cannot hold a
        rank on every GPU when each rank keeps ``rank_host_bytes`` on the host; empty: nothing to limit (no
        offload, or host memory unknown or large enough)."""
        if rank_host_bytes <= 0:
            return ()
        cache: dict[str, list[tuple[int, int]]] = self._host  # type: ignore[attr-defined]
        if gpu_type not in cache:  # once per type: a request asks for every distinct per-rank figure
            cache[gpu_type] = sorted({(n.host_memory_bytes, n.gpus_per_node) for n in self.nodes
                                      if n.gpu_type == gpu_type and n.host_memory_bytes is not None})
        return tuple(sorted({(mem, mem // rank_host_bytes) for mem, gpus in cache[gpu_type]
                             if mem // rank_host_bytes < gpus}))

    def host_capped(self, gpu_type: str, limits: tuple[tuple[int, int], ...]) -> NodePool:
        """This pool with each ``gpu_type`` node whose host memory ``limits`` names keeping only as many free
        GPUs as its host memory holds ranks (:meth:`host_limits`): where the planner may place a job that
        offloads."""
        if not limits:
            return self
        most = dict(limits)
        return self.with_nodes(tuple(
            n._replace(free_indices=n.free_indices[:most[n.host_memory_bytes]])
            if n.gpu_type == gpu_type and n.host_memory_bytes in most else n for n in self.nodes))

    @property
    def gpu_types(self) -> list[str]:
        """GPU type ids present in the cluster (free or not), sorted."""
        self._totals("")
        return sorted(self._stats)  # type: ignore[attr-defined]

    def _totals(self, gpu_type: str) -> tuple[int, int, int, int]:
        """(GPUs, free GPUs, most free on a node, largest node) of ``gpu_type``, computed once per pool."""
        cache: dict[str, tuple[int, int, int, int]] = self._stats  # type: ignore[attr-defined]
        if not cache:
            for n in self.nodes:
                total, free, most, largest = cache.get(n.gpu_type, (0, 0, 0, 0))
                cache[n.gpu_type] = (total + n.gpus_per_node, free + n.free, max(most, n.free),
                                     max(largest, n.gpus_per_node))
        return cache.get(gpu_type, (0, 0, 0, 0))

    def total_gpus(self, gpu_type: str) -> int:
        """GPUs of ``gpu_type``, busy or free."""
        return self._totals(gpu_type)[0]

    def free_gpus(self, gpu_type: str) -> int:
        """Free GPUs of ``gpu_type``."""
        return self._totals(gpu_type)[1]

    def max_free_in_node(self, gpu_type: str) -> int:
        """The largest number of free GPUs of ``gpu_type`` on one node."""
        return self._totals(gpu_type)[2]

    def max_node_size(self, gpu_type: str) -> int:
        """The largest node of ``gpu_type`` (GPUs per node)."""
        return self._totals(gpu_type)[3]

    def max_domain_gpus(self, gpu_type: str) -> int:
        """GPUs of the largest fast-link domain of ``gpu_type``: a node, or the nodes of one NVLink domain."""
        domains: dict[str, int] = {}
        for n in self.nodes:
            if n.gpu_type == gpu_type and n.nvlink_domain is not None:
                domains[n.nvlink_domain] = domains.get(n.nvlink_domain, 0) + n.gpus_per_node
        return max([self.max_node_size(gpu_type), *domains.values()])

    def domain_gpus(self, names: list[str]) -> int:
        """GPUs of the fast-link domain holding the nodes ``names`` (one node, or their NVLink domain)."""
        by_name = {n.name: n for n in self.nodes}
        label = by_name[names[0]].nvlink_domain
        if label is None:
            return by_name[names[0]].gpus_per_node
        return sum(n.gpus_per_node for n in self.nodes if n.nvlink_domain == label)

    def _free_nodes(self, gpu_type: str) -> list[int]:
        """Positions of the nodes of ``gpu_type`` with free GPUs (cached)."""
        cache: dict[str, list[int]] = self._by_type  # type: ignore[attr-defined]
        if not cache:
            for i, n in enumerate(self.nodes):
                if n.free > 0:
                    cache.setdefault(n.gpu_type, []).append(i)
        return cache.get(gpu_type, [])

    def _labelled(self, gpu_type: str, level: Locality) -> bool:
        """Whether any free node of ``gpu_type`` carries a label that ``level`` groups by (cached)."""
        cache: dict[tuple[str, Locality], bool] = self._labels  # type: ignore[attr-defined]
        if (gpu_type, level) not in cache:
            fields = {Locality.DOMAIN: ("nvlink_domain",), Locality.RACK: ("rack", "zone"),  # racks sit in zones
                      Locality.ZONE: ("zone",)}.get(level, ())
            cache[gpu_type, level] = any(getattr(self.nodes[i], f) is not None for i in self._free_nodes(gpu_type)
                                         for f in fields)
        return cache[gpu_type, level]

    def levels(self, gpu_type: str) -> tuple[Locality, ...]:
        """The locality levels that group the free nodes of ``gpu_type`` differently, tightest first (a rack
        level is left out when racks coincide with zones or are not labelled; CLUSTER is always last)."""
        cache: dict[str, tuple[Locality, ...]] = self._levels  # type: ignore[attr-defined]
        if gpu_type not in cache:
            nodes = [self.nodes[i] for i in self._free_nodes(gpu_type)]
            counts: dict[Locality, int] = {lv: len({n.group(lv) for n in nodes}) if self._labelled(gpu_type, lv)
                                           else 1 for lv in (Locality.RACK, Locality.ZONE)}
            counts[Locality.CLUSTER] = 1
            kept = [Locality.DOMAIN] + [lv for lv in (Locality.RACK, Locality.ZONE)
                                        if counts[lv] > counts[Locality(lv + 1)]]
            cache[gpu_type] = (*kept, Locality.CLUSTER)
        return cache[gpu_type]

    def crosses(self, gpu_type: str, level: Locality) -> tuple[bool, bool]:
        """Whether a placement searched at ``level`` crosses (racks, zones): it is there because no tighter
        group holds it, and the cluster labels more than one group at the tighter level."""
        levels = self.levels(gpu_type)
        return (level > Locality.RACK and Locality.RACK in levels,
                level > Locality.ZONE and Locality.ZONE in levels)

    def classes(self, gpu_type: str, level: Locality = Locality.CLUSTER) -> NodeClasses:
        """Nodes of ``gpu_type`` with free GPUs, grouped by (locality group at ``level``, free, size); groups in
        order of first appearance, larger free counts first within a group."""
        cache: dict[tuple[str, Locality], NodeClasses] = self._classes  # type: ignore[attr-defined]
        key = (gpu_type, level)
        if key in cache:
            return cache[key]
        if level is not Locality.CLUSTER and not self._labelled(gpu_type, level):
            # no labels: one group (every node standalone at DOMAIN), the classes of the whole cluster
            whole = self.classes(gpu_type)
            group = np.full_like(whole.group, -1 if level is Locality.DOMAIN else 0)
            cache[key] = NodeClasses(free=whole.free, size=whole.size, count=whole.count, members=whole.members,
                                     group=group)
            return cache[key]
        group_ids: dict[Hashable, int] = {}
        groups: dict[tuple[int, int, int], list[int]] = {}
        for i in self._free_nodes(gpu_type):
            n = self.nodes[i]
            label = n.group(level)
            g = -1 if level is Locality.DOMAIN and label is None else group_ids.setdefault(label, len(group_ids))
            groups.setdefault((g, n.free, n.gpus_per_node), []).append(i)
        keys = sorted(groups, key=lambda k: (k[0] < 0, k[0], -k[1], k[2]))
        members = tuple(tuple(groups[k]) for k in keys)
        cache[key] = NodeClasses(
            free=np.array([k[1] for k in keys], dtype=np.int64),
            size=np.array([k[2] for k in keys], dtype=np.int64),
            count=np.array([len(m) for m in members], dtype=np.int64),
            members=members,
            group=np.array([k[0] for k in keys], dtype=np.int64),
        )
        return cache[key]

    def assign(self, gpu_type: str, tp: int, nodes_used: list[int], blocks: list[int],
               level: Locality = Locality.CLUSTER) -> dict[str, list[int]]:
        """Concrete GPUs for a placement given per class (at ``level``): nodes used and tensor-parallel groups.

        Within a class the first ``nodes_used[j]`` members (cluster order) share its ``blocks[j]`` groups as
        evenly as whole groups allow (the first nodes take one more); each node gives its lowest free indices.
        """
        classes = self.classes(gpu_type, level)
        out: dict[int, list[int]] = {}
        for j, (used, placed) in enumerate(zip(nodes_used, blocks)):
            if used == 0:
                assert placed == 0, f"class {j} holds {placed} groups on no node"
                continue
            base, extra = divmod(placed, used)
            assert base >= 1 and base + (extra > 0) <= int(classes.free[j]) // tp, f"class {j} cannot hold {placed}"
            for k, pos in enumerate(classes.members[j][:used]):
                out[pos] = list(self.nodes[pos].free_indices[: (base + (k < extra)) * tp])
        return {self.nodes[pos].name: gpus for pos, gpus in sorted(out.items())}
