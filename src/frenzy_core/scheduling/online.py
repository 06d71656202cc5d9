"""``OnlineScheduler``: a policy behind the calls a cluster manager makes, for real clusters and the simulator.

A manager (a Kubernetes operator, a Slurm plugin, :func:`simulate`) tells the scheduler what happened --
``submit(job)``, ``cancel(job_id)``, ``node_down(node)``, ``node_up(node)``, ``job_finished(job_id)`` -- and
calls ``advance(now_s)``: the events are applied at ``now_s`` in the order they were told, a scheduling round
runs, and the actions to carry out come back (``Start``, ``Preempt``, ``Resize``). The scheduler keeps the
books: free GPUs per node, each job's run, progress (from its layout's rate), checkpoints and the GPU time it
held. ``to_json``/``from_json`` save and restore all of it, so a restarted scheduler carries on exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from frenzy_core import _limits as limits
from frenzy_core._files import load_json
from frenzy_core.errors import ConfigError, FrenzyError, require_instance, require_number, require_seed, short_repr
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.scheduling.checkpoint import CheckpointModel
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.messages import Action, Event, Preempt, Resize, Start
from frenzy_core.scheduling.plans import Placement
from frenzy_core.scheduling.policies import POLICIES, get_policy
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.rates import RateBook
from frenzy_core.scheduling.result import JobRecord, JobStatus
from frenzy_core.scheduling.runs import RunningJob, RunTable
from frenzy_core.scheduling.state import ClusterState
from frenzy_core.scheduling.throughput import PlannedThroughput
from frenzy_core.scheduling.workload import ThroughputFn

__all__ = ["JobBooks", "OnlineScheduler", "SchedulerError", "replay"]

STATE_VERSION = 1
"""Version of the ``to_json`` format."""


class SchedulerError(FrenzyError):
    """A policy returned an action the scheduler cannot apply (a bug in the policy), or a call out of order."""


@dataclass
class JobBooks:
    """What happened to one job so far."""

    submit_s: float
    status: str = "queued"
    """queued, running, finished, cancelled or rejected."""
    first_start_s: float | None = None
    finish_s: float | None = None
    gpu_s: float = 0.0
    """GPU-seconds held (stalls and work later lost included)."""
    preemptions: int = 0
    interruptions: int = 0
    """Runs cut short by a node going down."""
    resizes: int = 0
    lost_tokens: float = 0.0
    """Work trained and then lost to interruptions (since the last checkpoint)."""
    done_tokens: float = 0.0
    saved_tokens: float = 0.0
    owed_s: float = 0.0
    """Save time of the last planned stop, paid when the job runs again (its checkpoint must be written)."""
    reason: str | None = None
    last: Placement | None = None


def _check_args(cluster: object, seed: object, throughput: object, checkpoint: object) -> None:
    """ConfigErrors for arguments of the wrong type (a cluster that is no Cluster, a seed that is no int in
    [0, 2^63), a throughput that is no function) before anything is built from them."""
    require_instance("cluster", cluster, Cluster, "use Cluster.preset(name) or Cluster.from_yaml(path)")
    require_seed(seed)
    if throughput is not None and not callable(throughput):
        raise ConfigError(f"throughput must be a function (model, training, gpu, count) -> tokens/s, got "
                          f"{type(throughput).__name__}", field="throughput")
    if checkpoint is not None:
        require_instance("checkpoint", checkpoint, CheckpointModel)


class OnlineScheduler:
    """A scheduling policy driven by a cluster manager's events; see the module docstring and docs/scheduler.md.

    ``node_names`` name the nodes (cluster order, shapes expanded); default ``node:0``, ``node:1``, ... as the
    planner and :mod:`frenzy_core.hardware.topology` name them. ``throughput`` is the rate model (default: the
    planner, :class:`PlannedThroughput`); ``checkpoint`` prices preemption and failures.
    """

    def __init__(self, cluster: Cluster, policy: str | Policy = "frenzy-core", *, seed: int = 0,
                 throughput: ThroughputFn | PlannedThroughput | None = None,
                 checkpoint: CheckpointModel | None = None, node_names: Sequence[str] | None = None):
        _check_args(cluster, seed, throughput, checkpoint)
        self.cluster = cluster
        self.policy = get_policy(policy)
        self.seed = seed
        self.state = ClusterState(cluster)
        count = len(self.state.node_types)
        if node_names is not None and (isinstance(node_names, (str, bytes)) or not isinstance(node_names, Sequence)):
            raise ConfigError(f"node_names must be a list of names, got {type(node_names).__name__}",
                              field="node_names")
        names = [f"node:{i}" for i in range(count)] if node_names is None else [str(n) for n in node_names]
        if len(names) != count or len(set(names)) != count:
            raise ConfigError(f"node_names must name each of the cluster's {count} nodes once, got {len(names)} "
                              f"({len(set(names))} distinct)", field="node_names")
        self.node_names: tuple[str, ...] = tuple(names)
        self._node_index = {n: i for i, n in enumerate(names)}
        self.throughput = throughput if throughput is not None else PlannedThroughput()
        self.checkpoint = checkpoint if checkpoint is not None else CheckpointModel()
        self.rates = RateBook(self.throughput, self.state)
        self.now_s = 0.0
        self.jobs: dict[str, TrainingJob] = {}
        """Every job submitted, as submitted."""
        self.books: dict[str, JobBooks] = {}
        self.running = RunTable(self.state.gpu_types)
        self._pending: list[tuple[str, Any]] = []
        self.policy.start(self.state, self.rates, self.running, self.checkpoint, seed)

    # -- events ------------------------------------------------------------------------------------------------
    def submit(self, job: TrainingJob) -> None:
        """A job arrived (applied at the next ``advance``)."""
        if not isinstance(job, TrainingJob):
            raise ConfigError(f"submit takes a TrainingJob, got {type(job).__name__}", field="job")
        if job.id in self.jobs or any(kind == "submit" and j.id == job.id for kind, j in self._pending):
            raise ConfigError(f"job id {job.id!r} was already submitted; ids must be unique", field="job.id",
                              value=job.id)
        self._pending.append(("submit", job))

    def cancel(self, job_id: str) -> None:
        """Withdraw a queued or running job (a running one's GPUs are freed; the manager stops it)."""
        self._pending.append(("cancel", self._known(job_id)))

    def node_down(self, node: str | int) -> None:
        """A node failed or was drained: jobs with GPUs on it are interrupted (back to their last periodic
        checkpoint) and requeued; ``advance`` returns a Preempt for each so the manager stops their other ranks."""
        self._pending.append(("node_down", self._node(node)))

    def node_up(self, node: str | int) -> None:
        """A node is back, all of its GPUs free."""
        self._pending.append(("node_up", self._node(node)))

    def job_finished(self, job_id: str) -> None:
        """A running job completed its work."""
        self._pending.append(("job_finished", self._known(job_id)))

    def advance(self, now_s: float) -> list[Action]:
        """Apply the events told since the last call at ``now_s``, run one scheduling round, return its actions
        (those the events forced first: Preempt of interrupted jobs)."""
        require_number("now_s", now_s, low=0, high=limits.TIME_S.high)
        if now_s < self.now_s:
            raise ConfigError(f"advance({now_s}) is earlier than the scheduler's clock ({self.now_s})",
                              field="now_s", value=now_s)
        self.now_s = float(now_s)
        out: list[Action] = []
        pending, self._pending = self._pending, []
        for kind, arg in pending:
            if kind == "submit":
                self._on_submit(arg)
            elif kind == "cancel":
                self._on_cancel(arg)
            elif kind == "job_finished":
                self._on_finished(arg)
            elif kind == "node_down":
                out += self._on_node_down(arg)
            else:
                self.state.set_up(arg, True)
        for action in self.policy.schedule(self.now_s):
            self._apply(action)
            out.append(action)
        return out

    # -- inspection ----------------------------------------------------------------------------------------------
    def queued(self) -> list[str]:
        """Ids of the waiting jobs, in the policy's order."""
        return [j.id for j in self.policy.queued()]

    def expected_end_s(self, job_id: str) -> float:
        """When a running job ends if it keeps its GPUs."""
        if self._known(job_id) not in self.running:
            raise ConfigError(f"job {job_id!r} is not running", field="job_id", value=job_id)
        return self.running[job_id].end

    def records(self) -> list[JobRecord]:
        """One record per job submitted so far, in submission order."""
        return [self._record(job_id) for job_id in self.jobs]

    # -- event handling --------------------------------------------------------------------------------------------
    def _known(self, job_id: str) -> str:
        if not isinstance(job_id, str):
            raise ConfigError(f"a job id is a string, got {type(job_id).__name__}", field="job_id", value=job_id)
        if job_id not in self.jobs and not any(k == "submit" and j.id == job_id for k, j in self._pending):
            raise ConfigError(f"unknown job {job_id!r}", field="job_id", value=job_id)
        return job_id

    def _node(self, node: str | int) -> int:
        if isinstance(node, int) and not isinstance(node, bool) and 0 <= node < len(self.node_names):
            return node
        if isinstance(node, str) and node in self._node_index:
            return self._node_index[node]
        raise ConfigError(f"unknown node {node!r}", field="node", value=node,
                          hint=f"use a name such as {self.node_names[0]!r} or an index below {len(self.node_names)}")

    def _on_submit(self, job: TrainingJob) -> None:
        self.jobs[job.id] = job
        self.books[job.id] = JobBooks(submit_s=job.submit_time_s)
        self._resubmit(job)

    def _on_cancel(self, job_id: str) -> None:
        books = self.books[job_id]
        if books.status == "running":
            self._stop(job_id)
            self.policy.on_finish(job_id, self.now_s)
        elif books.status == "queued":
            self.policy.cancel(job_id)
        else:
            return
        books.status, books.reason = "cancelled", "cancelled by the manager"

    def _on_finished(self, job_id: str) -> None:
        books = self.books[job_id]
        if books.status != "running":
            raise SchedulerError(f"job_finished({job_id!r}): the job is {books.status}, not running")
        run = self._stop(job_id)
        books.done_tokens = float(run.job.total_tokens)
        books.status, books.finish_s = "finished", self.now_s
        self.policy.on_finish(job_id, self.now_s)

    def _on_node_down(self, node: int) -> list[Action]:
        if not self.state.up[node]:
            return []
        self.state.set_up(node, False)
        out: list[Action] = []
        for job_id in [j for j, r in self.running.items() if node in r.plan.nodes]:
            books = self.books[job_id]
            run = self.running[job_id]
            kept = run.checkpointed_at(self.now_s, self.checkpoint.interval_s)
            books.lost_tokens += run.tokens_at(self.now_s) - kept
            books.interruptions += 1
            self._stop(job_id)
            books.done_tokens = books.saved_tokens = kept
            books.owed_s = 0.0  # the checkpoint already exists: only the restore is paid
            reason = f"node {self.node_names[node]} down"
            out.append(Preempt(job_id=job_id, reason=reason))
            self._requeue(job_id)
        return out

    def _stop(self, job_id: str) -> RunningJob:
        """Take a job off its GPUs, charging the GPU time it held."""
        run = self.running.pop(job_id)
        self.state.release(run.plan.nodes)
        self.books[job_id].gpu_s += (self.now_s - run.started_s) * run.plan.num_gpus
        return run

    def _requeue(self, job_id: str) -> None:
        books = self.books[job_id]
        books.status = "queued"
        job = self.jobs[job_id]
        left = max(1, round(job.total_tokens - books.done_tokens))
        self._resubmit(job.model_copy(update={"work_tokens": left, "work_iterations": None}))

    def _resubmit(self, job: TrainingJob) -> None:
        """Give the policy a job (new, requeued, or restored with the queue): it queues it, or rejects it with its
        reason, which the books then say; never lost."""
        self.policy.submit(job, self.now_s)
        if job.id in self.policy.rejected:
            books = self.books[job.id]
            books.status, books.reason = "rejected", self.policy.rejected[job.id]

    # -- actions -------------------------------------------------------------------------------------------------
    def _check_plan(self, job_id: str, plan: Placement) -> None:
        problem = self._plan_problem(job_id, plan, self.state.free)
        if problem is not None:
            raise SchedulerError(f"policy {self.policy.name!r} {problem}")

    def _plan_problem(self, job_id: str, plan: Placement, free: np.ndarray) -> str | None:
        """Why ``plan`` cannot run ``job_id`` on the ``free`` GPUs per node (each node, or group's node, of its
        type, none asked beyond what is free), or None."""
        job = self.jobs[job_id]
        if plan.job_id != job_id:
            return f"sent for {job_id!r} the plan of {plan.job_id!r}"
        asked = None if job.request is None else job.request.gpu_type
        if asked is not None and plan.gpu_types != (asked,):
            return f"placed {job_id!r} on {' + '.join(plan.gpu_types)}; it asked for {asked}"
        wanted = plan.node_types()
        for node, count in plan.nodes.items():
            ok = 0 <= node < len(self.state.node_types)
            gpu_type = wanted.get(node)
            if not ok or self.state.node_types[node] != gpu_type or not 0 < count <= free[node]:
                have = (f"{self.state.node_types[node]}, {free[node]} free" if ok else "no such node")
                return f"placed {job_id!r} on node {node} ({have}) asking {count} {gpu_type or 'GPUs of no group'}"
        return None

    def _apply(self, action: Action) -> None:
        job_id = action.job_id
        if job_id not in self.books:
            raise SchedulerError(f"policy {self.policy.name!r} acted on unknown job {job_id!r}")
        books = self.books[job_id]
        if isinstance(action, Start):
            if books.status != "queued":
                raise SchedulerError(f"policy {self.policy.name!r} started {job_id!r}, which is {books.status}")
            self._check_plan(job_id, action.plan)
            self._run(job_id, action.plan, books.owed_s)
            return
        if books.status != "running":
            raise SchedulerError(f"policy {self.policy.name!r}: {action.kind} of {job_id!r}, which is {books.status}")
        run = self._stop(job_id)
        books.done_tokens = books.saved_tokens = run.tokens_at(self.now_s)
        save_s = self.checkpoint.save_s(run.job.model, run.job.training, run.plan.num_gpus)
        if isinstance(action, Preempt):
            books.preemptions += 1
            books.owed_s = save_s
            self._requeue(job_id)
            return
        assert isinstance(action, Resize)
        books.resizes += 1
        self._check_plan(job_id, action.plan)
        self._run(job_id, action.plan, save_s)

    def _run(self, job_id: str, plan: Placement, owed_s: float) -> None:
        books = self.books[job_id]
        job = self.jobs[job_id]
        self.state.take(plan.nodes)
        restore_s = self.checkpoint.restore_s(job.model, job.training, plan.num_gpus) if books.done_tokens else 0.0
        self.running[job_id] = RunningJob(job=job, plan=plan, started_s=self.now_s, stall_s=owed_s + restore_s,
                                          done_tokens=books.done_tokens, saved_tokens=books.saved_tokens)
        books.status, books.owed_s, books.last = "running", 0.0, plan
        if books.first_start_s is None:
            books.first_start_s = self.now_s

    # -- records ---------------------------------------------------------------------------------------------------
    def _record(self, job_id: str) -> JobRecord:
        b, job = self.books[job_id], self.jobs[job_id]
        status = {"finished": JobStatus.FINISHED, "cancelled": JobStatus.CANCELLED}.get(b.status,
                                                                                        JobStatus.UNSCHEDULABLE)
        reason = b.reason
        if status is JobStatus.UNSCHEDULABLE and reason is None:
            reason = "still waiting when no event was left" if b.status == "queued" else f"still {b.status}"
        p = b.last
        return JobRecord.model_construct(  # every value comes from validated objects: no need to check again
            id=job_id, status=status, submit_time_s=job.submit_time_s, start_time_s=b.first_start_s,
            finish_time_s=b.finish_s, gpu_type=None if p is None else "+".join(p.gpu_types),
            num_gpus=None if p is None else p.num_gpus, tokens_per_s=None if p is None else p.tokens_per_s,
            layout=None if p is None else p.describe(), reason=reason, work_tokens=job.total_tokens,
            gpu_seconds=b.gpu_s, preemptions=b.preemptions, interruptions=b.interruptions, resizes=b.resizes,
            lost_tokens=b.lost_tokens, violation=None)

    # -- saving and restoring ----------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """Everything needed to carry on after a restart, as JSON (the throughput model is not saved: pass the
        same one to :meth:`from_json`; it only caches what the planner computes)."""
        policy = self.policy
        if policy.name not in POLICIES:
            raise ConfigError(f"policy {policy.name!r} is not in the registry, so a saved state cannot rebuild it",
                              field="policy")
        running = [{"job_id": j, "plan": r.plan.model_dump(mode="json"), "started_s": r.started_s,
                    "stall_s": r.stall_s, "done_tokens": r.done_tokens, "saved_tokens": r.saved_tokens}
                   for j, r in self.running.items()]
        books = {}
        for j, b in self.books.items():
            entry = asdict(b)
            entry["last"] = None if b.last is None else b.last.model_dump(mode="json")
            books[j] = entry
        pending = [[k, a.model_dump(mode="json", exclude_unset=True) if k == "submit" else a] for k, a in self._pending]
        data = {
            "version": STATE_VERSION, "cluster": self.cluster.to_dict(), "policy": policy.name,
            "policy_params": policy.params(), "seed": self.seed, "checkpoint": self.checkpoint.model_dump(),
            "node_names": list(self.node_names), "now_s": self.now_s, "up": self.state.up.tolist(),
            # exclude_unset: a recipe's explicitly set fields are pinned by the planner, the others searched
            "jobs": [j.model_dump(mode="json", exclude_unset=True) for j in self.jobs.values()], "books": books,
            "running": running,
            "queue": [[j.id, j.total_tokens] for j in policy.queued()], "rejected": policy.rejected,
            "policy_state": policy.saved(),
            "pending": pending,
        }
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str, *, throughput: ThroughputFn | PlannedThroughput | None = None
                  ) -> OnlineScheduler:
        """A scheduler in the state :meth:`to_json` saved; it makes the same decisions the saved one would."""
        if not isinstance(text, (str, bytes)):
            raise ConfigError(f"from_json takes the text to_json wrote, got {type(text).__name__}", field="text")
        raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        data = load_json(raw, "scheduler state")
        try:
            return cls._restore(data, throughput)
        except FrenzyError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # a state edited by hand
            raise ConfigError(f"scheduler state: not what to_json writes ({type(exc).__name__}: "
                              f"{short_repr(str(exc), 200)})", field="text",
                              hint="restore a state saved by OnlineScheduler.to_json, unedited") from None

    @classmethod
    def _restore(cls, data: Any, throughput: ThroughputFn | PlannedThroughput | None) -> OnlineScheduler:
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise ConfigError(f"scheduler state version {short_repr(version)} is not {STATE_VERSION}",
                              field="version")
        policy = POLICIES[data["policy"]](**data["policy_params"])
        out = cls(Cluster.from_dict(data["cluster"]), policy, seed=data["seed"], throughput=throughput,
                  checkpoint=CheckpointModel.model_validate(data["checkpoint"]), node_names=data["node_names"])
        require_number("now_s", data["now_s"], low=0, high=limits.TIME_S.high)
        out.now_s = float(data["now_s"])
        for node, up in enumerate(data["up"]):
            if not up:
                out.state.set_up(node, False)
        out.jobs = {j["id"]: TrainingJob.model_validate(j) for j in data["jobs"]}
        for job_id, entry in data["books"].items():
            last = entry.pop("last")
            out.books[job_id] = JobBooks(**entry, last=None if last is None else Placement.model_validate(last))
        for entry in data["running"]:
            plan = Placement.model_validate(entry.pop("plan"))
            job_id = entry.pop("job_id")
            problem = out._plan_problem(job_id, plan, out.state.free)
            if problem is not None:
                raise ConfigError(f"scheduler state: running job {job_id!r}: the plan {problem}",
                                  field="running.plan", hint="restore a state saved by OnlineScheduler.to_json, "
                                  "unedited")
            out.state.take(plan.nodes)
            out.running[job_id] = RunningJob(job=out.jobs[job_id], plan=plan, **entry)
        policy.restore(data["policy_state"])
        policy.rejected = dict(data["rejected"])
        for job_id, tokens in data["queue"]:
            job = out.jobs[job_id]
            if tokens != job.total_tokens:
                job = job.model_copy(update={"work_tokens": tokens, "work_iterations": None})
            out._resubmit(job)
        out._pending = [(k, TrainingJob.model_validate(a) if k == "submit" else a) for k, a in data["pending"]]
        return out


def replay(scheduler: OnlineScheduler, events: Sequence[Event]) -> list[list[Action]]:
    """Feed a recorded event stream to ``scheduler``; the actions of each ``advance`` (for comparing a
    scheduler with the simulation that recorded the stream)."""
    out: list[list[Action]] = []
    for e in events:
        if e.kind == "submit":
            assert e.job is not None
            scheduler.submit(e.job)
        elif e.kind == "advance":
            out.append(scheduler.advance(e.time_s))
        elif e.kind in ("node_down", "node_up"):
            getattr(scheduler, e.kind)(e.node)
        else:
            getattr(scheduler, e.kind)(e.job_id)
    return out
