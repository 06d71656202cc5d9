"""Cluster-scheduling benchmarks: every policy on every workload, advance() latency, the full Philly trace.

Sections (``--sections``, default all):

* ``philly``: ``--jobs`` consecutive Philly jobs (from job ``--start``, arrival order) mapped to LLM training jobs
  (``jobs_from_trace``, seed = the run's seed: it draws each job's model), simulated under every policy on
  ``frenzy-paper`` (96 GPUs of 3 types) for every seed of ``--seeds`` and load of ``--loads`` (``arrival_scale``:
  2 doubles the arrival rate), with node failures at the default rate (``FailureModel``, seeded) unless
  ``--no-failures``. Means over seeds with 95% confidence intervals (Student's t). ``--runs-out FILE`` appends
  each run to FILE as it finishes (JSON lines); ``--tables-from FILE`` prints the tables of such a file (what
  finished of a long run that was stopped).
* ``workloads``: the same policies and seeds on the other workloads: ``--other-jobs`` Philly jobs on
  ``aws-mixed``, ``philly-like`` and ``alibaba-spot-2026`` scaled to 1,024 GPUs (arrivals 8x), and the Sia
  artifact's Philly workload 1 (``../shared/traces/sia_philly_workload_1.csv``, 1 h per job) on the Sia paper's
  64-GPU cluster.
* ``latency``: ``OnlineScheduler.advance`` with ``--queued`` jobs waiting on alibaba-spot-2026 scaled to
  ``--latency-gpus`` GPUs, half of every node busy; median of ``--reps`` calls, each on a fresh scheduler.
* ``full``: the whole Philly trace (74,167 jobs; ``--full-jobs N``: its first N) on ``philly-like`` (2,490 GPUs)
  under every policy; CPU seconds of ``simulate`` (one process, one core) and wall seconds; ``--records-out DIR``
  saves every job record per policy (``DIR/POLICY.json``) to compare two versions of the code decision by
  decision.

Acceptance targets (reported, never asserted; see docs/benchmarks.md): 0 placement violations everywhere; with
failures on, every job finished or reported unschedulable and frenzy-core's average JCT <= 0.85x the best other
policy's and its p99 no worse than the best other's at loads 0.5, 1 and 2; the full trace in <= 60 s per policy;
``advance()`` <= 50 ms with 5,000 queued jobs on 10,000 GPUs.

Run: ``python benchmarks/cluster.py [--quick]``. Needs the shared traces folder (``../shared/traces`` beside the
repository, or ``--traces``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from frenzy_core import Cluster
from frenzy_core.scheduling import (
    POLICIES,
    FailureModel,
    OnlineScheduler,
    PlannedThroughput,
    SimulationResult,
    TrainingJob,
    jobs_from_trace,
    load_trace,
    simulate,
)
from frenzy_core.scheduling.policies import FrenzyCore

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
"""The shared traces: Philly (msr-fiddle/philly-traces, CC BY 4.0, as processed by the Sia artifact) and the Sia
artifact's Philly workload 1 (siasosp23/artifacts)."""

SIA_CLUSTER = Cluster.from_dict({"name": "sia-paper", "nodes": [
    {"gpu": "t4", "gpus_per_node": 4, "count": 6},
    {"gpu": "a100-40gb", "gpus_per_node": 8, "count": 2},
    {"gpu": "rtx-3090", "gpus_per_node": 8, "count": 3},
]})
"""The Sia artifact's simulated cluster (sia-simulator/simulator_config.py: 6 x g4dn.12xlarge with 4 T4, 2 DGX
A100 40 GB with 8, 3 nodes of 8 RTX 2080 Ti; 64 GPUs). The catalogue has no RTX 2080 Ti (11 GB): its nodes are
RTX 3090 (24 GB) here, about 2x faster and with more memory."""

VARIANTS = {"frenzy-core/mix": lambda: FrenzyCore(mixing=True)}
"""Policies run beside the registry's (``--policies``): frenzy-core with placements spanning GPU types (off by
default)."""

T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""Two-sided 95% Student's t quantiles by degrees of freedom (any statistics table)."""


def philly_jobs(trace: Path, start: int, count: int, seed: int, cluster: Cluster, arrival_scale: float,
                throughput: PlannedThroughput) -> list[TrainingJob]:
    """``count`` consecutive Philly jobs from ``start``, times shifted to 0, mapped with ``seed``."""
    window = load_trace(trace, "philly", arrival_scale=arrival_scale)[start:start + count]
    t0 = window[0].submit_time_s
    window = [j.model_copy(update={"submit_time_s": j.submit_time_s - t0}) for j in window]
    return jobs_from_trace(window, seed=seed, cluster=cluster, throughput=throughput)


def sia_jobs(trace: Path, seed: int, cluster: Cluster, throughput: PlannedThroughput) -> list[TrainingJob]:
    """The Sia workload's jobs (sizes and arrivals as recorded; 1 h of work on the requested V100s each)."""
    return jobs_from_trace(load_trace(trace, "sia"), seed=seed, cluster=cluster, throughput=throughput,
                           default_duration_s=3600.0)


def mean_ci(values: Sequence[float]) -> str:
    """``mean ± half-width`` of a 95% confidence interval over seeds (the mean alone for one seed)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:.2f}"
    half = T_95[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    return f"{m:.2f} ± {half:.2f}"


def run(jobs: list[TrainingJob], cluster: Cluster, policy: str, seed: int, throughput: PlannedThroughput,
        failures: bool) -> tuple[SimulationResult, float]:
    """One simulation and its CPU seconds."""
    began = time.process_time()
    chosen = VARIANTS[policy]() if policy in VARIANTS else policy
    result = simulate(jobs, cluster, chosen, seed=seed, throughput=throughput, progress=False,
                      failures=FailureModel(seed=seed) if failures else None)
    assert result.finished + len(result.unschedulable) == len(jobs), "every job is accounted for"
    return result, time.process_time() - began


def mean_of(rs: list[tuple[SimulationResult, float]], attr: str) -> float:
    """The mean of a result field over runs (a missing value counts as infinite)."""
    return statistics.fmean(getattr(r, attr) or math.inf for r, _ in rs)


def table(title: str, runs: dict[tuple[str, str], list[tuple[SimulationResult, float]]]) -> None:
    """One row per (label, policy): means over seeds with 95% CIs; then frenzy-core against the best other."""
    print(f"\n### {title}\n", flush=True)
    print("| run | policy | seeds | finished | unsched. | violations | avg JCT h | p99 JCT h | goodput Mtok/GPU-h | "
          "failures | interrupted | preempted | resized | sim CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    labels = list(dict.fromkeys(label for label, _ in runs))
    for label in labels:
        for policy in [*POLICIES, *VARIANTS]:
            got = runs.get((label, policy))
            if not got:
                continue
            rs = [r for r, _ in got]
            avg = [r.avg_jct_s / 3600 for r in rs if r.avg_jct_s is not None]
            p99 = [r.p99_jct_s / 3600 for r in rs if r.p99_jct_s is not None]
            good = [r.goodput_tokens_per_gpu_hour / 1e6 for r in rs if r.goodput_tokens_per_gpu_hour]
            name = f"**{policy}**" if policy == "frenzy-core" else policy
            print(f"| {label} | {name} | {len(rs)} | {sum(r.finished for r in rs)} | "
                  f"{sum(len(r.unschedulable) for r in rs)} | {sum(r.violations for r in rs)} | {mean_ci(avg)} | "
                  f"{mean_ci(p99)} | {mean_ci(good)} | {sum(r.node_failures for r in rs)} | "
                  f"{sum(r.interruptions for r in rs)} | {sum(r.preemptions for r in rs)} | "
                  f"{sum(r.resizes for r in rs)} | {statistics.fmean(t for _, t in got):.1f} |")
    print()
    for label in labels:
        core = runs.get((label, "frenzy-core"))
        others = {p: runs[(label, p)] for p in POLICIES if p != "frenzy-core" and (label, p) in runs}
        mix = runs.get((label, "frenzy-core/mix"))
        if mix and core:
            print(f"- {label}: frenzy-core with mixing / without: average JCT "
                  f"{mean_of(mix, 'avg_jct_s') / mean_of(core, 'avg_jct_s'):.3f}x, p99 "
                  f"{mean_of(mix, 'p99_jct_s') / mean_of(core, 'p99_jct_s'):.3f}x, starts spanning types "
                  f"{sum(sum('+' in (j.gpu_type or '') for j in r.jobs) for r, _ in mix)}")
        if not core or not others:
            continue

        best_avg = min(others, key=lambda p: mean_of(others[p], "avg_jct_s"))
        best_p99 = min(others, key=lambda p: mean_of(others[p], "p99_jct_s"))
        ratio = mean_of(core, "avg_jct_s") / mean_of(others[best_avg], "avg_jct_s")
        p99_ratio = mean_of(core, "p99_jct_s") / mean_of(others[best_p99], "p99_jct_s")
        print(f"- {label}: frenzy-core average JCT {ratio:.2f}x the best other ({best_avg}); p99 {p99_ratio:.2f}x the "
              f"best other's ({best_p99})", flush=True)


def latency(queued: int, gpus: int, reps: int, trace: Path, throughput: PlannedThroughput) -> None:
    """Wall time of ``OnlineScheduler.advance`` with ``queued`` waiting jobs on a full cluster, per policy: when
    one 8-GPU node frees up (the steady state: one completion per round), and when half of every node frees up
    at once (a burst: the round then starts thousands of jobs). CPU time; median of ``reps`` fresh schedulers
    sharing one ``throughput``, after one untimed warm-up that builds the planner's tables for the nodes met."""
    from ortools.linear_solver import pywraplp  # noqa: F401  (imported once, before any round is timed)
    from ortools.sat.python import cp_model  # noqa: F401

    cluster = Cluster.preset("alibaba-spot-2026", scale=gpus)
    pool = [j.model_copy(update={"submit_time_s": 0.0})
            for j in philly_jobs(trace, 25_000, queued, 0, cluster, 1.0, throughput)]
    print(f"\n### advance() latency: {queued} queued jobs on {cluster.total_gpus} GPUs\n")
    print("| policy | one node frees: median CPU ms | jobs started | half of every node frees: CPU ms | started | "
          "ms per start |")
    print("|---|---|---|---|---|---|")
    for policy in POLICIES:
        one: list[float] = []
        burst: list[float] = []
        started = [0, 0]
        for rep in range(reps + 1):  # the first builds the planner's tables for the nodes it meets: not timed
            for case in (0, 1):
                sched = OnlineScheduler(cluster, policy, throughput=throughput)
                every = {n: int(f) for n, f in enumerate(sched.state.free) if f}
                sched.state.take(every)  # a full cluster (its jobs are another scheduler's)
                for job in pool:
                    sched.submit(job)
                sched.advance(0.0)  # the arrivals are queued; nothing can start
                if case == 0:
                    node = next(n for n, c in every.items() if c == 8)
                    sched.state.release({node: 8})
                else:
                    sched.state.release({n: c // 2 for n, c in every.items() if c >= 2})
                began = time.process_time()
                actions = sched.advance(1.0)
                if rep:
                    (one if case == 0 else burst).append(time.process_time() - began)
                started[case] = len(actions)
        per_start = 1000 * statistics.median(burst) / max(1, started[1])
        print(f"| {policy} | {1000 * statistics.median(one):.1f} | {started[0]} | {1000 * statistics.median(burst):.0f} "
              f"| {started[1]} | {per_start:.2f} |", flush=True)


def full_trace(trace: Path, throughput: PlannedThroughput, policies: list[str], count: int | None = None,
               records_out: Path | None = None) -> None:
    """The whole Philly trace (or its first ``count`` jobs) on philly-like under each policy; with
    ``records_out``, every job record of each policy saved there as JSON (``POLICY.json``), to compare two
    versions of the code decision by decision."""
    cluster = Cluster.preset("philly-like")
    began = time.process_time()
    jobs = jobs_from_trace(load_trace(trace, "philly")[:count], seed=0, cluster=cluster, throughput=throughput)
    print(f"\n### Full Philly trace ({len(jobs)} jobs) on philly-like ({cluster.total_gpus} GPUs)\n")
    print(f"Mapping: {time.process_time() - began:.1f} CPU s.\n")
    print("| policy | sim CPU s | sim wall s | finished | unsched. | violations | avg JCT h | p99 JCT h |")
    print("|---|---|---|---|---|---|---|---|")
    for policy in policies:
        wall = time.perf_counter()
        result, cpu = run(jobs, cluster, policy, 0, throughput, failures=False)
        print(f"| {policy} | {cpu:.1f} | {time.perf_counter() - wall:.1f} | {result.finished} | "
              f"{len(result.unschedulable)} | {result.violations} | {(result.avg_jct_s or 0) / 3600:.2f} | "
              f"{(result.p99_jct_s or 0) / 3600:.2f} |", flush=True)
        if records_out is not None:
            records_out.mkdir(parents=True, exist_ok=True)
            (records_out / f"{policy.replace('/', '_')}.json").write_text(  # frenzy-core/mix: one file
                json.dumps([r.model_dump(mode="json") for r in result.jobs]), encoding="utf-8")


def philly_title(start: int, count: int, load: float, failures: bool) -> str:
    return (f"Philly jobs {start}..{start + count - 1} on frenzy-paper (96 GPUs), load {load:g}, "
            f"failures {'on' if failures else 'off'}")


def philly_tables(path: Path) -> None:
    """The philly tables of the runs saved with ``--runs-out`` (one JSON line per run, as each finished): a long
    run stopped part-way still reports the seeds it completed, each table over the seeds every policy of that
    table finished (means over different seeds would not compare)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for title in dict.fromkeys(row["title"] for row in rows):
        mine = [row for row in rows if row["title"] == title]
        policies = {row["policy"] for row in mine}
        complete = {seed for seed in {row["seed"] for row in mine}
                    if {row["policy"] for row in mine if row["seed"] == seed} == policies}
        runs: dict[tuple[str, str], list[tuple[SimulationResult, float]]] = {}
        for row in mine:
            if row["seed"] in complete:
                runs.setdefault((f"load {row['load']:g}", row["policy"]), []).append(
                    (SimulationResult.model_validate(row["result"]), row["cpu_s"]))
        table(f"{title} (seeds {', '.join(map(str, sorted(complete)))})", runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--other-jobs", type=int, default=500)
    parser.add_argument("--start", type=int, default=25_000, help="First job of the window (arrival order).")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--loads", default="0.5,1,2", help="Arrival scales on frenzy-paper.")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--no-failures", action="store_true", help="Run without node failures.")
    parser.add_argument("--queued", type=int, default=5000)
    parser.add_argument("--latency-gpus", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--full-jobs", type=int, help="Only the first N jobs of the trace in the full section.")
    parser.add_argument("--records-out", type=Path, help="Save each policy's job records of the full section here.")
    parser.add_argument("--sections", default="philly,workloads,latency,full")
    parser.add_argument("--runs-out", type=Path, help="Append each philly run to this file (JSON lines).")
    parser.add_argument("--tables-from", type=Path, help="Print the philly tables of a --runs-out file and stop.")
    parser.add_argument("--quick", action="store_true", help="500 jobs, one seed, load 1, a smaller latency run.")
    args = parser.parse_args()
    philly = args.traces / "philly_2017_sep_nov.csv"
    sia = args.traces / "sia_philly_workload_1.csv"
    if not philly.is_file():
        raise SystemExit(f"trace {philly} not found: pass --traces (the folder of ../shared/traces)")
    if args.quick:
        args.jobs, args.other_jobs, args.seeds, args.loads, args.queued, args.latency_gpus = 500, 200, "0", "1", 500, 1000
    seeds = [int(s) for s in args.seeds.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    policies = args.policies.split(",")
    sections = set(args.sections.split(","))
    failures = not args.no_failures
    print(f"# Cluster scheduling benchmark ({date.today()}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, one process)")
    throughput = PlannedThroughput()  # shared: one candidate table per (model, recipe, GPU type, node size, links)
    runs: dict[tuple[str, str], list[tuple[SimulationResult, float]]]
    if args.tables_from is not None:
        philly_tables(args.tables_from)
        return
    if "philly" in sections:
        cluster = Cluster.preset("frenzy-paper")
        for load in loads:  # one table per load, printed as soon as it is done
            runs = {}
            for seed in seeds:
                jobs = philly_jobs(philly, args.start, args.jobs, seed, cluster, load, throughput)
                for policy in policies:
                    got = run(jobs, cluster, policy, seed, throughput, failures)
                    runs.setdefault((f"load {load:g}", policy), []).append(got)
                    if args.runs_out is not None:
                        with args.runs_out.open("a", encoding="utf-8") as out:
                            out.write(json.dumps({"title": philly_title(args.start, args.jobs, load, failures),
                                                  "load": load, "seed": seed, "policy": policy, "cpu_s": got[1],
                                                  "result": got[0].model_dump(mode="json")}) + "\n")
            table(philly_title(args.start, args.jobs, load, failures), runs)
    if "workloads" in sections:
        runs = {}
        for name, cluster, load in (("aws-mixed", Cluster.preset("aws-mixed"), 1.0),
                                    ("philly-like", Cluster.preset("philly-like"), 1.0),
                                    ("alibaba-spot x8", Cluster.preset("alibaba-spot-2026", scale=1024), 8.0)):
            for seed in seeds:
                jobs = philly_jobs(philly, args.start, args.other_jobs, seed, cluster, load, throughput)
                for policy in policies:
                    runs.setdefault((name, policy), []).append(run(jobs, cluster, policy, seed, throughput, failures))
        if sia.is_file():
            for seed in seeds:
                jobs = sia_jobs(sia, seed, SIA_CLUSTER, throughput)
                for policy in policies:
                    runs.setdefault(("Sia workload 1", policy), []).append(
                        run(jobs, SIA_CLUSTER, policy, seed, throughput, failures))
        table(f"Other workloads ({args.other_jobs} Philly jobs from {args.start}; the Sia workload), failures "
              f"{'on' if failures else 'off'}", runs)
    if "latency" in sections:
        latency(args.queued, args.latency_gpus, args.reps, philly, throughput)
    if "full" in sections:
        full_trace(philly, throughput, policies, args.full_jobs, args.records_out)


if __name__ == "__main__":
    main()
