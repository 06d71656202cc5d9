"""The policy interface every scheduler implements (the registry is ``frenzy_core.scheduling.policies``).

The simulator calls ``start`` once, then, at each event time, ``on_finish`` for jobs that ended, ``submit``
for jobs that arrived, and ``schedule`` for the placements to start now. A policy never changes the cluster
itself: it reads ``ClusterState`` (or a copy) and returns placements, which the simulator checks and applies.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.rates import RateBook
from frenzy_core.scheduling.state import Allocation, ClusterState
from frenzy_core.scheduling.workload import ThroughputFn

__all__ = ["Placement", "Policy"]


@dataclass(frozen=True)
class Placement:
    """Start ``job_id`` now on ``allocation`` (all GPUs of ``gpu_type``) at ``tokens_per_s``; ``tokens_per_s``
    None means no layout fits the allocation's memory: the job is placed and fails (an OOM placement)."""

    job_id: str
    gpu_type: str
    allocation: Allocation = field(hash=False)
    tokens_per_s: float | None
    layout: str | None = None
    """The layout it runs with, in words (``dp4 tp2 pp1 mbs2``), where the throughput function names it."""

    @property
    def num_gpus(self) -> int:
        """GPUs the placement takes."""
        return sum(self.allocation.values())


class Policy(abc.ABC):
    """A scheduling policy. ``rejected`` maps job ids the policy will never place to the reason."""

    name: str
    """Registry name, e.g. ``fifo-requested``."""
    state: ClusterState
    """The cluster's free GPUs (set by :meth:`start`; the simulator updates it)."""
    throughput: ThroughputFn
    """Tokens per second of a model on an allocation (set by :meth:`start`)."""
    seed: int
    """Seed for randomised policies (set by :meth:`start`)."""
    rates: RateBook
    """Tokens/s per job, GPU type and count, cached (set by :meth:`start`)."""

    def __init__(self) -> None:
        self.rejected: dict[str, str] = {}

    def start(self, state: ClusterState, throughput: ThroughputFn, seed: int) -> None:
        """Called once before the first event; keeps what the policy needs."""
        self.state = state
        self.throughput = throughput
        self.seed = seed
        self.rates = RateBook(throughput, state.gpu_types)

    @abc.abstractmethod
    def submit(self, job: TrainingJob, now: float) -> None:
        """A job arrived."""

    @abc.abstractmethod
    def on_finish(self, job_id: str, now: float) -> None:
        """A running job ended (finished or failed); its GPUs are already free."""

    @abc.abstractmethod
    def schedule(self, now: float) -> list[Placement]:
        """Placements to start now; together they must fit the free GPUs."""
