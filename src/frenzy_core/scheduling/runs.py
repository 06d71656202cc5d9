"""The running jobs: each job's run (``RunningJob``) and all of them as a mapping with array columns
(``RunTable``), which policies ask vectorised questions of every round (when do GPUs free up per type, which
runs end last) without walking thousands of Python objects."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.plans import Placement

__all__ = ["RunTable", "RunningJob"]


@dataclass
class RunningJob:
    """A job on its GPUs: progress is linear in time after ``stall_s`` (restoring a checkpoint) from the start
    of its current run."""

    job: TrainingJob
    """As submitted (its whole work)."""
    plan: Placement
    started_s: float
    """When the current run began (the latest start, resize or restart)."""
    stall_s: float
    """Seconds at the start of the run without progress (checkpoint save and restore)."""
    done_tokens: float
    """Tokens trained before the current run."""
    saved_tokens: float
    """Tokens in the job's last durable checkpoint before the current run."""
    end: float = field(init=False)
    """When the job ends if it keeps this run."""

    def __post_init__(self) -> None:
        self.end = self.started_s + self.stall_s + (self.job.total_tokens - self.done_tokens) / self.plan.tokens_per_s

    def tokens_at(self, now_s: float) -> float:
        """Tokens trained by ``now_s`` (never more than the job's work)."""
        productive = max(0.0, now_s - self.started_s - self.stall_s)
        return min(float(self.job.total_tokens), self.done_tokens + self.plan.tokens_per_s * productive)

    def remaining_s(self, now_s: float) -> float:
        """Seconds left on this run from ``now_s``."""
        return max(0.0, self.end - now_s)

    def checkpointed_at(self, now_s: float, interval_s: float) -> float:
        """Tokens in the last periodic checkpoint by ``now_s`` (one every ``interval_s`` of training)."""
        productive = max(0.0, now_s - self.started_s - self.stall_s)
        done = self.done_tokens + self.plan.tokens_per_s * interval_s * (productive // interval_s)
        return max(self.saved_tokens, min(done, float(self.job.total_tokens)))


class RunTable(MutableMapping[str, RunningJob]):
    """Job id -> its ``RunningJob``, in the order the runs began (as a dict keeps them), with columns kept in
    step: each run's GPU type (index into ``gpu_types``), expected end, GPU count and start number (its rank
    in that order). Columns are rows ``0..len-1`` in no particular order; a removed run's row is refilled by
    the last one."""

    def __init__(self, gpu_types: Sequence[str]):
        self._runs: dict[str, RunningJob] = {}
        self._type_index = {t: i for i, t in enumerate(gpu_types)}
        self._row: dict[str, int] = {}
        self._ids: list[str] = []
        self._gpu = np.zeros(64, dtype=np.int64)
        self._end = np.zeros(64)
        self._count = np.zeros(64, dtype=np.int64)
        self._rank = np.zeros(64, dtype=np.int64)
        self._started = 0
        self._spans: dict[str, list[tuple[int, int]]] = {}
        """Job id -> (type index, GPUs) of each group after the first of a run spanning types."""

    # -- the mapping -------------------------------------------------------------------------------------------
    def __getitem__(self, job_id: str) -> RunningJob:
        return self._runs[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._runs

    def values(self) -> Any:
        return self._runs.values()

    def items(self) -> Any:
        return self._runs.items()

    def __setitem__(self, job_id: str, run: RunningJob) -> None:
        row = self._row.get(job_id)
        if row is None:  # a new run goes last, as in a dict; a replaced one keeps its place
            row = self._row[job_id] = len(self._ids)
            self._ids.append(job_id)
            if row == self._end.size:
                self._gpu, self._end, self._count, self._rank = (
                    np.concatenate([a, np.zeros_like(a)]) for a in (self._gpu, self._end, self._count, self._rank))
            self._rank[row] = self._started
            self._started += 1
        self._runs[job_id] = run
        groups = run.plan.groups
        self._gpu[row] = self._type_index[run.plan.gpu_type]
        self._end[row] = run.end
        self._count[row] = groups[0].num_gpus if groups else run.plan.num_gpus
        if groups:
            self._spans[job_id] = [(self._type_index[g.gpu_type], g.num_gpus) for g in groups[1:]]
        else:
            self._spans.pop(job_id, None)

    def __delitem__(self, job_id: str) -> None:
        del self._runs[job_id]
        self._spans.pop(job_id, None)
        row = self._row.pop(job_id)
        last = len(self._ids) - 1
        moved = self._ids.pop()
        if row != last:
            self._ids[row] = moved
            self._row[moved] = row
            for column in (self._gpu, self._end, self._count, self._rank):
                column[row] = column[last]

    # -- the columns -------------------------------------------------------------------------------------------
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(GPU type index, expected end, GPU count, start number) of every run, one row each (read-only views)."""
        n = len(self._ids)
        out = (self._gpu[:n], self._end[:n], self._count[:n], self._rank[:n])
        for column in out:
            column.flags.writeable = False
        return out

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(GPU type index, expected end, GPU count) of the groups beyond the first of runs that span GPU types
        (their first group is their row of :meth:`columns`), one row per group."""
        rows = [(g, self._runs[j].end, n) for j, more in self._spans.items() for g, n in more]
        return (np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.float64),
                np.array([r[2] for r in rows], dtype=np.int64))

    def run_at(self, row: int) -> RunningJob:
        """The run of a row of :meth:`columns`."""
        return self._runs[self._ids[row]]
