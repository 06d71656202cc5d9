"""``ClusterState``: how many GPUs of each node are free while a simulation runs (a mutable view)."""

from __future__ import annotations

import numpy as np

from frenzy_core.hardware.cluster import Cluster

__all__ = ["Allocation", "ClusterState"]

Allocation = dict[int, int]
"""Node index (into ``ClusterState.node_types``) -> GPUs taken on it."""


class ClusterState:
    """Free GPUs per node, one entry per node (shapes expanded by their counts), in cluster order."""

    def __init__(self, cluster: Cluster):
        types: list[str] = []
        sizes: list[int] = []
        free: list[int] = []
        for shape in cluster.nodes:
            for _ in range(shape.count):
                types.append(shape.gpu)
                sizes.append(shape.gpus_per_node)
                free.append(shape.gpus_per_node if shape.free_gpus is None else shape.free_gpus)
        self.node_types: tuple[str, ...] = tuple(types)
        self.gpu_types: tuple[str, ...] = tuple(dict.fromkeys(types))
        self.capacity = np.array(sizes, dtype=np.int64)
        self.initial_free = np.array(free, dtype=np.int64)
        self.free = self.initial_free.copy()
        self._of_type = {t: np.flatnonzero(np.array(types) == t) for t in self.gpu_types}

    def copy(self) -> ClusterState:
        """An independent copy (a policy's scratch view while it decides several placements at once)."""
        out = object.__new__(ClusterState)
        out.__dict__.update(self.__dict__)
        out.free = self.free.copy()
        return out

    def usable_gpus(self, gpu_type: str | None = None) -> int:
        """GPUs that were free at the start (of one type, or all): the most one job can ever get."""
        nodes = self._nodes(gpu_type)
        return int(self.initial_free[nodes].sum())

    def free_gpus(self, gpu_type: str | None = None) -> int:
        """GPUs free now (of one type, or all)."""
        return int(self.free[self._nodes(gpu_type)].sum())

    def _nodes(self, gpu_type: str | None) -> np.ndarray:
        if gpu_type is None:
            return np.arange(len(self.node_types))
        return self._of_type.get(gpu_type, np.zeros(0, dtype=np.int64))

    def find(self, gpu_type: str, num_gpus: int) -> Allocation | None:
        """Where ``num_gpus`` free GPUs of ``gpu_type`` can go, or None: a job that fits one node goes to
        the node with the fewest free GPUs that holds it (best fit); a larger one takes the emptiest first."""
        nodes = self._nodes(gpu_type)
        free = self.free[nodes]
        if int(free.sum()) < num_gpus:
            return None
        holds = np.flatnonzero(free >= num_gpus)
        if holds.size:
            best = holds[np.argmin(free[holds])]  # ties: the first such node
            return {int(nodes[best]): num_gpus}
        out: Allocation = {}
        left = num_gpus
        for i in np.argsort(-free, kind="stable"):
            if left == 0:
                break
            take = int(min(free[i], left))
            if take:
                out[int(nodes[i])] = take
                left -= take
        return out

    def take(self, allocation: Allocation) -> None:
        """Mark the allocation's GPUs busy."""
        for node, count in allocation.items():
            assert 0 < count <= self.free[node], f"node {node}: taking {count} of {self.free[node]} free GPUs"
            self.free[node] -= count

    def release(self, allocation: Allocation) -> None:
        """Mark the allocation's GPUs free again."""
        for node, count in allocation.items():
            self.free[node] += count
            assert self.free[node] <= self.initial_free[node], f"node {node}: released more GPUs than it had"
