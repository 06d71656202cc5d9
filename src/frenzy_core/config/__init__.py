"""Validated configuration models: the model, the training recipe and the parallel layout."""

from frenzy_core.config.layout import global_batch_size, num_microbatches, validate_layout
from frenzy_core.config.model import (
    ArchKind,
    MLPKind,
    ModelConfig,
    MoEConfig,
    NormKind,
    PositionEmbedding,
    RopeScaling,
)
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.params import ParamCounts, count_parameters
from frenzy_core.config.training import (
    Attention,
    Framework,
    Optimizer,
    OptimizerImpl,
    Precision,
    Recompute,
    RecomputeMethod,
    TrainingConfig,
)

__all__ = [
    "ArchKind",
    "Attention",
    "Framework",
    "MLPKind",
    "MoEConfig",
    "ModelConfig",
    "NormKind",
    "Optimizer",
    "OptimizerImpl",
    "ParallelConfig",
    "ParamCounts",
    "PipelineSchedule",
    "PositionEmbedding",
    "Precision",
    "Recompute",
    "RecomputeMethod",
    "RopeScaling",
    "TrainingConfig",
    "count_parameters",
    "global_batch_size",
    "num_microbatches",
    "validate_layout",
]
