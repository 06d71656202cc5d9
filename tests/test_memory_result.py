"""MemoryEstimate / StageMemory: invariants and rendering."""

from __future__ import annotations

import pytest

from frenzy_core.errors import ConfigError
from frenzy_core.memory.result import MEMORY_CATEGORIES, MemoryEstimate, StageMemory


def _stage(stage: int, peak: int) -> StageMemory:
    breakdown = dict.fromkeys(MEMORY_CATEGORIES, 0)
    breakdown["activations"] = peak
    overhead = {"cuda_context": 100, "nccl_buffers": 0, "fragmentation": 0}
    return StageMemory(stage=stage, num_layers=2, num_params=10, inflight_microbatches=1, breakdown=breakdown,
                       peak_bytes=peak, peak_phase="backward", overhead=overhead, device_bytes=peak + 100)


def test_breakdown_must_sum_to_peak() -> None:
    with pytest.raises(ConfigError, match="breakdown sums"):
        StageMemory(stage=0, num_layers=1, num_params=1, inflight_microbatches=1, breakdown={"activations": 5},
                    peak_bytes=6, peak_phase="forward", overhead={}, device_bytes=6)


def test_table_marks_the_busiest_stage() -> None:
    a, b = _stage(0, 3 * 2**30), _stage(1, 2**30)
    est = MemoryEstimate(stages=[a, b], busiest_stage=0, peak_bytes=a.peak_bytes, device_bytes=a.device_bytes,
                         breakdown=a.breakdown, overhead=a.overhead, peak_phase="backward")
    text = est.table()
    header = text.splitlines()[0].split()
    assert "0*" in header and "1" in header and "1*" not in header
    assert "3.000" in text and "1.000" in text
    assert text.splitlines()[-1].startswith("* busiest stage")
