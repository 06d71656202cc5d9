"""What a simulation returns: one record per job, utilisation over time, and the summary figures."""

from __future__ import annotations

import enum
from pathlib import Path

import numpy as np
from pydantic import Field

from frenzy_core._base import FrozenModel

__all__ = ["JobRecord", "JobStatus", "SimulationResult", "Utilisation"]


class JobStatus(str, enum.Enum):
    """How a job's simulation ended."""

    FINISHED = "finished"
    """Ran to completion."""
    UNSCHEDULABLE = "unschedulable"
    """Never finished: the policy rejected it, or it still waited when no event was left."""
    CANCELLED = "cancelled"
    """Withdrawn by the manager (``OnlineScheduler.cancel``)."""


class JobRecord(FrozenModel):
    """What happened to one job."""

    id: str
    status: JobStatus
    submit_time_s: float = Field(ge=0)
    start_time_s: float | None = Field(default=None, description="When it was placed.")
    finish_time_s: float | None = Field(default=None, description="When it ended (finished or failed).")
    gpu_type: str | None = Field(default=None, description="The GPU type of its last run; the types joined by '+' "
                                 "where it spanned several (a100-80gb+v100-32gb).")
    num_gpus: int | None = None
    tokens_per_s: float | None = Field(default=None, description="Throughput of the layout it ran with.")
    layout: str | None = Field(default=None, description="That layout in words, where the policy named it.")
    reason: str | None = Field(default=None, description="Why it failed or was never placed.")
    work_tokens: int = Field(default=0, ge=0, description="Tokens the job had to train.")
    gpu_seconds: float = Field(default=0.0, ge=0, description=(
        "GPU-seconds held over all its runs (checkpoint stalls and work later lost included)."))
    preemptions: int = Field(default=0, ge=0, description="Times a policy stopped it to requeue it.")
    interruptions: int = Field(default=0, ge=0, description="Runs cut short by a node going down.")
    resizes: int = Field(default=0, ge=0, description="Times a policy moved it to other GPUs while running.")
    lost_tokens: float = Field(default=0.0, ge=0, description="Work lost to interruptions (since a checkpoint).")
    violation: str | None = Field(default=None, description=(
        "Why a placement of it did not fit its layout on its GPUs (simulate with allow_violations only)."))

    @property
    def jct_s(self) -> float | None:
        """Job completion time (finish minus submit) of a finished job."""
        if self.status is not JobStatus.FINISHED or self.finish_time_s is None:
            return None
        return self.finish_time_s - self.submit_time_s

    @property
    def queue_delay_s(self) -> float | None:
        """Seconds from submit to start of a placed job."""
        return None if self.start_time_s is None else self.start_time_s - self.submit_time_s


class Utilisation(FrozenModel):
    """Busy GPUs per type as a step function of time: ``busy_gpus[t][i]`` from ``times_s[i]`` on."""

    times_s: list[float] = Field(description="Event times at which the busy counts changed, increasing.")
    busy_gpus: dict[str, list[int]] = Field(description="GPU type -> busy GPUs from each time on.")
    capacity_gpus: dict[str, int] = Field(description="GPU type -> GPUs free at the start (usable).")

    def mean(self, until_s: float) -> dict[str, float]:
        """Time-averaged busy fraction of each type over [first time, ``until_s``]."""
        if not self.times_s or until_s <= self.times_s[0]:
            return {t: 0.0 for t in self.capacity_gpus}
        edges = np.append(np.asarray(self.times_s), max(until_s, self.times_s[-1]))
        widths = np.diff(edges)
        span = float(edges[-1] - edges[0])
        return {t: float(np.dot(widths, busy) / span / cap) if cap else 0.0
                for t, busy, cap in ((t, np.asarray(self.busy_gpus[t]), self.capacity_gpus[t])
                                     for t in self.capacity_gpus)}


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


class SimulationResult(FrozenModel):
    """Per-job records and the summary figures of one simulation."""

    policy: str
    avg_jct_s: float | None = Field(description="Mean job completion time of finished jobs; None if none.")
    median_jct_s: float | None = Field(default=None, description="Median of the same.")
    p99_jct_s: float | None = Field(description="99th percentile (linear interpolation) of the same.")
    avg_queue_delay_s: float | None = Field(default=None, description="Mean submit-to-start of placed jobs.")
    makespan_s: float = Field(ge=0, description="First arrival to last completion (0 without completions).")
    violations: int = Field(ge=0, description=(
        "Placements whose layout does not fit its GPUs (memory, tensor-parallel groups inside nodes, world size) "
        "or that claim more than the layout's rate there; 0 unless simulated with allow_violations."))
    goodput_tokens_per_gpu_hour: float | None = Field(default=None, description=(
        "Tokens of finished jobs per GPU-hour held by all jobs (restarts and lost work cost GPU time)."))
    preemptions: int = Field(default=0, ge=0, description="Policy preemptions, all jobs.")
    resizes: int = Field(default=0, ge=0, description="Policy resizes of running jobs, all jobs.")
    interruptions: int = Field(default=0, ge=0, description="Job runs cut short by node failures.")
    node_failures: int = Field(default=0, ge=0, description="Node failures simulated.")
    unschedulable: list[str] = Field(description="Ids of jobs never placed (reasons in their records).")
    jobs: list[JobRecord] = Field(description="One record per job, in submission order.")
    utilisation: Utilisation | None = Field(default=None, description="Busy GPUs per type over time.")
    round_latency_s: list[float] = Field(default_factory=list, description=(
        "Wall seconds of each scheduling round (policy.schedule); varies between runs and machines."))

    @property
    def finished(self) -> int:
        """Jobs that ran to completion."""
        return sum(r.status is JobStatus.FINISHED for r in self.jobs)

    @property
    def median_round_s(self) -> float | None:
        """Median scheduling-round latency."""
        return _percentile(np.asarray(self.round_latency_s), 50)

    @property
    def p99_round_s(self) -> float | None:
        """99th-percentile scheduling-round latency."""
        return _percentile(np.asarray(self.round_latency_s), 99)

    def mean_utilisation(self) -> dict[str, float]:
        """Busy fraction of each GPU type, averaged from the first event to the makespan's end."""
        if self.utilisation is None or not self.utilisation.times_s:
            return {}
        return self.utilisation.mean(self.utilisation.times_s[0] + self.makespan_s)

    def plot(self, path: str | Path, *others: SimulationResult) -> None:
        """Save the JCT CDF of this and ``others`` (one line per policy) and each one's utilisation over time
        (matplotlib; the ``plot`` extra)."""
        from frenzy_core.scheduling.report import plot_results

        plot_results([self, *others], path)


def summarise(policy: str, records: list[JobRecord], utilisation: Utilisation,
              round_latency_s: list[float], node_failures: int = 0) -> SimulationResult:
    """The summary figures of a simulation's records."""
    jct = np.array([r.jct_s for r in records if r.jct_s is not None], dtype=np.float64)
    delays = np.array([r.queue_delay_s for r in records if r.queue_delay_s is not None], dtype=np.float64)
    ended = [r.finish_time_s for r in records if r.finish_time_s is not None]
    first = min((r.submit_time_s for r in records), default=0.0)
    useful = sum(r.work_tokens for r in records if r.status is JobStatus.FINISHED)
    gpu_s = sum(r.gpu_seconds for r in records)
    return SimulationResult(
        policy=policy,
        avg_jct_s=float(jct.mean()) if jct.size else None,
        median_jct_s=_percentile(jct, 50),
        p99_jct_s=_percentile(jct, 99),
        avg_queue_delay_s=float(delays.mean()) if delays.size else None,
        makespan_s=max(ended) - first if ended else 0.0,
        violations=sum(r.violation is not None for r in records),
        goodput_tokens_per_gpu_hour=useful / (gpu_s / 3600.0) if gpu_s else None,
        preemptions=sum(r.preemptions for r in records),
        resizes=sum(r.resizes for r in records),
        interruptions=sum(r.interruptions for r in records),
        node_failures=node_failures,
        unschedulable=[r.id for r in records if r.status is JobStatus.UNSCHEDULABLE],
        jobs=records,
        utilisation=utilisation,
        round_latency_s=round_latency_s,
    )
