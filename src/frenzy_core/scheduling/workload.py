"""From cluster-trace jobs to LLM training jobs: ``jobs_from_trace``.

The mapping (documented in ``docs/traces.md``): the GPUs a trace job asked for choose a model-size bucket,
a preset is drawn from the bucket with a per-job seeded generator, the job gets the default recipe, and its
work is the tokens that allocation would have trained in the recorded duration on the trace's GPU type, by the
throughput function (the fastest layout that fits, by frenzy_core's time and memory models by default).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError, InfeasiblePlanError, require_instance, require_seed
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.recipe import default_training
from frenzy_core.scheduling.traces.records import TraceFormat, TraceJob

__all__ = ["DEFAULT_SIZE_BUCKETS", "HIGH_PRIORITY_JOB_TYPES", "REFERENCE_GPUS", "SizeBucket", "ThroughputFn",
           "default_throughput", "jobs_from_trace"]

ThroughputFn = Callable[[ModelConfig, TrainingConfig, str, int], float]
"""(model, training, GPU type id, GPU count) -> tokens per second of the fastest layout that fits;
raises :class:`InfeasiblePlanError` when no layout fits."""


class SizeBucket(FrozenModel):
    """Jobs asking for at most ``max_gpus`` GPUs (more than the bucket before) train one of ``presets``."""

    max_gpus: int | None = Field(gt=0, description="Largest request in the bucket; None: no limit (last).")
    presets: list[str] = Field(min_length=1, description="Model preset names drawn from, uniformly.")


DEFAULT_SIZE_BUCKETS: tuple[SizeBucket, ...] = (
    SizeBucket(max_gpus=1, presets=["gpt2", "gpt2-medium", "qwen2.5-0.5b"]),
    SizeBucket(max_gpus=4, presets=["gpt3-1.3b", "opt-1.3b", "pythia-1.4b", "qwen2.5-1.5b"]),
    SizeBucket(max_gpus=8, presets=["llama-2-7b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b"]),
    SizeBucket(max_gpus=32, presets=["gpt3-13b", "llama-2-13b"]),
    SizeBucket(max_gpus=None, presets=["llama-2-70b", "llama-3.1-70b", "qwen2.5-72b"]),
)
"""Request size -> model size, our choice: roughly the largest model whose mixed-precision Adam state
(16-18 bytes per parameter) fits the request's memory on 16-32 GB GPUs, the sizes the LLM literature trains
on such allocations (0.1-0.5B on one GPU, 1.3-1.5B on 2-4, 7-8B on a node of 8, 13B on 2-4 nodes, 70B beyond).
Dense decoder presets only; a job falls back to smaller buckets when no model of its own fits."""

REFERENCE_GPUS: Mapping[TraceFormat, str] = {
    TraceFormat.PHILLY: "v100-32gb",
    TraceFormat.SIA: "v100-32gb",
    TraceFormat.HELIOS: "v100-32gb",
    TraceFormat.ALIBABA_SPOT: "a100-80gb",
}
"""GPU type a trace's durations are converted on when its row names none the catalogue knows; our choice.
Philly (2017), the Sia/Pollux workloads derived from it, and Helios (2020) ran on Pascal/Volta-era servers:
the catalogue's 32 GB V100 stands in for them. The Alibaba 2026 fleet is mostly A100/H-class; anonymised
models ("GPU-series-1") become the 80 GB A100."""

HIGH_PRIORITY_JOB_TYPES: frozenset[str] = frozenset({"hp"})
"""Trace job types (lower-case) that become priority 1; others get 0. Alibaba spot: "HP" (high-priority, with
SLOs) versus "Spot" (opportunistic), per the trace's README."""


def _bucket_order(buckets: Sequence[SizeBucket], num_gpus: int) -> list[int]:
    """The bucket a request falls in, then every smaller one, largest first (fallbacks when nothing fits)."""
    for i, bucket in enumerate(buckets):
        if bucket.max_gpus is None or num_gpus <= bucket.max_gpus:
            return list(range(i, -1, -1))
    return list(range(len(buckets) - 1, -1, -1))


def _check_buckets(buckets: Sequence[SizeBucket]) -> None:
    if not buckets:
        raise ConfigError("buckets is empty; give at least one SizeBucket", field="buckets", value=[])
    limits = [b.max_gpus for b in buckets]
    if any(m is None for m in limits[:-1]):
        raise ConfigError("only the last bucket may have max_gpus=None", field="buckets", value=limits)
    finite = [m for m in limits if m is not None]
    if finite != sorted(set(finite)):
        raise ConfigError(f"bucket max_gpus must increase strictly, got {limits}", field="buckets",
                          value=limits)
    known = set(ModelConfig.presets())
    for bucket in buckets:
        for name in bucket.presets:
            if name not in known:
                ModelConfig.preset(name)  # raises UnknownNameError with suggestions


def _job_rng(seed: int, job_id: str) -> random.Random:
    """A generator per job, so that a job's mapping depends on the seed and its id only, not on other jobs
    (string seeds are hashed with SHA-512: the same on every platform and Python version since 3.2)."""
    return random.Random(f"{seed}:{job_id}")


def _reference_gpu(job: TraceJob, reference_gpu: str | None) -> tuple[str, bool]:
    """(GPU type id, whether the trace named it): the override, else the row's type if catalogued, else the
    format's reference GPU."""
    if reference_gpu is not None:
        return get_gpu_spec(reference_gpu).id, False
    if job.gpu_type is not None:
        try:
            return get_gpu_spec(job.gpu_type).id, True
        except ConfigError:
            pass
    return REFERENCE_GPUS[job.source], False


def default_throughput(model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
    """Tokens per second of the fastest layout of ``num_gpus`` ``gpu_type`` GPUs that fits, by frenzy_core's
    planner (analytic memory and time models)."""
    from frenzy_core.scheduling.throughput import planned_tokens_per_s

    return planned_tokens_per_s(model, training, gpu_type, num_gpus)


class _Rates:
    """Presets, recipes and throughputs, each computed once per key (a trace has few distinct ones)."""

    def __init__(self, throughput: ThroughputFn):
        self.throughput = throughput
        self.models: dict[str, ModelConfig] = {}
        self.recipes: dict[tuple[str, str], TrainingConfig] = {}
        self.rates: dict[tuple[str, str, int], float | None] = {}

    def recipe(self, name: str, gpu_id: str) -> TrainingConfig:
        """The default recipe of preset ``name`` on GPUs of type ``gpu_id`` (one object per key, so that jobs of
        the same model share it)."""
        key = (name, gpu_id)
        if key not in self.recipes:
            model = self.models.setdefault(name, ModelConfig.preset(name))
            self.recipes[key] = default_training(model, get_gpu_spec(gpu_id))
        return self.recipes[key]

    def tokens_per_s(self, name: str, gpu_id: str, num_gpus: int) -> float | None:
        """Throughput of the preset on ``num_gpus`` GPUs of ``gpu_id``; None when no layout fits."""
        key = (name, gpu_id, num_gpus)
        if key not in self.rates:
            training = self.recipe(name, gpu_id)
            try:
                self.rates[key] = self.throughput(self.models[name], training, gpu_id, num_gpus)
            except InfeasiblePlanError:
                self.rates[key] = None
        return self.rates[key]


def _choose_model(job: TraceJob, gpu_id: str, buckets: Sequence[SizeBucket], rates: _Rates,
                  seed: int) -> tuple[str, float]:
    """(preset, tokens/s): a seeded shuffle of the job's bucket, then of each smaller one; the first that fits."""
    rng = _job_rng(seed, job.id)
    for b in _bucket_order(buckets, job.num_gpus):
        for name in rng.sample(buckets[b].presets, len(buckets[b].presets)):
            tps = rates.tokens_per_s(name, gpu_id, job.num_gpus)
            if tps is not None:
                return name, tps
    raise InfeasiblePlanError(f"trace job {job.id!r}: no bucket model fits {job.num_gpus} x {gpu_id}",
                              suggestions=["add a smaller preset to the first bucket",
                                           "pass a GPU with more memory as reference_gpu"])


def jobs_from_trace(trace_jobs: Sequence[TraceJob], *, seed: int = 0, cluster: Cluster | None = None,
                    throughput: ThroughputFn | None = None,
                    buckets: Sequence[SizeBucket] = DEFAULT_SIZE_BUCKETS, reference_gpu: str | None = None,
                    default_duration_s: float | None = None) -> list[TrainingJob]:
    """One LLM training job per trace job, in the same order; same seed, same jobs.

    ``cluster``: where the jobs will run; a GPU type the trace names but the cluster lacks is dropped from the
    request (any type will do). ``throughput`` defaults to :func:`default_throughput`; ``reference_gpu``
    overrides the GPU type durations are converted on; ``default_duration_s`` is used for jobs whose trace
    records no duration (Sia).
    """
    require_seed(seed)
    if isinstance(trace_jobs, (str, bytes, Mapping)) or not isinstance(trace_jobs, Sequence):
        raise ConfigError(f"trace_jobs must be a list of TraceJob, got {type(trace_jobs).__name__}",
                          field="trace_jobs", hint="read them with load_trace")
    for i, job in enumerate(trace_jobs):
        require_instance(f"trace_jobs[{i}]", job, TraceJob)
    if cluster is not None:
        require_instance("cluster", cluster, Cluster)
    _check_buckets(buckets)
    if default_duration_s is not None and not default_duration_s > 0:
        raise ConfigError(f"default_duration_s={default_duration_s} must be > 0", field="default_duration_s",
                          value=default_duration_s)
    rates = _Rates(throughput or default_throughput)
    present = None if cluster is None else set(cluster.gpu_types)
    out: list[TrainingJob] = []
    for job in trace_jobs:
        duration_s = job.duration_s if job.duration_s is not None else default_duration_s
        if duration_s is None:
            raise ConfigError(f"trace job {job.id!r} ({job.source.value}) records no duration",
                              field="duration_s", value=None,
                              hint="pass default_duration_s to give such jobs a run time")
        gpu_id, named = _reference_gpu(job, reference_gpu)
        name, tps = _choose_model(job, gpu_id, buckets, rates, seed)
        requested_type = gpu_id if named and (present is None or gpu_id in present) else None
        high = job.job_type is not None and job.job_type.lower() in HIGH_PRIORITY_JOB_TYPES
        out.append(TrainingJob(
            id=job.id, submit_time_s=job.submit_time_s, model=rates.models[name],
            training=rates.recipe(name, gpu_id), work_tokens=max(1, round(tps * duration_s)),
            request=GPURequest(num_gpus=job.num_gpus, gpu_type=requested_type), priority=1 if high else 0,
        ))
    return out
