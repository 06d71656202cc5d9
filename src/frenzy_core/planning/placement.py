"""Choose one candidate and its node placement: OR-Tools CP-SAT, and an exhaustive reference.

Formulation (both solvers optimise exactly this; CP-SAT states it as a model, the reference enumerates it).

Sets
    K  placement options: (GPU type g, tensor-parallel size t, world size w, pool) of the ranked candidates,
       each represented by its best candidate (lowest rank, then canonical order); B_k = w / t groups to place.
       The pool is the request's, or for a candidate that offloads, a copy whose nodes keep only as many free
       GPUs as their host memory holds ranks (``CandidateTable.pool_of``), so no node is given more ranks than
       its host memory holds.
    J_k  node classes of type g at the option's locality level L_k (:mod:`frenzy_core.planning.shapes`): nodes
         with the same (locality group, free count f_j, size); m_j nodes per class. Classes keep the model small:
         a 16,384-GPU cluster of 8-GPU nodes without racks has at most 8 classes per type. At the domain level,
         nodes without a multi-node NVLink domain are standalone: each is a group of its own.
Data
    cap_{k,j} = floor(f_j / t_k)  whole TP groups one node of class j can hold (a TP group never spans nodes).
    lo_k  fewest groups on a node the option touches (the per-node GPUs it was timed with, over t); for ``even``
          and ``whole_nodes`` exactly lo_k (``whole_nodes``: fully free nodes of lo_k t GPUs only).
    rank_k, order_k  objective rank of option k's candidate (integer-scaled key, 0 best) and canonical position.
    cost_j = f_j * (N_g + 1) + 1  with N_g the nodes of type g that have free GPUs: the job leaves
           sum_j z_j f_j - w free GPUs behind on the nodes it touches (fragmentation), and the "+ 1" breaks the
           remaining ties towards fewer nodes.
Variables
    y_k in {0, 1}  option k is chosen;  u_{k,G} in {0, 1}  it sits in locality group G.
    z_{k,j} in [0, m_j]  nodes of class j the job uses (at most 1 of a standalone class).
    x_{k,j}  TP groups placed on class j (per-node counts, aggregated per class).
Constraints
    sum_k y_k = 1;  sum_G u_{k,G} + sum_{standalone j} z_{k,j} = y_k;  z_{k,j} <= m_j u_{k,G(j)};
    lo_k z_{k,j} <= x_{k,j} <= hi_{k,j} z_{k,j} (hi = cap, or lo when exact);  sum_j x_{k,j} = B_k y_k.
Objective (lexicographic, folded into one integer)
    minimise  sum_k y_k (rank_k (S + 1) + sum_j cost_j z_{k,j}) (|K| + 1) + order_k y_k,
    S = max_g sum_{j in J_g} cost_j m_j: rank first, then fragmentation, then canonical order.
Pruning (exact)
    The candidate table marks which options can be placed at all (their shape); a greedy pass takes options in
    (rank, order) and stops at the first placeable one; options of worse rank cannot win and options that
    cannot be placed cannot be chosen, so the model holds the placeable options of the incumbent's rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.cover import OptionShape, cover, min_cover, node_costs, spread
from frenzy_core.planning.nodes import Locality, NodePool
from frenzy_core.planning.request import PlacementMode

__all__ = ["DEFAULT_SEED", "Solution", "min_cover", "option_shape", "solve_cp_sat", "solve_exhaustive"]

DEFAULT_SEED = 0
"""CP-SAT random seed: fixed so that the same request gives the same plan."""


@dataclass(frozen=True)
class Solution:
    """A chosen candidate with its placement, the folded objective and how it was found."""

    candidate: int
    """Row of the candidate table."""
    nodes_used: tuple[int, ...]
    """Per node class of the candidate's GPU type."""
    groups: tuple[int, ...]
    """TP groups per node class."""
    fragmentation: int
    """Secondary objective sum_j cost_j z_j (see the module docstring)."""
    level: int
    """The :class:`Locality` whose classes ``nodes_used`` and ``groups`` index."""
    stranded_gpus: int
    """Free GPUs left on the nodes the job touches."""
    score: tuple[int, int, int]
    """(rank, fragmentation, order): the lexicographic objective."""
    optimal: bool
    solver: str
    solve_time_s: float


def option_shape(table: CandidateTable, pool: NodePool, row: int) -> OptionShape:
    """Where candidate ``row`` may be placed: its level's classes, groups to place and per-node bounds."""
    tp, level = int(table.tp[row]), int(table.level[row])
    assert level >= 0, "only placeable candidates have a shape"
    mode = table.placement
    lo = 1 if mode is PlacementMode.ANY and level == Locality.DOMAIN else int(table.per_node[row]) // tp
    classes = table.pool_of(row, pool).classes(table.gpu_types[int(table.gpu[row])], Locality(level))
    return OptionShape(classes=classes, tp=tp,
                       groups=int(table.world[row]) // tp, lo=lo, exact=mode is not PlacementMode.ANY,
                       whole=mode is PlacementMode.WHOLE_NODES)


def _solution(table: CandidateTable, pool: NodePool, row: int, nodes: np.ndarray, groups: np.ndarray,
              optimal: bool, solver: str, started: float) -> Solution:
    classes = option_shape(table, pool, row).classes
    frag = int((node_costs(classes) * nodes).sum())
    stranded = int((classes.free * nodes).sum()) - int(table.world[row])
    return Solution(candidate=row, nodes_used=tuple(int(v) for v in nodes), groups=tuple(int(v) for v in groups),
                    fragmentation=frag, level=int(table.level[row]), stranded_gpus=stranded,
                    score=(int(table.rank[row]), frag, int(table.order[row])), optimal=optimal, solver=solver,
                    solve_time_s=time.perf_counter() - started)


def solve_exhaustive(table: CandidateTable, pool: NodePool) -> Solution | None:
    """Reference: every candidate, each with its exact least-fragmentation placement; the least score wins."""
    started = time.perf_counter()
    best: tuple[tuple[int, int, int], int, np.ndarray] | None = None
    covers: dict[tuple[int, ...], tuple[int, np.ndarray] | None] = {}
    for row in range(len(table)):
        if table.level[row] < 0:
            continue
        key = tuple(int(a[row]) for a in (table.gpu, table.tp, table.world, table.level, table.per_node, table.pool))
        if key not in covers:
            covers[key] = cover(option_shape(table, pool, row))
        found = covers[key]
        if found is None:
            continue
        score = (int(table.rank[row]), found[0], int(table.order[row]))
        if best is None or score < best[0]:
            best = (score, row, found[1])
    if best is None:
        return None
    _, row, nodes = best
    return _solution(table, pool, row, nodes, spread(option_shape(table, pool, row), nodes), True, "exhaustive",
                     started)


def _greedy_nodes(shape: OptionShape) -> np.ndarray:
    """A feasible choice: the first locality group (or standalone node) that holds the option, its roomiest
    eligible nodes first; the fewest nodes, so the per-node lower bound holds if any choice meets it."""
    classes, eligible, hi = shape.classes, shape.eligible, shape.hi
    candidates = [eligible & (classes.group == g) for g in range(classes.num_groups)]
    candidates += [np.arange(len(hi)) == j for j in np.flatnonzero(eligible & (classes.group < 0))]
    for mask in candidates:
        nodes = np.zeros(len(hi), dtype=np.int64)
        left = shape.groups
        for j in sorted(np.flatnonzero(mask), key=lambda j: (-int(hi[j]), int(j))):
            most = 1 if classes.group[j] < 0 else int(classes.count[j])
            nodes[j] = min(most, max(-(-left // int(hi[j])), 0))
            left -= int(nodes[j] * hi[j])
        if left <= 0 and int(nodes.sum()) * shape.lo <= shape.groups:
            return nodes
    raise AssertionError("a placeable option has no greedy placement")


_Option = tuple[int, OptionShape]
"""(candidate row, where it may sit): one choice the CP-SAT model may take."""


def _add_placement(model: Any, options: list[_Option]) -> tuple[list[Any], list[list[Any]], list[list[Any]]]:
    """Variables and constraints: y[k] option k chosen, z[k][j] nodes of class j used, x[k][j] TP groups on them,
    one locality group (or standalone node) per chosen option."""
    y = [model.new_bool_var(f"y[{k}]") for k in range(len(options))]
    z: list[list[Any]] = []
    x: list[list[Any]] = []
    model.add_exactly_one(y)
    for k, (_, shape) in enumerate(options):
        classes, eligible, hi = shape.classes, shape.eligible, shape.hi
        most = [0 if not eligible[j] else 1 if classes.group[j] < 0 else int(classes.count[j])
                for j in range(len(hi))]
        z.append([model.new_int_var(0, most[j], f"z[{k},{j}]") for j in range(len(hi))])
        x.append([model.new_int_var(0, most[j] * int(hi[j]), f"x[{k},{j}]") for j in range(len(hi))])
        u = [model.new_bool_var(f"u[{k},{g}]") for g in range(classes.num_groups)]
        alone = [z[k][j] for j in range(len(hi)) if classes.group[j] < 0]
        # the chosen option sits in exactly one locality group or on one standalone node
        model.add(sum(u) + sum(alone) == y[k])
        # it places all its TP groups; the others place none
        model.add(sum(x[k]) == shape.groups * y[k])
        for j in range(len(hi)):
            # each node it touches holds between lo and hi whole groups (a TP group never spans nodes)
            model.add(x[k][j] <= int(hi[j]) * z[k][j])
            model.add(x[k][j] >= shape.lo * z[k][j])
            if classes.group[j] >= 0:
                # only nodes of the chosen group
                model.add(z[k][j] <= most[j] * u[int(classes.group[j])])
    return y, z, x


def _add_objective(model: Any, options: list[_Option], table: CandidateTable, y: list[Any],
                   z: list[list[Any]]) -> None:
    """Minimise fragmentation, then the canonical order (the options' ranks are equal)."""
    spans = [int((node_costs(sh.classes) * sh.classes.count).sum()) for _, sh in options]
    frag_weight = len(options) + 1
    # local order among the options (their ranks are equal), so the objective stays small
    local_order = {row: i for i, row in enumerate(sorted((o[0] for o in options), key=lambda r: int(table.order[r])))}
    terms: list[Any] = []
    for k, (row, shape) in enumerate(options):
        costs = node_costs(shape.classes)
        terms.extend(int(costs[j]) * frag_weight * z[k][j] for j in range(len(costs)))
        terms.append(local_order[row] * y[k])
    assert max(spans) * frag_weight * 2 < 2**62, "objective coefficients overflow int64"
    model.minimize(sum(terms))


def _add_greedy_hint(model: Any, options: list[_Option], incumbent: int, y: list[Any], z: list[list[Any]],
                     x: list[list[Any]]) -> None:
    """The incumbent with nodes taken from the roomiest classes, as a solution hint."""
    for k, (row, shape) in enumerate(options):
        size = len(z[k])
        nodes = _greedy_nodes(shape) if row == incumbent else np.zeros(size, np.int64)
        groups = spread(shape, nodes) if row == incumbent else np.zeros(size, np.int64)
        model.add_hint(y[k], row == incumbent)
        for j in range(size):
            model.add_hint(z[k][j], int(nodes[j]))
            model.add_hint(x[k][j], int(groups[j]))


def solve_cp_sat(table: CandidateTable, pool: NodePool, *, time_limit_s: float = 10.0, seed: int = DEFAULT_SEED,
                 num_workers: int = 1) -> Solution | None:
    """CP-SAT over the placement options (formulation in the module docstring); None when nothing can be placed."""
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    rows, feasible = table.options
    if not feasible.any():
        return None
    incumbent = int(rows[int(np.argmax(feasible))])
    best_rank = int(table.rank[incumbent])
    chosen = [int(r) for r, ok in zip(rows, feasible) if ok and int(table.rank[r]) == best_rank]
    options: list[_Option] = [(row, option_shape(table, pool, row)) for row in chosen]

    model = cp_model.CpModel()
    y, z, x = _add_placement(model, options)
    _add_objective(model, options, table, y, z)
    _add_greedy_hint(model, options, incumbent, y, z, x)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = num_workers
    status = solver.solve(model)

    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        shape = options[chosen.index(incumbent)][1]
        nodes = _greedy_nodes(shape)
        return _solution(table, pool, incumbent, nodes, spread(shape, nodes), False, "greedy", started)
    k = next(i for i in range(len(options)) if solver.value(y[i]))
    row = options[k][0]
    nodes = np.array([solver.value(v) for v in z[k]], dtype=np.int64)
    placed = np.array([solver.value(v) for v in x[k]], dtype=np.int64)
    return _solution(table, pool, row, nodes, placed, status == cp_model.OPTIMAL, "cp-sat", started)
