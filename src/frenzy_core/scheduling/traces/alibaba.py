"""Alibaba 2026 spot-GPU job table (``job_info_df.csv`` of alibaba/clusterdata cluster-trace-v2026-spot-gpu):
``job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type``.

``submit_time`` is seconds since the first job and ``duration`` seconds (the trace's README). The README calls
``gpu_request`` "GPUs requested by the job" and ``worker_num`` "instances requested"; its example rows pair
``gpu_request`` 1 with ``worker_num`` 94, so we read ``gpu_request`` as per worker: the job's GPUs are
``gpu_request x worker_num``, rounded up (fractional requests share a GPU, and a job holds at least one; the
product is first rounded to 6 decimals so that 0.3 x 10 is 3, not 4).
"""

from __future__ import annotations

import math

from frenzy_core.scheduling.traces._base import Excluded, TraceReader
from frenzy_core.scheduling.traces._fields import Fields, ParsedRow
from frenzy_core.scheduling.traces.records import TraceFormat

__all__ = ["AlibabaSpotReader"]


class AlibabaSpotReader(TraceReader):
    """``organization`` becomes the group, ``gpu_model`` the GPU type, ``job_type`` (HP or Spot) is kept."""

    format = TraceFormat.ALIBABA_SPOT
    columns = ("job_name", "organization", "gpu_model", "gpu_request", "worker_num", "submit_time",
               "duration", "job_type")

    def parse(self, fields: Fields, data_row: int) -> ParsedRow | Excluded:
        job_name = fields.text("job_name")
        gpus_per_worker = fields.number("gpu_request")
        workers = fields.integer("worker_num")
        submit = fields.number("submit_time")
        duration = fields.number("duration")
        if gpus_per_worker == 0 or workers == 0:
            return Excluded("no GPUs requested")
        if duration == 0:
            return Excluded("zero duration")
        return ParsedRow(id=job_name, submit_abs_s=submit, duration_s=duration,
                         num_gpus=math.ceil(round(gpus_per_worker * workers, 6)),
                         gpu_type=fields.optional_text("gpu_model"),
                         group=fields.optional_text("organization"),
                         job_type=fields.optional_text("job_type"))
