"""A peer's yardstick: the Sia artifact's own simulator on one of its Philly workloads, beside frenzy_core's.

Runs ``sia-simulator/multi_simulator.py`` of a checkout of siasosp23/artifacts (SOSP'23; not part of this
project: pass ``--checkout``) on ``workloads/philly/workload-N.csv`` for Sia (``--policy=sia``, p = -0.5,
lambda_n = 1.1, lambda_a = 0.01, 60 s rounds, as its ``run_experiment.sh``) and Gavel (360 s rounds), then the
same arrivals and sizes through ``jobs_from_trace`` under frenzy_core's policies on the Sia paper's cluster
(``benchmarks/cluster.py``'s ``SIA_CLUSTER``), and prints the average and p99 JCT of each. ``--parse-only`` reads
logs of an earlier run (``DIR/<policy>.log``, the simulator's stdout: its last "Completed jobs" line) instead of
running the artifact.

The artifact needs Python with numpy < 2, pandas < 2 (it calls ``DataFrame.append``), scipy, cvxpy with the CBC
(``cylp``), GLPK and ECOS solvers, autograd, psutil and rich (pymoo 0.4.2.1 for Pollux); give that interpreter
as ``--python``. Its Sia runs solve a MIP every simulated minute: hours of CPU for one 8-hour workload.

Run: ``python benchmarks/sia_artifact.py --checkout PATH --python PATH/TO/python [--workload 1]``.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from frenzy_core.scheduling import PlannedThroughput, load_trace, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import SIA_CLUSTER, sia_jobs  # noqa: E402

ARTIFACT_RUNS = {
    "sia": ["--policy=sia", "--policy_p_val=-0.5", "--mip_lambda_a=0.01", "--mip_lambda_n=1.1", "--interval=60",
            "--project_throughputs", "--share_max_replicas"],
    "gavel": ["--policy=gavel", "--interval=360"],
}
"""The artifact's own invocations (sia-simulator/run_experiment.sh)."""


def completed_jcts(log: Path) -> dict[str, float]:
    """The JCT (s) of every job the simulator's last round reports completed (its stdout prints the dict)."""
    last = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{") and line.endswith("}"):
            last = line
    return {} if last is None else {str(k): float(v) for k, v in ast.literal_eval(last).items()}


def summary(jct_s: list[float]) -> str:
    if not jct_s:
        return "- | - | 0"
    return f"{statistics.fmean(jct_s) / 3600:.2f} | {float(np.percentile(jct_s, 99)) / 3600:.2f} | {len(jct_s)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="A checkout of siasosp23/artifacts.")
    parser.add_argument("--python", default=sys.executable, help="Interpreter with the artifact's requirements.")
    parser.add_argument("--workload", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("sia-artifact-logs"))
    parser.add_argument("--policies", default="sia,gavel")
    parser.add_argument("--parse-only", action="store_true")
    args = parser.parse_args()
    sim = args.checkout / "sia-simulator"
    workload = sim / "workloads" / "philly" / f"workload-{args.workload}.csv"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for policy in args.policies.split(","):
        log = args.out / f"{policy}.log"
        if not args.parse_only:
            with log.open("w", encoding="utf-8") as out:
                subprocess.run([args.python, "multi_simulator.py", str(workload.resolve()), *ARTIFACT_RUNS[policy],
                                f"--output={(args.out / f'{policy}.jsonl').resolve()}"], cwd=sim, stdout=out,
                               stderr=subprocess.STDOUT, check=False)
        jcts = completed_jcts(log)
        rows.append(f"| Sia artifact | {policy} | {summary(list(jcts.values()))} |")
    total = len(load_trace(workload, "sia"))
    throughput = PlannedThroughput()
    jobs = sia_jobs(workload, 0, SIA_CLUSTER, throughput)
    for policy in ("fifo-requested", "frenzy-has", "gavel-like", "sia-like", "frenzy-core"):
        result = simulate(jobs, SIA_CLUSTER, policy, throughput=throughput, progress=False)
        rows.append(f"| frenzy_core | {policy} | {summary([r.jct_s for r in result.jobs if r.jct_s is not None])} |")
    print(f"Sia artifact Philly workload {args.workload} ({total} jobs)\n")
    print("| simulator | policy | avg JCT h | p99 JCT h | jobs finished |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
