"""Baselines: the MARP formula and HAS placement of Frenzy, and the fixed user request."""

from __future__ import annotations

import pytest

from frenzy_core import ConfigError, InfeasiblePlanError, ModelConfig, TrainingConfig
from frenzy_core.hardware import Cluster
from frenzy_core.planning import PlanConstraints, assess_baseline, marp_configs, marp_plan, user_request_plan


def _tiny() -> ModelConfig:
    # GPT-style, no biases, tied head: per layer 4h^2 + 8h^2 + two LayerNorms (2 x 2h) = 49,408 at h = 64;
    # embeddings 100 x 64 + 2,048 x 64 = 137,472; final norm 128 -> 236,416 parameters.
    return ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100)


def test_marp_bytes_match_the_published_formula() -> None:
    configs = {(c.tp, c.dp): c for c in marp_configs(_tiny(), TrainingConfig(seq_len=128, global_batch_size=4))}
    # tp = dp = 1: 20 x 236,416 + 4 x 128 x 64 x 2 x (34 + 5 x 4 x 128 / 64) = 4,728,320 + 4,849,664
    assert configs[(1, 1)].bytes_per_gpu == pytest.approx(9_577_984)
    # tp = dp = 2: 4,728,320 / 2 + 2 x 128 x 64 x 2 x (10 + 24/2 + 5 x 4 x 128 / (64 x 2))
    assert configs[(2, 2)].bytes_per_gpu == pytest.approx(2_364_160 + 1_376_256)
    # tp must divide the 4 heads; dp stops at the global batch
    assert {tp for tp, _ in configs} == {1, 2, 4}
    assert max(dp for _, dp in configs) == 4


def test_marp_list_is_sorted_by_gpus_then_memory() -> None:
    configs = marp_configs(_tiny(), TrainingConfig(seq_len=128, global_batch_size=16))
    keys = [(c.num_gpus, c.bytes_per_gpu) for c in configs]
    assert keys == sorted(keys)


def test_marp_needs_a_global_batch() -> None:
    with pytest.raises(ConfigError, match="global_batch_size"):
        marp_configs(_tiny(), TrainingConfig())


def test_has_matches_the_smallest_sufficient_memory_and_the_best_fitting_node() -> None:
    # about 18 GB predicted on one GPU: too big for a 16 GB T4, smallest fit is the 40 GB A100
    model = ModelConfig(num_layers=16, hidden_size=2048, num_attention_heads=16, vocab_size=32000)
    cluster = Cluster.from_dict({"nodes": [
        {"gpu": "t4", "gpus_per_node": 4, "count": 1},
        {"gpu": "a100-40gb", "gpus_per_node": 8, "count": 1, "free_gpus": 6},
        {"gpu": "a100-40gb", "gpus_per_node": 8, "count": 1, "free_gpus": 3},
        {"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1},
    ]})
    plan = marp_plan(model, cluster, TrainingConfig(seq_len=512, global_batch_size=1))
    assert 16e9 < plan.predicted_bytes < 40e9
    assert plan.gpu_types == ["a100-40gb"] and plan.num_gpus == 1
    assert plan.placement == {"node:2": [0]}  # the node with 3 free, not the one with 6
    assert plan.parallel.tp == 1 and plan.training.micro_batch_size == 1


def test_has_takes_the_fewest_gpus_first() -> None:
    model = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 3, "free_gpus": 2}]})
    # fewest GPUs first: one GPU fits, so HAS takes one
    plan = marp_plan(model, cluster, TrainingConfig(seq_len=128, global_batch_size=4))
    assert plan.num_gpus == 1


def test_marp_reports_when_nothing_fits() -> None:
    huge = ModelConfig(num_layers=96, hidden_size=12288, num_attention_heads=96, vocab_size=50257)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "t4", "gpus_per_node": 4, "count": 1}]})
    with pytest.raises(InfeasiblePlanError, match="MARP"):
        marp_plan(huge, cluster, TrainingConfig(seq_len=2048, global_batch_size=8))


def test_assessment_uses_the_library_estimators() -> None:
    model = ModelConfig(num_layers=16, hidden_size=2048, num_attention_heads=16, vocab_size=32000)
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1}]})
    plan = marp_plan(model, cluster, TrainingConfig(seq_len=512, global_batch_size=1))
    verdict = assess_baseline(model, plan)
    assert verdict.device_bytes is not None and verdict.tokens_per_s is not None and verdict.tokens_per_s > 0
    assert verdict.fits == (verdict.device_bytes <= verdict.usable_bytes)


def test_user_request_takes_exactly_the_requested_gpus() -> None:
    model = ModelConfig(num_layers=8, hidden_size=2048, num_attention_heads=16, vocab_size=32000)
    cluster = Cluster.from_dict({"nodes": [
        {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2},
        {"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
    ]})
    plan = user_request_plan(model, cluster, TrainingConfig(seq_len=2048, global_batch_size=32), gpu_type="A100",
                             num_gpus=4, constraints=PlanConstraints(micro_batch_sizes=[1, 2], zero_stages=[0]))
    assert plan.gpu_type == "a100-80gb" and plan.num_gpus == 4
    assert all(alt.num_gpus == 4 and alt.gpu_type == "a100-80gb" for alt in plan.alternatives)
