"""What a cluster manager and an :class:`~frenzy_core.scheduling.OnlineScheduler` say to each other.

Actions (scheduler -> manager): ``Start`` a queued job on a placement, ``Preempt`` a running one (it saves a
checkpoint and goes back to the queue), ``Resize`` a running one onto another placement (checkpoint, restart
with a new layout). Events (manager -> scheduler) are the calls ``submit``, ``cancel``, ``node_down``,
``node_up``, ``job_finished`` and ``advance``; :class:`Event` records one, so that a stream can be replayed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.plans import Placement

__all__ = ["Action", "Event", "Preempt", "Resize", "Start"]


class Start(FrozenModel):
    """Start a queued job on ``plan`` (its GPUs and the layout that fits them)."""

    kind: Literal["start"] = "start"
    job_id: str
    plan: Placement


class Preempt(FrozenModel):
    """Stop a running job and requeue it; ``reason`` says why (a policy's choice, or a node that went down, in
    which case the job restarts from its last periodic checkpoint)."""

    kind: Literal["preempt"] = "preempt"
    job_id: str
    reason: str


class Resize(FrozenModel):
    """Move a running job onto ``plan``: it checkpoints, stops, and restarts there with ``plan``'s layout."""

    kind: Literal["resize"] = "resize"
    job_id: str
    plan: Placement


Action = Start | Preempt | Resize
"""One decision of a scheduling round."""


class Event(FrozenModel):
    """One call a manager made on the scheduler, for replaying a stream (``simulate(..., events=[])``)."""

    kind: Literal["submit", "cancel", "node_down", "node_up", "job_finished", "advance"]
    time_s: float = Field(description="The scheduler's clock when the call was made (advance: its argument).")
    job: TrainingJob | None = Field(default=None, description="submit: the job.")
    job_id: str | None = Field(default=None, description="cancel, job_finished: the job.")
    node: str | None = Field(default=None, description="node_down, node_up: the node's name.")
    actions: list[Start | Preempt | Resize] = Field(default_factory=list, description="advance: what it returned.")
