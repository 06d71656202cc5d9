"""Why each GPU type lost, and what extra free GPUs would make a layout placeable."""

from __future__ import annotations

import numpy as np

from frenzy_core.planning.candidates import CandidateTable, TypeReport
from frenzy_core.planning.launchers import launchers_where
from frenzy_core.planning.nodes import NodePool
from frenzy_core.planning.plan import Rejection, RejectReason
from frenzy_core.planning.request import Objective, PlacementMode, PlanConstraints

__all__ = ["NOT_ALLOWED_MESSAGE", "best_feasible_per_type", "extra_free_gpus", "host_message", "type_rejections"]

GIB = 2**30


def best_feasible_per_type(table: CandidateTable, rows: np.ndarray, feasible: np.ndarray) -> dict[int, int]:
    """GPU type index -> its best placeable candidate row (``rows`` sorted best first)."""
    out: dict[int, int] = {}
    for row, ok in zip(rows, feasible):
        g = int(table.gpu[row])
        if ok and g not in out:
            out[g] = int(row)
    return out


def _placement_message(table: CandidateTable, pool: NodePool, g: int) -> str:
    name = table.gpu_types[g]
    mask = table.gpu == g
    if table.placement is not PlacementMode.ANY:
        rule = ("the same number of GPUs on every node" if table.placement is PlacementMode.EVEN
                else "whole free nodes of one size")
        return (f"no placement gives the fitting layouts (from {int(table.world[mask].min())} GPUs) {rule} "
                f"(placement={table.placement.value}); {pool.free_gpus(name)} {name} GPUs are free, at most "
                f"{pool.max_free_in_node(name)} on one node")
    tps = np.unique(table.tp[mask])
    largest = pool.max_free_in_node(name)
    small_tp = int(tps.min())
    if small_tp > largest:
        return (f"not enough free GPUs in one node for the TP group: every fitting layout needs tp >= {small_tp}, "
                f"the largest free block of {name} is {largest} GPUs")
    worlds = table.world[mask & (table.tp == small_tp)]
    groups = pool.classes(name).free_blocks(small_tp)
    return (f"free {name} GPUs are split across nodes: the smallest fitting layout with tp={small_tp} needs "
            f"{int(worlds.min())} GPUs in whole groups of {small_tp} per node, only {groups * small_tp} are free "
            "that way")


def host_message(pool: NodePool, report: TypeReport) -> str:
    """Why host memory keeps a type's fitting layouts off its nodes, and what would help."""
    name, need = report.gpu_type, report.min_host_bytes
    held = ", ".join(f"{mem / GIB:,.0f} GiB holds {ranks}" for mem, ranks in pool.host_limits(name, need))
    return (f"the fitting layouts keep at least {need / GIB:,.1f} GiB per rank in host memory (offload), and the "
            f"{name} nodes' host memory holds too few such ranks per node ({held}) for any placement; fewer ranks "
            "per node (more free nodes), no offload, or nodes with more host memory (host_memory_bytes) would help")


def _outranked_message(table: CandidateTable, chosen: int, row: int) -> str:
    obj = table.objective
    best, mine = float(table.value[chosen]), float(table.value[row])
    name = table.gpu_types[int(table.gpu[row])]
    if obj is Objective.THROUGHPUT:
        gap = 100.0 * (1.0 - mine / best)
        return f"slower by {gap:.1f}% ({mine:,.0f} vs {best:,.0f} tokens/s at its best layout)"
    if obj is Objective.COST:
        gap = 100.0 * (mine / best - 1.0)
        return f"more expensive by {gap:.1f}% (${mine:,.2f} vs ${best:,.2f} for the token budget)"
    if obj is Objective.TIME_TO_TRAIN:
        gap = 100.0 * (mine / best - 1.0)
        return f"slower to train by {gap:.1f}% ({mine:,.0f} s vs {best:,.0f} s)"
    if int(table.world[row]) > int(table.world[chosen]):
        return f"needs {int(table.world[row])} {name} GPUs vs {int(table.world[chosen])}"
    gap = 100.0 * (1.0 - float(table.tokens_per_s[row]) / float(table.tokens_per_s[chosen]))
    return f"same GPU count but slower by {gap:.1f}%"


UNEVEN_REFUSAL = ("micro-batch x dp dividing the global batch (Megatron-LM asserts it in megatron/core/"
                  "num_microbatches_calculator.py, DeepSpeed's gradient_accumulation_steps and the launchers "
                  f"other than {', '.join(launchers_where(lambda s: s.mixed))} have one count per job; ranks that "
                  "differ by one micro-batch are planned for framework 'torch' with those launchers only)")
"""Why a batch must split evenly where uneven splits are not searched."""


NOT_ALLOWED_MESSAGE = "excluded by constraints.gpu_types"
"""Why a type the request's gpu_types leaves out took no part."""


def _report_reason(report: TypeReport, constraints: PlanConstraints, uneven: bool = False
                   ) -> tuple[RejectReason, str] | None:
    """The reason found before placement, or None when the type had candidates."""
    cap = constraints.num_gpus or constraints.max_gpus
    if not report.allowed:
        return RejectReason.NOT_ALLOWED, NOT_ALLOWED_MESSAGE
    if report.min_world_fit is None:
        if report.min_device_bytes is not None:
            return RejectReason.DOES_NOT_FIT, (
                f"does not fit even at the largest layout: needs at least {report.min_device_bytes / GIB:.1f} GiB "
                f"per GPU, has {report.usable_bytes / GIB:.1f} GiB usable (after headroom)")
        if constraints.num_gpus is not None:
            return RejectReason.DOES_NOT_FIT, (
                f"no layout uses exactly num_gpus={constraints.num_gpus} GPUs of it (dp x tp x pp x cp must equal "
                f"it, with {'dp at most the micro-batches of the global batch' if uneven else UNEVEN_REFUSAL}, "
                "tp dividing the heads and pp the layers, within its node size)")
        return RejectReason.DOES_NOT_FIT, (f"no layout of the model fits in its {report.total_gpus} GPUs (the "
                                           "searched tensor/pipeline splits need more, or the pins exclude them)")
    if report.n_fit_free == 0:
        limit = report.free_gpus if cap is None else min(report.free_gpus, cap)
        what = "free" if cap is None or report.free_gpus <= cap else f"allowed (max/num_gpus={cap})"
        return RejectReason.NOT_ENOUGH_FREE, (f"fits from {report.min_world_fit} GPUs, only {limit} {what}")
    if report.n_within_limits == 0:
        return RejectReason.LIMITS, "; ".join(report.limit_reasons) or "removed by the request's limits"
    return None


def type_rejections(table: CandidateTable, pool: NodePool, rows: np.ndarray, feasible: np.ndarray,
                    chosen: int | None, constraints: PlanConstraints) -> list[Rejection]:
    """One :class:`Rejection` per GPU type of the cluster other than the chosen one."""
    best = best_feasible_per_type(table, rows, feasible)
    chosen_g = None if chosen is None else int(table.gpu[chosen])
    out = []
    for g, report in enumerate(table.reports):
        if g == chosen_g:
            continue
        early = _report_reason(report, constraints, table.uneven)
        if early is not None:
            out.append(Rejection(gpu_type=report.gpu_type, reason=early[0], message=early[1]))
        elif g not in best and report.host_blocked:
            out.append(Rejection(gpu_type=report.gpu_type, reason=RejectReason.HOST_MEMORY,
                                 message=host_message(pool, report)))
        elif g not in best:
            out.append(Rejection(gpu_type=report.gpu_type, reason=RejectReason.TP_SPLIT,
                                 message=_placement_message(table, pool, g)))
        else:
            assert chosen is not None, "a placeable candidate exists, so a plan was chosen"
            out.append(Rejection(gpu_type=report.gpu_type, reason=RejectReason.OUTRANKED,
                                 message=_outranked_message(table, chosen, best[g]),
                                 best_value=float(table.value[best[g]])))
    return out


def extra_free_gpus(pool: NodePool, gpu_type: str, tp: int, world: int, most: dict[str, int] | None = None
                    ) -> int | None:
    """Fewest busy GPUs of ``gpu_type`` that must be freed so ``world`` GPUs fit in whole TP groups per node.

    Each node can gain groups up to its size (or ``most[name]`` GPUs, the ranks its host memory holds for an
    offloading candidate); the first extra group on a node costs what completes its partial group, every further
    one ``tp``: the cheapest ``deficit`` groups win. None: too few GPUs in total.
    """
    need = world // tp
    costs: list[tuple[int, int]] = []  # (GPUs to free, groups at that price)
    have = 0
    for node in pool.nodes:
        if node.gpu_type != gpu_type:
            continue
        size = node.gpus_per_node if most is None else min(node.gpus_per_node, most.get(node.name, 0))
        now, top = min(node.free, size) // tp, size // tp
        have += now
        if top > now:
            costs.append(((now + 1) * tp - node.free, 1))
            if top > now + 1:
                costs.append((tp, top - now - 1))
    deficit = need - have
    if deficit <= 0:
        return 0
    total = 0
    for price, count in sorted(costs):
        take = min(count, deficit)
        total += take * price
        deficit -= take
        if deficit == 0:
            return total
    return None
