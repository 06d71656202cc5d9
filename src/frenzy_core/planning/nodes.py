"""The planner's view of a cluster: free GPUs per node, and nodes grouped into classes of equal free count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from frenzy_core.errors import ConfigError
from frenzy_core.hardware.cluster import Cluster

__all__ = ["FreeNode", "NodeClasses", "NodePool"]


@dataclass(frozen=True)
class FreeNode:
    """One node: its name, GPU type, size and which of its GPUs are free."""

    name: str
    gpu_type: str
    gpus_per_node: int
    free_indices: tuple[int, ...]

    @property
    def free(self) -> int:
        return len(self.free_indices)


@dataclass(frozen=True)
class NodeClasses:
    """Nodes of one GPU type with at least one free GPU, grouped by (free, gpus_per_node).

    ``members[j]`` lists the node positions (into :attr:`NodePool.nodes`) of class ``j`` in cluster order, so
    a placement that says "use 3 nodes of class j" means its first three members.
    """

    free: np.ndarray
    """Free GPUs on each node of the class."""
    size: np.ndarray
    """GPUs per node of the class (free + busy)."""
    count: np.ndarray
    """Nodes in the class."""
    members: tuple[tuple[int, ...], ...]

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

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"node names must be unique, repeated: {dup[:5]}", field="cluster.nodes")
        object.__setattr__(self, "_classes", {})

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> NodePool:
        """Every node of a :class:`frenzy_core.hardware.Cluster`, shapes expanded by their counts.

        Names and free GPUs follow :mod:`frenzy_core.hardware.topology`: node ``node:<i>`` (i counts nodes in
        cluster order), and on a node with ``f`` free GPUs the free ones are ``0 .. f-1``.
        """
        nodes: list[FreeNode] = []
        for shape in cluster.nodes:
            free = shape.gpus_per_node if shape.free_gpus is None else shape.free_gpus
            for _ in range(shape.count):
                nodes.append(FreeNode(name=f"node:{len(nodes)}", gpu_type=shape.gpu,
                                      gpus_per_node=shape.gpus_per_node, free_indices=tuple(range(free))))
        return cls(nodes=tuple(nodes))

    @property
    def gpu_types(self) -> list[str]:
        """GPU type ids present in the cluster (free or not), sorted."""
        return sorted({n.gpu_type for n in self.nodes})

    def total_gpus(self, gpu_type: str) -> int:
        """GPUs of ``gpu_type``, busy or free."""
        return sum(n.gpus_per_node for n in self.nodes if n.gpu_type == gpu_type)

    def free_gpus(self, gpu_type: str) -> int:
        """Free GPUs of ``gpu_type``."""
        return sum(n.free for n in self.nodes if n.gpu_type == gpu_type)

    def max_free_in_node(self, gpu_type: str) -> int:
        """The largest number of free GPUs of ``gpu_type`` on one node."""
        return max((n.free for n in self.nodes if n.gpu_type == gpu_type), default=0)

    def max_node_size(self, gpu_type: str) -> int:
        """The largest node of ``gpu_type`` (GPUs per node)."""
        return max((n.gpus_per_node for n in self.nodes if n.gpu_type == gpu_type), default=0)

    def classes(self, gpu_type: str) -> NodeClasses:
        """Nodes of ``gpu_type`` with free GPUs, grouped by (free, size); larger free counts first."""
        cache: dict[str, NodeClasses] = self._classes  # type: ignore[attr-defined]
        if gpu_type not in cache:
            groups: dict[tuple[int, int], list[int]] = {}
            for i, n in enumerate(self.nodes):
                if n.gpu_type == gpu_type and n.free > 0:
                    groups.setdefault((n.free, n.gpus_per_node), []).append(i)
            keys = sorted(groups, key=lambda k: (-k[0], k[1]))
            members = tuple(tuple(groups[k]) for k in keys)
            cache[gpu_type] = NodeClasses(
                free=np.array([k[0] for k in keys], dtype=np.int64),
                size=np.array([k[1] for k in keys], dtype=np.int64),
                count=np.array([len(m) for m in members], dtype=np.int64),
                members=members,
            )
        return cache[gpu_type]

    def assign(self, gpu_type: str, tp: int, nodes_used: list[int], blocks: list[int]) -> dict[str, list[int]]:
        """Concrete GPUs for a placement given per class: nodes used and tensor-parallel groups placed.

        Within a class the first ``nodes_used[j]`` members (cluster order) are filled with whole groups, as many
        per node as fit, until ``blocks[j]`` groups are placed; each node gives its lowest free indices.
        """
        classes = self.classes(gpu_type)
        out: dict[int, list[int]] = {}
        for j, (used, placed) in enumerate(zip(nodes_used, blocks)):
            per_node = int(classes.free[j]) // tp
            left = placed
            for pos in classes.members[j][:used]:
                take = min(per_node, left)
                if take == 0:
                    break
                out[pos] = list(self.nodes[pos].free_indices[: take * tp])
                left -= take
            if left:
                raise AssertionError(f"placement of class {j} left {left} groups unplaced")
        return {self.nodes[pos].name: gpus for pos, gpus in sorted(out.items())}
