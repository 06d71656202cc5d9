"""``RateBook``: what each GPU type and count would give a job (tokens/s), looked up once per job.

The one place that turns a :data:`ThroughputFn` into numpy arrays for the policies: a vectorised curve when
the function offers one (:class:`ThroughputCurve`), one call per count otherwise (stubs in tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import InfeasiblePlanError
from frenzy_core.scheduling.jobs import TrainingJob
from frenzy_core.scheduling.throughput import ThroughputCurve
from frenzy_core.scheduling.workload import ThroughputFn

__all__ = ["JobOptions", "RateBook", "power_of_two_counts"]


def power_of_two_counts(limit: int, extra: Sequence[int] = ()) -> list[int]:
    """1, 2, 4, ... up to ``limit``, plus the ``extra`` counts within it, sorted (the counts policies weigh:
    powers of two match Megatron's usual data-parallel degrees, extras keep a user's own request)."""
    counts = {1 << i for i in range(max(limit, 1).bit_length()) if (1 << i) <= limit}
    counts |= {c for c in extra if 0 < c <= limit}
    return sorted(counts)


@dataclass(frozen=True)
class JobOptions:
    """The allocations one job fits in memory: parallel arrays, one row per (GPU type, count)."""

    gpu: np.ndarray
    """Index into the cluster's GPU types."""
    count: np.ndarray
    tokens_per_s: np.ndarray
    run_s: np.ndarray
    """Seconds the job's whole work takes on the option."""

    def __len__(self) -> int:
        return int(self.gpu.shape[0])


class RateBook:
    """Tokens/s per (job, GPU type, count), cached per (model, recipe, type, count)."""

    def __init__(self, throughput: ThroughputFn, gpu_types: Sequence[str]):
        self.throughput = throughput
        self.gpu_types = tuple(gpu_types)
        self._rates: dict[tuple[ModelConfig, TrainingConfig, str, int], float] = {}

    def rate(self, job: TrainingJob, gpu_type: str, num_gpus: int) -> float | None:
        """Tokens/s of ``num_gpus`` ``gpu_type`` GPUs for the job; None when no layout fits in memory."""
        value = float(self.rates(job, gpu_type, [num_gpus])[0])
        return None if math.isnan(value) else value

    def layout(self, job: TrainingJob, gpu_type: str, num_gpus: int) -> str | None:
        """The layout the job would run with, in words, when the throughput function names it."""
        if isinstance(self.throughput, ThroughputCurve):
            return self.throughput.layout(job.model, job.training, gpu_type, num_gpus)
        return None

    def rates(self, job: TrainingJob, gpu_type: str, counts: Sequence[int]) -> np.ndarray:
        """Tokens/s per count (NaN where no layout fits)."""
        if not counts:
            return np.zeros(0)
        if isinstance(self.throughput, ThroughputCurve):
            curve = self.throughput.curve(job.model, job.training, gpu_type, max(counts))
            return np.asarray(curve[np.asarray(counts)], dtype=np.float64)
        out = np.empty(len(counts))
        for i, n in enumerate(counts):
            key = (job.model, job.training, gpu_type, n)
            if key not in self._rates:
                try:
                    self._rates[key] = float(self.throughput(job.model, job.training, gpu_type, n))
                except InfeasiblePlanError:
                    self._rates[key] = math.nan
            out[i] = self._rates[key]
        return out

    def options(self, job: TrainingJob, counts_per_type: Sequence[Sequence[int]]) -> JobOptions:
        """Every (type, count) of ``counts_per_type`` (one list per GPU type) that fits the job in memory."""
        gpu, count, rate = [], [], []
        for g, counts in enumerate(counts_per_type):
            r = self.rates(job, self.gpu_types[g], list(counts))
            ok = np.isfinite(r) & (r > 0)
            gpu.append(np.full(int(ok.sum()), g, dtype=np.int64))
            count.append(np.asarray(counts, dtype=np.int64)[ok])
            rate.append(r[ok])
        tokens = np.concatenate(rate) if rate else np.zeros(0)
        return JobOptions(gpu=np.concatenate(gpu) if gpu else np.zeros(0, np.int64),
                          count=np.concatenate(count) if count else np.zeros(0, np.int64),
                          tokens_per_s=tokens, run_s=job.total_tokens / tokens if tokens.size else tokens)
