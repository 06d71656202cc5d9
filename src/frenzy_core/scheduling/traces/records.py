"""What a trace reader returns: one ``TraceJob`` per kept row, plus the rows it skipped or left out."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field

from frenzy_core import _limits as limits
from frenzy_core._base import FrozenModel
from frenzy_core._limits import at_most

__all__ = ["SkippedRow", "TraceFormat", "TraceJob", "TraceLoad"]


class TraceFormat(str, enum.Enum):
    """The public cluster-trace formats frenzy_core reads (columns in ``docs/traces.md``)."""

    PHILLY = "philly"
    """Microsoft Philly 2017 (Sia artifact's processing): ``timestamp,duration,num_gpus,gpu_time,cluster``."""
    SIA = "sia"
    """Sia/Pollux workload files: ``name,time,application,num_replicas,batch_size`` (no durations)."""
    HELIOS = "helios"
    """SenseTime Helios ``cluster_log.csv``: ``job_id,user,vc,gpu_num,...,submit_time,...,duration,queue``."""
    ALIBABA_SPOT = "alibaba-spot"
    """Alibaba 2026 spot-GPU jobs: ``job_name,organization,gpu_model,...,submit_time,duration,job_type``."""


class TraceJob(FrozenModel):
    """One job as a cluster trace recorded it: when it arrived, the GPUs it asked for, how long it ran."""

    id: str = Field(description="The trace's job id; Philly has none and uses the 1-based data-row number.")
    source: TraceFormat = Field(description="The format it was read from.")
    submit_time_s: Annotated[float, at_most(limits.TIME_S)] = Field(
        ge=0, description="Seconds after the first submit (or the window start).")
    duration_s: Annotated[float | None, at_most(limits.TIME_S)] = Field(
        default=None, gt=0, description="Recorded run time, if recorded.")
    num_gpus: Annotated[int, at_most(limits.GPUS)] = Field(
        gt=0, description="GPUs the job asked for (all workers together).")
    gpu_type: str | None = Field(default=None, description="GPU model as the trace names it, where recorded.")
    group: str | None = Field(default=None, description="Virtual cluster or organisation that submitted it.")
    user: str | None = Field(default=None, description="Submitting user, where recorded.")
    application: str | None = Field(default=None, description="Workload name (Sia: cifar10, bert, ...).")
    batch_size: Annotated[int | None, at_most(limits.GLOBAL_BATCH)] = Field(
        default=None, gt=0, description="Recorded batch size (Sia).")
    state: str | None = Field(default=None, description="Final state (Helios: COMPLETED, FAILED, ...).")
    job_type: str | None = Field(default=None, description="Job class (Alibaba spot: HP or Spot).")

    @property
    def gpu_seconds(self) -> float | None:
        """GPU time it consumed (GPUs x duration), where the duration is recorded."""
        return None if self.duration_s is None else self.num_gpus * self.duration_s


class SkippedRow(FrozenModel):
    """A malformed row that ``on_error="skip"`` left out, with where and why."""

    line: int = Field(gt=0, description="1-based line of the file (the header is line 1).")
    row: int = Field(gt=0, description="1-based data row (the first row after the header is 1).")
    column: str | None = Field(description="The offending column; None when the row itself is malformed.")
    reason: str = Field(description="What was wrong and what was expected.")

    def describe(self, file_name: str) -> str:
        """One line naming the file, the line and row, the column and the reason."""
        where = f"column {self.column!r}: " if self.column else ""
        return f"{file_name} line {self.line} (data row {self.row}): {where}{self.reason}"


class TraceLoad(FrozenModel):
    """A read trace: the kept jobs, the malformed rows skipped, the rows left out on purpose."""

    path: str = Field(description="The file read.")
    source: TraceFormat = Field(description="Its format.")
    jobs: list[TraceJob] = Field(description="Kept jobs, in arrival order.")
    rows_read: int = Field(ge=0, description="Data rows in the file.")
    skipped: list[SkippedRow] = Field(default_factory=list, description="Malformed rows (on_error='skip').")
    excluded: dict[str, int] = Field(default_factory=dict, description=(
        "Well-formed rows left out, counted by reason (no GPUs, outside the time window, not sampled)."))
