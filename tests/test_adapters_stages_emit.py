"""``plan_job(..., launcher=X, mixed_stages=True)`` (``frenzy plan --mixed-stages --emit X``): for every launcher
whose scope says it starts pipelines over GPU types (``LaunchScope.stages``), random form (a) plans made within
it are accepted by its adapter and pass the checks of its consumer this project runs (torch's own torchrun
parser and the rank-to-stage reading, the Slurm hetjob's components, the JobSet's jobs and, where installed,
JobSet's own models with kubernetes-validate, Megatron-LM's flags read back by the project's Megatron reader:
tests/test_adapters_stages.py and tests/test_consumers.py). CI plans one request per launcher; the hundred per
launcher are slow. A launcher that cannot start such pipelines is never given one."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from typing import Any

import pytest

import test_adapters_stages as stage_tests
import test_consumers as consumer_tests
from adapter_plans import STAGE_MODEL
from frenzy_core import Cluster, InfeasiblePlanError, TrainingConfig, plan_job
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import Framework
from frenzy_core.hardware.gpus import load_gpu_specs
from frenzy_core.planning import Plan
from frenzy_core.planning.launchers import get_launch_scope, launchers_where

STAGE_LAUNCHERS = launchers_where(lambda s: s.stages)
"""Derived from the declarations: the launchers plan_job searches form (a) plans for."""


def _jobset_consumers(make: Callable[[], Plan]) -> None:
    """JobSet's own models and kubernetes-validate, where the consumers extra is installed (else only the
    structural checks run)."""
    if all(importlib.util.find_spec(m) for m in ("kubeflow_trainer_api", "kubernetes_validate")):
        consumer_tests.test_a_mixed_plans_jobset_matches_the_jobset_models_and_its_jobs_validate(make)


CHECKS: dict[str, list[Callable[[Callable[[], Plan]], None]]] = {
    "torchrun": [stage_tests.test_torchrun_lines_give_each_rank_its_stage_and_keep_tp_groups_in_a_node],
    "slurm": [stage_tests.test_slurm_hetjob_has_a_component_per_stage_run_with_that_stages_environment],
    "kubernetes": [stage_tests.test_the_jobset_runs_each_stage_on_its_type_with_its_environment, _jobset_consumers],
    "megatron": [stage_tests.test_megatron_runs_a_pipeline_over_types_with_one_tp_and_its_split],
}
"""Each stage launcher's consumer checks, as the adapter tests run them on the fixed plans."""


def _request(launcher: str, memory_gib: tuple[int, int], nodes: list[tuple[str, int, int]], gbs: int
             ) -> tuple[Cluster, TrainingConfig, dict[str, Any]]:
    """STAGE_MODEL (8 layers, 1B class) on A10G and L4 cut to ``memory_gib`` GiB, on ``nodes`` (type, size,
    count), in the launcher's framework (Megatron-LM for megatron: its distributed optimizer, ZeRO 0/1)."""
    specs = load_gpu_specs(overrides={"a10g": {"memory_bytes": memory_gib[0] * 2**30},
                                      "l4": {"memory_bytes": memory_gib[1] * 2**30}})
    cluster = Cluster.from_dict({"nodes": [{"gpu": g, "gpus_per_node": n, "count": c} for g, n, c in nodes]},
                                specs=specs)
    if launcher == "megatron":
        training = TrainingConfig(seq_len=1024, global_batch_size=gbs, framework=Framework.MEGATRON,
                                  distributed_optimizer=True)
        return cluster, training, {"micro_batch_sizes": [1], "recompute": ["none"]}
    training = TrainingConfig(seq_len=1024, global_batch_size=gbs)
    return cluster, training, {"micro_batch_sizes": [1], "zero_stages": [2], "recompute": ["none"]}


def _random_request(rng: random.Random, launcher: str) -> tuple[Cluster, TrainingConfig, dict[str, Any]]:
    """Memory of 3 to 6 GiB per type (often no type alone holds the model), nodes of 1, 2 or 4, one or two each."""
    return _request(launcher, (rng.randint(3, 6), rng.randint(3, 6)),
                    [(g, rng.choice([1, 2, 4]), rng.randint(1, 2)) for g in ("a10g", "l4")], rng.choice([4, 8, 16]))


def _accepted(launcher: str, request: tuple[Cluster, TrainingConfig, dict[str, Any]]) -> bool | None:
    """Plans ``request`` within ``launcher`` with mixed stages; the adapter accepts the plan and, when it is a
    pipeline over types, every consumer check passes (True); False: another plan; None: nothing fits."""
    cluster, training, constraints = request
    try:
        plan = plan_job(STAGE_MODEL, cluster, training, constraints=constraints, top_k=0, launcher=launcher,
                        mixed_stages=True, time_limit_s=10)
    except InfeasiblePlanError:
        return None
    assert plan.launcher == launcher
    ADAPTERS[launcher](plan)  # raises ConfigError if it cannot launch it
    if not plan.stages or plan.stages[0].pipeline_stage is None:
        return False
    for check in CHECKS[launcher]:
        check(lambda: plan)
    return True


def test_every_stage_launcher_has_its_consumer_checks() -> None:
    assert STAGE_LAUNCHERS and set(CHECKS) == set(STAGE_LAUNCHERS)


FIXED = {"megatron": ((6, 4), [("a10g", 2, 1), ("l4", 2, 1)])}
"""CI's request per launcher: 4 GiB A10G and L4, 2 + 4 GPUs (a pipeline of tp 1 and tp 2 stages); for megatron
6 and 4 GiB, 2 + 2 (one tp on both stages, as tests/adapter_plans.py's megatron_stages)."""


@pytest.mark.parametrize("launcher", STAGE_LAUNCHERS)
def test_a_pipeline_over_types_planned_within_a_launcher_is_accepted_by_its_consumer(launcher: str) -> None:
    memory, nodes = FIXED.get(launcher, ((4, 4), [("a10g", 2, 1), ("l4", 4, 1)]))
    assert _accepted(launcher, _request(launcher, memory, nodes, 8)) is True


@pytest.mark.slow
@pytest.mark.parametrize("launcher", STAGE_LAUNCHERS)
def test_a_hundred_pipelines_over_types_within_each_launcher_are_accepted(launcher: str) -> None:
    rng = random.Random(2026)
    outcomes = [_accepted(launcher, _random_request(rng, launcher)) for _ in range(100)]
    assert outcomes.count(True) >= 25, outcomes


def test_a_launcher_that_cannot_start_stages_is_never_given_them() -> None:
    """torchrun's own scope with ``stages`` off: the request that gives torchrun a pipeline over both types
    gives it none, or no plan (the declaration alone decides)."""
    request = _request("torchrun", (4, 4), [("a10g", 2, 1), ("l4", 4, 1)], 8)
    assert _accepted("torchrun", request) is True
    cluster, training, constraints = request
    try:
        plan = plan_job(STAGE_MODEL, cluster, training, constraints=constraints, top_k=0, mixed_stages=True,
                        launcher=get_launch_scope("torchrun").replace(stages=False), time_limit_s=10)
    except InfeasiblePlanError:
        return
    assert not plan.stages or plan.stages[0].pipeline_stage is None
