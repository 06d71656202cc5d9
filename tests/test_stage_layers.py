"""Uneven pipeline stages (``ParallelConfig.stage_layers``, issue 10 item 5) in the memory estimator, the batch
estimator and the time model: the even split written out is the default, every layer is on exactly one stage, the
stage holding more layers needs more, and bad splits are refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, TrainingConfig, estimate_memory
from frenzy_core.config import LayoutArrays
from frenzy_core.memory import estimate_memory_batch
from frenzy_core.memory.shards import stage_shape
from frenzy_core.timing import estimate_iteration_time, estimate_iteration_time_batch

MODEL = ModelConfig.preset("llama-2-7b")
TRAINING = TrainingConfig(seq_len=2048, framework="megatron", global_batch_size=32, distributed_optimizer=True)


def test_the_even_split_written_out_is_the_default() -> None:
    even = ParallelConfig(dp=2, tp=2, pp=4)
    written = even.replace(stage_layers=(8, 8, 8, 8))
    assert estimate_memory(MODEL, TRAINING, written).stages == estimate_memory(MODEL, TRAINING, even).stages
    assert estimate_iteration_time(MODEL, TRAINING, written, "h100-sxm").iteration_s == \
        estimate_iteration_time(MODEL, TRAINING, even, "h100-sxm").iteration_s


def test_the_stage_with_more_layers_needs_more_memory_and_sets_the_pace() -> None:
    even = ParallelConfig(dp=2, tp=2, pp=4)
    heavy_first = even.replace(stage_layers=(12, 8, 6, 6))
    stages = estimate_memory(MODEL, TRAINING, heavy_first).stages
    assert stages[0].num_layers == 12 and stages[3].num_layers == 6
    assert stages[0].peak_bytes > estimate_memory(MODEL, TRAINING, even).stages[0].peak_bytes
    # 12 layers on a stage take longer than 8 layers (plus the head on the last)
    assert estimate_iteration_time(MODEL, TRAINING, heavy_first, "h100-sxm").iteration_s > \
        estimate_iteration_time(MODEL, TRAINING, even, "h100-sxm").iteration_s


def test_batch_equals_the_scalar_path_on_uneven_rows() -> None:
    splits = [None, (8, 8, 8, 8), (10, 10, 10, 2), (2, 10, 10, 10), (9, 9, 9, 5)]
    layouts = LayoutArrays.from_columns({"dp": 2, "tp": 2, "pp": 4, "stage_layers": splits}, TRAINING)
    memory = estimate_memory_batch(MODEL, layouts, TRAINING)
    time = estimate_iteration_time_batch(MODEL, TRAINING, "h100-sxm", layouts)
    for i, split in enumerate(splits):
        parallel = ParallelConfig(dp=2, tp=2, pp=4, stage_layers=split)
        assert int(memory.peak_bytes[i]) == estimate_memory(MODEL, TRAINING, parallel).peak_bytes
        assert float(time.iteration_s[i]) == pytest.approx(
            estimate_iteration_time(MODEL, TRAINING, parallel, "h100-sxm").iteration_s, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 6), vpp=st.integers(1, 3), data=st.data())
def test_uneven_splits_stage_sum_equals_the_whole(pp: int, vpp: int, data: st.DataObject) -> None:
    chunks = pp * vpp if pp > 1 else 1
    vpp = chunks // pp
    cuts = sorted(data.draw(st.lists(st.integers(0, MODEL.num_layers), min_size=chunks - 1, max_size=chunks - 1)))
    split = tuple(np.diff([0, *cuts, MODEL.num_layers]).tolist())
    layouts = LayoutArrays.from_columns({"pp": pp, "vpp": vpp, "stage_layers": split,
                                         "schedule": "interleaved" if vpp > 1 else "1f1b"}, TrainingConfig())
    shape = stage_shape(MODEL, layouts, np.arange(pp))
    assert int(shape.num_layers.sum()) == MODEL.num_layers
    # stage s holds chunks s, s + pp, ...
    assert shape.num_layers.tolist() == [sum(split[s::pp]) for s in range(pp)]


def test_a_split_that_misses_layers_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        estimate_memory(MODEL, TRAINING, ParallelConfig(dp=2, tp=2, pp=4, stage_layers=(8, 8, 8, 7)))
    assert err.value.field == "parallel.stage_layers"
    assert "31" in str(err.value) and "32" in str(err.value)
    with pytest.raises(ConfigError) as err:
        estimate_memory(MODEL, TRAINING, ParallelConfig(dp=2, tp=2, pp=4, stage_layers=(16, 16)))
    assert "stage_layers" in (err.value.field or "")


def test_the_batch_path_refuses_negative_layer_counts_as_parallel_config_does() -> None:
    with pytest.raises(ConfigError, match="stage_layers"):
        ParallelConfig(pp=2, stage_layers=(40, -8))
    with pytest.raises(ConfigError, match="stage_layers entries are layer counts, not negative"):
        LayoutArrays.from_columns({"pp": 2, "stage_layers": [(40, -8)]}, TRAINING)
