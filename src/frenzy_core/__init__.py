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

__version__ = "0.1.0"

__all__ = [
    "ArchKind", "Attention", "ConfigError", "Framework", "FrenzyError", "InfeasiblePlanError", "MLPKind",
    "MemoryEstimate", "ModelConfig", "MoEConfig", "NormKind", "Optimizer", "OptimizerImpl",
    "OptionalDependencyError", "ParallelConfig", "PipelineSchedule", "PositionEmbedding", "Precision", "Recompute",
    "RecomputeMethod", "StageMemory", "TrainingConfig", "UnknownNameError", "count_parameters", "validate_layout",
    # -- names added by subpackages below --
]
