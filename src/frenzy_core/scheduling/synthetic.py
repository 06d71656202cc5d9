"""Synthetic workloads: Poisson arrivals, a model mix and log-normal work, with the default recipe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from frenzy_core import _limits as limits
from frenzy_core._base import FrozenModel
from frenzy_core._limits import at_most
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError, require_instance, require_number, require_seed
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.recipe import default_training

__all__ = ["LogNormalWork", "MixEntry", "synthetic_jobs"]

MAX_JOBS = 2**20
"""Most jobs one call makes (each is a validated model: a million take about a minute)."""


class MixEntry(FrozenModel):
    """One model of a synthetic mix: its weight and, optionally, the allocation its jobs ask for."""

    model: str = Field(description="Model preset name.")
    weight: float = Field(default=1.0, gt=0, description="Relative frequency.")
    num_gpus: Annotated[int | None, at_most(limits.GPUS)] = Field(
        default=None, gt=0, description="GPUs its jobs ask for; None: no request.")
    gpu_type: str | None = Field(default=None, description="GPU type they ask for; None: any.")

    @model_validator(mode="after")
    def _check(self) -> MixEntry:
        if self.gpu_type is not None and self.num_gpus is None:
            raise ValueError(f"gpu_type={self.gpu_type!r} needs num_gpus (a request is a count of that type)")
        return self


class LogNormalWork(FrozenModel):
    """Work in tokens, log-normally distributed (job run times in GPU clusters are heavy-tailed, spanning
    minutes to weeks: Jeon et al., ATC'19; Hu et al., SC'21)."""

    median_tokens: Annotated[float, at_most(limits.TOKENS)] = Field(
        gt=0, description="Median work (exp of the underlying normal's mean).")
    sigma: float = Field(ge=0, le=10, description="Standard deviation of log(work) (10: a factor of 22,000).")


def _job_kind(entry: MixEntry) -> tuple[ModelConfig, TrainingConfig, GPURequest | None]:
    """Model, recipe and request of the jobs of one mix entry (unknown presets or GPU types fail here)."""
    model = ModelConfig.preset(entry.model)
    gpu = None if entry.gpu_type is None else get_gpu_spec(entry.gpu_type)
    request = None if entry.num_gpus is None else GPURequest(num_gpus=entry.num_gpus,
                                                             gpu_type=None if gpu is None else gpu.id)
    return model, default_training(model, gpu), request


def synthetic_jobs(n: int, *, arrival_rate_per_s: float, model_mix: Sequence[MixEntry] | Mapping[str, float],
                   work_distribution: LogNormalWork, seed: int = 0) -> list[TrainingJob]:
    """``n`` jobs with Poisson arrivals (exponential gaps, first arrival after one gap), models drawn from
    ``model_mix`` (entries, or preset name -> weight), log-normal work and the default recipe."""
    require_number("n", n, low=0, high=MAX_JOBS, integer=True)
    require_number("arrival_rate_per_s", arrival_rate_per_s, low=0, low_open=True, high=1e9)
    require_seed(seed)
    require_instance("work_distribution", work_distribution, LogNormalWork)
    if not isinstance(model_mix, (Mapping, Sequence)) or isinstance(model_mix, str):
        raise ConfigError(f"model_mix must map preset names to weights or list MixEntry, got "
                          f"{type(model_mix).__name__}", field="model_mix")
    entries = [MixEntry(model=k, weight=w) for k, w in model_mix.items()] if isinstance(model_mix, Mapping) \
        else list(model_mix)
    if not entries:
        raise ConfigError("model_mix is empty; give at least one model", field="model_mix", value=model_mix)
    kinds = [_job_kind(e) for e in entries]
    weights = np.array([e.weight for e in entries])
    rng = np.random.default_rng(seed)
    arrivals_s = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, size=n))
    picks = rng.choice(len(entries), size=n, p=weights / weights.sum())
    # Capped at the TOKENS bound: a far tail draw must not make a job no model could be asked to train.
    work = np.clip(rng.lognormal(np.log(work_distribution.median_tokens), work_distribution.sigma, size=n),
                   1, limits.TOKENS.high)
    out = []
    for i in range(n):
        model, training, request = kinds[int(picks[i])]
        out.append(TrainingJob(id=f"job-{i}", submit_time_s=float(arrivals_s[i]), model=model,
                               training=training, work_tokens=max(1, round(float(work[i]))), request=request))
    return out
