"""Kernel workspaces and runtime overhead constants: each has a source; overhead categories add up."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core.config import ModelConfig, MoEConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.memory.overhead import OverheadModel, overhead_bytes, overhead_model, workspace_bytes
from frenzy_core.memory.result import OVERHEAD_CATEGORIES

MiB = 2**20


def test_every_constant_names_a_source() -> None:
    data = overhead_model().model_dump()
    for key in data:
        if key.endswith(("_bytes", "_fraction")):
            source = key.rsplit("_", 1)[0] + "_source"
            assert len(data[source]) > 40, f"{key} has no real source"


def test_workspaces_by_framework() -> None:
    dense = ModelConfig(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000)
    moe = dense.replace(moe=MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=128).model_dump())
    assert workspace_bytes(dense, TrainingConfig(framework="torch")) == 64 * MiB
    assert workspace_bytes(dense, TrainingConfig(framework="megatron")) == 96 * MiB
    assert workspace_bytes(moe, TrainingConfig(framework="megatron")) == (96 + 128) * MiB


def test_overhead_categories() -> None:
    out = overhead_bytes(np.array([0, 10 * 2**30]), np.array([0, 2]))
    assert set(out) == set(OVERHEAD_CATEGORIES)
    assert out["nccl_buffers"][0] == 0 and out["nccl_buffers"][1] == 2 * overhead_model().nccl_per_communicator_bytes
    assert out["fragmentation"][1] == round(10 * 2**30 * overhead_model().fragmentation_fraction)
    assert (out["cuda_context"] == overhead_model().cuda_context_bytes).all()


@settings(max_examples=40, deadline=None)
@given(low=st.integers(0, 2**60 - 1), gap=st.integers(1, 2**60), comms=st.integers(0, 5))
def test_device_bytes_grow_strictly_with_the_peak(low: int, gap: int, comms: int) -> None:
    """For one layout (one communicator count), more live-tensor bytes always mean more device bytes: the batch
    estimator picks a layout's busiest stage by its peak alone."""
    high = min(low + gap, 2**60)  # > low
    out = overhead_bytes(np.array([low, high]), np.array([comms, comms]))
    device = np.array([low, high]) + sum(out.values())
    assert device[1] > device[0]


def test_fragmentation_fraction_is_not_negative() -> None:
    with pytest.raises(ConfigError, match="fragmentation_fraction"):
        OverheadModel.model_validate({**overhead_model().model_dump(), "fragmentation_fraction": -0.01})
