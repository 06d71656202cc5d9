"""frenzy_core: how much memory each GPU of an LLM training job needs, and which GPUs and layout it should get.

Everything public is importable from here; see ``__all__``.
"""

from frenzy_core.config import (
    ArchKind,
    Attention,
    Framework,
    MLPKind,
    ModelConfig,
    MoEConfig,
    NormKind,
    Optimizer,
    OptimizerImpl,
    ParallelConfig,
    PipelineSchedule,
    PositionEmbedding,
    Precision,
    Recompute,
    RecomputeMethod,
    TrainingConfig,
    count_parameters,
    validate_layout,
)
from frenzy_core.errors import (
    ConfigError,
    FrenzyError,
    InfeasiblePlanError,
    OptionalDependencyError,
    UnknownNameError,
)
from frenzy_core.memory.result import MemoryEstimate, StageMemory
# -- exports added by subpackages below (one import per line) --
from frenzy_core.scheduling import POLICIES, compare
from frenzy_core.memory.probe import PhasePeak, ProbeResult, measure_training_step, probe_memory
from frenzy_core.memory import BatchEstimate, estimate_memory, estimate_memory_batch
from frenzy_core.planning import Objective, Plan, PlanConstraints, plan_job
from frenzy_core.timing import TimeEstimate, TimeModelParams, estimate_iteration_time, estimate_iteration_time_batch
from frenzy_core.timing import CalibrationResult, Measurement, calibrate
from frenzy_core.scheduling import GPURequest, SimulationResult, TraceFormat, TraceJob, TrainingJob, jobs_from_trace, load_trace, read_trace, simulate, synthetic_jobs
from frenzy_core.config.megatron import MegatronJob, from_megatron_args, parse_megatron_args, to_megatron_args
from frenzy_core.hardware import GPUSpec, LinkKind, get_gpu_spec, load_gpu_specs
from frenzy_core.hardware import Cluster, ClusterSummary, Node

__version__ = "0.1.0"

__all__ = [
    "ArchKind", "Attention", "ConfigError", "Framework", "FrenzyError", "InfeasiblePlanError", "MLPKind",
    "MemoryEstimate", "ModelConfig", "MoEConfig", "NormKind", "Optimizer", "OptimizerImpl",
    "OptionalDependencyError", "ParallelConfig", "PipelineSchedule", "PositionEmbedding", "Precision", "Recompute",
    "RecomputeMethod", "StageMemory", "TrainingConfig", "UnknownNameError", "count_parameters", "validate_layout",
    # -- names added by subpackages below --
    "POLICIES", "compare",
    "PhasePeak", "ProbeResult", "measure_training_step", "probe_memory",
    "BatchEstimate", "estimate_memory", "estimate_memory_batch",
    "Objective", "Plan", "PlanConstraints", "plan_job",
    "TimeEstimate", "TimeModelParams", "estimate_iteration_time", "estimate_iteration_time_batch",
    "CalibrationResult", "Measurement", "calibrate",
    "GPURequest", "SimulationResult", "TraceFormat", "TraceJob", "TrainingJob", "jobs_from_trace", "load_trace",
    "read_trace", "simulate", "synthetic_jobs",
    "MegatronJob", "from_megatron_args", "parse_megatron_args", "to_megatron_args",
    "GPUSpec", "LinkKind", "get_gpu_spec", "load_gpu_specs",
    "Cluster", "ClusterSummary", "Node",
]
