"""``ClusterState``: which GPUs of each node are free, and which nodes are up, while a scheduler runs."""

from __future__ import annotations

import numpy as np

from frenzy_core.hardware.cluster import Cluster

__all__ = ["Allocation", "ClusterState"]

Allocation = dict[int, int]
"""Node index (into ``ClusterState.node_types``) -> GPUs taken on it."""


class ClusterState:
    """Free GPUs per node, one entry per node (shapes expanded by their counts), in cluster order.

    ``initial_free`` is what each node offers the scheduler (a node's ``free_gpus``); a node that is down
    offers nothing until it is up again.
    """

    def __init__(self, cluster: Cluster):
        types: list[str] = []
        sizes: list[int] = []
        free: list[int] = []
        intra: list[float] = []
        inter: list[float] = []
        for shape in cluster.nodes:
            for _ in range(shape.count):
                types.append(shape.gpu)
                sizes.append(shape.gpus_per_node)
                free.append(shape.gpus_per_node if shape.free_gpus is None else shape.free_gpus)
                intra.append(float(shape.intra_node_bytes_per_s or 0.0))
                inter.append(float(shape.inter_node_bytes_per_s or 0.0))
        self.node_types: tuple[str, ...] = tuple(types)
        self.gpu_types: tuple[str, ...] = tuple(dict.fromkeys(types))
        self.type_index = np.array([self.gpu_types.index(t) for t in types], dtype=np.int64)
        self.capacity = np.array(sizes, dtype=np.int64)
        """GPUs per node (busy or free)."""
        self.initial_free = np.array(free, dtype=np.int64)
        self.intra_node_bytes_per_s = np.array(intra)
        self.inter_node_bytes_per_s = np.array(inter)
        self.free = self.initial_free.copy()
        """Free GPUs per node: change it only through take, release, set_up and assign, which keep the per-type
        sums in step (a round asks for them several times; summing 500 nodes each time cost a tenth of a
        simulation)."""
        self.up = np.ones(len(types), dtype=bool)
        self._of_type = {t: np.flatnonzero(np.array(types) == t) for t in self.gpu_types}
        self._usable: dict[str | None, int] = {t: int(self.initial_free[n].sum()) for t, n in self._of_type.items()}
        self._usable[None] = int(self.initial_free.sum())
        self._index = {t: g for g, t in enumerate(self.gpu_types)}
        self._type_of: list[int] = self.type_index.tolist()
        self._free_type = np.array([self._usable[t] for t in self.gpu_types], dtype=np.int64)
        """Free GPUs per type (the sum of ``free`` over the type's nodes)."""
        self._up_type = self._free_type.copy()
        """Per type, the GPUs the nodes that are up offer (``initial_free`` summed over them)."""

    def copy(self) -> ClusterState:
        """An independent copy (a policy's scratch view while it decides several placements at once)."""
        out = object.__new__(ClusterState)
        out.__dict__.update(self.__dict__)
        out.free = self.free.copy()
        out.up = self.up.copy()
        out._free_type = self._free_type.copy()
        out._up_type = self._up_type.copy()
        return out

    def idle(self) -> ClusterState:
        """A copy with every node up and offering all its GPUs (the most of the cluster a job could ever get)."""
        out = self.copy()
        out.free = self.initial_free.copy()
        out.up[:] = True
        out._free_type = np.array([self._usable[t] for t in self.gpu_types], dtype=np.int64)
        out._up_type = out._free_type.copy()
        return out

    def assign(self, other: ClusterState) -> None:
        """Take ``other``'s free GPUs (a copy of this state that a policy changed while trying a move)."""
        self.free[:] = other.free
        self._free_type[:] = other._free_type

    def nodes_of(self, gpu_type: str | None = None) -> np.ndarray:
        """Indices of the nodes of one type (or all), in cluster order."""
        if gpu_type is None:
            return np.arange(len(self.node_types))
        return self._of_type.get(gpu_type, np.zeros(0, dtype=np.int64))

    def usable_gpus(self, gpu_type: str | None = None) -> int:
        """GPUs that were free at the start (of one type, or all): the most one job can ever get."""
        return self._usable.get(gpu_type, 0)

    def free_gpus(self, gpu_type: str | None = None) -> int:
        """GPUs free now (of one type, or all)."""
        if gpu_type is None:
            return int(self._free_type.sum())
        g = self._index.get(gpu_type)
        return 0 if g is None else int(self._free_type[g])

    def busy_per_type(self) -> np.ndarray:
        """GPUs held by jobs, per type (``gpu_types`` order)."""
        return self._up_type - self._free_type  # a node that is down has no free GPUs and offers none

    def free_per_type(self) -> np.ndarray:
        """Free GPUs of each type now, in ``gpu_types`` order."""
        return self._free_type.copy()

    def find(self, gpu_type: str, num_gpus: int, block: int = 1) -> Allocation | None:
        """Where ``num_gpus`` free GPUs of ``gpu_type`` can go in whole blocks of ``block`` GPUs per node (a
        tensor-parallel group never spans nodes), or None. A job that fits one node goes to the node with the
        fewest free GPUs that holds it (best fit); a larger one takes the nodes with the most room first and
        its last blocks go best fit."""
        if num_gpus % block:
            return None
        nodes = self.nodes_of(gpu_type)
        free = self.free[nodes]
        blocks = free // block
        need = num_gpus // block
        if int(blocks.sum()) < need:
            return None
        holds = np.flatnonzero(blocks >= need)
        if holds.size:
            best = holds[np.argmin(free[holds])]  # ties: the first such node
            return {int(nodes[best]): num_gpus}
        out: Allocation = {}
        order = np.argsort(-blocks, kind="stable")
        for k, i in enumerate(order):
            b = int(blocks[i])
            if b >= need:  # the rest fits here: take the fullest remaining node that holds it
                rest = order[k:][blocks[order[k:]] >= need]
                j = rest[np.argmin(free[rest])]
                out[int(nodes[j])] = need * block
                return out
            out[int(nodes[i])] = b * block
            need -= b
        raise AssertionError("enough blocks were counted")  # pragma: no cover

    def take(self, allocation: Allocation) -> None:
        """Mark the allocation's GPUs busy."""
        for node, count in allocation.items():
            assert 0 < count <= self.free[node], f"node {node}: taking {count} of {self.free[node]} free GPUs"
            self.free[node] -= count
            self._free_type[self._type_of[node]] -= count

    def release(self, allocation: Allocation) -> None:
        """Mark the allocation's GPUs free again (those on a node that is down stay unavailable)."""
        for node, count in allocation.items():
            if self.up[node]:
                self.free[node] += count
                self._free_type[self._type_of[node]] += count
                assert self.free[node] <= self.initial_free[node], f"node {node}: released more GPUs than it had"

    def set_up(self, node: int, up: bool) -> None:
        """Take a node out (its GPUs are no longer offered) or bring it back (all of them free: no job runs on
        a node while it is down)."""
        g = self._type_of[node]
        if self.up[node] != up:
            self._up_type[g] += self.initial_free[node] if up else -self.initial_free[node]
        self._free_type[g] += (self.initial_free[node] if up else 0) - self.free[node]
        self.up[node] = up
        self.free[node] = self.initial_free[node] if up else 0
