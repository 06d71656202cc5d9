"""The policy interface every scheduler implements (the registry is ``frenzy_core.scheduling.policies``).

An :class:`~frenzy_core.scheduling.OnlineScheduler` owns the cluster state and the running jobs; it calls
``start`` once, then, at each ``advance``, ``on_finish`` for jobs that ended, ``submit`` for jobs that arrived
(and for preempted or interrupted jobs, with their remaining work), ``cancel`` for withdrawn ones, and
``schedule`` for the round's actions. A policy never changes the state itself: it reads ``state`` (or a copy)
and ``running``, and returns actions, which the scheduler checks and applies in order.
"""

from __future__ import annotations

import abc
from typing import Any

from frenzy_core.scheduling.checkpoint import CheckpointModel
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action
from frenzy_core.scheduling.rates import RateBook
from frenzy_core.scheduling.runs import RunTable
from frenzy_core.scheduling.state import ClusterState

__all__ = ["Policy"]


class Policy(abc.ABC):
    """A scheduling policy. ``rejected`` maps job ids the policy will never place to the reason."""

    name: str
    """Registry name, e.g. ``fifo-requested``."""
    state: ClusterState
    """The cluster's free GPUs (set by :meth:`start`; the scheduler updates it)."""
    rates: RateBook
    """Tokens/s per job, GPU type and count, and placements re-planned on free GPUs (set by :meth:`start`)."""
    running: RunTable
    """The running jobs by id (set by :meth:`start`; the scheduler updates it)."""
    checkpoint: CheckpointModel
    """What stopping a job costs (set by :meth:`start`)."""
    seed: int
    """Seed for randomised policies (set by :meth:`start`)."""

    def __init__(self) -> None:
        self.rejected: dict[str, str] = {}

    def params(self) -> dict[str, Any]:
        """Constructor arguments that rebuild this policy (saved with a scheduler's state)."""
        return {}

    def start(self, state: ClusterState, rates: RateBook, running: RunTable,
              checkpoint: CheckpointModel, seed: int) -> None:
        """Called once before the first event; keeps what the policy needs."""
        self.state = state
        self.rates = rates
        self.running = running
        self.checkpoint = checkpoint
        self.seed = seed

    @abc.abstractmethod
    def submit(self, job: TrainingJob, now: float) -> None:
        """A job arrived, or came back with ``job.total_tokens`` left to train (preempted or interrupted)."""

    @abc.abstractmethod
    def cancel(self, job_id: str) -> None:
        """A queued job was withdrawn."""

    @abc.abstractmethod
    def on_finish(self, job_id: str, now: float) -> None:
        """A running job ended or was cancelled; its GPUs are already free."""

    @abc.abstractmethod
    def schedule(self, now: float) -> list[Action]:
        """Actions for now, applied in order: each Start or Resize must fit the GPUs free after the ones before."""

    def saved(self) -> dict[str, Any]:
        """Internal state beyond the queue that a restored policy needs to decide the same (plain JSON data)."""
        return {}

    def restore(self, data: dict[str, Any]) -> None:
        """Take back what :meth:`saved` returned (called before the queue is resubmitted)."""
        if data:
            raise NotImplementedError(f"policy {self.name!r} saved state it cannot restore")

    def queued(self) -> list[TrainingJob]:
        """The waiting jobs, in the policy's order (saved with a scheduler's state; resubmitted in this order)."""
        raise NotImplementedError(f"policy {self.name!r} does not list its queue, so its state cannot be saved")
