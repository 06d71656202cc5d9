"""Trace-to-LLM-job mapping (stub throughput), TrainingJob validation, and the synthetic generator."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import (
    Cluster,
    ConfigError,
    InfeasiblePlanError,
    ModelConfig,
    Precision,
    TrainingConfig,
    UnknownNameError,
)
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.synthetic import LogNormalWork, MixEntry, synthetic_jobs
from frenzy_core.scheduling.traces import TraceFormat, TraceJob
from frenzy_core.scheduling.workload import DEFAULT_SIZE_BUCKETS, SizeBucket, jobs_from_trace


class StubThroughput:
    """tokens/s = 1000 x GPUs, except for the names it is told do not fit; records every call."""

    def __init__(self, infeasible: frozenset[str] = frozenset()):
        self.infeasible = infeasible
        self.calls: list[tuple[str | None, str, int, TrainingConfig]] = []

    def __call__(self, model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
        self.calls.append((model.name, gpu_type, num_gpus, training))
        if model.name in self.infeasible:
            raise InfeasiblePlanError(f"{model.name} does not fit")
        return 1000.0 * num_gpus


def _trace_job(job_id: str, num_gpus: int, duration_s: float | None = 100.0, **extra: Any) -> TraceJob:
    fields: dict[str, Any] = {"id": job_id, "source": TraceFormat.PHILLY, "submit_time_s": 5.0,
                              "duration_s": duration_s, "num_gpus": num_gpus}
    fields.update(extra)
    return TraceJob(**fields)


def _bucket_of(name: str | None) -> int:
    return next(i for i, b in enumerate(DEFAULT_SIZE_BUCKETS) if name in b.presets)


def test_default_buckets_name_existing_dense_decoder_presets() -> None:
    known = set(ModelConfig.presets())
    for bucket in DEFAULT_SIZE_BUCKETS:
        for name in bucket.presets:
            assert name in known
            model = ModelConfig.preset(name)
            assert model.moe is None and model.causal


@pytest.mark.parametrize("num_gpus, bucket", [(1, 0), (2, 1), (4, 1), (5, 2), (8, 2), (12, 3), (32, 3),
                                              (64, 4), (4096, 4)])
def test_request_size_chooses_bucket(num_gpus: int, bucket: int) -> None:
    (job,) = jobs_from_trace([_trace_job("a", num_gpus)], throughput=StubThroughput())
    assert _bucket_of(job.model.name) == bucket


def test_work_is_throughput_times_duration_and_request_is_kept() -> None:
    stub = StubThroughput()
    (job,) = jobs_from_trace([_trace_job("a", 4, duration_s=250.5)], throughput=stub)
    assert job.work_tokens == 4000 * 250.5 == job.total_tokens
    assert (job.id, job.submit_time_s, job.priority, job.deadline_s) == ("a", 5.0, 0, None)
    assert job.request == GPURequest(num_gpus=4, gpu_type=None)  # Philly records no GPU type
    assert stub.calls[0][1:3] == ("v100-32gb", 4)


def test_recipe_follows_reference_gpu() -> None:
    stub = StubThroughput()
    jobs = jobs_from_trace([_trace_job("a", 1)], throughput=stub)
    assert jobs[0].training.precision is Precision.FP16_MIXED  # the V100 has no bf16
    assert jobs[0].training.global_batch_size is None  # the planner's default batch (issue 13)
    jobs = jobs_from_trace([_trace_job("a", 1)], throughput=stub, reference_gpu="h100")
    assert jobs[0].training.precision is Precision.BF16_MIXED
    assert stub.calls[-1][1] == "h100-sxm"
    assert stub.calls[-1][3] == jobs[0].training  # work was converted with the recipe the job carries


@pytest.mark.parametrize("num_gpus", [1, 3, 5, 12])
def test_every_allocation_of_a_job_trains_the_planners_default_batch(num_gpus: int) -> None:
    """The job's batch is the planner's default (gpt2: GPT-2's published 512 sequences), whatever the GPU
    count: the layout a count gets trains it, moved by at most 5 % to split into whole micro-batches per rank,
    as plan_job does for a request without a batch."""
    from frenzy_core import default_global_batch, plan_job
    from frenzy_core.planning.candidates import BATCH_ADJUST_TOLERANCE
    from frenzy_core.scheduling.throughput import PlannedThroughput, homogeneous_cluster

    buckets = [SizeBucket(max_gpus=None, presets=["gpt2"])]
    planned = PlannedThroughput()
    (job,) = jobs_from_trace([_trace_job("a", num_gpus)], throughput=planned, buckets=buckets)
    layout = planned.layout(job.model, job.training, "v100-32gb", num_gpus)
    assert layout is not None and layout.world_size == num_gpus
    default = default_global_batch(job.model, job.training.seq_len)
    assert default == 512
    got = layout.training.global_batch_size
    assert got is not None and abs(got - default) <= BATCH_ADJUST_TOLERANCE * default
    assert got % (layout.training.micro_batch_size * layout.parallel.dp) == 0
    plan = plan_job(job.model, homogeneous_cluster("v100-32gb", num_gpus), job.training, top_k=0,
                    constraints={"num_gpus": num_gpus})
    assert plan.training.global_batch_size == got and plan.time.tokens_per_s == pytest.approx(layout.tokens_per_s)


def test_learned_positions_cap_sequence_length() -> None:
    buckets = [SizeBucket(max_gpus=None, presets=["gpt2"])]
    (job,) = jobs_from_trace([_trace_job("a", 1)], throughput=StubThroughput(), buckets=buckets)
    assert job.training.seq_len == 1024


def test_trace_gpu_type_becomes_request_when_catalogued() -> None:
    stub = StubThroughput()
    jobs = jobs_from_trace([
        _trace_job("known", 2, source=TraceFormat.ALIBABA_SPOT, gpu_type="A100-SXM4-80GB", job_type="HP"),
        _trace_job("anon", 2, source=TraceFormat.ALIBABA_SPOT, gpu_type="GPU-series-1", job_type="Spot"),
    ], throughput=stub)
    assert jobs[0].request == GPURequest(num_gpus=2, gpu_type="a100-80gb")
    assert jobs[1].request == GPURequest(num_gpus=2, gpu_type=None)
    assert [c[1] for c in stub.calls] == ["a100-80gb"] * len(stub.calls)  # anonymised: the format's reference
    assert [j.priority for j in jobs] == [1, 0]
    a10_only = Cluster.from_dict({"nodes": [{"gpu": "a10", "gpus_per_node": 4, "count": 2}]})
    a100_job = _trace_job("known", 2, source=TraceFormat.ALIBABA_SPOT, gpu_type="A100-SXM4-80GB")
    (on_a10,) = jobs_from_trace([a100_job], throughput=stub, cluster=a10_only)
    assert on_a10.request == GPURequest(num_gpus=2, gpu_type=None)  # the cluster has no A100: any type
    assert on_a10.work_tokens == jobs[0].work_tokens  # work is still converted on the trace's A100


def test_falls_back_to_smaller_buckets_when_nothing_fits() -> None:
    stub = StubThroughput(infeasible=frozenset(DEFAULT_SIZE_BUCKETS[2].presets))
    (job,) = jobs_from_trace([_trace_job("a", 8)], throughput=stub)
    assert _bucket_of(job.model.name) == 1
    assert job.work_tokens == 8000 * 100
    every = frozenset(n for b in DEFAULT_SIZE_BUCKETS for n in b.presets)
    with pytest.raises(InfeasiblePlanError, match="no bucket model fits 8 x v100-32gb"):
        jobs_from_trace([_trace_job("a", 8)], throughput=StubThroughput(infeasible=every))


def test_throughput_is_asked_once_per_model_gpu_and_count() -> None:
    stub = StubThroughput()
    trace = [_trace_job(str(i), 1) for i in range(200)]
    jobs = jobs_from_trace(trace, throughput=stub)
    assert len(jobs) == 200
    keys = [(c[0], c[1], c[2]) for c in stub.calls]
    assert len(keys) == len(set(keys)) == len({j.model.name for j in jobs}) == 3


def test_same_seed_same_jobs_other_seed_other_models() -> None:
    trace = [_trace_job(str(i), 1 + i % 8) for i in range(60)]
    a = jobs_from_trace(trace, seed=1, throughput=StubThroughput())
    b = jobs_from_trace(trace, seed=1, throughput=StubThroughput())
    c = jobs_from_trace(trace, seed=2, throughput=StubThroughput())
    assert a == b
    assert [j.model.name for j in a] != [j.model.name for j in c]


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 128), min_size=1, max_size=12), pick=st.integers(0, 11),
       seed=st.integers(0, 5))
def test_a_jobs_mapping_does_not_depend_on_the_other_jobs(sizes: list[int], pick: int, seed: int) -> None:
    trace = [_trace_job(f"j{i}", n) for i, n in enumerate(sizes)]
    alone = trace[pick % len(trace)]
    everything = jobs_from_trace(trace, seed=seed, throughput=StubThroughput())
    (single,) = jobs_from_trace([alone], seed=seed, throughput=StubThroughput())
    assert everything[pick % len(trace)] == single


def test_missing_duration_needs_a_default() -> None:
    job = _trace_job("cifar10-0", 4, duration_s=None, source=TraceFormat.SIA)
    with pytest.raises(ConfigError, match="records no duration.*default_duration_s"):
        jobs_from_trace([job], throughput=StubThroughput())
    (out,) = jobs_from_trace([job], throughput=StubThroughput(), default_duration_s=60.0)
    assert out.work_tokens == 4000 * 60


def test_bad_buckets_are_reported() -> None:
    with pytest.raises(UnknownNameError, match="llama-9b"):
        jobs_from_trace([], buckets=[SizeBucket(max_gpus=None, presets=["llama-9b"])])
    with pytest.raises(ConfigError, match="must increase"):
        jobs_from_trace([], buckets=[SizeBucket(max_gpus=8, presets=["gpt2"]),
                                     SizeBucket(max_gpus=4, presets=["gpt2"])])
    with pytest.raises(ConfigError, match="only the last bucket"):
        jobs_from_trace([], buckets=[SizeBucket(max_gpus=None, presets=["gpt2"]),
                                     SizeBucket(max_gpus=4, presets=["gpt2"])])


# ---------------------------------------------------------------- TrainingJob

def test_training_job_work_and_deadline_rules() -> None:
    model = ModelConfig.preset("gpt2")
    fixed = TrainingConfig(seq_len=1024, global_batch_size=8)
    job = TrainingJob(id="a", submit_time_s=0, model=model, training=fixed, work_iterations=10, deadline_s=5)
    assert job.tokens_per_iteration == 8 * 1024 and job.total_tokens == 10 * 8 * 1024
    with pytest.raises(ConfigError, match="exactly one of work_tokens"):
        TrainingJob(id="a", submit_time_s=0, model=model, training=fixed)
    with pytest.raises(ConfigError, match="exactly one of work_tokens"):
        TrainingJob(id="a", submit_time_s=0, model=model, training=fixed, work_tokens=1, work_iterations=1)
    with pytest.raises(ConfigError, match="work_iterations needs training.global_batch_size"):
        TrainingJob(id="a", submit_time_s=0, model=model, training=TrainingConfig(), work_iterations=3)
    with pytest.raises(ConfigError, match="deadline_s=10.0 must be after submit_time_s=10.0"):
        TrainingJob(id="a", submit_time_s=10, model=model, training=fixed, work_tokens=1, deadline_s=10)
    with pytest.raises(ConfigError, match="GPURequest.num_gpus"):
        GPURequest(num_gpus=0)
    assert GPURequest(num_gpus=2, gpu_type="Tesla V100-SXM2-32GB").gpu_type == "v100-32gb"
    with pytest.raises(ConfigError, match="GPURequest.gpu_type: unknown GPU type 'v1000'"):
        GPURequest(num_gpus=2, gpu_type="v1000")


# ---------------------------------------------------------------- synthetic workloads

def test_synthetic_is_seeded() -> None:
    kwargs = {"arrival_rate_per_s": 0.1, "model_mix": {"gpt2": 1.0, "llama-2-7b": 1.0},
                  "work_distribution": LogNormalWork(median_tokens=1e9, sigma=1.0)}
    a = synthetic_jobs(20, seed=3, **kwargs)  # type: ignore[arg-type]
    assert a == synthetic_jobs(20, seed=3, **kwargs)  # type: ignore[arg-type]
    assert a != synthetic_jobs(20, seed=4, **kwargs)  # type: ignore[arg-type]
    assert synthetic_jobs(0, seed=3, **kwargs) == []  # type: ignore[arg-type]
    assert [j.id for j in a] == [f"job-{i}" for i in range(20)]


def test_synthetic_statistics_match_parameters() -> None:
    n, rate = 20_000, 0.05
    jobs = synthetic_jobs(n, arrival_rate_per_s=rate, seed=0,
                          model_mix=[MixEntry(model="gpt2", weight=3.0),
                                     MixEntry(model="qwen2.5-0.5b", weight=1.0, num_gpus=2, gpu_type="a100")],
                          work_distribution=LogNormalWork(median_tokens=5e8, sigma=0.8))
    times = np.array([j.submit_time_s for j in jobs])
    assert np.all(np.diff(times) > 0) and times[0] > 0
    # mean gap of n exponential gaps: 1/rate with standard error 1/(rate sqrt(n)); allow 5 standard errors
    assert abs(times[-1] / n - 1 / rate) < 5 / (rate * math.sqrt(n))
    share = np.mean([j.model.name == "gpt2" for j in jobs])
    assert abs(share - 0.75) < 5 * math.sqrt(0.75 * 0.25 / n)
    # median of log-normal work: within 5 standard errors of the median of log(work), sigma sqrt(pi / 2n)
    log_work = np.log([j.total_tokens for j in jobs])
    assert abs(np.median(log_work) - math.log(5e8)) < 5 * 0.8 * math.sqrt(math.pi / (2 * n))
    assert abs(np.std(log_work) - 0.8) < 0.02
    small = [j for j in jobs if j.model.name == "qwen2.5-0.5b"]
    assert all(j.request == GPURequest(num_gpus=2, gpu_type="a100-80gb") for j in small)
    assert all(j.request is None for j in jobs if j.model.name == "gpt2")


def test_synthetic_rejects_bad_input() -> None:
    work = LogNormalWork(median_tokens=1e6, sigma=0.0)
    with pytest.raises(ConfigError, match="arrival_rate_per_s"):
        synthetic_jobs(3, arrival_rate_per_s=0.0, model_mix={"gpt2": 1}, work_distribution=work)
    with pytest.raises(ConfigError, match="model_mix is empty"):
        synthetic_jobs(3, arrival_rate_per_s=1.0, model_mix={}, work_distribution=work)
    with pytest.raises(UnknownNameError):
        synthetic_jobs(3, arrival_rate_per_s=1.0, model_mix={"gpt-5": 1}, work_distribution=work)
    with pytest.raises(ConfigError, match="gpu_type='a100' needs num_gpus"):
        MixEntry(model="gpt2", gpu_type="a100")
    jobs = synthetic_jobs(3, arrival_rate_per_s=1.0, model_mix={"gpt2": 1}, work_distribution=work)
    assert [j.work_tokens for j in jobs] == [1_000_000] * 3  # sigma 0: every job the median


# ---------------------------------------------------------------- the default throughput (the planner)

def test_homogeneous_cluster_holds_the_request_on_typical_nodes() -> None:
    from frenzy_core.scheduling.throughput import homogeneous_cluster

    cluster = homogeneous_cluster("v100", 12)
    assert [(n.gpu, n.gpus_per_node, n.count) for n in cluster.nodes] == [("v100-32gb", 8, 2)]


def test_default_throughput_uses_the_planner() -> None:
    from frenzy_core.scheduling.recipe import default_training
    from frenzy_core.scheduling.throughput import planned_tokens_per_s

    gpt2, big = ModelConfig.preset("gpt2"), ModelConfig.preset("llama-2-70b")
    one = planned_tokens_per_s(gpt2, default_training(gpt2), "a100", 1)
    two = planned_tokens_per_s(gpt2, default_training(gpt2), "a100", 2)
    assert 0 < one < two <= 2 * one  # data parallelism helps, never superlinearly
    with pytest.raises(InfeasiblePlanError):
        planned_tokens_per_s(big, default_training(big), "a100", 1)  # 70B of Adam state on one 80 GB GPU
    (job,) = jobs_from_trace([_trace_job("a", 1, duration_s=10.0)], reference_gpu="a100",
                             buckets=[SizeBucket(max_gpus=None, presets=["gpt2"])])
    assert job.work_tokens == round(10.0 * one)
