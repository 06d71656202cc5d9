"""The time model against published measured runs: the rows of ``throughput_megatron.csv`` and
``throughput_public.json`` with their source and regime, errors with the shipped defaults, and leave-one-source-out
cross-validation (fit on the other sources with :func:`calibrate`, predict the held-out one).

Used by ``benchmarks/time_model_accuracy.py`` and the tests; the reference files are not shipped (``../shared``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.training import Precision
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.timing.calibrate import Measurement, calibrate, prediction_errors
from frenzy_core.timing.params import TimeModelParams, default_time_model_params
from frenzy_core.timing.public_runs import public_run_measurement, read_public_runs
from frenzy_core.timing.published import read_throughput_csv, row_measurement

__all__ = ["LONG_CONTEXT_TOKENS", "ReferenceRow", "default_errors", "leave_one_source_out", "median_abs",
           "reference_rows", "regimes"]

LONG_CONTEXT_TOKENS = 8192
"""Sequence length from which a run counts as long-context (the reference rows run 2048, 4096 or 8192)."""


class ReferenceRow(FrozenModel):
    """One published run: where it comes from and the measurement."""

    source: str = Field(description="Short source name (one cross-validation fold).")
    measurement: Measurement


def regimes(m: Measurement) -> tuple[str, ...]:
    """The regimes a run belongs to: fsdp (ZeRO-2/3), megatron-tp-pp, fp8, long-context, and gpu:<id>."""
    out = []
    if m.training.effective_zero_stage >= 2:
        out.append("fsdp")
    if m.training.framework.value == "megatron" and (m.parallel.tp > 1 or m.parallel.pp > 1):
        out.append("megatron-tp-pp")
    if m.training.precision is Precision.FP8_MIXED:
        out.append("fp8")
    if m.training.seq_len >= LONG_CONTEXT_TOKENS:
        out.append("long-context")
    out.append(f"gpu:{m.gpu.id}")
    return tuple(out)


def reference_rows(reference_dir: str | Path) -> list[ReferenceRow]:
    """Every row of ``throughput_megatron.csv`` and ``throughput_public.json`` in ``reference_dir``."""
    root = Path(reference_dir)
    rows = [ReferenceRow(source="sc21" if r.is_sc21 else "megatron-readme", measurement=row_measurement(
        r, get_gpu_spec(r.gpu))) for r in read_throughput_csv(root / "throughput_megatron.csv")]
    rows += [ReferenceRow(source=r.id.split("|")[0], measurement=public_run_measurement(r))
             for r in read_public_runs(root / "throughput_public.json")]
    return rows


def _errors(measurements: list[Measurement], params: dict[str, TimeModelParams]) -> list[float]:
    return [prediction_errors([m], params[m.gpu.id].replace(**m.run_settings))[0] for m in measurements]


def default_errors(rows: list[ReferenceRow]) -> list[float]:
    """(modelled - measured) / measured step time of each row with the shipped defaults and its stated overlaps."""
    ms = [r.measurement for r in rows]
    return _errors(ms, {m.gpu.id: default_time_model_params(m.gpu) for m in ms})


def leave_one_source_out(rows: list[ReferenceRow], sources: list[str] | None = None) -> dict[int, float]:
    """Row index -> error when its source is held out: each GPU type's efficiencies are calibrated on the other
    sources' rows of that type (defaults where there are none) and the held-out rows predicted with them."""
    out: dict[int, float] = {}
    for held in sources if sources is not None else sorted({r.source for r in rows}):
        train = [r.measurement for r in rows if r.source != held]
        test = [(i, r.measurement) for i, r in enumerate(rows) if r.source == held]
        params: dict[str, TimeModelParams] = {}
        for gpu_id in sorted({m.gpu.id for _, m in test}):
            fit = [m for m in train if m.gpu.id == gpu_id]
            params[gpu_id] = calibrate(fit).params if fit else default_time_model_params(get_gpu_spec(gpu_id))
        out.update(zip([i for i, _ in test], _errors([m for _, m in test], params)))
    return out


def median_abs(errors: list[float]) -> float:
    """Median absolute error."""
    return float(np.median(np.abs(errors)))
