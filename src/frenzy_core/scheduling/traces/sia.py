"""Sia/Pollux workload files: ``name,time,application,num_replicas,batch_size``.

Pollux and Sia run each job until it has done a fixed amount of its application's work, so these files record
no duration: ``TraceJob.duration_s`` is None.
"""

from __future__ import annotations

from frenzy_core.scheduling.traces._base import Excluded, TraceReader
from frenzy_core.scheduling.traces._fields import Fields, ParsedRow
from frenzy_core.scheduling.traces.records import TraceFormat

__all__ = ["SiaReader"]


class SiaReader(TraceReader):
    """``time`` is seconds since the workload started; ``num_replicas`` the GPUs the job asked for."""

    format = TraceFormat.SIA
    columns = ("name", "time", "application", "num_replicas", "batch_size")

    def parse(self, fields: Fields, data_row: int) -> ParsedRow | Excluded:
        name = fields.text("name")
        submit = fields.number("time")
        application = fields.optional_text("application")
        num_gpus = fields.integer("num_replicas")
        batch_size = fields.integer("batch_size", minimum=1)
        if num_gpus == 0:
            return Excluded("no GPUs requested")
        return ParsedRow(id=name, submit_abs_s=submit, duration_s=None, num_gpus=num_gpus,
                         application=application, batch_size=batch_size)
