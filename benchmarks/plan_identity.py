"""Same answers before and after a planner speed change: ``plan_job`` on seeded random requests, written as JSON.

Run it once with each version of the library on the path and compare the two files (they must be equal):

    PYTHONPATH=/tmp/main/src python benchmarks/plan_identity.py --out before.json
    python benchmarks/plan_identity.py --out after.json
    cmp before.json after.json

Requests: small and 7B presets on random fragmented clusters of up to eight GPU types, torch and Megatron
recipes, pinned, default and non-dividing global batches, every objective, mixed types on and off, and now and
then a pinned GPU count, a placement mode or a launcher. Each answer is the plan's JSON without its solve time and
with its ``explain()`` (times in it masked, as the golden corpus does), or the refusal's type and message.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from typing import Any

from frenzy_core import ModelConfig, TrainingConfig
from frenzy_core.errors import ConfigError, InfeasiblePlanError
from frenzy_core.hardware import Cluster
from frenzy_core.planning import plan_job

GPU_TYPES = ("h100-sxm", "a100-80gb", "a100-40gb", "h200", "l40s", "a10g", "l4", "v100-32gb")
MODELS = ("gpt2", "qwen2.5-0.5b", "qwen2.5-1.5b", "gpt3-1.3b", "llama-2-7b", "mixtral-8x7b")
LAUNCHERS = ("torchrun", "megatron", "slurm", "kubernetes", "accelerate")
SOLVE_TIME = re.compile(r"in \d+ ms")
"""How ``explain()`` prints the solve time, which differs run to run."""


def request(rng: random.Random) -> dict[str, Any]:
    """One random request, as plain data (so it prints in a report)."""
    types = rng.sample(GPU_TYPES, rng.randint(1, len(GPU_TYPES)))
    nodes = []
    for _ in range(rng.randint(1, 24)):
        size = rng.choice([4, 8, 8])
        nodes.append({"gpu": rng.choice(types), "gpus_per_node": size, "count": rng.randint(1, 4),
                      "free_gpus": rng.choice([size, size, rng.randint(0, size)])})
    training: dict[str, Any] = {"seq_len": rng.choice([1024, 2048, 4096]),
                                "framework": rng.choice(["torch", "megatron"])}
    batch = rng.choice([None, 64, 96, 100, 256, 1000, 1024])
    if batch is not None:
        training["global_batch_size"] = batch
    objective = rng.choice(["throughput", "throughput", "gpus", "cost", "time_to_train"])
    constraints: dict[str, Any] = {"token_budget": 10**10} if objective == "time_to_train" else {}
    kwargs: dict[str, Any] = {"objective": objective, "mixed_types": rng.random() < 0.5}
    draw = rng.random()
    if draw < 0.1:
        constraints["num_gpus"] = rng.randint(1, 48)
    elif draw < 0.2:
        constraints["placement"] = rng.choice(["even", "whole_nodes"])
    elif draw < 0.3:
        kwargs["launcher"] = rng.choice(LAUNCHERS)
    return {"model": rng.choice(MODELS), "cluster": {"nodes": nodes}, "training": training,
            "constraints": constraints, **kwargs}


def answer(req: dict[str, Any]) -> Any:
    """The plan's JSON (solve time left out) with its explanation, or the refusal's type and message."""
    args = dict(req)
    model, cluster, training = args.pop("model"), args.pop("cluster"), args.pop("training")
    try:
        plan = plan_job(ModelConfig.preset(model), Cluster.from_dict(cluster), TrainingConfig(**training),
                        time_limit_s=300, **args)
    except (ConfigError, InfeasiblePlanError) as exc:
        return {"refused": type(exc).__name__, "message": SOLVE_TIME.sub("in <t> ms", str(exc))}
    data = plan.model_dump(mode="json", exclude={"solve_time_s", "model"})
    data["explain"] = SOLVE_TIME.sub("in <t> ms", plan.explain())
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    answers = []
    for _ in range(args.requests):
        req = request(rng)
        answers.append({"request": req, "answer": answer(req)})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1, sort_keys=True)
    refused = sum("refused" in a["answer"] for a in answers)
    print(f"wrote {len(answers)} answers ({refused} refused) to {args.out}")


if __name__ == "__main__":
    main()
