"""Microsoft Philly 2017, processed by the Sia artifact: ``timestamp,duration,num_gpus,gpu_time,cluster``."""

from __future__ import annotations

from frenzy_core.scheduling.traces._base import Excluded, TraceReader
from frenzy_core.scheduling.traces._fields import Fields, ParsedRow
from frenzy_core.scheduling.traces.records import TraceFormat

__all__ = ["PhillyReader"]


class PhillyReader(TraceReader):
    """``timestamp`` is a wall-clock time, ``duration`` seconds, ``cluster`` the virtual cluster; no ids."""

    format = TraceFormat.PHILLY
    columns = ("timestamp", "duration", "num_gpus", "cluster")

    def parse(self, fields: Fields, data_row: int) -> ParsedRow | Excluded:
        submit = fields.timestamp_s("timestamp")
        duration = fields.number("duration")
        num_gpus = fields.integer("num_gpus")
        group = fields.optional_text("cluster")
        if num_gpus == 0:
            return Excluded("no GPUs requested")
        if duration == 0:
            return Excluded("zero duration")
        return ParsedRow(id=str(data_row), submit_abs_s=submit, duration_s=duration, num_gpus=num_gpus,
                         group=group)
