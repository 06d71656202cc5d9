"""Cluster-trace readers: exact values from CSV snippets, malformed rows, windows, sampling, real traces."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError
from frenzy_core.scheduling import TraceFormat, TraceWarning, load_trace, read_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-03 00:00:10,100.0,2,200.0,vcA
2017-10-03 00:00:00,50.5,1,50.5,vcB
2017-10-03 01:00:00,3600,8,28800,vcA
"""

SIA = """name,time,application,num_replicas,batch_size
cifar10-0,107,cifar10,6,2048
bert-1,110,bert,12,12
"""

HELIOS = """job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
j1,u1,vcX,8,32,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:05,2020-04-01 00:10:05,600,5
j2,u2,vcY,0,4,1,COMPLETED,2020-04-01 00:00:30,2020-04-01 00:00:30,2020-04-01 00:01:30,60,0
j3,u1,vcX,1,4,1,CANCELLED,2020-04-01 00:01:00,2020-04-01 00:01:00,2020-04-01 00:01:00,0,0
j4,u3,vcZ,16,64,2,FAILED,2020-04-01 00:02:00,2020-04-01 00:02:10,2020-04-01 00:03:10,60,10
"""

ALIBABA = """job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type
437261,57,A100-SXM4-80GB,15,1,94,9589663,71718,Spot
239255,13,A10,20,1,1,0,2764799,HP
9,4,GPU-series-1,8,0.3,10,60,100,Spot
10,4,A10,8,0.5,1,61,100,Spot
"""


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_philly_rows_sorted_and_relative(tmp_path: Path) -> None:
    jobs = load_trace(_write(tmp_path, PHILLY), "philly")
    assert [j.id for j in jobs] == ["2", "1", "3"]  # 1-based data rows, in arrival order
    assert [j.submit_time_s for j in jobs] == [0.0, 10.0, 3600.0]
    assert [j.duration_s for j in jobs] == [50.5, 100.0, 3600.0]
    assert [j.num_gpus for j in jobs] == [1, 2, 8]
    assert [j.group for j in jobs] == ["vcB", "vcA", "vcA"]
    assert jobs[2].gpu_seconds == 28800.0
    assert all(j.source is TraceFormat.PHILLY and j.gpu_type is None for j in jobs)


def test_sia_has_no_durations(tmp_path: Path) -> None:
    jobs = load_trace(_write(tmp_path, SIA), TraceFormat.SIA)
    assert [(j.id, j.submit_time_s, j.num_gpus, j.application, j.batch_size) for j in jobs] == [
        ("cifar10-0", 0.0, 6, "cifar10", 2048), ("bert-1", 3.0, 12, "bert", 12)]
    assert all(j.duration_s is None and j.gpu_seconds is None for j in jobs)


def test_helios_leaves_out_cpu_jobs_and_zero_durations(tmp_path: Path) -> None:
    result = read_trace(_write(tmp_path, HELIOS), "helios")
    assert [(j.id, j.submit_time_s, j.num_gpus, j.duration_s) for j in result.jobs] == [
        ("j1", 0.0, 8, 600.0), ("j4", 120.0, 16, 60.0)]
    assert (result.jobs[1].user, result.jobs[1].group, result.jobs[1].state) == ("u3", "vcZ", "FAILED")
    assert result.rows_read == 4
    assert result.excluded == {"no GPUs requested": 1, "zero duration": 1}
    assert result.skipped == []


def test_alibaba_gpus_are_per_worker_times_workers(tmp_path: Path) -> None:
    jobs = load_trace(_write(tmp_path, ALIBABA), "alibaba-spot")
    by_id = {j.id: j for j in jobs}
    assert [j.id for j in jobs] == ["239255", "9", "10", "437261"]
    assert by_id["437261"].num_gpus == 94
    assert by_id["437261"].submit_time_s == 9589663.0
    assert by_id["9"].num_gpus == 3  # 0.3 x 10, not ceil(3.0000000000000004) = 4
    assert by_id["10"].num_gpus == 1  # half a GPU still holds one
    assert (by_id["239255"].gpu_type, by_id["239255"].group, by_id["239255"].job_type) == ("A10", "13", "HP")


def test_malformed_row_fails_naming_file_row_column_reason(tmp_path: Path) -> None:
    bad = PHILLY.replace("50.5,1,50.5", "soon,1,50.5")
    path = _write(tmp_path, bad, "philly_bad.csv")
    with pytest.raises(ConfigError) as err:
        load_trace(path, "philly")
    text = str(err.value)
    assert "philly_bad.csv line 3 (data row 2)" in text
    assert "column 'duration'" in text and "'soon' is not a number" in text
    assert "on_error='skip'" in text
    assert err.value.field == "duration" and err.value.value == "soon"


@pytest.mark.parametrize("row, column, reason", [
    ("2017-10-03 00:00:20,-5,1,5,vcA", "duration", "'-5' is not a finite number >= 0"),
    ("2017-10-03 00:00:20,5,1.5,5,vcA", "num_gpus", "'1.5' is not a whole number"),
    ("2017-10-03 00:00:20,nan,1,5,vcA", "duration", "'nan' is not a finite number >= 0"),
    ("yesterday,5,1,5,vcA", "timestamp", "'yesterday' is neither seconds nor a 'YYYY-MM-DD HH:MM:SS' time"),
    ("2017-10-03 00:00:20,5,1", None, "has 3 fields; the header has 5"),
])
def test_skip_reports_each_malformed_row(tmp_path: Path, row: str, column: str | None, reason: str) -> None:
    path = _write(tmp_path, PHILLY + row + "\n")
    result = read_trace(path, "philly", on_error="skip")
    assert len(result.jobs) == 3 and result.rows_read == 4
    assert len(result.skipped) == 1
    skipped = result.skipped[0]
    assert (skipped.line, skipped.row, skipped.column, skipped.reason) == (5, 4, column, reason)


def test_load_trace_warns_once_about_skipped_rows(tmp_path: Path) -> None:
    rows = "".join(f"2017-10-03 00:00:2{i},x,1,5,vcA\n" for i in range(5))
    path = _write(tmp_path, PHILLY + rows)
    expected = r"skipped 5 malformed rows of trace.csv: trace.csv line 5 .*and 2 more"
    with pytest.warns(TraceWarning, match=expected):
        jobs = load_trace(path, "philly", on_error="skip")
    assert len(jobs) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_trace(_write(tmp_path, PHILLY, "clean.csv"), "philly", on_error="skip")) == 3


def test_header_must_have_the_format_columns(tmp_path: Path) -> None:
    missing = r"lacks \['timestamp', 'duration', 'num_gpus', 'cluster'\] for format 'philly'"
    with pytest.raises(ConfigError, match=missing):
        load_trace(_write(tmp_path, SIA), "philly")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_trace(_write(tmp_path, "", "empty.csv"), "philly")
    with pytest.raises(ConfigError, match="no such trace file") as err:
        load_trace(tmp_path / "absent.csv", "philly")
    assert err.value.field == "path"
    assert read_trace(_write(tmp_path, PHILLY.splitlines()[0] + "\n", "header.csv"), "philly").jobs == []


def test_extra_columns_any_order_blank_lines_and_gzip(tmp_path: Path) -> None:
    text = ("cluster,extra,num_gpus,duration,timestamp\n"
            "vcA,z,4,10,2017-10-03 00:00:00\n\nvcB,z,2,20,2017-10-03 00:00:05\n")
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text)
    result = read_trace(path, "philly")
    assert [(j.id, j.num_gpus, j.duration_s, j.submit_time_s) for j in result.jobs] == [
        ("1", 4, 10.0, 0.0), ("2", 2, 20.0, 5.0)]
    assert result.rows_read == 2


def test_time_window_keeps_half_open_interval_and_shifts(tmp_path: Path) -> None:
    result = read_trace(_write(tmp_path, PHILLY), "philly", time_window=(10, 3600))
    assert [(j.id, j.submit_time_s) for j in result.jobs] == [("1", 0.0)]
    assert result.excluded == {"outside the time window": 2}
    jobs = load_trace(_write(tmp_path, PHILLY), "philly", time_window=(0, float("inf")))
    assert len(jobs) == 3


def test_arrival_scale_divides_arrival_times(tmp_path: Path) -> None:
    jobs = load_trace(_write(tmp_path, PHILLY), "philly", arrival_scale=4.0)
    assert [j.submit_time_s for j in jobs] == [0.0, 2.5, 900.0]
    assert [j.duration_s for j in jobs] == [50.5, 100.0, 3600.0]  # only arrivals change


def test_sampling_is_seeded_ordered_and_a_subset(tmp_path: Path) -> None:
    rows = "".join(f"{i},{i + 1},1,1,vc\n" for i in range(100))
    path = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n" + rows)
    full = {j.id: j for j in load_trace(path, "philly")}
    a = read_trace(path, "philly", sample=10, seed=3)
    b = load_trace(path, "philly", sample=10, seed=3)
    c = load_trace(path, "philly", sample=10, seed=4)
    assert a.jobs == b and len(b) == 10 and a.excluded == {"not sampled": 90}
    assert [j.id for j in b] != [j.id for j in c]
    assert all(full[j.id] == j for j in b)
    assert [j.submit_time_s for j in b] == sorted(j.submit_time_s for j in b)
    assert len(load_trace(path, "philly", sample=0.25)) == 25
    assert len(load_trace(path, "philly", sample=1.0)) == 100
    assert len(load_trace(path, "philly", sample=1000)) == 100


@pytest.mark.parametrize("kwargs, field", [
    ({"format": "slurm"}, "format"),
    ({"on_error": "ignore"}, "on_error"),
    ({"sample": 0}, "sample"),
    ({"sample": 1.5}, "sample"),
    ({"sample": True}, "sample"),
    ({"time_window": (5, 1)}, "time_window"),
    ({"time_window": (-1, 5)}, "time_window"),
    ({"arrival_scale": 0.0}, "arrival_scale"),
])
def test_bad_options_name_the_field(tmp_path: Path, kwargs: dict[str, object], field: str) -> None:
    path = _write(tmp_path, PHILLY)
    with pytest.raises(ConfigError) as err:
        load_trace(path, **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


@settings(max_examples=40, deadline=None)
@given(submits=st.lists(st.integers(0, 10_000), min_size=1, max_size=40),
       start=st.integers(0, 5_000), length=st.integers(1, 10_000), scale=st.sampled_from([0.5, 1.0, 3.0]),
       count=st.integers(1, 50), seed=st.integers(0, 3))
def test_window_sample_scale_laws(tmp_path_factory: pytest.TempPathFactory, submits: list[int], start: int,
                                  length: int, scale: float, count: int, seed: int) -> None:
    rows = "".join(f"{t},5,1,5,vc\n" for t in submits)
    path = tmp_path_factory.mktemp("law") / "t.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + rows, encoding="utf-8")
    first = min(submits)
    in_window = [t - first for t in submits if start <= t - first < start + length]
    result = read_trace(path, "philly", time_window=(start, start + length), sample=count,
                        arrival_scale=scale, seed=seed)
    assert len(result.jobs) == min(count, len(in_window))
    assert len(result.jobs) + sum(result.excluded.values()) == len(submits)
    times = [j.submit_time_s for j in result.jobs]
    assert times == sorted(times)
    assert all(0 <= t * scale < length for t in times)


def _shared_trace(name: str) -> Path:
    path = SHARED / "traces" / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared reference folder is not beside the project)")
    return path


def test_real_philly_trace() -> None:
    result = read_trace(_shared_trace("philly_2017_sep_nov.csv"), "philly")
    assert result.rows_read == 74_167 and len(result.jobs) == 74_167
    assert result.skipped == [] and result.excluded == {}
    # the first row: 2017-09-04 10:30:41, 2,240,194 s on 8 GPUs in virtual cluster 7f04ca
    first = result.jobs[0]
    assert (first.id, first.submit_time_s, first.duration_s, first.num_gpus, first.group) == (
        "1", 0.0, 2_240_194.0, 8, "7f04ca")
    # the last row: 2017-11-30 23:52:11, i.e. 87 days 13:21:30 after the first
    assert result.jobs[-1].submit_time_s == 87 * 86400 + 13 * 3600 + 21 * 60 + 30
    assert sum(j.num_gpus == 1 for j in result.jobs) == 69_294


def test_real_sia_workload() -> None:
    jobs = load_trace(_shared_trace("sia_philly_workload_1.csv"), "sia")
    assert len(jobs) == 160
    assert (jobs[0].id, jobs[0].num_gpus, jobs[0].batch_size) == ("cifar10-0", 6, 2048)
    assert jobs[-1].submit_time_s == 27695 - 107


def test_docs_example_runs() -> None:
    """The first example of docs/traces.md, on the shared copy of the Philly trace."""
    path = _shared_trace("philly_2017_sep_nov.csv")
    docs = Path(__file__).resolve().parents[1] / "docs" / "traces.md"
    example = docs.read_text(encoding="utf-8").split("```python\n")[1].split("```")[0]
    assert '"philly_2017_sep_nov.csv"' in example
    namespace: dict[str, object] = {}
    exec(example.replace('"philly_2017_sep_nov.csv"', repr(str(path))), namespace)  # noqa: S102
    trace, jobs = namespace["trace"], namespace["jobs"]
    assert isinstance(trace, list) and isinstance(jobs, list) and len(jobs) == len(trace) > 0
