"""Fit the time model's efficiencies to a handful of measured iterations of one GPU type.

Damped Gauss-Newton (Levenberg-Marquardt) on the log-ratio of predicted to measured iteration time, over the
logarithms of the fitted efficiencies (so they stay positive; each is capped at 1), with a weak pull towards the
starting values so that parameters the measurements cannot separate stay where they were. numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, field_validator, model_validator

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import Recompute, TrainingConfig
from frenzy_core.errors import ConfigError, require_instance, require_number, short_repr
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing.estimator import estimate_iteration_time, resolve_gpu
from frenzy_core.timing.flops import training_flops
from frenzy_core.timing.params import TimeModelParams, default_time_model_params

__all__ = ["DEFAULT_FIT", "DEFAULT_PRIOR_WEIGHT", "CalibrationResult", "Measurement", "calibrate", "calibrate_by_gpu",
           "prediction_errors"]

DEFAULT_FIT: tuple[str, ...] = ("matmul_efficiency", "fp8_matmul_efficiency", "attention_efficiency",
                                "memory_efficiency", "collective_efficiency")
"""Parameters :func:`calibrate` fits unless told otherwise (the overlaps describe the run, not the GPU)."""

DEFAULT_PRIOR_WEIGHT = 0.1
"""Weight of log(param / start) in the least squares: a 10% change costs as much as a 1% misfit on one run."""
MAX_PRIOR_WEIGHT = 1e6
"""Largest prior_weight taken: at 1e6 a 1e-6 change of a parameter already outweighs a 100% misfit, so nothing
moves; beyond it the fit only loses float precision."""
_MAX_ITERATIONS = 50
_STEP = 1e-4  # finite-difference step in log-parameter space
_TOLERANCE = 1e-9  # stop when a step lowers the squared residual by less than this share


class Measurement(FrozenModel):
    """One measured training run: configs, GPU and either seconds per iteration or TFLOPS per GPU."""

    model: ModelConfig
    training: TrainingConfig
    parallel: ParallelConfig
    gpu: GPUSpec = Field(description="The GPU type (an id or alias is looked up in the catalogue).")
    iteration_s: float | None = Field(default=None, gt=0, description="Measured seconds per optimizer step.")
    tflops_per_gpu: float | None = Field(default=None, gt=0, description="Measured TFLOPS per GPU.")
    tflops_include_recompute: bool = Field(default=False, description=(
        "Whether tflops_per_gpu counts recomputed FLOPs (hardware FLOPs) rather than model FLOPs."))
    run_settings: dict[str, float] = Field(default_factory=dict, description=(
        "TimeModelParams fields fixed by how the run was configured (e.g. tensor_parallel_overlap=1 for "
        "Megatron's --tp-comm-overlap); applied on top of the parameters and never fitted."))
    label: str = Field(default="", description="Name shown in reports.")

    @field_validator("gpu", mode="before")
    @classmethod
    def _lookup(cls, value: Any) -> Any:
        return resolve_gpu(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_target(self) -> Measurement:
        if (self.iteration_s is None) == (self.tflops_per_gpu is None):
            raise ValueError("give exactly one of iteration_s and tflops_per_gpu")
        unknown = set(self.run_settings) - set(TimeModelParams.model_fields)
        if unknown:
            raise ValueError(f"run_settings has unknown parameters {sorted(unknown)}; use TimeModelParams fields")
        return self

    def measured_iteration_s(self) -> float:
        """Seconds per iteration, converting TFLOPS with the FLOP count it was reported in."""
        if self.iteration_s is not None:
            return self.iteration_s
        assert self.tflops_per_gpu is not None
        from frenzy_core.config.layout import global_batch_size

        recompute = self.training.recompute if self.tflops_include_recompute else Recompute.NONE
        flops = training_flops(self.model, self.training.seq_len, global_batch_size(self.training, self.parallel),
                               recompute)
        return flops / (self.tflops_per_gpu * 1e12 * self.parallel.world_size)

    def predict_s(self, params: TimeModelParams) -> float:
        """Modelled seconds per iteration with ``params`` (and this run's settings)."""
        run_params = params.replace(**self.run_settings) if self.run_settings else params
        return estimate_iteration_time(self.model, self.training, self.parallel, self.gpu,
                                       params=run_params).iteration_s


class CalibrationResult(FrozenModel):
    """Fitted parameters and the fit error, before and after, per measurement."""

    params: TimeModelParams
    fitted: tuple[str, ...] = Field(description="Names of the parameters that were fitted.")
    errors_before: list[float] = Field(description="(predicted - measured) / measured with the starting params.")
    errors_after: list[float] = Field(description="(predicted - measured) / measured with the fitted params.")
    median_abs_error_before: float = Field(ge=0)
    median_abs_error_after: float = Field(ge=0)
    iterations: int = Field(ge=0, description="Gauss-Newton steps taken.")


def prediction_errors(measurements: Sequence[Measurement], params: TimeModelParams) -> list[float]:
    """Relative error (predicted - measured) / measured of each measurement under ``params``."""
    return [m.predict_s(params) / m.measured_iteration_s() - 1.0 for m in measurements]


Source = Measurement | Mapping[str, Any] | str | Path


def _measurements(sources: Sequence[Source] | str | Path, run: Mapping[str, Any] | None) -> list[Measurement]:
    """Measurement objects, dicts of their fields, and files (run tables, training logs: timing/runs.py)."""
    if isinstance(sources, (str, Path)):
        sources = [sources]
    if isinstance(sources, Mapping) or not isinstance(sources, Sequence):
        raise ConfigError(f"measurements must be a list of Measurement, dicts of their fields or run files, got "
                          f"{type(sources).__name__}", field="measurements")
    if run is not None and not isinstance(run, Mapping):
        raise ConfigError(f"run must map a run's layout fields to values, got {type(run).__name__}", field="run")
    out: list[Measurement] = []
    for i, item in enumerate(sources):
        if not isinstance(item, (Measurement, Mapping, str, Path)):
            raise ConfigError(f"measurements[{i}] must be a Measurement, a dict of its fields or a run file, got "
                              f"{type(item).__name__}", field=f"measurements[{i}]")
        if isinstance(item, (str, Path)):
            from frenzy_core.timing.runs import load_measurements

            out += load_measurements([item], run)
        else:
            out.append(item if isinstance(item, Measurement) else Measurement.model_validate(item))
    return out


def calibrate(measurements: Sequence[Source] | str | Path, params: TimeModelParams | None = None,
              fit: Sequence[str] = DEFAULT_FIT, prior_weight: float = DEFAULT_PRIOR_WEIGHT,
              run: Mapping[str, Any] | None = None) -> CalibrationResult:
    """Fit ``fit`` (efficiency names of :class:`TimeModelParams`) to measurements of one GPU type.

    ``measurements``: :class:`Measurement` objects, or files: run tables (``.csv``/``.json``, timing/runs.py) and
    training logs (torchtitan, Megatron-LM, HF Trainer), whose layout is ``run``. Starts from ``params``
    (default: the GPU's documented defaults) and returns the fitted parameters with the relative error of every
    measurement before and after. ``prior_weight`` pulls towards the start (0: plain least squares).
    """
    require_number("prior_weight", prior_weight, low=0, high=MAX_PRIOR_WEIGHT)
    if params is not None:
        require_instance("params", params, TimeModelParams)
    measurements = _measurements(measurements, run)
    if not measurements:
        raise ConfigError("calibrate needs at least one measurement", field="measurements", value=0)
    ids = sorted({m.gpu.id for m in measurements})
    if len(ids) > 1:
        raise ConfigError(f"measurements span GPU types {ids}; calibrate one GPU type at a time",
                          field="measurements", value=ids)
    if isinstance(fit, str) or not isinstance(fit, Sequence):
        raise ConfigError(f"fit must be a list of parameter names, got {type(fit).__name__} {short_repr(fit)}",
                          field="fit", hint=f"for one parameter: fit=[{short_repr(fit)}]")
    bad = [f for f in fit if not isinstance(f, str) or f not in TimeModelParams.model_fields
           or not f.endswith("_efficiency")]
    if bad or not fit:
        effs = [f for f in TimeModelParams.model_fields if f.endswith("_efficiency")]
        raise ConfigError(f"cannot fit {bad or 'nothing'}", field="fit", value=list(fit), hint=f"fit some of {effs}")
    start = params if params is not None else default_time_model_params(measurements[0].gpu)
    measured = np.array([m.measured_iteration_s() for m in measurements])
    z0 = np.log([getattr(start, f) for f in fit])

    def params_at(z: np.ndarray) -> TimeModelParams:
        return start.replace(**{f: float(v) for f, v in zip(fit, np.exp(np.minimum(z, 0.0)))})

    def residuals(z: np.ndarray) -> np.ndarray:
        p = params_at(z)
        pred = np.array([m.predict_s(p) for m in measurements])
        return np.concatenate([np.log(pred / measured), prior_weight * (z - z0)])

    z, damping, steps = z0.copy(), 1e-3, 0
    r = residuals(z)
    for steps in range(1, _MAX_ITERATIONS + 1):  # noqa: B007 - the count is reported after the loop
        jac = np.empty((r.size, z.size))
        for j in range(z.size):
            dz = np.zeros_like(z)
            dz[j] = _STEP
            jac[:, j] = (residuals(z + dz) - r) / _STEP
        improved = False
        while damping < 1e6:
            lhs = jac.T @ jac + damping * np.eye(z.size)
            trial = np.minimum(z - np.linalg.solve(lhs, jac.T @ r), 0.0)
            r_trial = residuals(trial)
            if r_trial @ r_trial < r @ r:
                gain = float(r @ r - r_trial @ r_trial)
                z, r, damping, improved = trial, r_trial, damping / 3.0, True
                break
            damping *= 4.0
        if not improved or gain <= _TOLERANCE * float(r @ r):
            break
    fitted = params_at(z)
    before = prediction_errors(measurements, start)
    after = prediction_errors(measurements, fitted)
    return CalibrationResult(
        params=fitted, fitted=tuple(fit), errors_before=before, errors_after=after,
        median_abs_error_before=float(np.median(np.abs(before))),
        median_abs_error_after=float(np.median(np.abs(after))), iterations=steps,
    )


def calibrate_by_gpu(measurements: Sequence[Source] | str | Path, run: Mapping[str, Any] | None = None,
                     fit: Sequence[str] = DEFAULT_FIT, prior_weight: float = DEFAULT_PRIOR_WEIGHT
                     ) -> dict[str, CalibrationResult]:
    """:func:`calibrate` each GPU type of ``measurements`` on its own runs: GPU id -> result."""
    loaded = _measurements(measurements, run)
    if not loaded:
        raise ConfigError("calibrate needs at least one measurement", field="measurements", value=0)
    ids = sorted({m.gpu.id for m in loaded})
    return {gpu: calibrate([m for m in loaded if m.gpu.id == gpu], fit=fit, prior_weight=prior_weight)
            for gpu in ids}
