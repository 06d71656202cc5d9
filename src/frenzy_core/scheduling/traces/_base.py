"""The small base every trace-format reader implements: its columns and how one row becomes a job."""

from __future__ import annotations

import abc

from frenzy_core.scheduling.traces._fields import Fields, ParsedRow
from frenzy_core.scheduling.traces.records import TraceFormat

__all__ = ["Excluded", "TraceReader"]


class Excluded(str):
    """A well-formed row left out on purpose; the string is the reason (counted in ``TraceLoad.excluded``)."""


class TraceReader(abc.ABC):
    """Reads one trace format; ``parse`` raises ``RowError`` for malformed values."""

    format: TraceFormat
    columns: tuple[str, ...]
    """Columns the reader needs; others in the file are ignored."""

    @abc.abstractmethod
    def parse(self, fields: Fields, data_row: int) -> ParsedRow | Excluded:
        """The row as a job, or why it is left out."""
