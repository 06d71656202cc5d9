"""The time model against published Megatron-LM throughputs (../shared/reference/throughput_megatron.csv)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from frenzy_core import get_gpu_spec
from frenzy_core.timing import default_time_model_params, estimate_iteration_time, training_flops
from frenzy_core.timing.calibrate import Measurement, calibrate, prediction_errors
from frenzy_core.timing.published import read_throughput_csv, row_measurement

# ../shared beside the repository root; FRENZY_SHARED points elsewhere (a git worktree's checkout).
SHARED = Path(os.environ.get("FRENZY_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
CSV = SHARED / "reference" / "throughput_megatron.csv"

pytestmark = pytest.mark.skipif(not CSV.exists(), reason=f"{CSV} not present (reference data is not shipped)")


def _measurements() -> list[Measurement]:
    return [row_measurement(row, get_gpu_spec(row.gpu)) for row in read_throughput_csv(CSV)]


def _errors(measurements: list[Measurement]) -> np.ndarray:
    return np.array([prediction_errors([m], default_time_model_params(m.gpu).replace(**m.run_settings))[0]
                     for m in measurements])


def test_reader_and_row_mapping() -> None:
    rows = read_throughput_csv(CSV)
    assert len(rows) == 19 and {r.gpu for r in rows} == {"a100-80gb-sxm", "h100-80gb-sxm"}
    one_t = next(r for r in rows if r.params_b == 1008.0)
    m = row_measurement(one_t, get_gpu_spec(one_t.gpu))
    assert m.parallel.world_size == 3072 and m.parallel.tp == 8 and m.parallel.pp == 64
    assert m.model.num_params() == pytest.approx(1008e9, rel=0.01)
    # SC21 reports hardware FLOPs (96 B s l h^2 (...)): iteration seconds = those FLOPs / (163 TFLOPS x 3072).
    h, L, s, V, B = 25600, 128, 2048, 51200, 3072
    flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert m.measured_iteration_s() == pytest.approx(flops / (163e12 * 3072))


def test_csv_gpu_names_are_catalogue_aliases() -> None:
    for row in read_throughput_csv(CSV):
        get_gpu_spec(row.gpu)


def test_default_parameters_median_error_within_15_percent() -> None:
    errors = _errors(_measurements())
    assert np.median(np.abs(errors)) <= 0.15
    assert np.all(np.abs(errors) < 0.5)  # no row wildly off


def test_calibration_on_half_generalises_to_other_half() -> None:
    held_out: list[float] = []
    measurements = _measurements()
    for gpu_id in sorted({m.gpu.id for m in measurements}):
        rows = [m for m in measurements if m.gpu.id == gpu_id]
        fit, test = rows[0::2], rows[1::2]
        result = calibrate(fit)
        assert result.median_abs_error_after <= result.median_abs_error_before
        held_out += prediction_errors(test, result.params)
    assert np.median(np.abs(held_out)) <= 0.15


def test_modelled_mfu_brackets_published_mfu() -> None:
    # The H100 rows publish MFU (41-49%); the model's MFU follows from its time, so its error carries over.
    for m in _measurements():
        if m.gpu.id != "h100-sxm":
            continue
        est = estimate_iteration_time(m.model, m.training, m.parallel, m.gpu,
                                      params=default_time_model_params(m.gpu).replace(**m.run_settings))
        published_mfu = training_flops(m.model, m.training.seq_len, est.global_batch_size) / (
            m.measured_iteration_s() * m.parallel.world_size * m.gpu.peak_tflops["bf16"] * 1e12)
        assert 0.40 < published_mfu < 0.50
        assert est.mfu == pytest.approx(published_mfu / (1 + prediction_errors([m], default_time_model_params(
            m.gpu).replace(**m.run_settings))[0]), rel=1e-9)
