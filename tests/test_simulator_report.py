"""``compare`` and ``plot_results``: the comparison table and figure of simulation results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from frenzy_core import OptionalDependencyError, compare
from frenzy_core.scheduling.result import JobRecord, JobStatus, SimulationResult, Utilisation, summarise


def _result(policy: str, jcts: list[float]) -> SimulationResult:
    # each job trains 1e9 tokens on 4 GPUs for its JCT
    records = [JobRecord(id=f"j{i}", status=JobStatus.FINISHED, submit_time_s=0.0, start_time_s=0.0,
                         finish_time_s=j, gpu_type="a100-80gb", num_gpus=4, work_tokens=10**9, gpu_seconds=4 * j)
               for i, j in enumerate(jcts)]
    records.append(JobRecord(id="never", status=JobStatus.UNSCHEDULABLE, submit_time_s=0.0, reason="too big"))
    # 4 of 8 GPUs busy for the first 3,600 s, none after: 25% over the 7,200 s makespan
    util = Utilisation(times_s=[0.0, 3600.0], busy_gpus={"a100-80gb": [4, 0]}, capacity_gpus={"a100-80gb": 8})
    return summarise(policy, records, util, [0.001, 0.003, 0.002])


def test_summary_figures_and_utilisation() -> None:
    r = _result("p", [3600.0, 7200.0])
    assert (r.avg_jct_s, r.median_jct_s, r.makespan_s, r.avg_queue_delay_s) == (5400.0, 5400.0, 7200.0, 0.0)
    assert r.unschedulable == ["never"] and r.median_round_s == 0.002
    assert r.mean_utilisation() == {"a100-80gb": 0.25}
    # goodput: 2e9 tokens over 4 x (3,600 + 7,200) GPU-seconds = 12 GPU-hours
    assert r.goodput_tokens_per_gpu_hour == pytest.approx(2e9 / 12)


def test_compare_lists_every_policy_against_the_first() -> None:
    text = compare([_result("fifo", [3600.0, 7200.0]), _result("fast", [1800.0, 3600.0])])
    header, fifo, fast = text.splitlines()
    assert header.split()[:3] == ["policy", "finished", "violations"]
    # finished, violations, unschedulable, avg JCT h 1.50 / 0.75, mean utilisation 25.0%, goodput 2e9 tokens per
    # 12 GPU-hours = 166.67 M, round 2.0 ms, -50% vs first
    assert fifo.split() == ["fifo", "2", "0", "1", "1.50", "1.50", "1.99", "0.00", "2.00", "25.0", "166.67", "2.0",
                            "+0.0%"]
    assert fast.split()[4] == "0.75" and fast.split()[-1] == "-50.0%"


def test_plot_writes_a_figure_or_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "sim.png"
    _result("a", [3600.0]).plot(out, _result("b", [1800.0]))
    assert out.stat().st_size > 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(OptionalDependencyError, match="frenzy_core\\[plot\\]"):
        _result("a", [3600.0]).plot(tmp_path / "again.png")


def test_scheduler_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first example of docs/scheduler.md, on the shared copy of the Philly trace."""
    pytest.importorskip("matplotlib")
    trace = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_2017_sep_nov.csv"
    if not trace.is_file():
        pytest.skip(f"the shared Philly trace is not at {trace}")
    docs = Path(__file__).resolve().parents[1] / "docs" / "scheduler.md"
    example = docs.read_text(encoding="utf-8").split("```python\n")[1].split("```")[0]
    assert '"philly_2017_sep_nov.csv"' in example
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(example.replace('"philly_2017_sep_nov.csv"', repr(str(trace))), namespace)  # noqa: S102
    results = namespace["results"]
    assert isinstance(results, list) and len(results) == 5
    assert all(r.violations == 0 and r.finished + len(r.unschedulable) == 200 for r in results)
    assert (tmp_path / "sim.png").stat().st_size > 0
