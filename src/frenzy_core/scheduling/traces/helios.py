"""SenseTime Helios ``cluster_log.csv``:
``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue``.

``submit_time`` is a ``YYYY-MM-DD HH:MM:SS`` wall-clock time and ``duration`` the seconds the job ran
(Hu et al., "Characterization and Prediction of Deep Learning Workloads in Large-Scale GPU Datacenters",
SC'21; S-Lab-System-Group/HeliosData). CPU-only jobs (``gpu_num`` 0) are left out.
"""

from __future__ import annotations

from frenzy_core.scheduling.traces._base import Excluded, TraceReader
from frenzy_core.scheduling.traces._fields import Fields, ParsedRow
from frenzy_core.scheduling.traces.records import TraceFormat

__all__ = ["HeliosReader"]


class HeliosReader(TraceReader):
    """One row per job; ``vc`` is the virtual cluster, ``state`` the final Slurm state."""

    format = TraceFormat.HELIOS
    columns = ("job_id", "user", "vc", "gpu_num", "state", "submit_time", "duration")

    def parse(self, fields: Fields, data_row: int) -> ParsedRow | Excluded:
        job_id = fields.text("job_id")
        num_gpus = fields.integer("gpu_num")
        submit = fields.timestamp_s("submit_time")
        duration = fields.number("duration")
        user = fields.optional_text("user")
        group = fields.optional_text("vc")
        state = fields.optional_text("state")
        if num_gpus == 0:
            return Excluded("no GPUs requested")
        if duration == 0:
            return Excluded("zero duration")
        return ParsedRow(id=job_id, submit_abs_s=submit, duration_s=duration, num_gpus=num_gpus, group=group,
                         user=user, state=state)
