"""Pipeline stages on different GPU types (issue 12, form a): the exact split against a Metis-style split.

Both run the same form (a) search (``frenzy_core.planning.stages.stage_search``: the same configurations, the same
bounds, the same cost model) and differ only in how a configuration's layers are split: the exact dynamic
program (``best_split``) or layers in proportion to each stage's speed with memory fix-ups
(``frenzy_core.planning.metis.metis_split``, written from the Metis paper's description). Each instance also
reports the best plan without form (a) (``plan_job(mixed_stages=False)``: single type or replica mix).
Instances: the issue's Llama-2-70B on 16 A100-80GB + 16 H100 (seq 4,096, batch 64), GPT-3 175B on the
``frenzy-paper`` testbed (seq 2,048, its default batch) and a few smaller two-type clusters.

Run: ``python benchmarks/stages.py [--quick]`` (``--quick``: the small instances only). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import date

from frenzy_core import InfeasiblePlanError, ModelConfig, TrainingConfig
from frenzy_core.hardware import Cluster
from frenzy_core.planning import plan_job
from frenzy_core.planning.metis import metis_stage_search
from frenzy_core.planning.search import make_search
from frenzy_core.planning.stages import stage_search

TIME_LIMIT_S = 120.0
"""Per search (our choice: long enough for every instance here to finish its search)."""


def _two(a: str, b: str, nodes: int) -> Cluster:
    return Cluster.from_dict({"nodes": [{"gpu": a, "gpus_per_node": 8, "count": nodes},
                                        {"gpu": b, "gpus_per_node": 8, "count": nodes}]})


def instances(quick: bool) -> list[tuple[str, str, Cluster, TrainingConfig]]:
    small = [("llama-2-13b on 8 a10g + 8 l40s", "llama-2-13b", _two("a10g", "l40s", 1),
              TrainingConfig(seq_len=2048, global_batch_size=32)),
             ("llama-2-7b on 8 l4 + 8 a10g", "llama-2-7b", _two("l4", "a10g", 1),
              TrainingConfig(seq_len=4096, global_batch_size=32))]
    if quick:
        return small
    return [("llama-2-70b on 16 a100-80gb + 16 h100", "llama-2-70b", _two("a100-80gb", "h100-sxm", 2),
             TrainingConfig(seq_len=4096, global_batch_size=64)),
            ("gpt3-175b on frenzy-paper", "gpt3-175b", Cluster.preset("frenzy-paper"), TrainingConfig(seq_len=2048)),
            *small]


def _row(name: str, model_name: str, cluster: Cluster, training: TrainingConfig) -> str:
    model = ModelConfig.preset(model_name)
    t0 = time.perf_counter()
    try:
        other = plan_job(model, cluster, training, time_limit_s=TIME_LIMIT_S)
        other_s, other_text = time.perf_counter() - t0, f"{other.time.tokens_per_s:,.0f}"
    except InfeasiblePlanError:
        other_s, other_text = time.perf_counter() - t0, "infeasible"
    cells = []
    for search_fn in (stage_search, metis_stage_search):
        search = make_search(model, cluster, training, "throughput", None, None, None)
        start = time.perf_counter()
        _, choice, _ = search_fn(search, start + TIME_LIMIT_S)
        took = time.perf_counter() - start
        gbs = search.training.global_batch_size or 0
        if choice is None:
            cells.append(f"none | {took:.1f}")
            continue
        tokens = gbs * search.training.seq_len / (choice.step_us / 1e6)
        cells.append(f"{tokens:,.0f} ({sum(choice.tps) * choice.dp} GPUs, {list(choice.layers)}) | {took:.1f}")
    return f"| {name} | {other_text} | {other_s:.1f} | {' | '.join(cells)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {date.today()}")
    print("| instance | best without form (a), tokens/s | s | exact split, tokens/s (GPUs, layers) | s | "
          "Metis-style split, tokens/s (GPUs, layers) | s |")
    print("|---|---|---|---|---|---|---|")
    for name, model, cluster, training in instances(args.quick):
        print(_row(name, model, cluster, training), flush=True)


if __name__ == "__main__":
    main()
