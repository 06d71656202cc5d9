"""A user's own measured runs, for :func:`calibrate`: a CSV or JSON table of layout + measured step time, and
training logs (timing/logs.py) whose layout is given alongside.

One run per row (CSV) or object (JSON list). Keys: ``model`` (a preset name or a path to a Hugging Face
``config.json``), ``gpu``, any :class:`ParallelConfig` field (``dp``, ``tp``, ``pp``, ``vpp``, ``cp``, ``ep``) and
:class:`TrainingConfig` field (``seq_len``, ``micro_batch_size``, ``global_batch_size``, ``precision``, ...), the
measurement (``step_s``, ``tokens_per_s`` for the whole job, ``tokens_per_s_per_gpu``, or ``log``: a log file, a
path relative to the table), the run's overlaps (any ``*_overlap`` field of :class:`TimeModelParams`) and an
optional ``label``. Empty CSV cells mean "not given".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from frenzy_core._files import exists, load_csv_rows, load_json, read_text
from frenzy_core.config.layout import global_batch_size
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError, short_repr
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.timing.calibrate import Measurement
from frenzy_core.timing.logs import read_log_step_time
from frenzy_core.timing.params import TimeModelParams

__all__ = ["TABLE_SUFFIXES", "load_measurements", "run_measurement"]

TABLE_SUFFIXES = (".csv", ".json")
"""File suffixes read as run tables; any other file is read as a training log."""

_MEASURES = ("step_s", "tokens_per_s", "tokens_per_s_per_gpu", "log")
_OVERLAPS = tuple(name for name in TimeModelParams.model_fields if name.endswith("_overlap"))


def _model(value: object, base: Path | None) -> ModelConfig:
    if isinstance(value, ModelConfig):
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"model must be a preset name or a config.json path, got {value!r}", field="model")
    path = Path(value) if base is None or Path(value).is_absolute() else base / value
    if value.endswith(".json") or exists(path):
        if not exists(path):
            raise ConfigError(f"model file {str(path)!r} does not exist", field="model", value=value)
        return ModelConfig.from_hf_config(path)
    return ModelConfig.preset(value)


def _number(value: object, name: str, where: str) -> float:
    """A table cell (a string from CSV, a number from JSON) as a finite float; ConfigError naming the cell."""
    try:
        out = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else math.nan
    except ValueError:
        out = math.nan
    if not math.isfinite(out):
        raise ConfigError(f"{where}: {name}={short_repr(value)} is not a finite number", field=name, value=value)
    return out


def run_measurement(row: Mapping[str, Any], base: Path | None = None, where: str = "run") -> Measurement:
    """One run (a table row, or a log's layout with ``log`` set) as a :class:`Measurement`."""
    row = {k: v for k, v in row.items() if v is not None and v != ""}
    known = {"model", "gpu", "label", *_MEASURES, *_OVERLAPS, *ParallelConfig.model_fields,
             *TrainingConfig.model_fields}
    unknown = sorted(set(row) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown columns {unknown}", field=unknown[0],
                          hint="use model, gpu, ParallelConfig/TrainingConfig fields, step_s / tokens_per_s / "
                               "tokens_per_s_per_gpu / log, *_overlap and label")
    for name in ("model", "gpu"):
        if name not in row:
            raise ConfigError(f"{where}: no {name!r} given", field=name)
    measures = [m for m in _MEASURES if m in row]
    if len(measures) != 1:
        raise ConfigError(f"{where}: give exactly one of {list(_MEASURES)}, got {measures or 'none'}",
                          field="step_s")
    parallel = ParallelConfig.model_validate({k: row[k] for k in ParallelConfig.model_fields if k in row})
    training = TrainingConfig.model_validate({k: row[k] for k in TrainingConfig.model_fields if k in row})
    model = _model(row["model"], base)
    gpu = get_gpu_spec(str(row["gpu"]))
    gbs = global_batch_size(training, parallel)
    tokens = gbs * training.seq_len
    measure = measures[0]
    if measure == "log":
        log = Path(str(row["log"]))
        log = log if base is None or log.is_absolute() else base / log
        step_s = read_log_step_time(log, global_batch_size=gbs, seq_len=training.seq_len,
                                    world_size=parallel.world_size).step_s
    else:
        value = _number(row[measure], measure, where)
        if not value > 0:
            raise ConfigError(f"{where}: {measure} must be positive, got {row[measure]!r}", field=measure)
        step_s = {"step_s": value, "tokens_per_s": tokens / value,
                  "tokens_per_s_per_gpu": tokens / (value * parallel.world_size)}[measure]
    settings = {k: _number(row[k], k, where) for k in _OVERLAPS if k in row}
    return Measurement(model=model, training=training, parallel=parallel, gpu=gpu, iteration_s=step_s,
                       run_settings=settings, label=str(row.get("label", where)))


def _table_rows(path: Path) -> list[dict[str, Any]]:
    text = read_text(path, "run table")
    if path.suffix.lower() == ".json":
        data = load_json(text, str(path))
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ConfigError(f"{path}: expected a JSON list of run objects", field="runs", value=str(path))
        return data
    return load_csv_rows(text, str(path))


def load_measurements(sources: Sequence[str | Path], run: Mapping[str, Any] | None = None) -> list[Measurement]:
    """Measurements from run tables (``.csv``/``.json``) and training logs; a log's layout is ``run`` (the keys
    of a table row, without the measurement)."""
    out: list[Measurement] = []
    for source in sources:
        path = Path(source)
        if path.suffix.lower() in TABLE_SUFFIXES:
            rows = _table_rows(path)
            if not rows:
                raise ConfigError(f"{path}: no runs", field="runs", value=str(path))
            out += [run_measurement(r, path.parent, f"{path} run {i + 1}") for i, r in enumerate(rows)]
        else:
            if run is None:
                raise ConfigError(f"{path}: a log needs the run's layout (model, gpu, dp, tp, ..., seq_len, "
                                  "global_batch_size)", field="run", hint="pass run={...}, or list logs in a "
                                  "runs table with a 'log' column")
            out.append(run_measurement({**run, "log": str(path), "label": run.get("label", path.name)}, None,
                                       str(path)))
    return out
