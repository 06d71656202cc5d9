"""Placement solvers: CP-SAT agrees with the exhaustive reference, placements are valid and deterministic.

These are laws of the solvers, independent of the memory and time models, so the candidates come from a small
stand-in estimator whose numbers are simple to reason about (memory grows with the model and shrinks with
tp/pp/ZeRO; time falls with GPUs and rises with pipeline bubbles and tensor-parallel traffic).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ModelConfig, TrainingConfig
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.hardware import get_gpu_spec
from frenzy_core.planning.candidates import build_candidates
from frenzy_core.planning.nodes import FreeNode, Locality, NodeClasses, NodePool
from frenzy_core.planning.placement import min_cover, solve_cp_sat, solve_exhaustive
from frenzy_core.planning.request import Objective, PlacementMode, PlanConstraints
from frenzy_core.planning.shapes import placement_shapes

GPU_TYPES = ("t4", "a100-40gb", "a100-80gb", "h100-sxm")
GIB = 2**30


class StandInEstimator:
    """Simple vectorised memory and time, enough to exercise the solvers."""

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, lay: LayoutArrays) -> np.ndarray:
        params = model.num_params() / (lay.tp * lay.pp)
        states = 12.0 * params / np.where(lay.zero_stage >= 1, lay.dp, 1) + 4.0 * params
        keep = np.array([1.0, 0.6, 0.15])[lay.recompute]
        act = 34.0 * lay.micro_batch_size * training.seq_len * model.hidden_size * model.num_layers / lay.tp * keep
        return (states + act + 0.5 * GIB).astype(np.int64)

    def host_bytes(self, model: ModelConfig, training: TrainingConfig, lay: LayoutArrays) -> np.ndarray:
        """With ``offload_optimizer``: the Adam states and fp32 master copy of the rank's parameter shard."""
        if not training.offloads:
            return np.zeros(len(lay), dtype=np.int64)
        params = model.num_params() / (lay.tp * lay.pp)
        return (12.0 * params / np.where(lay.zero_stage >= 1, lay.dp, 1)).astype(np.int64)

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, lay: LayoutArrays, gpu: Any,
                    cluster: Any) -> np.ndarray:
        gbs = lay.global_batch_size
        flops = 6.0 * model.num_params() * gbs * training.seq_len * np.array([1.0, 1.05, 1.33])[lay.recompute]
        compute = flops / (lay.world_size * gpu.peak_tflops.get("fp16", 10.0) * 1e12 * 0.5)
        micro = np.maximum(gbs // (lay.micro_batch_size * lay.dp), 1)
        return compute * (1 + (lay.pp - 1) / micro + 0.04 * (lay.tp - 1)) + 0.002 * np.log2(lay.dp + 1)


def _pool(rng: random.Random, locality: bool = False, host: random.Random | None = None) -> NodePool:
    """Random nodes; with ``locality``, some in racks of two zones and some in multi-node NVLink domains; with
    ``host`` (its own random stream, so the nodes are those drawn without it), some nodes with a host memory of
    1 to 16 GiB (unknown on the others)."""
    nodes = []
    for gpu in rng.sample(GPU_TYPES, rng.randint(1, 3)):
        size = rng.choice([4, 8])
        for _ in range(rng.randint(1, 5)):
            free = rng.randint(0, size)
            labels: dict[str, Any] = {}
            if locality:
                labels = {"rack": rng.choice(["r1", "r2", None]), "zone": rng.choice(["a", "b"]),
                          "nvlink_domain": rng.choice([None, None, f"{gpu}-nvl"])}
            if host is not None:
                labels["host_memory_bytes"] = host.choice([None, 1 * GIB, 4 * GIB, 16 * GIB])
            nodes.append(FreeNode(f"node:{len(nodes)}", gpu, size, tuple(sorted(rng.sample(range(size), free))),
                                  **labels))
    return NodePool(nodes=tuple(nodes))


def _instance(seed: int, locality: bool = False, host: bool = False) -> tuple[Any, NodePool]:
    """A random small model, recipe, cluster, objective and constraints; returns the candidate table and pool.
    With ``locality``: racks, zones, NVLink domains and a random placement mode too; with ``host``: optimizer
    offload and nodes of small host memory."""
    rng = random.Random(seed)
    heads = rng.choice([4, 8, 16])
    model = ModelConfig(num_layers=rng.choice([4, 8, 12]), hidden_size=heads * rng.choice([128, 256, 512]),
                        num_attention_heads=heads, vocab_size=32000)
    training = TrainingConfig(seq_len=rng.choice([1024, 2048, 4096]), global_batch_size=rng.choice([8, 16, 32, 64]),
                              offload_optimizer="cpu" if host else "none")
    pool = _pool(rng, locality, random.Random(-seed) if host else None)
    objective = rng.choice(list(Objective))
    constraints = PlanConstraints(token_budget=10**9, max_gpus=rng.choice([None, 8, 16]),
                                  micro_batch_sizes=[1, 2], zero_stages=[0, 1],
                                  placement=rng.choice(list(PlacementMode)) if locality else PlacementMode.ANY)
    specs = {name: get_gpu_spec(name) for name in pool.gpu_types}
    table = build_candidates(model, training, pool, specs, constraints, objective, StandInEstimator())
    return table, pool


def _check_agree(seed: int, locality: bool = False, host: bool = False) -> None:
    table, pool = _instance(seed, locality, host)
    reference = solve_exhaustive(table, pool)
    cp = solve_cp_sat(table, pool, time_limit_s=10)
    assert (reference is None) == (cp is None), f"seed {seed}: one solver found a plan, the other did not"
    if reference is None or cp is None:
        return
    assert cp.optimal
    assert cp.score == reference.score, f"seed {seed}"
    assert table.value[cp.candidate] == table.value[reference.candidate]
    _check_valid(table, pool, cp)


def _check_valid(table: Any, pool: NodePool, solution: Any) -> None:
    """Only free GPUs, whole TP groups per node, exactly the world size, inside one locality group, each node
    with at least (any) or exactly (even, whole nodes) the GPUs the candidate was timed with."""
    row = solution.candidate
    gpu_type = table.gpu_types[int(table.gpu[row])]
    tp = int(table.tp[row])
    level = Locality(solution.level)
    placement = table.pool_of(row, pool).assign(gpu_type, tp, list(solution.nodes_used), list(solution.groups),
                                                level)
    by_name = {n.name: n for n in pool.nodes}
    assert sum(len(v) for v in placement.values()) == int(table.world[row])
    host = int(table.host_bytes[int(table.layout[row])])
    for name, gpus in placement.items():
        node = by_name[name]
        assert node.gpu_type == gpu_type
        assert set(gpus) <= set(node.free_indices) and len(set(gpus)) == len(gpus)
        assert len(gpus) % tp == 0, f"a tp={tp} group would span nodes on {name}"
        assert node.host_memory_bytes is None or len(gpus) * host <= node.host_memory_bytes, "host memory"
    groups = {by_name[name].group(level) for name in placement}
    assert len(groups) == 1 or (level is Locality.DOMAIN and len(placement) == 1 and groups == {None})
    counts = [len(g) for g in placement.values()]
    per_node = int(table.per_node[row])
    if table.placement is PlacementMode.ANY:
        assert level is Locality.DOMAIN or min(counts) >= per_node
    else:
        assert set(counts) == {per_node}
    if table.placement is PlacementMode.WHOLE_NODES:
        assert all(len(gpus) == by_name[n].gpus_per_node == by_name[n].free for n, gpus in placement.items())


@settings(max_examples=160, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_matches_exhaustive_property(seed: int) -> None:
    _check_agree(seed)


@pytest.mark.parametrize("seed", range(60))
def test_cp_sat_matches_exhaustive_fixed_seeds(seed: int) -> None:
    _check_agree(seed)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_matches_exhaustive_with_locality_and_placement_modes(seed: int) -> None:
    _check_agree(seed, locality=True)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**9))
def test_cp_sat_matches_exhaustive_with_host_memory(seed: int) -> None:
    """Offloading jobs on nodes of small host memory: both solvers keep each node's ranks within it."""
    _check_agree(seed, host=True)


@pytest.mark.slow
def test_host_memory_instances_are_not_trivial() -> None:
    """Host memory moves the plan in some instances, leaves none in others and a plan in most (the same
    instances without host memory figures)."""
    with_host = [solve_exhaustive(*_instance(seed, host=True)) for seed in range(20)]
    without = [solve_exhaustive(*_instance(seed)) for seed in range(20)]
    assert sum(a is not None for a in with_host) >= 8
    assert sum(b is not None and a is None for a, b in zip(with_host, without)) >= 1
    assert sum(a is not None and b is not None and a.score != b.score for a, b in zip(with_host, without)) >= 4


def test_locality_instances_are_not_trivial() -> None:
    found = [solve_exhaustive(*_instance(seed, locality=True)) for seed in range(60)]
    assert 10 <= sum(f is not None for f in found) <= 58
    levels = {f.level for f in found if f is not None}
    assert len(levels) >= 2, levels


def test_instances_are_not_trivial() -> None:
    """The random instances mix feasible and infeasible requests and several GPU types (so agreement means
    something)."""
    found = [solve_exhaustive(*_instance(seed)) is not None for seed in range(60)]
    assert 10 <= sum(found) <= 58


def _brute_cover(classes: NodeClasses, tp: int, groups: int) -> int | None:
    caps = classes.blocks_per_node(tp)
    costs = classes.free * (int(classes.count.sum()) + 1) + 1
    best = None
    for nodes in itertools.product(*[range(int(m) + 1) for m in classes.count]):
        if sum(n * int(c) for n, c in zip(nodes, caps)) >= groups:
            cost = sum(n * int(c) for n, c in zip(nodes, costs))
            best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=7), st.sampled_from([1, 2, 4, 8]), st.integers(1, 12))
def test_min_cover_is_exact(frees: list[int], tp: int, groups: int) -> None:
    pool = NodePool(nodes=tuple(FreeNode(f"node:{i}", "a100-80gb", 8, tuple(range(f))) for i, f in enumerate(frees)))
    classes = pool.classes("a100-80gb")
    found = min_cover(classes, tp, groups)
    expected = _brute_cover(classes, tp, groups)
    assert (found is None) == (expected is None)
    if found is not None:
        assert found[0] == expected
        assert int((found[1] * classes.blocks_per_node(tp)).sum()) >= groups


def test_fragmentation_prefers_filling_partial_nodes() -> None:
    """A 4-GPU job on nodes with 8, 4 and 2 free takes the node with exactly 4 free (nothing left stranded)."""
    pool = NodePool(nodes=(FreeNode("node:0", "a100-80gb", 8, tuple(range(8))),
                           FreeNode("node:1", "a100-80gb", 8, (4, 5, 6, 7)),
                           FreeNode("node:2", "a100-80gb", 8, (0, 1))))
    classes = pool.classes("a100-80gb")
    cover = min_cover(classes, 2, 2)
    assert cover is not None
    used = {pool.nodes[classes.members[j][0]].name: int(n) for j, n in enumerate(cover[1]) if n}
    assert used == {"node:1": 1}


def test_solvers_are_deterministic() -> None:
    for seed in (3, 17, 29):
        first, pool = _instance(seed)
        again, _ = _instance(seed)
        a, b = solve_cp_sat(first, pool), solve_cp_sat(again, pool)
        assert (a is None and b is None) or (a is not None and b is not None and a.score == b.score
                                              and a.nodes_used == b.nodes_used and a.groups == b.groups)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**9))
def test_placement_shapes_work_per_world(seed: int) -> None:
    """Law: the shape of each world size does not depend on the others asked with it (their order, repeats), so
    the candidate table may work shapes out once per distinct (tp, world) pair."""
    rng = random.Random(seed)
    pool = _pool(rng, locality=rng.random() < 0.5)
    mode = rng.choice(list(PlacementMode))
    for name in pool.gpu_types:
        tp = rng.choice([1, 2, 4])
        worlds = np.array([rng.randint(1, 40) for _ in range(12)], dtype=np.int64)
        level, per_node = placement_shapes(pool, name, tp, worlds, mode)
        for i, w in enumerate(worlds):
            one_level, one_node = placement_shapes(pool, name, tp, np.array([w]), mode)
            assert (int(one_level[0]), int(one_node[0])) == (int(level[i]), int(per_node[i])), (seed, name, int(w))
