"""Per-GPU training memory: an analytic estimator (scalar and vectorised) and its result types."""

from frenzy_core.memory.batch import BatchEstimate, estimate_memory_batch
from frenzy_core.memory.estimator import estimate_memory
from frenzy_core.memory.result import MEMORY_CATEGORIES, OVERHEAD_CATEGORIES, MemoryEstimate, StageMemory

__all__ = [
           "MEMORY_CATEGORIES",
           "OVERHEAD_CATEGORIES",
           "BatchEstimate",
           "MemoryEstimate",
           "StageMemory",
           "estimate_memory",
           "estimate_memory_batch",
]
