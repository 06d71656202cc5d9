"""torch's sequence parallelism is refused by the memory model, never silently dropped (issue 10, item 6)."""

from __future__ import annotations

import numpy as np
import pytest

from frenzy_core import (
    ConfigError,
    ModelConfig,
    ParallelConfig,
    TrainingConfig,
    estimate_iteration_time,
    estimate_memory,
    estimate_memory_batch,
    plan_job,
)

MODEL = ModelConfig.preset("gpt2")
TORCH_SP = TrainingConfig(seq_len=1024, global_batch_size=8, sequence_parallel=True)


def test_scalar_refuses_torch_sequence_parallel_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        estimate_memory(MODEL, TORCH_SP, ParallelConfig(tp=2, dp=4))
    assert err.value.field == "training.sequence_parallel"
    assert "torchtitan" in str(err.value) and "framework='megatron'" in str(err.value)


def test_without_tensor_parallelism_the_flag_has_no_effect() -> None:
    plain = TORCH_SP.replace(sequence_parallel=False)
    assert estimate_memory(MODEL, TORCH_SP, ParallelConfig(dp=8)) == estimate_memory(MODEL, plain, ParallelConfig(dp=8))


def test_batch_marks_torch_sequence_parallel_rows_invalid_and_keeps_the_rest() -> None:
    plain = TORCH_SP.replace(sequence_parallel=False)
    rows = {"tp": [1, 2, 2], "dp": [8, 4, 4], "sequence_parallel": [1, 1, 0]}
    batch = estimate_memory_batch(MODEL, rows, plain)
    assert batch.valid.tolist() == [True, False, True]
    assert int(batch.device_bytes[1]) == -1
    assert int(batch.device_bytes[2]) == estimate_memory(MODEL, plain, ParallelConfig(tp=2, dp=4)).device_bytes
    megatron = plain.replace(framework="megatron")
    assert np.all(estimate_memory_batch(MODEL, rows, megatron).valid)


def test_planner_refuses_a_pinned_torch_sequence_parallel() -> None:
    cluster = {"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8}]}
    with pytest.raises(ConfigError) as err:
        plan_job(MODEL, cluster, TORCH_SP, time_limit_s=2)
    assert err.value.field == "constraints.sequence_parallel"


def test_time_model_times_torch_sequence_parallel() -> None:
    """The time model covers it (torchtitan's collectives): the flag changes the step time at tp > 1."""
    plain = TORCH_SP.replace(sequence_parallel=False)
    times = [estimate_iteration_time(MODEL, t, ParallelConfig(tp=2, dp=4), "h100-sxm").iteration_s
             for t in (TORCH_SP, plain)]
    assert times[0] != times[1]


def test_torch_routing_imbalance_under_expert_parallelism_is_refused() -> None:
    """torch's MoE terms give each expert-parallel rank its fair share: an explicit imbalance at ep > 1 is refused
    (at ep = 1 a rank computes every routed pair, so the factor truly has no effect)."""
    moe = ModelConfig.preset("qwen1.5-moe-a2.7b")
    t = TrainingConfig(seq_len=1024, global_batch_size=8, moe_load_imbalance=1.5)
    with pytest.raises(ConfigError) as err:
        estimate_memory(moe, t, ParallelConfig(dp=4, ep=4))
    assert err.value.field == "training.moe_load_imbalance"
    assert estimate_memory(moe, t, ParallelConfig(dp=4)) == estimate_memory(
        moe, t.replace(moe_load_imbalance=None), ParallelConfig(dp=4))
    batch = estimate_memory_batch(moe, {"dp": [4, 4], "ep": [1, 4]}, t)
    assert batch.valid.tolist() == [True, False]
    assert np.all(estimate_memory_batch(moe, {"dp": [4, 4], "ep": [1, 4]}, t.replace(framework="megatron")).valid)
