"""Cluster-scheduling benchmarks: every policy on the Philly trace, scheduling-round latency, simulation time.

Sections (``--sections``, default all):

* ``philly``: a window of ``--jobs`` consecutive Philly jobs (from job ``--start``, arrival order) mapped to LLM
  training jobs (``jobs_from_trace``, seed = the run's seed), simulated under every policy on the
  ``frenzy-paper`` cluster (96 GPUs of 3 types) for each seed of ``--seeds`` at arrival scale 1, and for the
  first seed at each other load of ``--loads`` (``arrival_scale``: 2 doubles the arrival rate).
* ``alibaba``: the same window on ``alibaba-spot-2026`` scaled to ``--alibaba-gpus`` GPUs, arrivals sped up
  by each of ``--alibaba-loads`` (the trace alone barely loads a cluster ten times the paper's).
* ``latency``: one ``frenzy-core`` round (``policy.schedule``) with 10 to 1,000 queued jobs on alibaba-spot-2026
  scaled to 96..4,096 GPUs, half of every node busy; median of ``--reps`` rounds, each on a fresh queue.
* ``scale``: a 10,000-job Philly simulation under ``frenzy-core`` and ``fifo-requested`` on frenzy-paper.

Acceptance targets (reported, never asserted; see docs/benchmarks.md): on >= 2,000 Philly jobs on frenzy-paper,
frenzy-core's average JCT >= 25% below fifo-requested and >= 10% below frenzy-has at every seed, zero OOM
placements, every job accounted for; median round <= 100 ms with 500 queued jobs on 1,000 GPUs; 10,000 jobs
simulated in under 2 minutes on one core.

Run: ``python benchmarks/cluster.py [--quick]`` (``--quick``: 500 jobs, one seed, fewer sizes). Needs the
shared traces folder (``../shared/traces`` beside the repository, or ``--trace``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from datetime import date
from pathlib import Path

from frenzy_core import Cluster
from frenzy_core.scheduling import (
    POLICIES,
    PlannedThroughput,
    SimulationResult,
    TrainingJob,
    get_policy,
    jobs_from_trace,
    load_trace,
    simulate,
)
from frenzy_core.scheduling.state import ClusterState

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "philly_2017_sep_nov.csv"
"""The shared Philly trace (msr-fiddle/philly-traces, CC BY 4.0, as processed by the Sia artifact)."""


def philly_jobs(trace: Path, start: int, count: int, seed: int, cluster: Cluster, arrival_scale: float,
                throughput: PlannedThroughput) -> list[TrainingJob]:
    """``count`` consecutive Philly jobs from ``start``, times shifted to 0, mapped with ``seed``."""
    window = load_trace(trace, "philly", arrival_scale=arrival_scale)[start:start + count]
    t0 = window[0].submit_time_s
    window = [j.model_copy(update={"submit_time_s": j.submit_time_s - t0}) for j in window]
    return jobs_from_trace(window, seed=seed, cluster=cluster, throughput=throughput)


def run_all(jobs: list[TrainingJob], cluster: Cluster, policies: list[str], seed: int,
            throughput: PlannedThroughput) -> list[tuple[SimulationResult, float]]:
    """Each policy's result and its simulation wall time (s)."""
    out = []
    for name in policies:
        began = time.perf_counter()
        result = simulate(jobs, cluster, name, seed=seed, throughput=throughput, progress=False)
        out.append((result, time.perf_counter() - began))
    return out


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def table(title: str, rows: list[tuple[str, list[tuple[SimulationResult, float]]]]) -> None:
    """A markdown table: one row per (run, policy), JCT in hours, reductions of frenzy-core."""
    print(f"\n{title}\n")
    print("| run | policy | finished | OOM | unschedulable | avg JCT h | median JCT h | p99 JCT h | "
          "avg queue h | makespan h | median round ms | sim s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, results in rows:
        for r, wall_s in results:
            accounted = r.finished + r.oom_placements + len(r.unschedulable) == len(r.jobs)
            assert accounted, "every job is accounted for"
            print(f"| {label} | {r.policy} | {r.finished} | {r.oom_placements} | {len(r.unschedulable)} | "
                  f"{hours(r.avg_jct_s)} | {hours(r.median_jct_s)} | {hours(r.p99_jct_s)} | "
                  f"{hours(r.avg_queue_delay_s)} | {hours(r.makespan_s)} | "
                  f"{1000 * (r.median_round_s or 0):.2f} | {wall_s:.1f} |")
    print()
    for label, results in rows:
        by = {r.policy: r for r, _ in results}
        core = by.get("frenzy-core")
        if core is None or core.avg_jct_s is None:
            continue
        parts = [f"{name} {1 - core.avg_jct_s / other.avg_jct_s:+.1%}" for name, other in by.items()
                 if name != "frenzy-core" and other.avg_jct_s]
        print(f"- {label}: frenzy-core average JCT below " + ", ".join(parts))


def latency(sizes: list[int], queues: list[int], reps: int, trace: Path, throughput: PlannedThroughput) -> None:
    """Median wall time of one frenzy-core round per (cluster size, queue length)."""
    print("\nScheduling-round latency, frenzy-core (median of rounds on fresh queues, ms)\n")
    print("| GPUs | " + " | ".join(f"{q} queued" for q in queues) + " |")
    print("|---|" + "---|" * len(queues))
    base = Cluster.preset("alibaba-spot-2026")
    pool = philly_jobs(trace, 25_000, max(queues) * reps, 0, base, 1.0, throughput)
    for gpus in sizes:
        cluster = base.scaled(gpus)
        cells = []
        for q in queues:
            times = []
            for rep in range(reps):
                state = ClusterState(cluster)
                state.take({n: int(state.free[n]) // 2 for n in range(len(state.free)) if state.free[n] >= 2})
                policy = get_policy("frenzy-core")
                policy.start(state, throughput, 0)
                for job in pool[rep * q:(rep + 1) * q]:
                    policy.submit(job, job.submit_time_s)
                now = max(j.submit_time_s for j in pool[rep * q:(rep + 1) * q])
                began = time.perf_counter()
                policy.schedule(now)
                times.append(time.perf_counter() - began)
            cells.append(f"{1000 * statistics.median(times):.1f}")
        print(f"| {cluster.total_gpus} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--start", type=int, default=25_000, help="First job of the window (arrival order).")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--loads", default="0.5,1,2", help="Arrival scales for the first seed.")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--alibaba-gpus", type=int, default=1024)
    parser.add_argument("--alibaba-loads", default="4,8")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sections", default="philly,alibaba,latency,scale")
    parser.add_argument("--quick", action="store_true", help="500 jobs, one seed, fewer sizes.")
    args = parser.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"trace {args.trace} not found: pass --trace (the Philly CSV of ../shared/traces)")
    if args.quick:
        args.jobs, args.seeds, args.loads, args.reps = 500, "0", "1", 3
    seeds = [int(s) for s in args.seeds.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    policies = args.policies.split(",")
    sections = set(args.sections.split(","))
    print(f"# Cluster scheduling benchmark ({date.today()}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, one process)")
    throughput = PlannedThroughput()  # shared: one candidate table per (model, recipe, GPU type)
    if "philly" in sections:
        cluster = Cluster.preset("frenzy-paper")
        rows = []
        for seed in seeds:
            jobs = philly_jobs(args.trace, args.start, args.jobs, seed, cluster, 1.0, throughput)
            rows.append((f"seed {seed}, load 1", run_all(jobs, cluster, policies, seed, throughput)))
        for load in loads:
            if load != 1.0:
                jobs = philly_jobs(args.trace, args.start, args.jobs, seeds[0], cluster, load, throughput)
                rows.append((f"seed {seeds[0]}, load {load:g}", run_all(jobs, cluster, policies, seeds[0],
                                                                         throughput)))
        table(f"Philly jobs {args.start}..{args.start + args.jobs - 1} on frenzy-paper (96 GPUs)", rows)
    if "alibaba" in sections:
        cluster = Cluster.preset("alibaba-spot-2026", scale=args.alibaba_gpus)
        rows = []
        for load in [float(x) for x in args.alibaba_loads.split(",")]:
            jobs = philly_jobs(args.trace, args.start, args.jobs, seeds[0], cluster, load, throughput)
            rows.append((f"seed {seeds[0]}, load {load:g}", run_all(jobs, cluster, policies, seeds[0], throughput)))
        table(f"Philly jobs on alibaba-spot-2026 scaled to {cluster.total_gpus} GPUs", rows)
    if "latency" in sections:
        sizes = [96, 1024] if args.quick else [96, 1024, 4096]
        queues = [10, 100, 500] if args.quick else [10, 100, 500, 1000]
        latency(sizes, queues, args.reps, args.trace, throughput)
    if "scale" in sections:
        n = 2000 if args.quick else 10_000
        cluster = Cluster.preset("frenzy-paper")
        began = time.perf_counter()
        jobs = philly_jobs(args.trace, args.start, n, seeds[0], cluster, 1.0, throughput)
        print(f"\n{n} Philly jobs mapped in {time.perf_counter() - began:.1f} s")
        for r, wall_s in run_all(jobs, cluster, ["fifo-requested", "frenzy-core"], seeds[0], throughput):
            print(f"- {r.policy}: simulated in {wall_s:.1f} s ({r.finished} finished, {r.oom_placements} OOM, "
                  f"{len(r.unschedulable)} unschedulable, avg JCT {hours(r.avg_jct_s)} h)")


if __name__ == "__main__":
    main()
