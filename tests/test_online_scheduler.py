"""``OnlineScheduler``: a manager's event stream gives the simulator's decisions, state survives a JSON round trip,
failures cost what the checkpoint model says, and no job is lost."""

from __future__ import annotations

import json

import pytest

from frenzy_core import Cluster, ConfigError, ModelConfig, TrainingConfig
from frenzy_core.scheduling import (
    POLICIES,
    CheckpointModel,
    Event,
    FailureModel,
    GPURequest,
    OnlineScheduler,
    PlannedThroughput,
    Preempt,
    Start,
    TrainingJob,
    replay,
    simulate,
)
from frenzy_core.scheduling.failures import DEFAULT_FAILURES_PER_GPU_HOUR
from frenzy_core.scheduling.result import JobStatus
from frenzy_core.scheduling.synthetic import LogNormalWork, MixEntry, synthetic_jobs

GPT2 = ModelConfig.preset("gpt2")
RECIPE = TrainingConfig(seq_len=1024, global_batch_size=64)
THROUGHPUT = PlannedThroughput()
CLUSTER = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
                                       {"gpu": "v100-32gb", "gpus_per_node": 4, "count": 2, "free_gpus": 3}]})


def per_gpu_1000(model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
    return 1000.0 * num_gpus


def _workload(n: int = 24) -> list[TrainingJob]:
    mix = [MixEntry(model="gpt2", weight=3.0, num_gpus=2), MixEntry(model="gpt3-1.3b", weight=2.0, num_gpus=4),
           MixEntry(model="llama-2-7b", weight=1.0, num_gpus=8)]
    return synthetic_jobs(n, arrival_rate_per_s=1 / 600, model_mix=mix,
                          work_distribution=LogNormalWork(median_tokens=3e9, sigma=1.0), seed=3)


def _dump(actions: list[list[object]]) -> list[list[dict[str, object]]]:
    return [[a.model_dump(mode="json") for a in step] for step in actions]  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_replaying_a_simulation_gives_its_decisions_and_json_survives_mid_run(policy: str) -> None:
    events: list[Event] = []
    failures = FailureModel(failures_per_gpu_hour=2e-3, repair_s=3600.0, seed=1)  # a few failures in the run
    result = simulate(_workload(), CLUSTER, policy, throughput=THROUGHPUT, progress=False, failures=failures,
                      events=events)
    recorded = [e.actions for e in events if e.kind == "advance"]
    assert result.violations == 0 and result.finished + len(result.unschedulable) == 24
    # a fresh scheduler fed the same stream decides exactly the same
    fresh = OnlineScheduler(CLUSTER, policy, throughput=THROUGHPUT)
    assert _dump(replay(fresh, events)) == _dump(recorded)
    assert [r.model_dump() for r in fresh.records()] == [r.model_dump() for r in result.jobs]
    # stopped half-way, saved as JSON, restored into a new process's scheduler: the rest is the same too
    half = len(events) // 2
    first = OnlineScheduler(CLUSTER, policy, throughput=THROUGHPUT)
    before = replay(first, events[:half])
    text = first.to_json()
    json.loads(text)  # plain JSON
    restored = OnlineScheduler.from_json(text, throughput=PlannedThroughput())
    assert restored.to_json() == text
    after = replay(restored, events[half:])
    assert _dump(before + after) == _dump(recorded)


def test_a_node_failure_loses_the_work_since_the_last_checkpoint() -> None:
    # one 4-GPU job at 4,000 tokens/s, 40 M tokens (10,000 s); checkpoints every 3,600 s of training; its node
    # fails at 5,000 s: it keeps 3,600 s of work (14.4 M tokens), loses 1,400 s (5.6 M tokens), and restarts
    # at 6,000 s on the repaired node after restoring (checkpoint bytes / (4 GPUs x bandwidth)).
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 4}]})
    checkpoint = CheckpointModel(storage_bytes_per_s_per_gpu=1e9, interval_s=3600.0)
    sched = OnlineScheduler(cluster, "fifo-requested", throughput=per_gpu_1000, checkpoint=checkpoint)
    job = TrainingJob(id="j", submit_time_s=0.0, model=GPT2, training=RECIPE, work_tokens=40_000_000,
                      request=GPURequest(num_gpus=4))
    sched.submit(job)
    (start,) = sched.advance(0.0)
    assert isinstance(start, Start) and start.plan.num_gpus == 4 and sched.expected_end_s("j") == 10_000.0
    sched.node_down("node:0")
    (stop,) = sched.advance(5000.0)
    assert stop == Preempt(job_id="j", reason="node node:0 down")
    assert sched.queued() == ["j"] and sched.advance(5500.0) == []  # nowhere to run
    sched.node_up(0)
    (again,) = sched.advance(6000.0)
    assert isinstance(again, Start)
    restore_s = checkpoint.checkpoint_bytes(GPT2, RECIPE) / 4e9
    assert sched.expected_end_s("j") == pytest.approx(6000.0 + restore_s + (40e6 - 14.4e6) / 4000.0)
    sched.job_finished("j")
    sched.advance(sched.expected_end_s("j"))
    (record,) = sched.records()
    assert record.status is JobStatus.FINISHED and record.interruptions == 1
    assert record.lost_tokens == pytest.approx(5.6e6)
    assert record.gpu_seconds == pytest.approx(4 * (5000.0 + restore_s + 25.6e6 / 4000.0))


def test_checkpoint_bytes_are_weights_master_weights_and_adam_states() -> None:
    # bf16-mixed AdamW: 2 (bf16 weights) + 4 (fp32 master) + 8 (two fp32 moments) bytes per parameter
    llama = ModelConfig.preset("llama-2-7b")
    training = TrainingConfig(seq_len=4096, precision="bf16-mixed")
    model = CheckpointModel(storage_bytes_per_s_per_gpu=1e9)
    assert model.checkpoint_bytes(llama, training) == 14 * llama.num_params()
    assert model.save_s(llama, training, 8) == pytest.approx(14 * llama.num_params() / 8e9)
    # Llama 3's figure: 419 interruptions / (54 days x 16,384 GPUs)
    assert DEFAULT_FAILURES_PER_GPU_HOUR * 54 * 24 * 16384 == pytest.approx(419)


def test_with_failures_no_job_is_lost_and_goodput_drops() -> None:
    jobs = _workload(30)
    calm = simulate(jobs, CLUSTER, "frenzy-core", throughput=THROUGHPUT, progress=False)
    stormy = simulate(jobs, CLUSTER, "frenzy-core", throughput=THROUGHPUT, progress=False,
                      failures=FailureModel(failures_per_gpu_hour=5e-3, repair_s=7200.0))
    for r in (calm, stormy):
        assert r.finished + len(r.unschedulable) == 30 and r.violations == 0
    assert stormy.node_failures > 0 and stormy.interruptions > 0
    assert {r.id for r in stormy.jobs if r.status is JobStatus.FINISHED} == {
        r.id for r in calm.jobs if r.status is JobStatus.FINISHED}
    assert calm.goodput_tokens_per_gpu_hour is not None and stormy.goodput_tokens_per_gpu_hour is not None
    assert stormy.goodput_tokens_per_gpu_hour < calm.goodput_tokens_per_gpu_hour


def test_the_manager_api_refuses_what_makes_no_sense() -> None:
    sched = OnlineScheduler(CLUSTER, "sia-like", throughput=per_gpu_1000,
                            node_names=["a0", "a1", "v0", "v1"])
    job = TrainingJob(id="j", submit_time_s=0.0, model=GPT2, training=RECIPE, work_tokens=10**6,
                      request=GPURequest(num_gpus=2))
    sched.submit(job)
    with pytest.raises(ConfigError, match="already submitted"):
        sched.submit(job)
    with pytest.raises(ConfigError, match="unknown job 'nope'"):
        sched.job_finished("nope")
    with pytest.raises(ConfigError, match="unknown node 'node:0'"):
        sched.node_down("node:0")
    with pytest.raises(ConfigError, match="node_names must name each"):
        OnlineScheduler(CLUSTER, "sia-like", node_names=["a0"])
    assert [a.kind for a in sched.advance(10.0)] == ["start"]
    with pytest.raises(ConfigError, match="earlier than the scheduler's clock"):
        sched.advance(5.0)
    sched.cancel("j")
    assert sched.advance(20.0) == [] and not sched.running
    (record,) = sched.records()
    assert record.status is JobStatus.CANCELLED and record.gpu_seconds == pytest.approx(10.0 * 4)
