"""``read_trace`` / ``load_trace``: a cluster-trace CSV into ``TraceJob`` records, with windowing, sampling
and arrival-rate scaling.

Order of operations: parse every row (malformed rows fail or are skipped), sort by submit time (stable),
measure times from the first job's submit, keep the time window and shift it to start at 0, sample, then
divide arrival times by ``arrival_scale``.
"""

from __future__ import annotations

import csv
import enum
import gzip
import math
import os
import re
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from frenzy_core import _limits as limits
from frenzy_core._files import is_file
from frenzy_core._limits import beyond_message
from frenzy_core.errors import ConfigError, require_seed, short_repr
from frenzy_core.scheduling.traces._base import Excluded, TraceReader
from frenzy_core.scheduling.traces._fields import Fields, ParsedRow, RowError
from frenzy_core.scheduling.traces.alibaba import AlibabaSpotReader
from frenzy_core.scheduling.traces.helios import HeliosReader
from frenzy_core.scheduling.traces.philly import PhillyReader
from frenzy_core.scheduling.traces.records import SkippedRow, TraceFormat, TraceJob, TraceLoad
from frenzy_core.scheduling.traces.sia import SiaReader

__all__ = ["READERS", "OnError", "TraceWarning", "load_trace", "read_trace"]

READERS: dict[TraceFormat, TraceReader] = {
    reader.format: reader for reader in (PhillyReader(), SiaReader(), HeliosReader(), AlibabaSpotReader())
}
"""One reader per format."""

_WARN_EXAMPLES = 3
"""How many skipped rows ``load_trace``'s warning quotes (the rest are counted)."""


class OnError(str, enum.Enum):
    """What to do with a malformed row."""

    FAIL = "fail"
    """Raise ConfigError naming the file, line, column and reason."""
    SKIP = "skip"
    """Leave the row out and list it in ``TraceLoad.skipped``."""


class TraceWarning(UserWarning):
    """``load_trace`` skipped malformed rows (``read_trace`` lists them all)."""


_E = TypeVar("_E", bound=enum.Enum)


def _choice(enum_type: type[_E], value: object, field: str) -> _E:
    """``value`` as a member of ``enum_type``; ConfigError naming ``field`` and the allowed values otherwise."""
    try:
        return enum_type(value)
    except ValueError:
        known = [m.value for m in enum_type]
        raise ConfigError(f"{field}={short_repr(value)} is not one of {known}", field=field, value=value) from None


@contextmanager
def _open_text(path: Path) -> Iterator[IO[str]]:
    """The file as text; ``.gz`` files are decompressed; a byte-order mark is dropped; bytes that are not UTF-8
    become lone surrogates (``surrogateescape``), so that the row holding them can be reported or skipped."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8-sig", errors="surrogateescape", newline="") as zipped:
            yield zipped
    else:
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as plain:
            yield plain


_UNDECODABLE = re.compile("[\udc80-\udcff]")
"""What ``surrogateescape`` makes of a byte that is not UTF-8."""


def _csv_rows(rows: Iterator[list[str]]) -> Iterator[list[str] | RowError]:
    """The rows of a CSV reader; a row csv refuses (a field over its 131,072-character limit) as a RowError in its
    place (the reader goes on at the next line); a row with bytes that are not UTF-8 too."""
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            yield RowError(None, f"is not a CSV row csv can read ({exc})")
            continue
        yield RowError(None, "holds bytes that are not UTF-8") if _UNDECODABLE.search("".join(row)) else row


def _check_bounds(result: ParsedRow) -> None:
    """A RowError for a row whose GPUs or times are beyond frenzy_core's bounds (docs/architecture.md)."""
    if result.num_gpus > limits.GPUS.high:
        raise RowError(None, beyond_message(result.num_gpus, limits.GPUS, "GPUs"))
    for what, seconds in (("submit time", result.submit_abs_s), ("duration", result.duration_s or 0.0)):
        if abs(seconds) > limits.TIME_S.high:
            raise RowError(None, beyond_message(seconds, limits.TIME_S, what))


def _column_index(header: list[str] | None, reader: TraceReader, path: Path) -> dict[str, int]:
    if header is None:
        raise ConfigError(f"{path.name}: the file is empty; a {reader.format.value} trace starts with the "
                          f"header {','.join(reader.columns)}", field="path", value=str(path))
    index = {name.strip(): i for i, name in enumerate(header)}
    missing = [c for c in reader.columns if c not in index]
    if missing:
        raise ConfigError(
            f"{path.name}: the header lacks {missing} for format {reader.format.value!r} (found {header})",
            field="format", value=reader.format.value,
            hint=f"a {reader.format.value} trace has columns {','.join(reader.columns)}; "
                 f"known formats: {[f.value for f in TraceFormat]}")
    return index


def _parse_file(path: Path, reader: TraceReader, on_error: OnError
                ) -> tuple[list[ParsedRow], list[SkippedRow], Counter[str], int]:
    parsed: list[ParsedRow] = []
    skipped: list[SkippedRow] = []
    excluded: Counter[str] = Counter()
    data_row = 0
    with _read_errors(path) as where, _open_text(path) as handle:
        rows = csv.reader(handle)
        where.append(rows)
        index = _column_index(next(rows, None), reader, path)
        width = len(index)
        for row in _csv_rows(rows):
            if not row:  # a blank line (a trailing newline, say) is no row
                continue
            data_row += 1
            try:
                if isinstance(row, RowError):
                    raise row
                if len(row) != width:
                    raise RowError(None, f"has {len(row)} fields; the header has {width}")
                result = reader.parse(Fields(row, index), data_row)
                if not isinstance(result, Excluded):
                    _check_bounds(result)
            except RowError as exc:
                bad = SkippedRow(line=rows.line_num, row=data_row, column=exc.column, reason=exc.reason)
                if on_error is OnError.FAIL:
                    raise ConfigError(bad.describe(path.name), field=exc.column,
                                      value=row[index[exc.column]] if exc.column and isinstance(row, list) else row,
                                      hint="pass on_error='skip' to leave malformed rows out") from None
                skipped.append(bad)
                continue
            if isinstance(result, Excluded):
                excluded[str(result)] += 1
            else:
                parsed.append(result)
    return parsed, skipped, excluded, data_row


@contextmanager
def _read_errors(path: Path) -> Iterator[list[Any]]:
    """A file that cannot be read to its end (a truncated or corrupt ``.gz``, a read error) as one ConfigError
    naming the line reached; the caller appends its csv reader to the yielded list so that the line is known."""
    reader: list[Any] = []
    try:
        yield reader
    except (EOFError, OSError, zlib.error) as exc:
        line = reader[0].line_num if reader else 0
        raise ConfigError(f"{path.name}: reading stopped after line {line}: {exc}", field="path", value=str(path),
                          hint="the file is truncated or corrupt; download it again") from None


def _check_window(time_window: tuple[float, float] | None) -> tuple[float, float] | None:
    if time_window is None:
        return None
    try:
        start_s, end_s = (float(t) for t in time_window)
    except (TypeError, ValueError):
        raise ConfigError(f"time_window={time_window!r} must be a pair (start_s, end_s)", field="time_window",
                          value=time_window) from None
    if not (0 <= start_s < end_s) or math.isnan(end_s):
        raise ConfigError(f"time_window={time_window!r} needs 0 <= start_s < end_s (seconds after the first "
                          "submit; end_s may be math.inf)", field="time_window", value=time_window)
    return start_s, end_s


def _sample_size(sample: float | None, available: int) -> int | None:
    """How many jobs ``sample`` keeps: an int is a count, a float in (0, 1] a fraction (rounded)."""
    if sample is None:
        return None
    if isinstance(sample, bool) or not isinstance(sample, (int, float)):
        raise ConfigError(f"sample={sample!r} must be a count (int >= 1) or a fraction (float in (0, 1])",
                          field="sample", value=sample)
    if isinstance(sample, int):
        if sample < 1:
            raise ConfigError(f"sample={sample} must be >= 1 when a count", field="sample", value=sample)
        return min(sample, available)
    if not 0 < sample <= 1:
        raise ConfigError(f"sample={sample} must be in (0, 1] when a fraction; pass an int for a count",
                          field="sample", value=sample)
    return round(sample * available)


def read_trace(path: str | Path, format: TraceFormat | str = TraceFormat.PHILLY, *,
               on_error: OnError | str = OnError.FAIL, time_window: tuple[float, float] | None = None,
               sample: float | None = None, arrival_scale: float = 1.0, seed: int = 0) -> TraceLoad:
    """Read a trace with a full account of skipped and excluded rows.

    ``time_window`` = (start_s, end_s) keeps jobs submitted in [start_s, end_s) seconds after the first submit
    and shifts them to start at 0; ``sample`` keeps a seeded random count (int) or fraction (float) of those,
    in arrival order; ``arrival_scale`` > 1 compresses arrivals (2.0 doubles the arrival rate).
    """
    fmt = _choice(TraceFormat, format, "format")
    mode = _choice(OnError, on_error, "on_error")
    require_seed(seed)
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a file path, got {type(path).__name__}", field="path", value=path)
    window = _check_window(time_window)
    if not (isinstance(arrival_scale, (int, float)) and not isinstance(arrival_scale, bool)
            and 1e-6 <= arrival_scale <= 1e6):
        raise ConfigError(f"arrival_scale={short_repr(arrival_scale)} must be a number in [1e-6, 1e6] (2.0 doubles "
                          "the arrival rate)", field="arrival_scale", value=arrival_scale)
    file = Path(path)
    if not is_file(file):
        raise ConfigError(f"no such trace file {str(file)!r}", field="path", value=str(file),
                          hint="public traces are not shipped with frenzy_core; download them (see docs/traces.md)")
    parsed, skipped, excluded, rows_read = _parse_file(file, READERS[fmt], mode)

    parsed.sort(key=lambda r: r.submit_abs_s)
    origin_s = parsed[0].submit_abs_s if parsed else 0.0
    offsets_s = [r.submit_abs_s - origin_s for r in parsed]
    keep = list(range(len(parsed)))
    if window is not None:
        start_s, end_s = window
        keep = [i for i in keep if start_s <= offsets_s[i] < end_s]
        if len(parsed) - len(keep):
            excluded["outside the time window"] += len(parsed) - len(keep)
        offsets_s = [t - start_s for t in offsets_s]
    size = _sample_size(sample, len(keep))
    if size is not None and size < len(keep):
        chosen = np.random.default_rng(seed).choice(len(keep), size=size, replace=False)
        excluded["not sampled"] += len(keep) - size
        keep = [keep[i] for i in sorted(chosen.tolist())]

    jobs = []
    for i in keep:
        r = parsed[i]
        jobs.append(TraceJob(
            id=r.id, source=fmt, submit_time_s=offsets_s[i] / arrival_scale, duration_s=r.duration_s,
            num_gpus=r.num_gpus, gpu_type=r.gpu_type, group=r.group, user=r.user, application=r.application,
            batch_size=r.batch_size, state=r.state, job_type=r.job_type))
    return TraceLoad(path=str(file), source=fmt, jobs=jobs, rows_read=rows_read, skipped=skipped,
                     excluded=dict(excluded))


def load_trace(path: str | Path, format: TraceFormat | str = TraceFormat.PHILLY, *,
               on_error: OnError | str = OnError.FAIL, time_window: tuple[float, float] | None = None,
               sample: float | None = None, arrival_scale: float = 1.0, seed: int = 0) -> list[TraceJob]:
    """The jobs of a trace (options as :func:`read_trace`); skipped rows raise one ``TraceWarning``."""
    result = read_trace(path, format, on_error=on_error, time_window=time_window, sample=sample,
                        arrival_scale=arrival_scale, seed=seed)
    if result.skipped:
        name = Path(path).name
        shown = "; ".join(s.describe(name) for s in result.skipped[:_WARN_EXAMPLES])
        more = len(result.skipped) - _WARN_EXAMPLES
        warnings.warn(f"skipped {len(result.skipped)} malformed rows of {name}: {shown}"
                      + (f"; and {more} more (read_trace lists them all)" if more > 0 else ""),
                      TraceWarning, stacklevel=2)
    return result.jobs
