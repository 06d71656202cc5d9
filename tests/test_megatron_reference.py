"""The memory estimator against 42 measured Megatron-LM runs: median |error| over supported cases <= 10%."""

from __future__ import annotations

from types import ModuleType

import pytest

from project_scripts import BENCHMARKS, ROOT, load_script

REFERENCE = ROOT.parent / "shared" / "reference" / "megatron_measured_memory.json"


def _harness() -> ModuleType:
    if not REFERENCE.exists():
        pytest.skip(f"reference data {REFERENCE} is absent (it lives beside the project, not in it)")
    return load_script(BENCHMARKS / "megatron_reference.py")


def test_median_error_over_supported_cases_is_within_ten_percent() -> None:
    harness = _harness()
    results = harness.compare(REFERENCE)
    assert len(results) == 42
    supported = [r for r in results if r.supported]
    # the 4 others use flags the configs cannot express or omit flags the run used (docs/megatron-cases.md)
    assert len(supported) >= 38
    median = harness.median_abs_error(results)
    assert median <= harness.TOLERANCE, "\n" + harness.format_table(results)


def test_every_supported_case_has_a_positive_estimate_and_a_breakdown_that_sums() -> None:
    harness = _harness()
    for r in harness.compare(REFERENCE):
        if r.supported:
            assert r.estimated_bytes is not None and r.estimated_bytes > 0, r.test
            assert sum(r.breakdown.values()) == r.estimated_bytes, r.test
