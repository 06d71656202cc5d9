"""The running-jobs table: it is a dict of runs with array columns in step, and frenzy-core's vectorised
questions of it (when GPUs free up, which runs end last) schedule exactly as the walk over every run did."""

from __future__ import annotations

import heapq
from collections.abc import Collection
from operator import attrgetter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, ModelConfig, TrainingConfig
from frenzy_core.scheduling import FailureModel, PlannedThroughput, simulate
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.plans import Placement
from frenzy_core.scheduling.policies import FrenzyCore, _elastic
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.runs import RunningJob, RunTable
from frenzy_core.scheduling.synthetic import LogNormalWork, MixEntry, synthetic_jobs

TYPES = ["a100-80gb", "v100-32gb", "t4"]
GPT2 = ModelConfig.preset("gpt2")
RECIPE = TrainingConfig(seq_len=1024, global_batch_size=64)


def _run(job_id: str, gpu_type: str, num_gpus: int, tokens: int) -> RunningJob:
    job = TrainingJob(id=job_id, submit_time_s=0.0, model=GPT2, training=RECIPE, work_tokens=tokens,
                      request=GPURequest(num_gpus=num_gpus))
    plan = Placement(job_id=job_id, gpu_type=gpu_type, nodes={0: num_gpus}, tokens_per_s=1000.0 * num_gpus)
    return RunningJob(job=job, plan=plan, started_s=0.0, stall_s=0.0, done_tokens=0.0, saved_tokens=0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.sampled_from(TYPES), st.integers(1, 8), st.integers(1, 10**6),
                          st.booleans()), max_size=60))
def test_the_table_is_a_dict_of_runs_with_columns_in_step(ops: list[tuple[int, str, int, int, bool]]) -> None:
    table, plain = RunTable(TYPES), {}
    started: list[str] = []  # start order, as the rank column numbers it
    for key, gpu_type, num_gpus, tokens, remove in ops:
        job_id = f"j{key}"
        if remove and job_id in plain:
            del table[job_id], plain[job_id]
            started.remove(job_id)
        elif not remove:
            run = _run(job_id, gpu_type, num_gpus, tokens)
            if job_id not in plain:
                started.append(job_id)
            table[job_id] = plain[job_id] = run
    assert list(table) == list(plain) and list(table.values()) == list(plain.values()) and len(table) == len(plain)
    gpu, end, count, rank = table.columns()
    rows = [table.run_at(row) for row in range(len(table))]
    assert sorted(r.job.id for r in rows) == sorted(plain)
    assert [TYPES[g] for g in gpu] == [r.plan.gpu_type for r in rows]
    assert end.tolist() == [r.end for r in rows] and count.tolist() == [r.plan.num_gpus for r in rows]
    assert len(set(rank.tolist())) == len(rows)
    by_rank = [r.job.id for _, r in sorted(zip(rank.tolist(), rows), key=lambda x: x[0])]
    assert by_rank == started  # ranks follow the start order (a replaced run keeps its own)


class _WalkingCore(FrenzyCore):
    """frenzy-core with its release times as first written: a sorted walk over every running job per type."""

    def _release_times(self, now: float) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for t in self.state.gpu_types:
            ends = sorted((r.end, r.plan.num_gpus) for r in self.running.values() if r.plan.gpu_type == t)
            times = np.array([now] + [max(now, e) for e, _ in ends])
            freed = self.state.free_gpus(t) + np.concatenate([[0], np.cumsum([n for _, n in ends])])
            out.append((times, freed.astype(np.int64)))
        return out


def _walking_longest(policy: Policy, types: Collection[str]) -> list[RunningJob]:
    """The growth candidates as first chosen: ``heapq.nlargest`` over the runs in running order."""
    return heapq.nlargest(_elastic.GROW_CANDIDATES, (r for r in policy.running.values() if r.plan.gpu_type in types),
                          key=attrgetter("end"))


def test_the_vectorised_round_schedules_exactly_as_the_walk_over_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
                                           {"gpu": "v100-32gb", "gpus_per_node": 4, "count": 3},
                                           {"gpu": "t4", "gpus_per_node": 4, "count": 2}]})
    mix = [MixEntry(model="gpt2", weight=4.0, num_gpus=1), MixEntry(model="gpt2", weight=3.0, num_gpus=2),
           MixEntry(model="gpt3-1.3b", weight=2.0, num_gpus=4), MixEntry(model="llama-2-7b", weight=1.0, num_gpus=8)]
    jobs = synthetic_jobs(300, arrival_rate_per_s=1 / 240, model_mix=mix,
                          work_distribution=LogNormalWork(median_tokens=2e9, sigma=1.5), seed=7)
    throughput = PlannedThroughput()
    failures = FailureModel(failures_per_gpu_hour=1e-3, repair_s=3600.0, seed=2)
    new = simulate(jobs, cluster, FrenzyCore(), throughput=throughput, progress=False, failures=failures)
    with monkeypatch.context() as patch:
        patch.setattr(_elastic, "longest_runs", _walking_longest)
        old = simulate(jobs, cluster, _WalkingCore(), throughput=throughput, progress=False, failures=failures)
    assert new.violations == 0 and new.finished + len(new.unschedulable) == len(jobs)
    # the run exercises every path the table feeds: queues, growth, preemption and failures
    assert new.resizes > 0 and new.preemptions > 0 and new.interruptions > 0
    assert [r.model_dump() for r in new.jobs] == [r.model_dump() for r in old.jobs]
    timing = {"round_latency_s"}  # wall clock, the one field that differs by design
    assert new.model_dump(exclude=timing) == old.model_dump(exclude=timing)
