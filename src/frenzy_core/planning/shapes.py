"""Where a candidate's GPUs can go, and so which links it is timed with.

For each (GPU type, tp, world size) the planner finds the tightest locality level that holds the job
(:class:`Locality`: one fast-link domain, one rack, one zone, anywhere) and, above one domain, the most GPUs every
node it touches can get: ``g`` (a multiple of tp) such that some nodes of one group, each holding between ``g``
and its free GPUs in whole tensor-parallel groups, add up to the world size. The candidate is timed with
``Links(g, intra, inter)`` (inside one domain: every group on the fast link; across racks or zones: the slower
cluster link), and the solvers place it exactly so (every node it touches gets at least ``g``, or exactly ``g``
for ``even`` and ``whole_nodes``), so the plan's time is the time of its placement.

A ring runs at its slowest member: a node holding k of the job's GPUs gives a data-parallel ring k NICs, so the
node with the fewest sets the pace (docs/planner.md, "Placement and links").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from frenzy_core.hardware.gpu import Links
from frenzy_core.planning.nodes import Locality, NodeClasses, NodePool
from frenzy_core.planning.request import PlacementMode

__all__ = ["placement_shapes", "shape_links"]

IntArray = npt.NDArray[np.int64]


def _per_group(classes: NodeClasses, tp: int) -> list[tuple[IntArray, IntArray]]:
    """Per locality group: node capacities in GPUs of whole tp groups, largest first, and the sizes of its
    fully free nodes (standalone nodes are left to :func:`_best_alone`)."""
    caps = classes.free // tp * tp
    out: list[tuple[IntArray, IntArray]] = []
    for g in range(classes.num_groups):
        members = classes.group == g
        cap = np.repeat(caps[members], classes.count[members])
        full = classes.free[members] == classes.size[members]
        out.append((-np.sort(-cap), np.repeat(classes.size[members][full], classes.count[members][full])))
    return out


def _best_alone(classes: NodeClasses, tp: int, worlds: IntArray, mode: PlacementMode) -> IntArray:
    """Per world: what one standalone node (its own fast-link domain) can hold it with: tp for ``any`` (every
    group inside the node), the whole world for ``even``, its size for ``whole_nodes``; 0 where none can."""
    alone = classes.group < 0
    if not alone.any():
        return np.zeros(worlds.shape, dtype=np.int64)
    if mode is PlacementMode.WHOLE_NODES:
        full = classes.size[alone & (classes.free == classes.size) & (classes.size % tp == 0)]
        return np.where(np.isin(worlds, full), worlds, 0)
    fits = worlds <= int((classes.free[alone] // tp * tp).max())
    return np.where(fits, tp if mode is PlacementMode.ANY else worlds, 0)


def _best_any(caps: IntArray, tp: int, worlds: IntArray, floor: bool) -> IntArray:
    """Largest g (multiple of tp) such that nodes each taking between g and their capacity reach each world;
    0 where none. ``floor=False``: only whether the capacities reach it (g = tp where they do)."""
    best = np.zeros(worlds.shape, dtype=np.int64)
    top = int(caps[0]) if caps.size else 0
    total = np.cumsum(caps)  # caps are sorted largest first: those >= g are a prefix
    for g in range(tp, (top if floor else tp) + 1, tp):
        k = int(np.searchsorted(-caps, -g, side="right"))
        n = np.searchsorted(total[:k], worlds)  # nodes - 1 of the fewest (roomiest first) that reach the world
        best = np.where((n < k) & ((n + 1) * g <= worlds), g, best)
    return best


def _best_exact(caps: IntArray, full: IntArray, tp: int, worlds: IntArray, mode: PlacementMode) -> IntArray:
    """Largest per-node count g with world / g nodes each taking exactly g GPUs (even: nodes with at least g
    free; whole_nodes: fully free nodes of size g); 0 where none."""
    best = np.zeros(worlds.shape, dtype=np.int64)
    if mode is PlacementMode.EVEN:
        sizes, counts = np.arange(tp, (int(caps[0]) if caps.size else 0) + 1, tp), None
    else:
        sizes, counts = np.unique(full[full % tp == 0], return_counts=True)
    for k, g in enumerate(sizes):
        have = int((caps >= g).sum()) if counts is None else int(counts[k])
        best = np.where((worlds % g == 0) & (worlds // g <= have), g, best)
    return best


def placement_shapes(pool: NodePool, gpu_type: str, tp: int, worlds: IntArray, mode: PlacementMode
                     ) -> tuple[IntArray, IntArray]:
    """Per world size: the tightest :class:`Locality` that holds it (-1: it cannot be placed) and the GPUs each
    node it touches gets at least (``any``; tp inside one domain) or exactly (``even``, ``whole_nodes``)."""
    level = np.full(worlds.shape, -1, dtype=np.int64)
    per_node = np.zeros(worlds.shape, dtype=np.int64)
    for lv in pool.levels(gpu_type):
        todo = np.flatnonzero(level < 0)
        if todo.size == 0:
            break
        w = worlds[todo]
        classes = pool.classes(gpu_type, lv)
        best = _best_alone(classes, tp, w, mode)
        for caps, full in _per_group(classes, tp):
            if mode is PlacementMode.ANY:
                found = _best_any(caps, tp, w, floor=lv is not Locality.DOMAIN)
            else:
                found = _best_exact(caps, full, tp, w, mode)
            best = np.maximum(best, found)
        ok = best > 0
        level[todo[ok]] = int(lv)
        per_node[todo[ok]] = best[ok]
    return level, per_node


def shape_links(pool: NodePool, gpu_type: str, base: Links, level: int, per_node: int) -> Links:
    """The links a placement at ``level`` with at least ``per_node`` GPUs on each node is timed with: inside one
    fast-link domain, the type's largest domain as the node (every group of the job is then intra-node); else
    ``per_node``, ``base``'s intra-node link, and its NICs or, when it must cross racks or zones, the slower of
    those and the cluster's inter-rack or inter-zone link."""
    if level == Locality.DOMAIN:
        return Links(pool.max_domain_gpus(gpu_type), base.intra_node_bytes_per_s, base.inter_node_bytes_per_s)
    racks, zones = pool.crosses(gpu_type, Locality(level))
    inter = base.inter_node_bytes_per_s
    rack_bw = pool.inter_rack_bytes_per_s
    zone_bw = pool.inter_zone_bytes_per_s or rack_bw
    if racks and rack_bw is not None:
        inter = min(inter, rack_bw)
    if zones and zone_bw is not None:
        inter = min(inter, zone_bw)
    return Links(per_node, base.intra_node_bytes_per_s, inter)
