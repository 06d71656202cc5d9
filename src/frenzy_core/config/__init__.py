"""Validated configuration models: the model, the training recipe and the parallel layout; layouts as arrays
and the rules they must satisfy."""

from frenzy_core.config.arrays import LAYOUT_COLUMNS, LayoutArrays
from frenzy_core.config.batch import DEFAULT_BATCH_TOKENS, DefaultBatch, default_batch, default_global_batch
from frenzy_core.config.layout import (
    LAYOUT_RULES,
    LayoutRule,
    global_batch_size,
    layout_mask,
    num_microbatches,
    validate_layout,
)
from frenzy_core.config.model import (
    ArchKind,
    MLAConfig,
    MLPKind,
    ModelConfig,
    MoEConfig,
    NormKind,
    NormPlacement,
    PositionEmbedding,
    QKNormScope,
    RopeScaling,
)
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.params import ParamCounts, count_parameters
from frenzy_core.config.training import (
    Attention,
    Fp8Recipe,
    Framework,
    Optimizer,
    OptimizerImpl,
    Precision,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    TrainingConfig,
)

__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "LAYOUT_COLUMNS",
    "LAYOUT_RULES",
    "ArchKind",
    "Attention",
    "DefaultBatch",
    "Fp8Recipe",
    "Framework",
    "LayoutArrays",
    "LayoutRule",
    "MLAConfig",
    "MLPKind",
    "MoEConfig",
    "ModelConfig",
    "NormKind",
    "NormPlacement",
    "Optimizer",
    "OptimizerImpl",
    "ParallelConfig",
    "ParamCounts",
    "PipelineSchedule",
    "PositionEmbedding",
    "Precision",
    "QKNormScope",
    "Recompute",
    "RecomputeMethod",
    "RecomputeModule",
    "RopeScaling",
    "TrainingConfig",
    "count_parameters",
    "default_batch",
    "default_global_batch",
    "global_batch_size",
    "layout_mask",
    "num_microbatches",
    "validate_layout",
]
