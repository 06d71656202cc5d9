"""The calibrated-parameter file ``frenzy calibrate`` writes and ``plan_job(time_model=...)`` / ``frenzy plan
--time-model`` read: per GPU id, the fitted :class:`TimeModelParams` fields (YAML, or JSON of the same shape).

    format: frenzy-time-model/1
    gpus:
      h100-sxm:
        params: {matmul_efficiency: 0.64, attention_efficiency: 0.81, ...}
        runs: 3
        median_abs_error_before: 0.121
        median_abs_error_after: 0.015
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from frenzy_core._files import load_json, load_yaml, output_path, read_text, write_text
from frenzy_core.errors import ConfigError, short_repr
from frenzy_core.timing.calibrate import CalibrationResult
from frenzy_core.timing.params import TimeModelParams

__all__ = ["FORMAT", "read_calibration_file", "write_calibration_file"]

FORMAT = "frenzy-time-model/1"
"""The ``format`` value of a calibration file."""
_STRICT = ConfigDict(allow_inf_nan=False)
OUT_HINT = "e.g. time_model.yaml or time_model.json"
"""What a time-model file is named."""


def write_calibration_file(path: str | Path, results: Mapping[str, CalibrationResult]) -> None:
    """Write the fitted parameters of each GPU id (YAML unless ``path`` ends in ``.json``)."""
    data: dict[str, Any] = {"format": FORMAT, "gpus": {
        gpu: {"params": {k: float(v) for k, v in r.params.model_dump().items() if k in r.fitted},
              "runs": len(r.errors_after), "median_abs_error_before": round(r.median_abs_error_before, 4),
              "median_abs_error_after": round(r.median_abs_error_after, 4)}
        for gpu, r in sorted(results.items())}}
    path = output_path(path, "out", OUT_HINT)
    text = json.dumps(data, indent=2) + "\n" if path.suffix.lower() == ".json" else yaml.safe_dump(
        data, sort_keys=False)
    write_text(path, text, "out", OUT_HINT)


def read_calibration_file(path: str | Path) -> dict[str, dict[str, float]]:
    """GPU id -> fitted :class:`TimeModelParams` fields of a calibration file."""
    if not isinstance(path, (str, PathLike)):
        raise ConfigError(f"time_model must be the path of a time-model file, got {type(path).__name__}",
                          field="time_model", hint="write one with: frenzy calibrate RUNS.csv --out FILE")
    path = Path(path)
    try:
        text = read_text(path, "time-model file")
        data = load_json(text, str(path)) if path.suffix.lower() == ".json" else load_yaml(text, str(path))
    except ConfigError as exc:
        raise ConfigError(f"not a readable time-model file: {exc}", field="time_model", value=str(path),
                          hint="write one with: frenzy calibrate RUNS.csv --out FILE") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("gpus"), dict):
        raise ConfigError(f"{path}: not a time-model file (expected 'format: {FORMAT}' and a 'gpus' mapping)",
                          field="time_model", value=str(path), hint="write one with: frenzy calibrate")
    out: dict[str, dict[str, float]] = {}
    for gpu, entry in data["gpus"].items():
        params = entry.get("params") if isinstance(entry, dict) else None
        if not isinstance(params, dict):
            raise ConfigError(f"{path}: gpus.{gpu} has no 'params' mapping", field="time_model", value=str(path))
        unknown = sorted(set(params) - set(TimeModelParams.model_fields))
        if unknown:
            raise ConfigError(f"{path}: gpus.{gpu}.params has unknown parameters {unknown}", field="time_model",
                              value=str(path), hint="use TimeModelParams fields")
        out[str(gpu)] = {str(k): _param(k, v, f"{path}: gpus.{gpu}.params") for k, v in params.items()}
    return out


def _param(name: str, value: object, where: str) -> float:
    """``value`` checked against TimeModelParams' bounds for field ``name`` (a number, finite, in range)."""
    field = TimeModelParams.model_fields[name]
    try:
        return float(TypeAdapter(Annotated[float, field], config=_STRICT).validate_python(value))
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        raise ConfigError(f"{where}.{name}={short_repr(value)}: {reason}", field="time_model",
                          value=value, hint="write the file with: frenzy calibrate") from None
