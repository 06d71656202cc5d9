"""Every launcher declares what it can launch (``Adapter.scope``, one row of ``LAUNCH_SCOPES``), and every plan
made within that declaration (``plan_job(..., launcher=name)``, ``frenzy plan --emit name``) is accepted by its
adapter; the declaration is not vacuous: plans outside it are refused."""

from __future__ import annotations

import random

import pytest

from frenzy_core import Cluster, ConfigError, InfeasiblePlanError, ModelConfig, TrainingConfig, plan_job
from frenzy_core.adapters import ADAPTERS, LAUNCHERS
from frenzy_core.planning import LAUNCH_SCOPES, PlacementMode

NAMED_TYPES = ("a100-80gb", "h100-sxm", "l4", "a10g", "t4", "l40s", "v100-32gb")
"""GPU types every launcher has a name for (data/launcher_gpu_names.yaml), so no refusal is about names."""


def _request(rng: random.Random) -> tuple[ModelConfig, Cluster, TrainingConfig, dict[str, object], str]:
    """A random small model, busy cluster, recipe, constraints and objective."""
    heads = rng.choice([8, 16])
    moe = {"num_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 1024} if rng.random() < 0.2 else None
    model = ModelConfig(name="random", num_layers=rng.choice([4, 8, 12]), hidden_size=heads * 128,
                        num_attention_heads=heads, num_kv_heads=rng.choice([heads, heads // 2]), mlp="swiglu",
                        norm="rmsnorm", vocab_size=32000, position_embedding="rotary", tied_embeddings=False,
                        moe=moe)
    nodes = []
    for gpu in rng.sample(NAMED_TYPES, rng.randint(1, 3)):
        size = rng.choice([4, 8])
        for _ in range(rng.randint(1, 3)):
            nodes.append({"gpu": gpu, "gpus_per_node": size, "count": rng.randint(1, 3),
                          "free_gpus": rng.choice([size, size, rng.randint(0, size)])})
    gbs = rng.choice([None, None, 16, 24, 64])
    training = TrainingConfig(seq_len=rng.choice([512, 1024, 2048]), global_batch_size=gbs)
    constraints: dict[str, object] = {"max_gpus": rng.choice([None, 8, 12, 24])}
    return model, Cluster.from_dict({"nodes": nodes}), training, constraints, rng.choice(["throughput", "gpus",
                                                                                           "cost"])


def _plans_accepted(launcher: str, n: int, seed: int) -> int:
    """Plans ``n`` random requests within ``launcher`` and has its adapter build each; how many were feasible."""
    rng = random.Random(seed)
    feasible = 0
    for _ in range(n):
        model, cluster, training, constraints, objective = _request(rng)
        try:
            plan = plan_job(model, cluster, training, objective=objective, constraints=constraints, top_k=0,
                            launcher=launcher, time_limit_s=5)
        except InfeasiblePlanError:
            continue
        feasible += 1
        assert plan.launcher == launcher
        ADAPTERS[launcher](plan)  # raises ConfigError if it cannot launch it
    return feasible


def test_every_adapter_declares_its_scope() -> None:
    assert set(LAUNCH_SCOPES) == set(LAUNCHERS)
    for name, adapter in ADAPTERS.items():
        assert adapter.scope is LAUNCH_SCOPES[name]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_plans_within_a_launcher_are_accepted_by_it(launcher: str) -> None:
    assert _plans_accepted(launcher, 10, seed=13) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_hundred_plans_within_each_launcher_are_accepted(launcher: str) -> None:
    assert _plans_accepted(launcher, 100, seed=2026) >= 50


UNEVEN = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1},
                                      {"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2, "free_gpus": 4}]})
"""8 + 4 + 4 free: a 12-GPU plan with any placement takes 8 + 4 (nothing stranded), an even one 4 + 4 + 4."""


@pytest.mark.parametrize("launcher", [n for n, s in LAUNCH_SCOPES.items() if s.placement is not PlacementMode.ANY])
def test_even_launchers_refuse_uneven_plans_and_plan_even_ones(launcher: str) -> None:
    model = ModelConfig.preset("gpt2")
    training = TrainingConfig(seq_len=1024, global_batch_size=48)
    uneven = plan_job(model, UNEVEN, training, constraints={"num_gpus": 12, "tp": 1}, top_k=0)
    assert sorted(len(g) for g in uneven.placement.values()) == [4, 8]
    with pytest.raises(ConfigError, match="uneven"):
        ADAPTERS[launcher](uneven)
    even = plan_job(model, UNEVEN, training, constraints={"num_gpus": 12, "tp": 1}, top_k=0, launcher=launcher)
    assert len({len(g) for g in even.placement.values()}) == 1
    ADAPTERS[launcher](even)


@pytest.mark.parametrize("launcher", [n for n, s in LAUNCH_SCOPES.items() if s.layouts is not None])
def test_a_launcher_gets_only_layouts_it_can_write(launcher: str) -> None:
    """Without the scope the planner picks a layout the adapter refuses (a virtual pipeline, ZeRO-3 with a
    pipeline, context parallelism); within it, one the adapter writes."""
    model = ModelConfig.preset("llama-2-7b")
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-40gb", "gpus_per_node": 8, "count": 2}]})
    framework = "megatron" if launcher == "megatron" else "torch"
    refused = {"megatron": {"zero_stages": [3], "pp": 2},
               "deepspeed": {"zero_stages": [3], "pp": 2},
               "accelerate": {"zero_stages": [3], "tp": 2}}[launcher]
    training = TrainingConfig(seq_len=2048, framework=framework)
    outside = plan_job(model, cluster, training, constraints=refused, top_k=0)
    with pytest.raises(ConfigError):
        ADAPTERS[launcher](outside)
    with pytest.raises(ConfigError, match=f"launcher {launcher} can write none"):
        plan_job(model, cluster, training, constraints=refused, top_k=0, launcher=launcher)
    within = plan_job(model, cluster, training, top_k=0, launcher=launcher)
    ADAPTERS[launcher](within)


def test_megatron_plans_skip_gpu_types_it_cannot_run_flash_attention_on() -> None:
    model = ModelConfig.preset("gpt2")
    cluster = Cluster.preset("frenzy-paper")
    plan = plan_job(model, cluster, TrainingConfig(seq_len=1024), constraints={"gpu_types": ["v100", "a100"]},
                    top_k=0, launcher="megatron")
    assert plan.gpu_type == "a100-80gb"
    (v100,) = [r for r in plan.rejected if r.gpu_type == "v100-32gb"]
    assert "the launcher cannot run it" in v100.message and "compute capability" in v100.message
    eager = plan_job(model, cluster, TrainingConfig(seq_len=1024, attention="eager"),
                     constraints={"gpu_types": ["v100"]}, top_k=0, launcher="megatron")
    ADAPTERS["megatron"](eager)


def test_a_launcher_moves_a_defaulted_framework_and_refuses_a_pinned_one() -> None:
    model = ModelConfig.preset("gpt2")
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8}]})
    plan = plan_job(model, cluster, TrainingConfig(seq_len=1024), top_k=0, launcher="megatron")
    assert plan.training.framework.value == "megatron"
    with pytest.raises(ConfigError, match="framework"):
        plan_job(model, cluster, TrainingConfig(seq_len=1024, framework="torch"), launcher="megatron")
    with pytest.raises(ConfigError, match="precision"):
        plan_job(model, cluster, TrainingConfig(seq_len=1024, precision="amp-bf16"), launcher="deepspeed")


def test_frenzy_plan_emit_plans_within_the_launcher(tmp_path: object) -> None:
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from frenzy_core.cli import app

    path = Path(str(tmp_path)) / "uneven.yaml"
    path.write_text("nodes:\n  - {gpu: a100-80gb, gpus_per_node: 8}\n"
                    "  - {gpu: a100-80gb, gpus_per_node: 8, count: 2, free_gpus: 4}\n", encoding="utf-8")
    args = ["plan", "gpt2", "--cluster", str(path), "--num-gpus", "12", "--tp", "1", "--global-batch", "48",
            "--json", "--runners-up", "0"]
    anywhere = json.loads(CliRunner().invoke(app, args).stdout)
    assert sorted(len(g) for g in anywhere["plan"]["placement"].values()) == [4, 8]
    result = CliRunner().invoke(app, [*args, "--emit", "slurm", "-o", "script=train.py"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {len(g) for g in out["plan"]["placement"].values()} == {4}
    assert out["plan"]["launcher"] == "slurm" and "launch" in out
