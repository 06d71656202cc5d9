"""Step times from the training logs users already have: torchtitan, Megatron-LM and the Hugging Face Trainer.

Formats, as the projects print them:

- torchtitan (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``): ``step: 10  loss:  7.9  ...
  tps: 6,935  tflops: 289.70  mfu: 29.29%`` (ANSI colours around the fields), where ``tps`` is tokens per second
  per GPU (tokens of a data-parallel rank / (seconds x non-data-parallel GPUs)): step seconds =
  global batch x sequence / (tps x GPUs).
- Megatron-LM (``megatron/training/training.py``, ``training_log``): `` [2025-04-13 23:41:12] iteration  10/ 1000
  | consumed samples: 160 | elapsed time per iteration (ms): 1147.6 | ...``.
- Hugging Face Trainer (``trainer_utils.speed_metrics``, printed by ``log_metrics`` and the final log dict):
  ``train_samples_per_second = 12.345`` or ``{'train_runtime': 83.4, 'train_samples_per_second': 12.345, ...}``:
  step seconds = global batch / samples per second (the Trainer's runtime includes its start-up).

The first reading of a torchtitan or Megatron log is warm-up (compilation, allocator growth) and is dropped when
there are others; the step time is the median of the rest.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.errors import ConfigError

__all__ = ["LOG_FORMATS", "LogReading", "read_log_step_time"]

LOG_FORMATS = ("torchtitan", "megatron", "hf-trainer")
"""Log formats :func:`read_log_step_time` recognises."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMBER = r"([0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?)"
# marker (a line is a reading of this format if it contains it) -> pattern of the value
_PATTERNS: dict[str, tuple[str, re.Pattern[str]]] = {
    "torchtitan": ("tps:", re.compile(r"\bstep:\s*\d+\b.*?\btps:\s*" + _NUMBER)),
    "megatron": ("elapsed time per iteration (ms)",
                 re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUMBER)),
    "hf-trainer": ("train_samples_per_second",
                   re.compile(r"train_samples_per_second['\"]?\s*[:=]\s*" + _NUMBER)),
}


class LogReading(FrozenModel):
    """What a log says about the step time."""

    format: str = Field(description="Which project's log format it is (one of LOG_FORMATS).")
    step_s: float = Field(gt=0, description="Median seconds per optimizer step over the readings used.")
    readings: int = Field(gt=0, description="Log lines the median is over.")


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def read_log_step_time(path: str | Path, *, global_batch_size: int, seq_len: int, world_size: int) -> LogReading:
    """Seconds per step from a torchtitan, Megatron-LM or Hugging Face Trainer log file.

    ``global_batch_size``, ``seq_len`` and ``world_size`` convert throughput lines into step time. A line that
    carries a format's marker but not a readable value is a ConfigError naming the file, line number and text.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read log {str(path)!r}: {exc.strerror}", field="log", value=str(path)) from None
    found: dict[str, list[float]] = {name: [] for name in _PATTERNS}
    for number, raw in enumerate(lines, start=1):
        line = _ANSI.sub("", raw)
        for name, (marker, pattern) in _PATTERNS.items():
            if marker not in line or (name == "torchtitan" and ("step:" not in line or "validate" in line)):
                continue
            match = pattern.search(line)
            value = _value(match.group(1)) if match else 0.0
            if not match or value <= 0:
                raise ConfigError(f"{path}:{number}: cannot read the {name} step time from this line: "
                                  f"{line.strip()[:200]!r}", field="log", value=f"{path}:{number}",
                                  hint=f"expected a positive number after {marker!r}")
            found[name].append(value)
    formats = [name for name, values in found.items() if values]
    if not formats:
        raise ConfigError(f"{path}: no step-time lines found", field="log", value=str(path), hint=(
            "expected torchtitan 'step: N ... tps: X', Megatron-LM 'elapsed time per iteration (ms): X' or "
            "Hugging Face Trainer 'train_samples_per_second' lines"))
    if len(formats) > 1:
        raise ConfigError(f"{path}: lines of several log formats ({', '.join(formats)})", field="log",
                          value=str(path), hint="give one run's log per file")
    name = formats[0]
    values = found[name]
    if name != "hf-trainer" and len(values) > 1:
        values = values[1:]  # the first logged interval includes warm-up
    median = statistics.median(values)
    if name == "torchtitan":
        step_s = global_batch_size * seq_len / (median * world_size)
    elif name == "megatron":
        step_s = median / 1000.0
    else:
        step_s = global_batch_size / median
    return LogReading(format=name, step_s=step_s, readings=len(values))
