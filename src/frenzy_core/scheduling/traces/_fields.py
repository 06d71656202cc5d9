"""Typed access to one CSV row's columns; a bad value raises :class:`RowError` naming the column."""

from __future__ import annotations

import math
from datetime import datetime
from typing import NamedTuple

__all__ = ["Fields", "ParsedRow", "RowError"]

_EPOCH = datetime(1970, 1, 1)
"""Wall-clock times without a zone are read as naive UTC, so a DST change cannot shift arrivals."""


class RowError(Exception):
    """A value of a row is malformed: ``column`` (None for the row as a whole) and the reason."""

    def __init__(self, column: str | None, reason: str):
        self.column = column
        self.reason = reason
        super().__init__(reason)


class ParsedRow(NamedTuple):
    """One well-formed row, times still on the trace's own clock (absolute seconds)."""

    id: str
    submit_abs_s: float
    duration_s: float | None
    num_gpus: int
    gpu_type: str | None = None
    group: str | None = None
    user: str | None = None
    application: str | None = None
    batch_size: int | None = None
    state: str | None = None
    job_type: str | None = None


class Fields:
    """The columns of one row by name, converted on access."""

    __slots__ = ("_index", "_row")

    def __init__(self, row: list[str], index: dict[str, int]):
        self._row = row
        self._index = index

    def text(self, column: str) -> str:
        """The stripped value, which must not be empty."""
        value = self._row[self._index[column]].strip()
        if not value:
            raise RowError(column, "is empty")
        return value

    def optional_text(self, column: str) -> str | None:
        """The stripped value, None when empty."""
        return self._row[self._index[column]].strip() or None

    def number(self, column: str, *, minimum: float = 0.0) -> float:
        """A finite number >= ``minimum``."""
        raw = self._row[self._index[column]].strip()
        try:
            value = float(raw)
        except ValueError:
            raise RowError(column, f"{raw!r} is not a number") from None
        if not math.isfinite(value) or value < minimum:
            raise RowError(column, f"{raw!r} is not a finite number >= {minimum:g}")
        return value

    def integer(self, column: str, *, minimum: int = 0) -> int:
        """A whole number >= ``minimum`` (``"8.0"`` is read as 8)."""
        raw = self._row[self._index[column]].strip()
        value = self.number(column, minimum=minimum)
        if not value.is_integer():
            raise RowError(column, f"{raw!r} is not a whole number")
        return int(value)

    def timestamp_s(self, column: str) -> float:
        """Seconds: a plain number, or a ``YYYY-MM-DD HH:MM:SS`` wall-clock time (read as UTC)."""
        raw = self._row[self._index[column]].strip()
        reason = f"{raw!r} is neither seconds nor a 'YYYY-MM-DD HH:MM:SS' time"
        if ":" not in raw and "-" not in raw[1:]:  # no clock or date separator: plain seconds
            try:
                return self.number(column, minimum=-math.inf)
            except RowError:
                raise RowError(column, reason) from None
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise RowError(column, reason) from None
        if moment.tzinfo is not None:
            return moment.timestamp()
        return (moment - _EPOCH).total_seconds()
