"""Pipelines of unequal stages (issue 12, form a): the step formula against the simulated 1F1B timeline, each
stage's time and memory against the homogeneous models, and the exact layer split."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ModelConfig, ParallelConfig, TrainingConfig, estimate_iteration_time
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.memory import estimate_memory
from frenzy_core.memory.batch import stage_device_bytes
from frenzy_core.planning.metis import metis_split
from frenzy_core.planning.stages import best_split
from frenzy_core.timing.pipeline import pipeline_timeline
from frenzy_core.timing.stages import PipelineStage, estimate_pipeline_time, pipeline_step_s

MODEL = ModelConfig.preset("llama-2-7b")
TRAINING = TrainingConfig(seq_len=4096, global_batch_size=32, micro_batch_size=1, sequence_parallel=True)
"""(torch tp > 1 runs torchtitan's sequence parallelism: the memory model refuses it without)"""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.1, 5.0), min_size=2, max_size=6), st.integers(1, 12), st.floats(1.0, 3.0))
def test_step_formula_bounds_the_simulated_1f1b(forward: list[float], m: int, ratio: float) -> None:
    """sum t + (m - 1) max t is never below the 1F1B timeline run with the same lengths (it is Alpa's
    latency, an upper bound where stages differ)."""
    backward = [ratio * f for f in forward]
    slots = pipeline_timeline(len(forward), m, forward, backward)
    simulated = max(s.end_s for s in slots)
    t = np.array(forward) + np.array(backward)
    assert float(pipeline_step_s(t, m)) >= simulated * (1 - 1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 16), st.floats(0.1, 5.0))
def test_step_formula_is_exact_for_equal_stages(pp: int, m: int, forward: float) -> None:
    slots = pipeline_timeline(pp, m, forward, 2 * forward)
    assert float(pipeline_step_s(np.full(pp, 3 * forward), m)) == pytest.approx(max(s.end_s for s in slots))


def _links(gpu: str, tp: int) -> Links:
    spec = get_gpu_spec(gpu)
    return Links(tp, spec.links.intra_node_bytes_per_s, spec.links.inter_node_bytes_per_s)


def test_one_type_pipeline_matches_the_homogeneous_model() -> None:
    """On one type with one tp, the slowest stage's micro-batch is the homogeneous model's busiest stage (its
    bubble over pp - 1 slots), the gradient sync and optimizer are the same, and the step differs only by the
    bubble: (pp - 1) max t there, sum t - max t here."""
    parallel = ParallelConfig(dp=2, tp=2, pp=4)
    links = _links("h100-sxm", 2)
    spec = get_gpu_spec("h100-sxm")
    homogeneous = estimate_iteration_time(MODEL, TRAINING, parallel, spec, cluster=links)
    result = estimate_pipeline_time(MODEL, TRAINING, parallel,
                                    [PipelineStage(spec, 2, links, links.inter_node_bytes_per_s)] * 4)
    t = np.array(result.microbatch_s)
    assert homogeneous.breakdown["pipeline_bubble"] / 3 == pytest.approx(t.max(), rel=1e-12)
    assert result.time.breakdown["data_parallel"] == pytest.approx(homogeneous.breakdown["data_parallel"])
    assert result.time.breakdown["optimizer"] == pytest.approx(homogeneous.breakdown["optimizer"])
    assert result.time.breakdown["compute"] == pytest.approx(homogeneous.breakdown["compute"])
    assert result.time.breakdown["pipeline_bubble"] == pytest.approx(t.sum() - t.max())
    assert result.time.iteration_s <= homogeneous.iteration_s


def test_mixed_pipeline_charges_each_stage_on_its_type() -> None:
    """The same split runs slower where a stage moves to the slower type, and more layers on a stage take
    longer; a stage's memory is the memory model's stage of its own layout."""
    h100, a100 = get_gpu_spec("h100-sxm"), get_gpu_spec("a100-80gb")
    p2p = min(_links("h100-sxm", 2).inter_node_bytes_per_s, _links("a100-80gb", 2).inter_node_bytes_per_s)
    parallel = ParallelConfig(dp=2, tp=2, pp=4, stage_layers=(10, 10, 6, 6))
    fast = [PipelineStage(h100, 2, _links("h100-sxm", 2), p2p)]
    slow = [PipelineStage(a100, 2, _links("a100-80gb", 2), p2p)]
    all_fast = estimate_pipeline_time(MODEL, TRAINING, parallel, fast * 4)
    mixed = estimate_pipeline_time(MODEL, TRAINING, parallel, fast * 2 + slow * 2)
    assert mixed.microbatch_s[:2] == pytest.approx(all_fast.microbatch_s[:2])
    assert all(m > f for m, f in zip(mixed.microbatch_s[2:], all_fast.microbatch_s[2:]))
    assert mixed.microbatch_s[0] > all_fast.microbatch_s[2] * 10 / 6 * 0.9
    memory = estimate_memory(MODEL, TRAINING, parallel)
    lay = LayoutArrays.from_configs(TRAINING, parallel)
    for i in range(4):
        assert int(stage_device_bytes(MODEL, TRAINING, lay, i)[0]) == memory.stages[i].device_bytes


def test_pipeline_needs_one_stage_per_rank() -> None:
    spec = get_gpu_spec("h100-sxm")
    with pytest.raises(ConfigError, match="one stage per pipeline rank"):
        estimate_pipeline_time(MODEL, TRAINING, ParallelConfig(pp=4),
                               [PipelineStage(spec, 1, _links("h100-sxm", 1), 1e10)] * 3)


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 4), st.integers(4, 9), st.integers(1, 6), st.data())
def test_best_split_is_the_exhaustive_optimum(stages: int, layers: int, m: int, data: st.DataObject) -> None:
    """The dynamic program's split minimises sum t + (m - 1) max t over every split (l_i >= 1, sum = L)."""
    if layers < stages:
        layers = stages
    rows = []
    for _ in range(stages):
        t = np.cumsum([0.0] + data.draw(st.lists(st.floats(0.0, 3.0), min_size=layers, max_size=layers)))
        cap = data.draw(st.integers(1, layers))
        t[cap + 1:] = np.inf
        rows.append(t)
    table = np.stack(rows)
    found = best_split(table, m)
    best = None
    for split in itertools.product(range(1, layers + 1), repeat=stages):
        if sum(split) != layers:
            continue
        times = np.array([table[i, s] for i, s in enumerate(split)])
        if np.isfinite(times).all():
            value = float(pipeline_step_s(times, m))
            best = value if best is None else min(best, value)
    if best is None:
        assert found is None
        return
    assert found is not None
    split, value, optimal = found
    assert sum(split) == layers and min(split) >= 1
    assert value == pytest.approx(best)
    assert float(pipeline_step_s(np.array([table[i, s] for i, s in enumerate(split)]), m)) == pytest.approx(best)
    assert optimal


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 4), st.integers(4, 12), st.integers(1, 8), st.data())
def test_metis_style_split_is_valid_and_never_beats_the_exact_one(stages: int, layers: int, m: int,
                                                                   data: st.DataObject) -> None:
    """The baseline's split holds every layer within the stages' memory caps, and the dynamic program's is
    never worse on the same cost."""
    layers = max(layers, stages)
    rows = []
    for _ in range(stages):
        per_layer = data.draw(st.floats(0.1, 3.0))
        t = data.draw(st.floats(0.0, 1.0)) + per_layer * np.arange(layers + 1, dtype=np.float64)
        cap = data.draw(st.integers(1, layers))
        t[cap + 1:] = np.inf
        rows.append(t)
    table = np.stack(rows)
    exact, baseline = best_split(table, m), metis_split(table, m)
    if exact is None:
        assert baseline is None
        return
    assert baseline is not None
    split, value, optimal = baseline
    assert sum(split) == layers and min(split) >= 1 and not optimal
    assert all(np.isfinite(table[i, s]) for i, s in enumerate(split))
    assert value == pytest.approx(float(pipeline_step_s(np.array([table[i, s] for i, s in enumerate(split)]), m)))
    assert exact[1] <= value * (1 + 1e-12)
