"""Planner benchmarks: planning time vs cluster size and GPU types, CP-SAT vs exhaustive, quality vs Frenzy's MARP.

Clusters are synthetic: ``total_gpus`` spread evenly over ``num_types`` GPU types in 8-GPU nodes; a fixed-seed
draw leaves 40% of nodes fully free and the rest with 0-7 free GPUs (a busy cluster). The job is Llama-2-7B,
sequence 4,096, global batch 1,024, bf16 mixed precision, Megatron-style recipe (so vpp, sequence parallelism and
the distributed optimizer are searched too). Times are wall-clock medians of ``plan_job`` (estimation included).

Targets (reported, not asserted): median <= 100 ms for 1,024 GPUs of 6 types; <= 1 s for 16,384 GPUs of 8 types;
CP-SAT >= 20x faster than the exhaustive reference at 4,096 GPUs with the same objective.

Mixed GPU types (issue 12): ``--mixed`` times ``plan_job`` with and without the mixed-type search, for the
Megatron recipe and the same job on the torch runtime (uneven data-parallel ranks searched), alternated
under the same load (targets: <= 1 s at 1,024 GPUs of 6 types, <= 5 s at 16,384 GPUs of 8 types), and compares
the mixed plan with the best single-type plan on 200 random fragmented clusters.

Run: ``python benchmarks/planner.py [--runs 20] [--quick] [--mixed]`` (``--quick``: fewer sizes and runs).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from datetime import date

from frenzy_core import Framework, InfeasiblePlanError, ModelConfig, Precision, TrainingConfig
from frenzy_core.hardware import Cluster
from frenzy_core.planning import PlanConstraints, assess_baseline, marp_plan, plan_job
from frenzy_core.planning.placement import solve_cp_sat, solve_exhaustive
from frenzy_core.planning.search import make_search

GPU_TYPES = ("h100-sxm", "a100-80gb", "a100-40gb", "h200", "l40s", "a10g", "l4", "rtx-4090")
"""Eight types with a bf16 peak (so every type can run the bf16 recipe)."""
FREE_NODE_SHARE = 0.4
"""Share of nodes left fully free in the synthetic busy cluster (our choice)."""


def make_cluster(total_gpus: int, num_types: int, seed: int = 0) -> Cluster:
    """``total_gpus`` over ``num_types`` types in 8-GPU nodes, with a seeded busy/free pattern."""
    rng = random.Random(seed)
    nodes_per_type = max(total_gpus // (8 * num_types), 1)
    shapes = []
    for gpu in GPU_TYPES[:num_types]:
        counts: dict[int, int] = {}
        for _ in range(nodes_per_type):
            free = 8 if rng.random() < FREE_NODE_SHARE else rng.randint(0, 7)
            counts[free] = counts.get(free, 0) + 1
        shapes += [{"gpu": gpu, "gpus_per_node": 8, "count": c, "free_gpus": f} for f, c in sorted(counts.items())]
    return Cluster.from_dict({"nodes": shapes})


MODEL = ModelConfig.preset("llama-2-7b")
TRAINING = TrainingConfig(seq_len=4096, global_batch_size=1024, framework=Framework.MEGATRON)
TORCH_TRAINING = TrainingConfig(seq_len=4096, global_batch_size=1024, framework=Framework.TORCH)
"""The same job on the torch runtime: ZeRO stages 0-3 searched, and data-parallel ranks that differ by one
micro-batch (issue 13), which most of its layouts are."""
RECIPES = {"megatron": TRAINING, "torch": TORCH_TRAINING}


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def scaling(runs: int, sizes: list[int], types: list[int]) -> None:
    print(f"\n## Planning time (median of {runs} runs, ms)\n")
    print("| GPUs | " + " | ".join(f"{t} type{'s' if t > 1 else ''}" for t in types) + " |")
    print("|---:|" + "---:|" * len(types))
    for size in sizes:
        row = []
        for t in types:
            cluster = make_cluster(size, t)
            plan_job(MODEL, cluster, TRAINING)  # warm caches (GPU catalogue, ortools import)
            row.append(f"{median_ms(functools.partial(plan_job, MODEL, cluster, TRAINING), runs):,.0f}")
        print(f"| {size:,} | " + " | ".join(row) + " |")


def versus_exhaustive(runs: int, size: int, num_types: int) -> None:
    cluster = make_cluster(size, num_types)
    search = make_search(MODEL, cluster, TRAINING, "throughput", None)
    table = search.table()
    cp = solve_cp_sat(table, search.pool)
    ex = solve_exhaustive(table, search.pool)
    assert cp is not None and ex is not None
    cp_ms = median_ms(lambda: solve_cp_sat(table, search.pool), runs)
    ex_ms = median_ms(lambda: solve_exhaustive(table, search.pool), max(3, runs // 4))
    print(f"\n## CP-SAT vs exhaustive at {size:,} GPUs of {num_types} types ({len(table):,} candidates)\n")
    print("| solver | median solve ms | objective (tokens/s) | score |")
    print("|---|---:|---:|---|")
    print(f"| cp-sat | {cp_ms:,.1f} | {table.value[cp.candidate]:,.0f} | {cp.score} |")
    print(f"| exhaustive | {ex_ms:,.1f} | {table.value[ex.candidate]:,.0f} | {ex.score} |")
    print(f"\nsolver speed ratio {ex_ms / cp_ms:,.0f}x; identical objective: {cp.score == ex.score}")
    plan_cp = median_ms(functools.partial(plan_job, MODEL, cluster, TRAINING), runs)
    plan_ex = median_ms(functools.partial(plan_job, MODEL, cluster, TRAINING, solver="exhaustive"), max(3, runs // 4))
    print(f"whole plan_job (estimation included): cp-sat {plan_cp:,.0f} ms, exhaustive {plan_ex:,.0f} ms, "
          f"ratio {plan_ex / plan_cp:,.0f}x")


QUALITY_CASES = [
    ("gpt2", TrainingConfig(seq_len=1024, global_batch_size=8, precision=Precision.FP16_MIXED)),
    ("gpt2", TrainingConfig(seq_len=1024, global_batch_size=64, precision=Precision.FP16_MIXED)),
    ("gpt3-1.3b", TrainingConfig(seq_len=2048, global_batch_size=16, precision=Precision.FP16_MIXED)),
    ("llama-2-7b", TrainingConfig(seq_len=1024, global_batch_size=8, precision=Precision.FP16_MIXED)),
    ("llama-2-7b", TrainingConfig(seq_len=2048, global_batch_size=64, precision=Precision.FP16_MIXED)),
]
"""fp16 mixed precision so that the V100s of the Frenzy testbed can run every case (they have no bf16)."""


def _describe(num_gpus: int, gpu: str, tp: int, pp: int, dp: int) -> str:
    return f"{num_gpus} x {gpu} tp{tp} pp{pp} dp{dp}"


def quality() -> None:
    print("\n## Plan quality vs the MARP + HAS replica (frenzy-paper cluster, all GPUs free)\n")
    print("MARP's choice is judged by the library's estimators (fits with 5% headroom? tokens/s on the slowest GPU it "
          "uses); the planner's plans fit by construction.\n")
    print("| model | recipe | MARP + HAS | fits | tokens/s | planner, objective gpus | tokens/s "
          "| planner, objective throughput | tokens/s |")
    print("|---|---|---|---|---:|---|---:|---|---:|")
    cluster = Cluster.preset("frenzy-paper")
    for preset, training in QUALITY_CASES:
        model = ModelConfig.preset(preset)
        recipe = f"s{training.seq_len} gbs{training.global_batch_size}"
        cells = []
        try:
            base = marp_plan(model, cluster, training)
            verdict = assess_baseline(model, base, headroom=PlanConstraints().headroom)
            fits = "yes" if verdict.fits else f"no: {(verdict.device_bytes or 0) / 2**30:.0f} GiB"
            cells += [_describe(base.num_gpus, "+".join(base.gpu_types), base.parallel.tp, 1, base.parallel.dp), fits,
                      f"{verdict.tokens_per_s or 0:,.0f}"]
        except InfeasiblePlanError:
            cells += ["none schedulable", "-", "-"]
        for objective in ("gpus", "throughput"):
            try:
                plan = plan_job(model, cluster, training, objective=objective)
                p = plan.parallel
                cells += [_describe(plan.num_gpus, "+".join(plan.gpu_types), p.tp, p.pp, p.dp)
                          + f" mbs{plan.training.micro_batch_size} {plan.training.recompute.value}",
                          f"{plan.time.tokens_per_s:,.0f}"]
            except InfeasiblePlanError:
                cells += ["infeasible", "-"]
        print(f"| {preset} | {recipe} | " + " | ".join(cells) + " |")


def mixed_timing(runs: int, cases: list[tuple[int, int]]) -> None:
    """plan_job with and without the mixed-type search (issue 12), for the Megatron and the torch recipe,
    alternated run by run under the same load: wall and CPU (``time.process_time``, which other processes' load
    barely moves) medians, load average."""
    print(f"\n## Planning time with the mixed-type search (median of {runs} runs each, alternated, ms: wall / CPU)\n")
    print("| GPUs | types | recipe | mixed_types=False | mixed_types=True | chosen | load average |")
    print("|---:|---:|---|---:|---:|---|---|")
    for size, num_types in cases:
        cluster = make_cluster(size, num_types)
        for name, training in RECIPES.items():
            plan_job(MODEL, cluster, training)
            times: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
            load = os.getloadavg()[0]
            for _ in range(runs):
                for flag in (False, True):
                    wall, cpu = time.perf_counter(), time.process_time()
                    plan = plan_job(MODEL, cluster, training, mixed_types=flag)
                    times[flag][0].append(time.perf_counter() - wall)
                    times[flag][1].append(time.process_time() - cpu)
            cells = [" / ".join(f"{1000 * statistics.median(xs):,.0f}" for xs in times[flag])
                     for flag in (False, True)]
            chosen = f"{plan.num_gpus} x {' + '.join(plan.gpu_types)}"
            print(f"| {size:,} | {num_types} | {name} | {cells[0]} | {cells[1]} | {chosen} | "
                  f"{load:.1f}-{os.getloadavg()[0]:.1f} |")


GAIN_MODELS = ("qwen2.5-0.5b", "gpt2", "qwen2.5-1.5b", "llama-2-7b")
"""Models of the mixed-gain study (small enough that fragments of a few nodes hold them)."""


def mixed_gain(instances: int, seed: int = 0) -> None:
    """Random fragmented mixed clusters (2-6 types, 2-12 nodes of 4 or 8 GPUs, 1-8 free each), several models at sequence 1,024
    and every objective: how often mixing wins, the distribution of the gain, and that it is never worse."""
    rng = random.Random(seed)
    gains: dict[str, list[float]] = {"throughput": [], "gpus": [], "cost": [], "time_to_train": []}
    worse = infeasible_single = mixed_only = 0
    for _ in range(instances):
        types = rng.sample(GPU_TYPES[:6], rng.randint(2, 6))
        nodes = []
        for _ in range(rng.randint(2, 12)):
            size = rng.choice([4, 8])
            nodes.append({"gpu": rng.choice(types), "gpus_per_node": size, "free_gpus": rng.randint(1, size)})
        cluster = Cluster.from_dict({"nodes": nodes})
        model = ModelConfig.preset(rng.choice(GAIN_MODELS))
        training = TrainingConfig(seq_len=1024, global_batch_size=rng.choice([16, 32, 64]))
        objective = rng.choice(list(gains))
        cons = {"token_budget": 10**9} if objective == "time_to_train" else None
        try:
            single = plan_job(model, cluster, training, objective=objective, constraints=cons, mixed_types=False)
        except InfeasiblePlanError:
            single = None
        try:
            plan = plan_job(model, cluster, training, objective=objective, constraints=cons)
        except InfeasiblePlanError:
            infeasible_single += single is None
            continue
        if single is None:
            mixed_only += 1
            continue
        gain = (plan.objective_value / single.objective_value if objective == "throughput"
                else single.objective_value / plan.objective_value) - 1
        worse += gain < -1e-12
        gains[objective].append(gain)
    print(f"\n## Mixed vs the best single-type plan on {instances} random fragmented clusters\n")
    print("| objective | instances | mixed chosen | median gain when mixed | max gain |")
    print("|---|---:|---:|---:|---:|")
    for objective, values in gains.items():
        won = [g for g in values if g > 0]
        med = f"{statistics.median(won):+.1%}" if won else "-"
        top = f"{max(won):+.1%}" if won else "-"
        print(f"| {objective} | {len(values)} | {len(won)} | {med} | {top} |")
    print(f"\nnever worse: {worse == 0} ({worse} worse); feasible only by mixing: {mixed_only}; "
          f"infeasible either way: {infeasible_single}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--mixed", action="store_true", help="only the mixed-type tables (issue 12)")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}, Python "
          f"{platform.python_version()}; date {date.today().isoformat()}")
    if args.mixed:
        mixed_timing(args.runs, [(1024, 6), (16384, 8)])
        mixed_gain(200)
        return
    if args.quick:
        scaling(3, [8, 1024], [1, 6])
        versus_exhaustive(3, 1024, 6)
    else:
        scaling(args.runs, [8, 64, 1024, 4096, 16384], [1, 2, 4, 6, 8])
        versus_exhaustive(args.runs, 4096, 6)
    quality()


if __name__ == "__main__":
    main()
