"""Iteration-time model: seconds per training step of a layout on a GPU type, and its calibration."""

from frenzy_core.timing.calibrate import CalibrationResult, Measurement, calibrate, calibrate_by_gpu
from frenzy_core.timing.estimator import estimate_iteration_time, estimate_iteration_time_batch
from frenzy_core.timing.flops import training_flops
from frenzy_core.timing.params import TimeModelParams, default_time_model_params, load_time_model_params
from frenzy_core.timing.result import TIME_CATEGORIES, TimeEstimate, TimeEstimateBatch

__all__ = [
    "TIME_CATEGORIES", "CalibrationResult", "Measurement", "TimeEstimate", "TimeEstimateBatch", "TimeModelParams",
    "calibrate", "calibrate_by_gpu", "default_time_model_params", "estimate_iteration_time",
    "estimate_iteration_time_batch", "load_time_model_params", "training_flops",
]
