"""plan_job on every model preset and the two headline cluster presets: a fitting plan or a reasoned refusal."""

from __future__ import annotations

import functools

import pytest

from frenzy_core import Cluster, InfeasiblePlanError, ModelConfig, TrainingConfig, default_global_batch, plan_job
from frenzy_core.hardware import get_gpu_spec
from frenzy_core.memory import estimate_memory


@functools.cache
def _cluster(name: str) -> Cluster:
    # alibaba-spot-2026 scaled to 1,024 GPUs keeps the fleet's type mix and the test fast.
    return Cluster.preset(name, scale=1024 if name == "alibaba-spot-2026" else None)


def _training(model: ModelConfig) -> TrainingConfig:
    return TrainingConfig(seq_len=model.default_seq_len(), global_batch_size=512)


CI_PRESETS = ("bert-base", "gemma-2b", "gpt2", "gpt3-175b", "llama-3.1-8b", "llama-3.1-405b", "mistral-7b",
              "mixtral-8x7b", "opt-1.3b", "phi-3-mini-4k", "pythia-1.4b", "qwen1.5-moe-a2.7b", "qwen2.5-0.5b",
              "qwen3-30b-a3b", "qwen3-8b")
"""One preset of each family and kind (encoder, dense decoder, sliding window, fused projections, partial rotary,
MoE with and without shared experts, the largest that must be refused) plans in CI; the other presets (sizes of the
same families) plan under ``-m slow``."""


@pytest.mark.parametrize("cluster_name", ["frenzy-paper", "alibaba-spot-2026"])
@pytest.mark.parametrize("preset", [p if p in CI_PRESETS else pytest.param(p, marks=pytest.mark.slow)
                                    for p in ModelConfig.presets()])
def test_every_preset_plans_or_explains(preset: str, cluster_name: str) -> None:
    model = ModelConfig.preset(preset)
    cluster = _cluster(cluster_name)
    training = _training(model)
    try:
        plan = plan_job(model, cluster, training, time_limit_s=5, top_k=2)
    except InfeasiblePlanError as exc:
        # Only the largest models may be refused, and the refusal must say why.
        assert model.num_params() > 60e9, f"{preset} on {cluster_name} refused: {exc}"
        assert exc.reasons, str(exc)
        return
    for stage in plan.stages:  # a mixed plan: each group on its own type
        again = estimate_memory(model, plan.stage_training(stage), plan.parallel)
        assert again.device_bytes == stage.device_bytes <= get_gpu_spec(stage.gpu_type).memory_bytes
    assert plan.num_gpus == sum(s.num_gpus for s in plan.stages) == sum(len(g) for g in plan.placement.values())
    assert plan.time.tokens_per_s > 0


def test_the_ci_presets_are_presets() -> None:
    assert set(CI_PRESETS) <= set(ModelConfig.presets()), set(CI_PRESETS) - set(ModelConfig.presets())


@pytest.mark.parametrize("preset", ["gpt2", "bert-base", "llama-3.1-8b"])
def test_default_recipe_runs_every_position_table(preset: str) -> None:
    model = ModelConfig.preset(preset)
    plan = plan_job(model, _cluster("frenzy-paper"), time_limit_s=5, top_k=0)
    assert plan.training.seq_len == model.default_seq_len() <= 2048
    # Without a global batch the plan trains the default one (moved by at most 5 % to split evenly) and says so.
    default = default_global_batch(model, plan.training.seq_len)
    assert plan.default_batch is not None and plan.default_batch.global_batch_size == default
    gbs = plan.training.global_batch_size
    assert gbs is not None and abs(gbs - default) <= 0.05 * default
    assert gbs % (plan.training.micro_batch_size * plan.parallel.dp) == 0
    assert "(default: " in plan.explain()
