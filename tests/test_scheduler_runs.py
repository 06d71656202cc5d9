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
from frenzy_core.scheduling.policies import FrenzyCore, _choice, _elastic
from frenzy_core.scheduling.policies._queue import QueueTable
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.runs import RunningJob, RunTable
from frenzy_core.scheduling.state import ClusterState
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
    """frenzy-core with its release times as first written: a sorted walk over every running job per type, and
    every option's start looked up in them (free now or not)."""

    def _earliest_start(self, table: QueueTable, rows: np.ndarray, now: float) -> np.ndarray:
        start = np.full(rows.size, np.inf)
        for g, (times, freed) in enumerate(self._release_times(now)):
            on_g = table.gpu[rows] == g
            k = np.searchsorted(freed, table.count[rows][on_g], side="left")
            start[on_g] = np.where(k < times.size, times[np.minimum(k, times.size - 1)], np.inf)
        return start

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


def _full_prune(items: np.ndarray, gpu: np.ndarray, count: np.ndarray, value: np.ndarray,
                free: np.ndarray) -> np.ndarray:
    """The choice's pruning without its early return (every (type, count) sorted and cut)."""
    if not items.size:
        return items
    g, c, v = gpu[items], count[items], value[items]
    least = np.full(free.size, np.iinfo(np.int64).max)
    np.minimum.at(least, g, c)
    on = least < np.iinfo(np.int64).max
    most_jobs = int((free[on] // least[on]).sum())
    order = np.lexsort((items, -v, c, g))
    g, c = g[order], c[order]
    start = np.concatenate([[0], np.flatnonzero((g[1:] != g[:-1]) | (c[1:] != c[:-1])) + 1])
    rank = np.arange(order.size) - np.repeat(start, np.diff(np.append(start, order.size)))
    return np.sort(items[order[rank < free[g] // c + most_jobs]])


def test_the_vectorised_round_schedules_exactly_as_the_walk_over_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The RunTable's columns, options free now starting now without release times, growth skipping types where
    every run is at its largest count and the pruning's early return: the same records as the walk without them."""
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
    with monkeypatch.context() as patch:  # and without the round's shortcuts: growth weighed on every type with
        patch.setattr(_elastic, "longest_runs", _walking_longest)  # newly idle GPUs, the full pruning
        patch.setattr(_elastic.BelowCeiling, "any_on", lambda self, types: bool(types))
        patch.setattr(_choice, "_prune", _full_prune)
        old = simulate(jobs, cluster, _WalkingCore(), throughput=throughput, progress=False, failures=failures)
    assert new.violations == 0 and new.finished + len(new.unschedulable) == len(jobs)
    # the run exercises every path the table feeds: queues, growth, preemption and failures
    assert new.resizes > 0 and new.preemptions > 0 and new.interruptions > 0
    assert [r.model_dump() for r in new.jobs] == [r.model_dump() for r in old.jobs]
    timing = {"round_latency_s"}  # wall clock, the one field that differs by design
    assert new.model_dump(exclude=timing) == old.model_dump(exclude=timing)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["take", "release", "down", "up", "assign"]), st.integers(0, 5),
                          st.integers(1, 8)), max_size=40))
def test_the_free_gpus_per_type_are_the_sums_over_their_nodes(ops: list[tuple[str, int, int]]) -> None:
    """take, release, set_up and assign keep the per-type sums equal to the per-node counts summed."""
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
                                           {"gpu": "t4", "gpus_per_node": 4, "count": 3, "free_gpus": 2},
                                           {"gpu": "a100-80gb", "gpus_per_node": 4, "count": 1}]})
    state = ClusterState(cluster)
    held: list[dict[int, int]] = []
    for op, node, n in ops:
        if op == "take" and state.free[node] >= 1:
            held.append({node: min(n, int(state.free[node]))})
            state.take(held[-1])
        elif op == "release" and held:
            state.release(held.pop(n % len(held)))
        elif op in ("down", "up"):
            state.set_up(node, op == "up")
            held = [a for a in held if next(iter(a)) != node]
        elif op == "assign":
            scratch = state.copy()
            if scratch.free[node] >= 1:
                scratch.take({node: 1})
                held.append({node: 1})
            state.assign(scratch)
    per_type = np.bincount(state.type_index, weights=state.free, minlength=2).astype(np.int64)
    busy = np.bincount(state.type_index, weights=np.where(state.up, state.initial_free - state.free, 0), minlength=2)
    assert state.free_per_type().tolist() == per_type.tolist()
    assert state.busy_per_type().tolist() == busy.astype(np.int64).tolist()
    assert [state.free_gpus(t) for t in state.gpu_types] == per_type.tolist()
    assert state.free_gpus() == int(state.free.sum()) and state.free_gpus("h100-sxm") == 0
