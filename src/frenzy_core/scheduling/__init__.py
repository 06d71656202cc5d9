"""Multi-job scheduling: training jobs, cluster traces, trace-to-LLM-job mapping, workloads, simulation."""

from frenzy_core.scheduling.checkpoint import CheckpointModel
from frenzy_core.scheduling.failures import FailureModel
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.messages import Action, Event, Preempt, Resize, Start
from frenzy_core.scheduling.online import OnlineScheduler, SchedulerError, replay
from frenzy_core.scheduling.plans import Placement, RunLayout
from frenzy_core.scheduling.policies import POLICIES, get_policy
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.report import compare, plot_results
from frenzy_core.scheduling.result import JobRecord, JobStatus, SimulationResult, Utilisation
from frenzy_core.scheduling.runs import RunningJob
from frenzy_core.scheduling.simulator import simulate
from frenzy_core.scheduling.state import ClusterState
from frenzy_core.scheduling.synthetic import LogNormalWork, MixEntry, synthetic_jobs
from frenzy_core.scheduling.throughput import GPUGroup, PlannedThroughput
from frenzy_core.scheduling.traces import (
    OnError,
    SkippedRow,
    TraceFormat,
    TraceJob,
    TraceLoad,
    TraceWarning,
    load_trace,
    read_trace,
)
from frenzy_core.scheduling.workload import DEFAULT_SIZE_BUCKETS, SizeBucket, ThroughputFn, jobs_from_trace

__all__ = [
    "DEFAULT_SIZE_BUCKETS",
    "POLICIES",
    "Action",
    "CheckpointModel",
    "ClusterState",
    "Event",
    "FailureModel",
    "GPUGroup",
    "GPURequest",
    "JobRecord",
    "JobStatus",
    "LogNormalWork",
    "MixEntry",
    "OnError",
    "OnlineScheduler",
    "Placement",
    "PlannedThroughput",
    "Policy",
    "Preempt",
    "Resize",
    "RunLayout",
    "RunningJob",
    "SchedulerError",
    "SimulationResult",
    "SizeBucket",
    "SkippedRow",
    "Start",
    "ThroughputFn",
    "TraceFormat",
    "TraceJob",
    "TraceLoad",
    "TraceWarning",
    "TrainingJob",
    "Utilisation",
    "compare",
    "get_policy",
    "jobs_from_trace",
    "load_trace",
    "plot_results",
    "read_trace",
    "replay",
    "simulate",
    "synthetic_jobs",
]
