"""Exact least-fragmentation node choices for one placement option: the reference solver's arithmetic.

An option places ``groups`` tensor-parallel groups of ``tp`` GPUs inside one locality group of node classes,
every node it touches holding between ``lo`` and its capacity in groups (exactly ``lo`` for ``even`` and
``whole_nodes``). Its cost is ``sum_j cost_j z_j`` with ``cost_j = free_j (N + 1) + 1`` (free capacity of the
touched nodes, then their number; N = nodes of the type with free GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.errors import ConfigError
from frenzy_core.planning.nodes import NodeClasses

__all__ = ["MAX_DP_CELLS", "OptionShape", "cover", "min_cover", "node_costs", "spread"]

IntArray = npt.NDArray[np.int64]

MAX_DP_CELLS = 50_000_000
"""Largest (nodes x groups x items) table the exhaustive reference fills for a per-node lower bound (memory)."""


def node_costs(classes: NodeClasses) -> IntArray:
    """``cost_j = free_j (N + 1) + 1`` per class: stranded capacity first, then node count."""
    return np.asarray(classes.free * (int(classes.count.sum()) + 1) + 1, dtype=np.int64)


@dataclass(frozen=True)
class OptionShape:
    """How one option may sit on the classes of its level: groups to place and per-node bounds in groups."""

    classes: NodeClasses
    tp: int
    groups: int
    lo: int
    """Fewest groups on a node it touches (exactly this many when ``exact``)."""
    exact: bool
    whole: bool
    """Only fully free nodes of exactly ``lo * tp`` GPUs."""

    @property
    def eligible(self) -> npt.NDArray[np.bool_]:
        caps = self.classes.blocks_per_node(self.tp)
        ok = caps >= self.lo
        if self.whole:
            ok &= (self.classes.free == self.classes.size) & (self.classes.size == self.lo * self.tp)
        return np.asarray(ok, dtype=bool)

    @property
    def hi(self) -> IntArray:
        """Most groups on one node of each class."""
        caps = self.classes.blocks_per_node(self.tp)
        return np.full_like(caps, self.lo) if self.exact else caps


def _chunks(count: IntArray, mask: npt.NDArray[np.bool_], most: int) -> list[tuple[int, int]]:
    """(class, nodes) items: each class's count (at most ``most``) split into powers of two."""
    items: list[tuple[int, int]] = []
    for j in np.flatnonzero(mask):
        left, chunk = min(int(count[j]), most), 1
        while left > 0:
            take = min(chunk, left)
            items.append((int(j), take))
            left -= take
            chunk *= 2
    return items


def min_cover(classes: NodeClasses, tp: int, groups: int, mask: npt.NDArray[np.bool_] | None = None
              ) -> tuple[int, IntArray] | None:
    """Least-cost node counts per class (among ``mask``) with room for ``groups`` TP groups, or None.

    A covering knapsack (min sum cost_j z_j with sum cap_j z_j >= groups, z_j <= m_j) by dynamic programming
    over groups, each class's count split into powers of two.
    """
    caps = classes.blocks_per_node(tp)
    mask = np.ones(len(caps), dtype=bool) if mask is None else mask & (caps > 0)
    if int((caps * classes.count)[mask].sum()) < groups:
        return None
    costs = node_costs(classes)
    best = np.full(groups + 1, np.iinfo(np.int64).max // 4, dtype=np.int64)
    best[0] = 0
    items = _chunks(classes.count, mask & (caps > 0), groups)
    took = np.zeros((len(items), groups + 1), dtype=bool)
    positions = np.arange(groups + 1)
    for i, (j, n) in enumerate(items):
        cand = best[np.maximum(positions - n * int(caps[j]), 0)] + n * int(costs[j])
        took[i] = cand < best
        best = np.where(took[i], cand, best)
    nodes = np.zeros(len(caps), dtype=np.int64)
    b = groups
    for i in range(len(items) - 1, -1, -1):
        if took[i, b]:
            j, n = items[i]
            nodes[j] += n
            b = max(b - n * int(caps[j]), 0)
    return int(best[groups]), nodes


def _bounded_cover(shape: OptionShape, mask: npt.NDArray[np.bool_]) -> tuple[int, IntArray] | None:
    """As :func:`min_cover`, with every touched node holding at least ``lo`` groups: at most groups / lo nodes
    (a second dimension of the table: nodes used)."""
    classes, groups, lo = shape.classes, shape.groups, shape.lo
    caps, costs = classes.blocks_per_node(shape.tp), node_costs(classes)
    n_max = groups // lo
    items = _chunks(classes.count, mask, n_max)
    if len(items) * (n_max + 1) * (groups + 1) > MAX_DP_CELLS:
        raise ConfigError(f"the exhaustive reference would fill a table of {len(items) * (n_max + 1) * (groups + 1):,}"
                          " cells for one placement", field="solver", value="exhaustive", hint="use solver='cp-sat'")
    inf = np.iinfo(np.int64).max // 4
    best = np.full((n_max + 1, groups + 1), inf, dtype=np.int64)
    best[0, 0] = 0
    took = np.zeros((len(items), n_max + 1, groups + 1), dtype=bool)
    positions = np.arange(groups + 1)
    for i, (j, n) in enumerate(items):
        cand = np.full_like(best, inf)
        cand[n:] = best[:-n][:, np.maximum(positions - n * int(caps[j]), 0)] + n * int(costs[j])
        took[i] = cand < best
        best = np.where(took[i], cand, best)
    used = int(np.argmin(best[:, groups]))
    if best[used, groups] >= inf:
        return None
    nodes = np.zeros(len(caps), dtype=np.int64)
    b, k = groups, used
    for i in range(len(items) - 1, -1, -1):
        if took[i, k, b]:
            j, n = items[i]
            nodes[j] += n
            k, b = k - n, max(b - n * int(caps[j]), 0)
    return int(best[used, groups]), nodes


def _exact_cover(shape: OptionShape, mask: npt.NDArray[np.bool_]) -> tuple[int, IntArray] | None:
    """Exactly groups / lo nodes, each holding lo groups: the cheapest eligible nodes (cost rises with free)."""
    classes = shape.classes
    if shape.groups % shape.lo:
        return None
    need = shape.groups // shape.lo
    costs = node_costs(classes)
    nodes = np.zeros(len(costs), dtype=np.int64)
    for j in sorted(np.flatnonzero(mask), key=lambda j: (int(costs[j]), int(j))):
        nodes[j] = min(int(classes.count[j]), need - int(nodes.sum()))
    if int(nodes.sum()) < need:
        return None
    return int((costs * nodes).sum()), nodes


def _group_cover(shape: OptionShape, mask: npt.NDArray[np.bool_]) -> tuple[int, IntArray] | None:
    if shape.exact:
        return _exact_cover(shape, mask)
    if shape.lo == 1:
        return min_cover(shape.classes, shape.tp, shape.groups, mask)
    return _bounded_cover(shape, mask)


def cover(shape: OptionShape) -> tuple[int, IntArray] | None:
    """The least-cost placement of ``shape`` inside one locality group (or on one standalone node), exactly."""
    classes, eligible = shape.classes, shape.eligible
    costs, hi = node_costs(classes), shape.hi
    best: tuple[int, IntArray] | None = None
    for g in range(classes.num_groups):
        found = _group_cover(shape, eligible & (classes.group == g))
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    for j in np.flatnonzero(eligible & (classes.group < 0)):  # one standalone node holds it all
        if shape.lo <= shape.groups <= int(hi[j]) and (best is None or int(costs[j]) < best[0]):
            nodes = np.zeros(len(costs), dtype=np.int64)
            nodes[j] = 1
            best = (int(costs[j]), nodes)
    return best


def spread(shape: OptionShape, nodes: IntArray) -> IntArray:
    """Groups per class when ``nodes`` hold the option: ``lo`` on every node, the rest in class order."""
    hi = shape.hi
    out = nodes * shape.lo
    left = shape.groups - int(out.sum())
    for j in range(len(out)):
        add = min(int(nodes[j] * (hi[j] - shape.lo)), left)
        out[j] += add
        left -= add
    assert left == 0, "nodes chosen cannot hold the groups"
    return np.asarray(out, dtype=np.int64)
