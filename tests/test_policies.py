"""The built-in scheduling policies: a hand-checked schedule each, and invariants every one of them keeps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, InfeasiblePlanError, ModelConfig, TrainingConfig
from frenzy_core.scheduling import POLICIES, simulate
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.policies import FrenzyCore
from frenzy_core.scheduling.result import JobStatus, SimulationResult

GPT2 = ModelConfig.preset("gpt2")
BIG = ModelConfig.preset("llama-2-7b")
RECIPE = TrainingConfig(seq_len=1024)
PER_GPU = {"a100-80gb": 3000.0, "v100-32gb": 1000.0}
"""Stub tokens/s per GPU: the A100 three times the V100, perfect scaling."""


def stub(model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
    """``PER_GPU`` x GPUs; llama-2-7b fits only on 2 or more A100s."""
    if model.name == "llama-2-7b" and (gpu_type != "a100-80gb" or num_gpus < 2):
        raise InfeasiblePlanError("does not fit")
    return PER_GPU[gpu_type] * num_gpus


def _job(job_id: str, submit_s: float, num_gpus: int, tokens: int, *, model: ModelConfig = GPT2,
         gpu_type: str | None = None) -> TrainingJob:
    return TrainingJob(id=job_id, submit_time_s=submit_s, model=model, training=RECIPE, work_tokens=tokens,
                       request=GPURequest(num_gpus=num_gpus, gpu_type=gpu_type))


def _cluster(*shapes: tuple[str, int, int]) -> Cluster:
    return Cluster.from_dict({"nodes": [{"gpu": g, "gpus_per_node": n, "count": c} for g, n, c in shapes]})


def _run(jobs: list[TrainingJob], cluster: Cluster, policy: str, seed: int = 0) -> SimulationResult:
    return simulate(jobs, cluster, policy, throughput=stub, progress=False, seed=seed)


def _placed(result: SimulationResult) -> dict[str, tuple[str | None, int | None, float | None, float | None]]:
    return {r.id: (r.gpu_type, r.num_gpus, r.start_time_s, r.finish_time_s) for r in result.jobs}


MIXED = (("v100-32gb", 4, 1), ("a100", 8, 1))


def test_frenzy_has_takes_fewest_gpus_on_the_smallest_sufficient_memory() -> None:
    # gpt2's MARP list starts at 1 GPU needing ~3.6 GB: 32 GB V100s come before 80 GB A100s. Five jobs
    # asking for 4 GPUs each get one GPU each: four V100s, then an A100; 12,000 tokens.
    jobs = [_job(f"j{i}", 0, 4, 12_000) for i in range(5)]
    result = _run(jobs, _cluster(*MIXED), "frenzy-has")
    expected = {f"j{i}": ("v100-32gb", 1, 0.0, 12.0) for i in range(4)}
    expected["j4"] = ("a100-80gb", 1, 0.0, 4.0)
    assert _placed(result) == expected


def test_gavel_like_puts_requests_where_normalised_throughput_is_highest() -> None:
    # A and B (4 GPUs, 120,000 tokens) and C (llama-2-7b, 8 A100s only, 240,000 tokens). The LP's unique
    # optimum is A and B on the A100s (normalised throughput 1 + 1); C waits for them: 120,000 / 12,000 = 10 s.
    jobs = [_job("A", 0, 4, 120_000), _job("B", 0, 4, 120_000), _job("C", 0, 8, 240_000, model=BIG)]
    result = _run(jobs, _cluster(*MIXED), "gavel-like")
    assert _placed(result) == {"A": ("a100-80gb", 4, 0.0, 10.0), "B": ("a100-80gb", 4, 0.0, 10.0),
                               "C": ("a100-80gb", 8, 10.0, 20.0)}


def test_sia_like_spreads_gpus_by_normalised_goodput() -> None:
    # A asks 2 (counts 1, 2, 4), B asks 4 (counts 2, 4, 8) on 8 A100s. Value lambda - G^-0.5 with G the
    # speed-up over the least count: A4 + B4 = (1.1 - 0.5) + (1.1 - 2^-0.5) = 0.993 beats every other split
    # (B8 alone 0.6, A2 + B4 0.786, A4 + B2 0.7).
    jobs = [_job("A", 0, 2, 120_000), _job("B", 0, 4, 120_000)]
    result = _run(jobs, _cluster(("a100", 8, 1)), "sia-like")
    assert _placed(result) == {"A": ("a100-80gb", 4, 0.0, 10.0), "B": ("a100-80gb", 4, 0.0, 10.0)}


def test_frenzy_core_runs_the_smallest_job_first_on_every_gpu() -> None:
    # 4 A100s; L asks 4 GPUs for 4,800,000 tokens (400 s), S1 and S2 ask 2 for 60,000 and 120,000 (10 and 20 s).
    # Value = (least queued GPU-seconds / the job's) x (its fastest run / this run): S1 on 4 GPUs (1.0) beats
    # S1 + S2 on 2 each (0.5 + 0.25); then S2 on 4; then L. FIFO would run L first: JCTs 400, 410, 420 s.
    jobs = [_job("L", 0, 4, 4_800_000), _job("S1", 0, 2, 60_000), _job("S2", 0, 2, 120_000)]
    result = _run(jobs, _cluster(("a100", 4, 1)), "frenzy-core")
    assert _placed(result) == {"S1": ("a100-80gb", 4, 0.0, 5.0), "S2": ("a100-80gb", 4, 5.0, 15.0),
                               "L": ("a100-80gb", 4, 15.0, 415.0)}
    assert result.avg_jct_s == pytest.approx((5 + 15 + 415) / 3)
    fifo = _run(jobs, _cluster(("a100", 4, 1)), "fifo-requested")
    assert [r.jct_s for r in fifo.jobs] == [400.0, 410.0, 420.0]


def test_frenzy_core_serves_a_starving_job_before_shorter_ones() -> None:
    # 4 A100s: four 1-GPU jobs ending at 3, 6, 9, 12 s, then a 1-GPU job of 12 s (6 s on 2 GPUs, the count
    # frenzy-core gives it) every 3 s: each event frees 2 GPUs and a short job takes them. "wide" (counts 2 or
    # 4; 40 s on 4 GPUs) arrives at 1 s and always loses to the shorter job. At 1 + 4 x 40 = 161 s it starves;
    # at the next event (162 s) 2 GPUs are free, but 80 s on 2 is more than 1.25 x the 43 s until it would
    # finish on 4 (at 165 + 40 s), so it reserves the A100s and no short job starts; at 165 s it starts on 4.
    first = [_job(f"f{k}", 0, 1, 3000 * 3 * k) for k in (1, 2, 3, 4)]
    stream = [_job(f"s{i}", 3.0 + 3.0 * i, 1, 36_000) for i in range(78)]
    jobs = [*first, _job("wide", 1, 4, 480_000), *stream]
    result = _run(jobs, _cluster(("a100", 4, 1)), "frenzy-core")
    wide = next(r for r in result.jobs if r.id == "wide")
    assert (wide.start_time_s, wide.num_gpus) == (165.0, 4)
    assert result.finished == len(jobs)
    # without the bound it waits for the stream to end (the last short job arrives at 234 s)
    unbounded = simulate(jobs, _cluster(("a100", 4, 1)), FrenzyCore(starvation_factor=math.inf), throughput=stub,
                         progress=False)
    late = next(r for r in unbounded.jobs if r.id == "wide")
    assert late.start_time_s is not None and late.start_time_s >= 234.0


WORKLOAD = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12), st.integers(1, 30),
                              st.sampled_from([None, "a100", "v100"]), st.booleans()), max_size=18)


def _workload(specs: list[tuple[int, int, int, str | None, bool]]) -> list[TrainingJob]:
    return [_job(f"j{i}", t, n, 1000 * n * d, gpu_type=g, model=BIG if big else GPT2)
            for i, (t, n, d, g, big) in enumerate(specs)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=12, deadline=None)
@given(specs=WORKLOAD, a100_nodes=st.integers(1, 2), v100_nodes=st.integers(0, 2))
def test_every_policy_conserves_jobs_capacity_and_memory(policy: str, specs: list[tuple[int, int, int, str | None,
                                                                                         bool]],
                                                         a100_nodes: int, v100_nodes: int) -> None:
    shapes = [("a100", 8, a100_nodes)] + ([("v100-32gb", 4, v100_nodes)] if v100_nodes else [])
    jobs = _workload(specs)
    result = _run(jobs, _cluster(*shapes), policy)
    # every job counted exactly once; none placed where it does not fit; nothing left waiting
    assert [r.id for r in result.jobs] == [j.id for j in jobs]
    assert result.violations == 0
    assert result.finished + len(result.unschedulable) == len(jobs)
    assert all(r.reason != "still waiting when no event was left" for r in result.jobs)
    capacity = {"a100-80gb": 8 * a100_nodes, "v100-32gb": 4 * v100_nodes}
    placed = [r for r in result.jobs if r.status is JobStatus.FINISHED]
    for r, job in zip(result.jobs, jobs):
        if r.status is JobStatus.FINISHED:
            assert r.gpu_type is not None and r.num_gpus is not None and r.start_time_s is not None
            # memory fit and the rate it ran at, straight from the throughput function
            assert r.tokens_per_s == stub(job.model, job.training, r.gpu_type, r.num_gpus)
            assert r.start_time_s >= r.submit_time_s
            assert job.request is not None
            assert job.request.gpu_type in (None, r.gpu_type)
    # never more GPUs of a type busy than it has: over the records of jobs that ran once (a preempted or resized
    # job's record spans all its runs from first start to finish, not one interval: hypothesis found a 4-GPU job
    # preempted for a 2-GPU one counted through the other's run), and in the simulator's busy counts
    once = [r for r in placed if r.preemptions == r.resizes == r.interruptions == 0]
    for r in once:
        t = r.start_time_s
        busy = sum(o.num_gpus or 0 for o in once if o.gpu_type == r.gpu_type
                   and (o.start_time_s or 0) <= (t or 0) < (o.finish_time_s or 0))
        assert busy <= capacity[str(r.gpu_type)]
    assert result.utilisation is not None
    for gpu_type, counts in result.utilisation.busy_gpus.items():
        assert max(counts, default=0) <= capacity[gpu_type]
    # utilisation samples agree with the records where each record is one run
    if len(once) == len(placed):
        for t, busy_a100 in zip(result.utilisation.times_s, result.utilisation.busy_gpus["a100-80gb"]):
            assert busy_a100 == sum(o.num_gpus or 0 for o in placed if o.gpu_type == "a100-80gb"
                                    and (o.start_time_s or 0) <= t < (o.finish_time_s or 0))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_same_seed_same_schedule(policy: str) -> None:
    jobs = _workload([(3 * i % 17, 1 + i % 8, 5 + 7 * i % 23, None, i % 5 == 0) for i in range(40)])
    cluster = _cluster(*MIXED)
    first, second = _run(jobs, cluster, policy, seed=3), _run(jobs, cluster, policy, seed=3)
    assert first.jobs == second.jobs
    assert first.model_dump(exclude={"round_latency_s"}) == second.model_dump(exclude={"round_latency_s"})
