"""``frenzy simulate TRACE``: replay a public cluster trace as LLM training jobs under scheduling policies."""

from __future__ import annotations

import gzip
import zlib
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from frenzy_core._files import is_file
from frenzy_core.cli import options as opt
from frenzy_core.cli._common import (
    console,
    err_console,
    handle_errors,
    load_cluster_arg,
    new_table,
    parse_names,
    plot_target,
    print_json,
    require_positive,
)
from frenzy_core.cli.payloads import simulate_payload
from frenzy_core.errors import ConfigError
from frenzy_core.scheduling import SimulationResult, TraceFormat, TraceJob, TraceLoad
from frenzy_core.scheduling.report import plot_results
from frenzy_core.scheduling.throughput import PlannedThroughput

__all__ = ["simulate"]


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:,.2f}"


_HEADERS: dict[TraceFormat, tuple[str, ...]] = {
    TraceFormat.PHILLY: ("timestamp", "duration", "num_gpus"),
    TraceFormat.SIA: ("name", "time", "application", "num_replicas"),
    TraceFormat.HELIOS: ("job_id", "user", "vc", "gpu_num"),
    TraceFormat.ALIBABA_SPOT: ("job_name", "organization", "gpu_model"),
}
"""The first columns of each trace format's header (docs/traces.md), to tell the format without --format."""


def _open_text(path: Path) -> object:
    # surrogateescape: a byte that is not UTF-8 is for the trace reader to report (or skip) with its row
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape")
    return path.open(encoding="utf-8", errors="surrogateescape")


def detect_format(path: Path) -> TraceFormat:
    """The trace format whose header starts the file; ConfigError naming --format when none does."""
    try:
        with _open_text(path) as f:  # type: ignore[attr-defined]
            header = f.readline().strip().lower()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read trace file {str(path)!r}: {exc}", field="TRACE", value=str(path),
                          hint="check the file (a .gz must be complete)") from None
    columns = tuple(c.strip() for c in header.split(","))
    for fmt, start in _HEADERS.items():
        if columns[: len(start)] == start:
            return fmt
    raise ConfigError(f"{path.name}: the header {header[:80]!r} is not one of the known trace formats",
                      field="--format", value=header[:80], hint="pass --format philly, sia, helios or alibaba-spot")


@handle_errors
def simulate(
    trace: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (CSV, optionally .gz).")],
    format: Annotated[TraceFormat | None, typer.Option("--format", "-f", help=(
        "Trace format (default: told from the file's header)."))] = None,
    cluster: opt.Cluster[str | None] = None,
    scale: opt.Scale[int | None] = None,
    policies: Annotated[str | None, typer.Option(help=(
        "Comma-separated policies (default: every built-in one)."))] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Replay only the first N jobs (in arrival order).")] = None,
    on_error: Annotated[str, typer.Option(help=(
        "Malformed trace rows: 'skip' them (with a note) or 'fail' on the first one."))] = "skip",
    seed: Annotated[int, typer.Option(help="Seed of the trace-to-model mapping and of the policies.")] = 0,
    default_duration: Annotated[float | None, typer.Option(help=(
        "Run time in seconds for jobs whose trace records none (Sia traces)."))] = None,
    plot: opt.Plot = None,
    json_out: opt.Json = False,
    failures: Annotated[bool, typer.Option("--failures", help=(
        "Nodes fail and are repaired (Llama 3's rate; see docs/scheduler.md)."))] = False,
) -> None:
    """Simulate scheduling policies on a trace: each trace job becomes an LLM training job of the same size.

    Rows the reader cannot parse are skipped, and their count is printed on stderr. --plot draws the CDF of job
    completion times per policy and each GPU type's utilisation over time.

    Examples:

      frenzy simulate philly.csv --limit 200

      frenzy simulate sia_philly_workload_1.csv --format sia --default-duration 3600 --cluster philly-like

      frenzy simulate philly.csv --limit 100 --plot jct.png --json
    """
    from frenzy_core.scheduling import POLICIES, jobs_from_trace
    from frenzy_core.scheduling import simulate as run_simulation

    require_positive(default_duration, "--default-duration")
    plot = plot_target(plot)
    names = parse_names(policies, "--policies") or list(POLICIES)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ConfigError(f"unknown policies {unknown}", field="--policies", value=unknown,
                          hint="use some of " + ", ".join(POLICIES))
    if not is_file(trace):
        raise ConfigError(f"trace file {str(trace)!r} does not exist", field="TRACE", value=str(trace))
    where = load_cluster_arg(cluster, scale)
    if on_error not in ("skip", "fail"):
        raise ConfigError(f"--on-error must be 'skip' or 'fail', got {on_error!r}", field="--on-error",
                          value=on_error)
    format = format or detect_format(trace)
    loaded, trace_jobs = _trace_jobs(trace, format, on_error, limit, default_duration)
    throughput = PlannedThroughput()  # one planner table per (model, recipe, GPU type), shared by every policy
    if not json_out:
        console.print(f"Replaying {len(trace_jobs)} of {len(loaded.jobs)} jobs from {trace.name} on "
                      f"{where.describe()}", highlight=False, soft_wrap=True)
    spinner = err_console.status("mapping trace jobs to LLM training jobs") if not json_out else nullcontext()
    with spinner:
        jobs = jobs_from_trace(trace_jobs, seed=seed, cluster=where.cluster, throughput=throughput,
                               default_duration_s=default_duration)
    results = [run_simulation(jobs, where.cluster, name, seed=seed, progress=not json_out, throughput=throughput,
                              failures=failures)
               for name in names]
    if plot is not None:
        plot_results(results, plot)
    if json_out:
        print_json(simulate_payload(trace, format, where, len(jobs), len(loaded.skipped), plot, results))
        return
    _print_results(results, len(jobs), plot)


def _trace_jobs(trace: Path, trace_format: TraceFormat, on_error: str, limit: int | None,
                default_duration: float | None) -> tuple[TraceLoad, list[TraceJob]]:
    """The trace read (skipped rows noted on stderr) and the jobs to replay; ConfigError for an unreadable file,
    no jobs, or jobs without run time and no --default-duration."""
    from frenzy_core.scheduling import read_trace

    try:
        loaded = read_trace(trace, trace_format, on_error=on_error)
    except (EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read trace file {str(trace)!r}: {exc}", field="TRACE", value=str(trace),
                          hint="the file is truncated or not a trace; a .gz must be complete") from None
    trace_jobs = loaded.jobs[:limit] if limit is not None else loaded.jobs
    if loaded.skipped:
        first = loaded.skipped[0].describe(trace.name)
        err_console.print(f"note: skipped {len(loaded.skipped)} malformed rows (first: {first})", highlight=False,
                          soft_wrap=True, markup=False)
    if not trace_jobs:
        raise ConfigError(f"{trace.name} has no jobs to replay as {trace_format.value}", field="TRACE",
                          hint="check --format (philly, sia, helios, alibaba-spot)")
    undated = sum(j.duration_s is None for j in trace_jobs)
    if undated and default_duration is None:
        raise ConfigError(
            f"{undated} of the {len(trace_jobs)} jobs record no run time ({trace_format.value} traces may not)",
            field="--default-duration",
            hint="pass --default-duration SECONDS to give them one, e.g. --default-duration 3600",
        )
    return loaded, trace_jobs


def _print_results(results: list[SimulationResult], jobs: int, plot: Path | None) -> None:
    """One row per policy: jobs finished, placements that do not fit, unschedulable, JCT and makespan in hours."""
    table = new_table(
        f"{jobs} jobs; job completion time (JCT) and makespan in hours",
        ["policy", "finished", "violations", "unschedulable", "avg JCT", "p99 JCT", "makespan"],
    )
    for r in results:
        table.add_row(r.policy, str(r.finished), str(r.violations), str(len(r.unschedulable)),
                      _hours(r.avg_jct_s), _hours(r.p99_jct_s), _hours(r.makespan_s))
    console.print(table)
    if plot is not None:
        console.print(f"Saved the JCT CDF to {plot}", highlight=False)
