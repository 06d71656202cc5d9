"""frenzy_core: how much memory each GPU of an LLM training job needs, and which GPUs and layout it should get.

Everything public is importable from here; see ``__all__``.
"""

from frenzy_core.config import (
    ArchKind,
    Attention,
    Framework,
    LayoutArrays,
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
    default_global_batch,
    validate_layout,
)
from frenzy_core.config.megatron import MegatronJob, from_megatron_args, parse_megatron_args
from frenzy_core.config.megatron_writer import to_megatron_args
from frenzy_core.errors import (
    ConfigError,
    FrenzyError,
    InfeasiblePlanError,
    OptionalDependencyError,
    UnknownNameError,
)
from frenzy_core.hardware import Cluster, ClusterSummary, GPUSpec, LinkKind, Links, Node, get_gpu_spec, load_gpu_specs
from frenzy_core.memory import BatchEstimate, estimate_memory, estimate_memory_batch
from frenzy_core.memory.probe import PhasePeak, ProbeResult, measure_training_step, probe_memory
from frenzy_core.memory.result import MemoryEstimate, StageMemory
from frenzy_core.planning import Objective, Plan, PlanConstraints, plan_job

# -- exports added by subpackages below (one import per line) --
from frenzy_core.scheduling import (
    POLICIES,
    GPURequest,
    SimulationResult,
    TraceFormat,
    TraceJob,
    TrainingJob,
    compare,
    jobs_from_trace,
    load_trace,
    read_trace,
    simulate,
    synthetic_jobs,
)
from frenzy_core.timing import (
    CalibrationResult,
    Measurement,
    TimeEstimate,
    TimeModelParams,
    calibrate,
    estimate_iteration_time,
    estimate_iteration_time_batch,
)

__version__ = "0.1.0"

__all__ = [
    # -- names added by subpackages below --
    "POLICIES",
    "ArchKind",
    "Attention",
    "BatchEstimate",
    "CalibrationResult",
    "Cluster",
    "ClusterSummary",
    "ConfigError",
    "Framework",
    "FrenzyError",
    "GPURequest",
    "GPUSpec",
    "InfeasiblePlanError",
    "LayoutArrays",
    "LinkKind",
    "Links",
    "MLPKind",
    "Measurement",
    "MegatronJob",
    "MemoryEstimate",
    "MoEConfig",
    "ModelConfig",
    "Node",
    "NormKind",
    "Objective",
    "Optimizer",
    "OptimizerImpl",
    "OptionalDependencyError",
    "ParallelConfig",
    "PhasePeak",
    "PipelineSchedule",
    "Plan",
    "PlanConstraints",
    "PositionEmbedding",
    "Precision",
    "ProbeResult",
    "Recompute",
    "RecomputeMethod",
    "SimulationResult",
    "StageMemory",
    "TimeEstimate",
    "TimeModelParams",
    "TraceFormat",
    "TraceJob",
    "TrainingConfig",
    "TrainingJob",
    "UnknownNameError",
    "calibrate",
    "compare",
    "count_parameters",
    "default_global_batch",
    "estimate_iteration_time",
    "estimate_iteration_time_batch",
    "estimate_memory",
    "estimate_memory_batch",
    "from_megatron_args",
    "get_gpu_spec",
    "jobs_from_trace",
    "load_gpu_specs",
    "load_trace",
    "measure_training_step",
    "parse_megatron_args",
    "plan_job",
    "probe_memory",
    "read_trace",
    "simulate",
    "synthetic_jobs",
    "to_megatron_args",
    "validate_layout",
]
