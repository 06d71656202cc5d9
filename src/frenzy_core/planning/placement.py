"""Choose one candidate and its node placement: OR-Tools CP-SAT, and an exhaustive reference.

Formulation (both solvers optimise exactly this; CP-SAT states it as a model, the reference enumerates it).

Sets
    K  placement options: (GPU type g, tensor-parallel size t, world size w) of the ranked candidates, each
       represented by its best candidate (lowest rank, then canonical order); B_k = w / t groups to place.
    J_g  node classes of type g: nodes with the same free count f_j and size; m_j nodes per class.
         Classes keep the model small: a 16,384-GPU cluster of 8-GPU nodes has at most 8 classes per type
         (free counts 1..8; nodes with nothing free are left out).
Data
    cap_{k,j} = floor(f_j / t_k)  whole TP groups one node of class j can hold (a TP group never spans nodes).
    rank_k, order_k  objective rank of option k's candidate (integer-scaled key, 0 best) and canonical position.
    cost_j = f_j * (N_g + 1) + 1  with N_g the nodes of type g that have free GPUs: the job leaves
           sum_j z_j f_j - w free GPUs behind on the nodes it touches (fragmentation), and the "+ 1" breaks the
           remaining ties towards fewer nodes.
Variables
    y_k in {0, 1}  option k is chosen.
    z_{k,j} in [0, m_j]  nodes of class j the job uses.
    x_{k,j} in [0, m_j cap_{k,j}]  TP groups placed on class j (per-node counts x_{c,n}, aggregated per class).
Constraints
    sum_k y_k = 1;  sum_j x_{k,j} = B_k y_k;  x_{k,j} <= cap_{k,j} z_{k,j};  z_{k,j} <= x_{k,j};
    z_{k,j} <= m_j y_k.  (t x_{k,j} <= f_j z_{k,j} follows from the cap.)
Objective (lexicographic, folded into one integer)
    minimise  sum_k y_k (rank_k (S + 1) + sum_j cost_j z_{k,j}) (|K| + 1) + order_k y_k,
    S = max_g sum_{j in J_g} cost_j m_j: rank first, then fragmentation, then canonical order.
Pruning (exact)
    A greedy pass takes options in (rank, order) and stops at the first one with enough whole groups free
    (sum_j m_j cap_{k,j} >= B_k, which is necessary and sufficient); options of worse rank cannot win and options
    that cannot be placed cannot be chosen, so the model holds the feasible options of the incumbent's rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from frenzy_core.planning.candidates import CandidateTable, dense_rank
from frenzy_core.planning.nodes import NodeClasses, NodePool

__all__ = ["DEFAULT_SEED", "Solution", "min_cover", "placement_options", "solve_cp_sat", "solve_exhaustive"]

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
    stranded_gpus: int
    """Free GPUs left on the nodes the job touches."""
    score: tuple[int, int, int]
    """(rank, fragmentation, order): the lexicographic objective."""
    optimal: bool
    solver: str
    solve_time_s: float


def _node_costs(classes: NodeClasses) -> np.ndarray:
    return classes.free * (int(classes.count.sum()) + 1) + 1


def min_cover(classes: NodeClasses, tp: int, groups: int) -> tuple[int, np.ndarray] | None:
    """Exact least-fragmentation node counts per class holding ``groups`` TP groups of ``tp`` GPUs, or None.

    A covering knapsack (min sum cost_j z_j with sum cap_j z_j >= groups, z_j <= m_j) solved by dynamic
    programming over groups, with each class's count split into powers of two.
    """
    caps = classes.blocks_per_node(tp)
    if int((caps * classes.count).sum()) < groups:
        return None
    costs = _node_costs(classes)
    inf = np.iinfo(np.int64).max // 4
    best = np.full(groups + 1, inf, dtype=np.int64)
    best[0] = 0
    items: list[tuple[int, int]] = []  # (class, nodes in this chunk)
    for j in range(len(caps)):
        if caps[j] == 0:
            continue
        left, chunk = int(classes.count[j]), 1
        while left > 0:
            take = min(chunk, left)
            items.append((j, take))
            left -= take
            chunk *= 2
    took = np.zeros((len(items), groups + 1), dtype=bool)
    positions = np.arange(groups + 1)
    for i, (j, n) in enumerate(items):
        src = np.maximum(positions - n * int(caps[j]), 0)
        cand = best[src] + n * int(costs[j])
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


def _spread(classes: NodeClasses, tp: int, nodes: np.ndarray, groups: int) -> np.ndarray:
    """TP groups per class when ``nodes`` hold ``groups`` of them: fill classes in order."""
    caps = classes.blocks_per_node(tp)
    out = np.zeros(len(caps), dtype=np.int64)
    left = groups
    for j in range(len(caps)):
        out[j] = min(int(nodes[j] * caps[j]), left)
        left -= int(out[j])
    assert left == 0, "nodes chosen cannot hold the groups"
    return out


def _solution(table: CandidateTable, pool: NodePool, row: int, nodes: np.ndarray, groups: np.ndarray,
              optimal: bool, solver: str, started: float) -> Solution:
    classes = pool.classes(table.gpu_types[int(table.gpu[row])])
    frag = int((_node_costs(classes) * nodes).sum())
    stranded = int((classes.free * nodes).sum()) - int(table.world[row])
    return Solution(candidate=row, nodes_used=tuple(int(v) for v in nodes), groups=tuple(int(v) for v in groups),
                    fragmentation=frag, stranded_gpus=stranded,
                    score=(int(table.rank[row]), frag, int(table.order[row])), optimal=optimal, solver=solver,
                    solve_time_s=time.perf_counter() - started)


def solve_exhaustive(table: CandidateTable, pool: NodePool) -> Solution | None:
    """Reference: every candidate, each with its exact least-fragmentation placement; the least score wins."""
    started = time.perf_counter()
    best: tuple[tuple[int, int, int], int, np.ndarray] | None = None
    for row in range(len(table)):
        classes = pool.classes(table.gpu_types[int(table.gpu[row])])
        tp = int(table.tp[row])
        cover = min_cover(classes, tp, int(table.world[row]) // tp)
        if cover is None:
            continue
        score = (int(table.rank[row]), cover[0], int(table.order[row]))
        if best is None or score < best[0]:
            best = (score, row, cover[1])
    if best is None:
        return None
    _, row, nodes = best
    tp = int(table.tp[row])
    classes = pool.classes(table.gpu_types[int(table.gpu[row])])
    groups = _spread(classes, tp, nodes, int(table.world[row]) // tp)
    return _solution(table, pool, row, nodes, groups, True, "exhaustive", started)


def placement_options(table: CandidateTable, pool: NodePool) -> tuple[np.ndarray, np.ndarray]:
    """Rows representing each (type, tp, world) option, sorted by (rank, order), and whether each can be placed."""
    if len(table) == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    by_score = np.lexsort((table.order, table.rank))
    group = dense_rank(np.stack([table.gpu, table.tp, table.world]))[by_score]
    first = np.zeros(len(by_score), dtype=bool)
    _, where = np.unique(group, return_index=True)  # first occurrence in score order = best of its group
    first[where] = True
    rows = by_score[first]
    pairs = np.stack([table.gpu[rows], table.tp[rows]])
    kinds = dense_rank(pairs)
    free = np.zeros(int(kinds.max()) + 1, dtype=np.int64)  # GPUs free in whole TP groups, per (type, tp)
    for k, i in zip(*np.unique(kinds, return_index=True)):
        g, tp = int(pairs[0, i]), int(pairs[1, i])
        free[k] = pool.classes(table.gpu_types[g]).free_blocks(tp) * tp
    return rows, free[kinds] >= table.world[rows]


def _greedy_nodes(classes: NodeClasses, tp: int, groups: int) -> np.ndarray:
    """Nodes per class taking the classes with the most room first: a feasible hint, not necessarily best."""
    caps = classes.blocks_per_node(tp)
    nodes = np.zeros(len(caps), dtype=np.int64)
    left = groups
    for j in np.argsort(-caps, kind="stable"):
        if left <= 0 or caps[j] == 0:
            continue
        nodes[j] = min(int(classes.count[j]), -(-left // int(caps[j])))
        left -= int(nodes[j] * caps[j])
    return nodes


_Option = tuple[int, int, int, NodeClasses]
"""(candidate row, tp, TP groups, node classes of its GPU type): one choice the CP-SAT model may take."""


def _add_placement(model: Any, options: list[_Option]) -> tuple[list[Any], list[list[Any]], list[list[Any]]]:
    """Variables and constraints: y[k] option k chosen, z[k][j] nodes of class j used, x[k][j] TP groups on them."""
    y = [model.new_bool_var(f"y[{k}]") for k in range(len(options))]
    z: list[list[Any]] = []
    x: list[list[Any]] = []
    for k, (_, tp, _, classes) in enumerate(options):
        caps = classes.blocks_per_node(tp)
        z.append([model.new_int_var(0, int(classes.count[j]) if caps[j] else 0, f"z[{k},{j}]")
                  for j in range(len(caps))])
        x.append([model.new_int_var(0, int(classes.count[j] * caps[j]), f"x[{k},{j}]") for j in range(len(caps))])
    # exactly one option is chosen
    model.add_exactly_one(y)
    for k, (_, tp, groups, classes) in enumerate(options):
        caps = classes.blocks_per_node(tp)
        # the chosen option places all its TP groups; the others place none
        model.add(sum(x[k]) == groups * y[k])
        for j in range(len(caps)):
            # a node holds at most cap whole groups (a TP group never spans nodes)
            model.add(x[k][j] <= int(caps[j]) * z[k][j])
            # a counted node holds at least one group
            model.add(z[k][j] <= x[k][j])
            # only the chosen option uses nodes, at most the class's nodes
            model.add(z[k][j] <= int(classes.count[j]) * y[k])
    return y, z, x


def _add_objective(model: Any, options: list[_Option], table: CandidateTable, y: list[Any],
                   z: list[list[Any]]) -> None:
    """Minimise fragmentation, then the canonical order (the options' ranks are equal)."""
    spans = [int((_node_costs(cl) * cl.count).sum()) for *_, cl in options]
    frag_weight = len(options) + 1
    # local order among the options (their ranks are equal), so the objective stays small
    local_order = {row: i for i, row in enumerate(sorted((o[0] for o in options), key=lambda r: int(table.order[r])))}
    terms: list[Any] = []
    for k, (row, _, _, classes) in enumerate(options):
        costs = _node_costs(classes)
        terms.extend(int(costs[j]) * frag_weight * z[k][j] for j in range(len(costs)))
        terms.append(local_order[row] * y[k])
    assert max(spans) * frag_weight * 2 < 2**62, "objective coefficients overflow int64"
    model.minimize(sum(terms))


def _add_greedy_hint(model: Any, options: list[_Option], incumbent: int, y: list[Any], z: list[list[Any]],
                     x: list[list[Any]]) -> None:
    """The incumbent with nodes taken from the roomiest classes, as a solution hint."""
    for k, (row, tp, groups, classes) in enumerate(options):
        hint_nodes = _greedy_nodes(classes, tp, groups) if row == incumbent else np.zeros(len(z[k]), np.int64)
        hint_groups = _spread(classes, tp, hint_nodes, groups) if row == incumbent else np.zeros(len(z[k]), np.int64)
        model.add_hint(y[k], row == incumbent)
        for j in range(len(z[k])):
            model.add_hint(z[k][j], int(hint_nodes[j]))
            model.add_hint(x[k][j], int(hint_groups[j]))


def solve_cp_sat(table: CandidateTable, pool: NodePool, *, time_limit_s: float = 10.0, seed: int = DEFAULT_SEED,
                 num_workers: int = 1) -> Solution | None:
    """CP-SAT over the placement options (formulation in the module docstring); None when nothing can be placed."""
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    rows, feasible = placement_options(table, pool)
    if not feasible.any():
        return None
    incumbent = int(rows[int(np.argmax(feasible))])
    best_rank = int(table.rank[incumbent])
    chosen = [int(r) for r, ok in zip(rows, feasible) if ok and int(table.rank[r]) == best_rank]
    options: list[_Option] = []
    for row in chosen:
        g, tp = int(table.gpu[row]), int(table.tp[row])
        options.append((row, tp, int(table.world[row]) // tp, pool.classes(table.gpu_types[g])))

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
        row, tp, groups, classes = options[chosen.index(incumbent)]
        nodes = _greedy_nodes(classes, tp, groups)
        return _solution(table, pool, row, nodes, _spread(classes, tp, nodes, groups), False, "greedy", started)
    k = next(i for i in range(len(options)) if solver.value(y[i]))
    row, tp, groups, classes = options[k]
    nodes = np.array([solver.value(v) for v in z[k]], dtype=np.int64)
    placed = np.array([solver.value(v) for v in x[k]], dtype=np.int64)
    return _solution(table, pool, row, nodes, placed, status == cp_model.OPTIMAL, "cp-sat", started)
