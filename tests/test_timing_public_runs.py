"""The time model against all 68 published runs of ../shared/reference (public JSON + Megatron CSV)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from frenzy_core import Attention, Fp8Recipe, Framework, Precision
from frenzy_core.timing import default_time_model_params, estimate_iteration_time
from frenzy_core.timing.public_runs import public_run_measurement, read_public_runs
from frenzy_core.timing.validation import default_errors, leave_one_source_out, median_abs, reference_rows, regimes

# ../shared beside the repository root; FRENZY_SHARED points elsewhere (a git worktree's checkout).
SHARED = Path(os.environ.get("FRENZY_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
REF = SHARED / "reference"
JSON = REF / "throughput_public.json"

pytestmark = pytest.mark.skipif(not JSON.exists(), reason=f"{JSON} not present (reference data is not shipped)")


@pytest.fixture(scope="module")
def rows():  # type: ignore[no-untyped-def]
    return reference_rows(REF)


@pytest.fixture(scope="module")
def errors(rows):  # type: ignore[no-untyped-def]
    return np.array(default_errors(rows))


def test_reader_maps_every_run() -> None:
    runs = read_public_runs(JSON)
    assert len(runs) == 49
    for run in runs:
        m = public_run_measurement(run)
        assert m.parallel.world_size == run.num_gpus
        assert m.measured_iteration_s() == run.measured_step_s
        assert m.training.framework is (Framework.TORCH if run.framework == "torch-fsdp" else Framework.MEGATRON)
    by_id = {r.id: public_run_measurement(r) for r in runs}
    current = by_id["mbridge25.11|h100-sxm|Llama 3 8B|fp8"]
    assert current.training.fp8_recipe is Fp8Recipe.CURRENT and current.training.effective_zero_stage == 3
    delayed = by_id["dgxc|h100|Llama 3.1 70B|fp8-mixed"]
    assert delayed.training.fp8_recipe is Fp8Recipe.DELAYED and delayed.training.distributed_optimizer
    assert delayed.run_settings == {"tensor_parallel_overlap": 1.0, "pipeline_p2p_overlap": 1.0}
    assert by_id["dgxc|h100|Nemotron-4 340B|bf16-mixed"].training.recompute.value == "selective"
    # Megatron-Bridge rows state no overlaps: the library's own defaults (TP overlap with SP, p2p with vpp)
    assert by_id["mbridge25.11|h100-sxm|Llama 3 70B|fp8"].run_settings == {"tensor_parallel_overlap": 1.0,
                                                                          "pipeline_p2p_overlap": 1.0}
    assert current.run_settings == {}  # tp = pp = 1
    # llm-foundry's benchmark script runs MPT with its Triton FlashAttention by default
    assert by_id["llmfoundry|h100-sxm|H100|bf16|mpt-7b|s2048|g8"].training.attention is Attention.TRITON
    assert delayed.training.attention is Attention.FLASH


def test_shipped_defaults_on_all_68_rows(rows, errors) -> None:  # type: ignore[no-untyped-def]
    assert len(rows) == 68
    assert median_abs(list(errors)) <= 0.10
    assert errors.min() >= -0.30, "no row more than 30% too fast"
    by_regime: dict[str, list[float]] = defaultdict(list)
    for row, e in zip(rows, errors):
        for regime in (*regimes(row.measurement), f"source:{row.source}"):  # each source held to the same bar
            by_regime[regime].append(e)
    assert {"fsdp", "megatron-tp-pp", "fp8", "long-context", "gpu:a100-80gb", "gpu:h100-sxm"} <= set(by_regime)
    for regime, errs in by_regime.items():
        assert median_abs(errs) <= 0.15, regime


def test_fp8_speedup_over_bf16_pairs(rows) -> None:  # type: ignore[no-untyped-def]
    # The same layouts in bf16 and fp8 (NVIDIA DGX Cloud NeMo benchmarks, H100): measured speed-ups 1.33-1.53.
    by_id = {r.measurement.label: r.measurement for r in rows}
    pairs = [(by_id[k], by_id[k.replace("bf16-mixed", "fp8-mixed")]) for k in by_id if k.startswith("dgxc")
             and k.endswith("bf16-mixed")]
    assert len(pairs) == 6
    for bf16, fp8 in pairs:
        assert fp8.training.precision is Precision.FP8_MIXED
        predicted = [estimate_iteration_time(m.model, m.training, m.parallel, m.gpu, params=default_time_model_params(
            m.gpu).replace(**m.run_settings)).iteration_s for m in (bf16, fp8)]
        measured = bf16.measured_iteration_s() / fp8.measured_iteration_s()
        assert predicted[0] / predicted[1] == pytest.approx(measured, rel=0.10), bf16.label


def test_leave_one_source_out_fast_fold(rows) -> None:  # type: ignore[no-untyped-def]
    # One fold in CI: hold out Narayanan et al. (SC21, A100); fit A100-80GB on llm-foundry's rows.
    held = leave_one_source_out(rows, ["sc21"])
    assert len(held) == 10 and median_abs(list(held.values())) <= 0.12


@pytest.mark.slow
def test_leave_one_source_out_all_sources(rows) -> None:  # type: ignore[no-untyped-def]
    held = leave_one_source_out(rows)
    assert len(held) == 68 and median_abs(list(held.values())) <= 0.12
