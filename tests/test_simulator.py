"""The discrete-event simulator and the fifo-requested policy: a stub throughput and hand-computed times."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import (
    Cluster,
    ConfigError,
    InfeasiblePlanError,
    ModelConfig,
    TrainingConfig,
    UnknownNameError,
)
from frenzy_core.scheduling.jobs import GPURequest, TrainingJob
from frenzy_core.scheduling.messages import Action, Start
from frenzy_core.scheduling.online import SchedulerError
from frenzy_core.scheduling.plans import Placement
from frenzy_core.scheduling.policies import get_policy
from frenzy_core.scheduling.policy import Policy
from frenzy_core.scheduling.simulator import JobStatus, SimulationResult, simulate
from frenzy_core.scheduling.state import ClusterState

GPT2 = ModelConfig.preset("gpt2")
BIG = ModelConfig.preset("llama-2-7b")
RECIPE = TrainingConfig(seq_len=1024)


def per_gpu_1000(model: ModelConfig, training: TrainingConfig, gpu_type: str, num_gpus: int) -> float:
    """1000 tokens/s per GPU; llama-2-7b fits nowhere."""
    if model.name == "llama-2-7b":
        raise InfeasiblePlanError("does not fit")
    return 1000.0 * num_gpus


def _job(job_id: str, submit_s: float, num_gpus: int | None, seconds: float, *, gpu_type: str | None = None,
         model: ModelConfig = GPT2) -> TrainingJob:
    """A job that runs ``seconds`` on its request under ``per_gpu_1000``."""
    request = None if num_gpus is None else GPURequest(num_gpus=num_gpus, gpu_type=gpu_type)
    tokens = round(1000 * (num_gpus or 1) * seconds)
    return TrainingJob(id=job_id, submit_time_s=submit_s, model=model, training=RECIPE, work_tokens=tokens,
                       request=request)


def _cluster(*shapes: tuple[str, int, int]) -> Cluster:
    return Cluster.from_dict({"nodes": [{"gpu": g, "gpus_per_node": n, "count": c} for g, n, c in shapes]})


def _run(jobs: list[TrainingJob], cluster: Cluster, policy: str | Policy = "fifo-requested"
         ) -> SimulationResult:
    return simulate(jobs, cluster, policy, throughput=per_gpu_1000, progress=False)


def test_fifo_blocks_behind_the_head() -> None:
    # A takes 4 of 8 GPUs for 100 s; B needs all 8 and waits for A; C (2 GPUs) may not pass B.
    jobs = [_job("A", 0, 4, 100), _job("B", 10, 8, 50), _job("C", 20, 2, 10)]
    result = _run(jobs, _cluster(("a100", 8, 1)))
    starts = {r.id: (r.start_time_s, r.finish_time_s) for r in result.jobs}
    assert starts == {"A": (0.0, 100.0), "B": (100.0, 150.0), "C": (150.0, 160.0)}
    assert [r.jct_s for r in result.jobs] == [100.0, 140.0, 140.0]
    assert result.avg_jct_s == pytest.approx(380 / 3)
    assert result.p99_jct_s == 140.0
    assert result.makespan_s == 160.0
    assert (result.violations, result.unschedulable, result.finished) == (0, [], 3)
    assert all(r.gpu_type == "a100-80gb" and r.status is JobStatus.FINISHED for r in result.jobs)


def test_a_request_that_fits_no_memory_is_rejected_on_arrival() -> None:
    jobs = [_job("big", 0, 8, 100, model=BIG), _job("small", 1, 8, 10)]
    result = _run(jobs, _cluster(("a100", 8, 1)))
    big, small = result.jobs
    assert (big.status, big.start_time_s) == (JobStatus.UNSCHEDULABLE, None)
    assert big.reason == "llama-2-7b fits in memory on none of the allocations fifo-requested may give it on a100-80gb"
    assert (small.start_time_s, small.finish_time_s) == (1.0, 11.0)
    assert result.violations == 0 and result.finished == 1


class _NodeZero(Policy):
    """A broken test policy: places waiting jobs on all 8 GPUs of node 0 at ``rate`` without checking anything;
    ``per_round`` jobs are placed per round."""

    name = "node-zero"

    def __init__(self, rate: float, per_round: int | None) -> None:
        super().__init__()
        self.rate, self.per_round = rate, per_round
        self.waiting: list[TrainingJob] = []

    def submit(self, job: TrainingJob, now: float) -> None:
        self.waiting.append(job)

    def cancel(self, job_id: str) -> None:
        self.waiting = [j for j in self.waiting if j.id != job_id]

    def on_finish(self, job_id: str, now: float) -> None:
        pass

    def schedule(self, now: float) -> list[Action]:
        taken = self.waiting[: self.per_round] if self.per_round is not None else self.waiting
        self.waiting = self.waiting[len(taken):]
        return [Start(job_id=j.id, plan=Placement(job_id=j.id, gpu_type="a100-80gb", nodes={0: 8},
                                                  tokens_per_s=self.rate)) for j in taken]


def test_a_placement_that_does_not_fit_is_a_policy_error_unless_allowed() -> None:
    # llama-2-7b fits nowhere under the stub; the policy places it anyway (and claims a rate for gpt2 that the
    # stub does not give 8 GPUs: 1000 x 8 = 8000 tokens/s)
    jobs = [_job("big", 0, 8, 100, model=BIG), _job("fast", 0, 8, 100)]
    with pytest.raises(SchedulerError, match="placed 'big' on 8 x a100-80gb: claims 8000 tokens/s"):
        _run(jobs, _cluster(("a100", 8, 1)), _NodeZero(rate=8000.0, per_round=1))
    result = simulate(jobs, _cluster(("a100", 8, 1)), _NodeZero(rate=16000.0, per_round=1), throughput=per_gpu_1000,
                      progress=False, allow_violations=True)
    # both are counted; they run at the claimed rate (0.8 M tokens at 16,000 tokens/s: 50 s each, in turn)
    assert [(r.start_time_s, r.finish_time_s) for r in result.jobs] == [(0.0, 50.0), (50.0, 100.0)]
    assert result.violations == 2 and all(r.violation is not None for r in result.jobs)


def test_impossible_requests_are_rejected_without_blocking_others() -> None:
    jobs = [_job("too-big", 0, 16, 1), _job("wrong-type", 0, 1, 1, gpu_type="h100"),
            _job("no-request", 0, None, 1), _job("ok", 1, 2, 5)]
    result = _run(jobs, _cluster(("a100", 8, 1)))
    assert result.unschedulable == ["too-big", "wrong-type", "no-request"]
    reasons = {r.id: r.reason for r in result.jobs}
    assert reasons["too-big"] == "asks for 16 GPUs of one type; the cluster has 8"
    assert reasons["wrong-type"] == "asks for h100-sxm, which the cluster lacks (it has a100-80gb)"
    assert "no GPU request" in str(reasons["no-request"])
    assert result.jobs[3].finish_time_s == 6.0


def test_an_untyped_request_must_fit_one_type() -> None:
    cluster = _cluster(("v100-32gb", 4, 1), ("a100", 8, 1))
    result = _run([_job("ten", 0, 10, 1), _job("eight", 0, 8, 1)], cluster)
    assert result.unschedulable == ["ten"]
    assert result.jobs[0].reason == "asks for 10 GPUs of one type; the cluster has 8"
    assert (result.jobs[1].gpu_type, result.jobs[1].finish_time_s) == ("a100-80gb", 1.0)


def test_typed_requests_and_first_type_that_fits() -> None:
    cluster = _cluster(("v100-32gb", 4, 1), ("a100", 8, 1))
    jobs = [_job("any-4", 0, 4, 10), _job("any-8", 0, 8, 10), _job("v100", 0, 2, 10, gpu_type="v100")]
    result = _run(jobs, cluster)
    placed = {r.id: (r.gpu_type, r.start_time_s) for r in result.jobs}
    assert placed == {"any-4": ("v100-32gb", 0.0), "any-8": ("a100-80gb", 0.0), "v100": ("v100-32gb", 10.0)}


def test_a_job_larger_than_a_node_spans_nodes() -> None:
    result = _run([_job("wide", 0, 8, 10)], _cluster(("a100", 4, 2)))
    assert result.jobs[0].num_gpus == 8 and result.jobs[0].finish_time_s == 10.0


def test_empty_workload_and_bad_input() -> None:
    result = _run([], _cluster(("a100", 8, 1)))
    assert (result.avg_jct_s, result.p99_jct_s, result.makespan_s, result.jobs) == (None, None, 0.0, [])
    with pytest.raises(ConfigError, match="appears twice"):
        _run([_job("A", 0, 1, 1), _job("A", 1, 1, 1)], _cluster(("a100", 8, 1)))
    with pytest.raises(UnknownNameError, match="fifo-requested"):
        get_policy("fifo-request")


def test_a_placement_beyond_the_free_gpus_is_a_policy_error() -> None:
    with pytest.raises(SchedulerError, match="placed 'B' on node 0"):
        _run([_job("A", 0, 8, 10), _job("B", 0, 8, 10)], _cluster(("a100", 8, 1)), _NodeZero(rate=8000.0, per_round=None))


@settings(max_examples=40, deadline=None)
@given(specs=st.lists(st.tuples(st.integers(0, 50), st.integers(1, 12), st.integers(1, 40),
                                st.sampled_from([None, "a100", "v100"]), st.booleans()), max_size=25),
       a100_nodes=st.integers(1, 2), v100_nodes=st.integers(0, 2))
def test_conservation_capacity_and_fifo_order(specs: list[tuple[int, int, int, str | None, bool]],
                                              a100_nodes: int, v100_nodes: int) -> None:
    shapes = [("a100", 8, a100_nodes)] + ([("v100-32gb", 4, v100_nodes)] if v100_nodes else [])
    cluster = _cluster(*shapes)
    jobs = [_job(f"j{i}", t, n, d, gpu_type=g, model=BIG if oom else GPT2)
            for i, (t, n, d, g, oom) in enumerate(specs)]
    result = _run(jobs, cluster)
    # every job is counted exactly once, in submission order; jobs that fit nowhere are never placed
    assert [r.id for r in result.jobs] == [j.id for j in jobs]
    assert result.violations == 0
    assert result.finished + len(result.unschedulable) == len(jobs)
    # fifo-requested rejects impossible requests on arrival, so nothing is left waiting at the end
    assert all(r.reason != "still waiting when no event was left" for r in result.jobs)
    placed = [(float(r.start_time_s), float(r.finish_time_s or 0.0), str(r.gpu_type), int(r.num_gpus or 0), r)
              for r in result.jobs if r.start_time_s is not None]
    assert all(start >= r.submit_time_s for start, _, _, _, r in placed)
    # strict FIFO: start times never decrease in arrival order
    in_arrival_order = sorted(placed, key=lambda p: (p[4].submit_time_s, int(p[4].id[1:])))
    assert [p[0] for p in in_arrival_order] == sorted(p[0] for p in placed)
    # at every start, the running jobs of each type fit that type's GPUs
    capacity = {"a100-80gb": 8 * a100_nodes, "v100-32gb": 4 * v100_nodes}
    for t, _, gpu_type, _, _ in placed:
        busy = sum(n for start, end, other, n, _ in placed if other == gpu_type and start <= t < end)
        assert busy <= capacity[gpu_type]
    # a job that asked for a type got it
    for r, job in zip(result.jobs, jobs):
        if r.gpu_type is not None and job.request is not None and job.request.gpu_type is not None:
            assert r.gpu_type == job.request.gpu_type


def test_progress_bar_stays_off_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate([_job("A", 0, 1, 5)], _cluster(("a100", 8, 1)), "fifo-requested", throughput=per_gpu_1000,
                      progress=True)
    assert result.finished == 1
    assert capsys.readouterr().out == ""


def test_cluster_state_best_fit_and_spread() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100", "gpus_per_node": 8, "count": 1, "free_gpus": 3},
                                           {"gpu": "a100", "gpus_per_node": 8, "count": 1},
                                           {"gpu": "a100", "gpus_per_node": 8, "count": 1, "free_gpus": 5}]})
    state = ClusterState(cluster)
    assert state.usable_gpus("a100-80gb") == 16 and state.usable_gpus() == 16
    assert state.find("a100-80gb", 3) == {0: 3}  # the fullest node that holds it
    assert state.find("a100-80gb", 4) == {2: 4}
    assert state.find("a100-80gb", 10) == {1: 8, 0: 2}  # the emptiest node first, the rest best fit
    assert state.find("a100-80gb", 8, block=4) == {1: 8}
    assert state.find("a100-80gb", 12, block=4) == {1: 8, 2: 4}  # node 0's 3 free GPUs hold no block of 4
    assert state.find("a100-80gb", 16, block=4) is None and state.find("a100-80gb", 6, block=4) is None
    assert state.find("a100-80gb", 17) is None and state.find("h100-sxm", 1) is None
    scratch = state.copy()
    scratch.take({1: 8})
    assert scratch.free_gpus() == 8 and state.free_gpus() == 16
    state.take({0: 3, 2: 5})
    state.release({0: 3})
    assert state.free.tolist() == [3, 8, 0]


def test_default_throughput_runs_jobs_at_the_planned_rate() -> None:
    from frenzy_core.scheduling.throughput import planned_tokens_per_s

    job = TrainingJob(id="g", submit_time_s=0, model=GPT2, training=RECIPE, work_tokens=10**9,
                      request=GPURequest(num_gpus=2, gpu_type="a100"))
    result = simulate([job], _cluster(("a100", 8, 1)), "fifo-requested", progress=False)
    rate = planned_tokens_per_s(GPT2, RECIPE, "a100-80gb", 2)
    assert result.jobs[0].tokens_per_s == pytest.approx(rate, rel=1e-12)
    assert result.jobs[0].finish_time_s == pytest.approx(10**9 / rate)
    # the record names the layout: its dp x tp x pp is the 2 GPUs
    degrees = {p[:2]: int(p[2:]) for p in str(result.jobs[0].layout).split() if p[:2] in ("dp", "tp", "pp")}
    assert degrees["dp"] * degrees["tp"] * degrees["pp"] == 2
