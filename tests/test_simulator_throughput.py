"""``PlannedThroughput``: the per-count curve agrees with one planner call per count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from frenzy_core import InfeasiblePlanError, ModelConfig
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.scheduling.rates import RateBook, power_of_two_counts
from frenzy_core.scheduling.recipe import default_training
from frenzy_core.scheduling.state import ClusterState
from frenzy_core.scheduling.throughput import PlannedThroughput, planned_tokens_per_s


@pytest.mark.parametrize(("preset", "gpu", "counts"), [
    ("gpt2", "v100-32gb", [1, 3, 8, 12]),
    ("llama-2-13b", "rtx-3090", [4, 16, 24]),
])
def test_curve_matches_the_planner_count_by_count(preset: str, gpu: str, counts: list[int]) -> None:
    model = ModelConfig.preset(preset)
    training = default_training(model, get_gpu_spec("v100-32gb"))
    planned = PlannedThroughput()
    curve = planned.curve(model, training, gpu, max(counts))
    for n in counts:
        try:
            expected = planned_tokens_per_s(model, training, gpu, n)
        except InfeasiblePlanError:
            assert math.isnan(curve[n])
            with pytest.raises(InfeasiblePlanError):
                planned(model, training, gpu, n)
            continue
        assert curve[n] == pytest.approx(expected, rel=1e-12)
        assert planned(model, training, gpu, n) == pytest.approx(expected, rel=1e-12)


def test_rate_book_uses_the_curve_and_stubs_alike() -> None:
    model = ModelConfig.preset("gpt2")
    training = default_training(model)
    planned = PlannedThroughput()
    from frenzy_core import Cluster
    from frenzy_core.scheduling.jobs import TrainingJob

    job = TrainingJob(id="j", submit_time_s=0, model=model, training=training, work_tokens=10**9)
    state = ClusterState(Cluster.from_dict({"nodes": [{"gpu": "a100", "gpus_per_node": 8}]}))
    book = RateBook(planned, state)
    stub_book = RateBook(lambda m, t, g, n: 10.0 * n, state)
    # one node of the type's typical shape: the cluster's rate is the typical-node rate
    assert book.rate(job, "a100-80gb", 8) == planned(model, training, "a100-80gb", 8)
    options = stub_book.options(job, [[1, 2, 4]], job.total_tokens)
    assert options.count.tolist() == [1, 2, 4] and options.run_s.tolist() == [10**8, 5 * 10**7, 2.5 * 10**7]
    assert power_of_two_counts(12, [6, 20]) == [1, 2, 4, 6, 8]


def test_answers_do_not_depend_on_what_was_asked_before() -> None:
    # one candidate table serves every count (the batch is the same for all: the planner's default); a table
    # rebuilt larger for a larger count must give the smaller counts the same rates and layouts
    from frenzy_core.scheduling.throughput import GPUGroup

    model = ModelConfig(num_layers=2, hidden_size=1024, num_attention_heads=2, vocab_size=32000)  # a small grid
    spec = get_gpu_spec("v100-32gb")
    training = default_training(model, spec)
    group = GPUGroup.of([8, 3, 1], spec.links)
    fresh, used = PlannedThroughput(), PlannedThroughput()
    used.curve(model, training, spec.id, 100)  # a table of 128 GPUs instead of 64
    used.curve_on(model, training, spec.id, GPUGroup.of([8] * 13, spec.links), 100)
    for n in (1, 3, 4, 12):
        assert used.best_on(model, training, spec.id, group, n) == fresh.best_on(model, training, spec.id, group, n)
    assert np.array_equal(used.curve_on(model, training, spec.id, group, 12),
                          fresh.curve_on(model, training, spec.id, group, 12), equal_nan=True)
    assert np.array_equal(used.curve(model, training, spec.id, 24), fresh.curve(model, training, spec.id, 24),
                          equal_nan=True)
