"""Every emitted plan is launchable with the offload fallback on (issue 13): random ``frenzy plan --emit X``
requests that reach the fallback (small clusters of GPUs too small for the model without offload) are planned
within each launcher's scope, accepted by its adapter and read by the consumer checks this project runs (the real
consumers of tests/test_consumers.py where the ``consumers`` extra is installed, torch's own torchrun parser, the
Slurm script run with stubs, Megatron-LM's flags read back by the project's reader). CI plans one request per
launcher; the hundred per launcher are slow."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import test_adapters_slurm as slurm_tests
import test_consumers as consumer_tests
from frenzy_core import Cluster, InfeasiblePlanError, ModelConfig, TrainingConfig, plan_job
from frenzy_core.adapters import ADAPTERS, LAUNCHERS
from frenzy_core.adapters.base import OFFLOAD_ENV
from frenzy_core.config import Framework
from frenzy_core.config.megatron import from_megatron_args
from frenzy_core.hardware.gpus import load_gpu_specs
from frenzy_core.planning import Plan
from frenzy_core.planning.launchers import FULL_OFFLOAD, offload_kind
from test_consumers import one_rank_gloo  # noqa: F401 (DeepSpeed's one gloo rank: a fixture, by name)

GIB = 2**30
WIDE = ModelConfig.preset("gpt2").replace(name="wide", num_layers=8, hidden_size=1024, num_attention_heads=16,
                                          num_kv_heads=16, ffn_hidden_size=4096, vocab_size=2048)
"""tests/test_planning_offload.py's 0.1B model: about 3 GiB per GPU without offload on one GPU, under 1 GiB with
the optimizer on the host."""

TARGETS = [*LAUNCHERS, "torchtitan"]
"""Each launcher, and torchrun with torchtitan's flags (``--emit torchrun -o torchtitan=true``)."""


def _adapter(target: str) -> tuple[str, dict[str, Any]]:
    return ("torchrun", {"torchtitan": True}) if target == "torchtitan" else (target, {})


def _consumer(check: Callable[..., None], *args: Any) -> Callable[[Plan, Path, pytest.FixtureRequest], None]:
    """A test_consumers.py check (which reads ``FIVE_PLANS[name]()``) run on the given plan."""
    def run(plan: Plan, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        request.getfixturevalue("monkeypatch").setitem(consumer_tests.FIVE_PLANS, "fallback", lambda: plan)
        check("fallback", *[tmp_path if a is Path else a for a in args])
    return run


def _torchrun(plan: Plan, tmp_path: Path, request: pytest.FixtureRequest, torchtitan: bool = False) -> None:
    """torch's own torchrun parser reads every node's line; the recipe's offload reaches the script."""
    run = pytest.importorskip("torch.distributed.run")
    data = ADAPTERS["torchrun"](plan, torchtitan=torchtitan)
    for node in data["nodes"]:
        args = run.get_args_parser().parse_args(node["argv"][1:])
        assert (args.nnodes, args.nproc_per_node) == (str(len(plan.placement)), str(node["nproc_per_node"]))
        assert all(name in node["env"] for name in OFFLOAD_ENV)
        if torchtitan:
            assert "--training.enable_cpu_offload" in node["argv"]


def _slurm(plan: Plan, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The sbatch script run with stubs: srun starts torchrun, whose own parser reads the line."""
    run = pytest.importorskip("torch.distributed.run")
    argv, env = slurm_tests._run_with_stubs(ADAPTERS["slurm"].emit(plan), tmp_path)
    args = run.get_args_parser().parse_args(argv[1:])
    assert args.nnodes == str(len(plan.placement)) and env["FRENZY_OFFLOAD_OPTIMIZER"] == "cpu"


def _megatron(plan: Plan, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The project's Megatron-LM reader gives back the layout (strict=False: it does not model the offload flags,
    which are Megatron-LM's own, megatron/training/arguments.py)."""
    data = ADAPTERS["megatron"](plan)
    _, _, parallel = from_megatron_args(data["args"], plan.num_gpus, strict=False)
    assert parallel == plan.parallel
    assert {"--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--use-distributed-optimizer"} <= set(
        data["args"])


def _deepspeed(plan: Plan, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """DeepSpeed's own config class, on one gloo rank (test_consumers.py's fixture)."""
    _consumer(consumer_tests.test_deepspeed_config_accepts, request.getfixturevalue("one_rank_gloo"))(
        plan, tmp_path, request)


CHECKS: dict[str, Callable[[Plan, Path, pytest.FixtureRequest], None]] = {
    "torchrun": _torchrun,
    "torchtitan": lambda plan, tmp_path, request: _torchrun(plan, tmp_path, request, torchtitan=True),
    "slurm": _slurm,
    "megatron": _megatron,
    "deepspeed": _deepspeed,
    "accelerate": _consumer(consumer_tests.test_accelerate_loads_and_launch_validates, Path),
    "kubernetes": _consumer(consumer_tests.test_pytorchjob_pods_validate_and_the_kubeflow_sdk_reads_the_job),
    "kubeflow-trainjob": _consumer(consumer_tests.test_trainjob_matches_the_trainer_api_models),
    "ray": _consumer(consumer_tests.test_ray_scaling_config_accepts_the_kwargs),
    "skypilot": _consumer(consumer_tests.test_skypilot_task_from_yaml, Path),
}
"""Each target's consumer check of one plan."""


def _request(target: str, memory_gib: float, size: int, count: int, free: int, gbs: int,
             num_gpus: int | None) -> tuple[Cluster, TrainingConfig, dict[str, Any]]:
    """WIDE on ``count`` nodes of ``size`` A100s (``free`` free each) cut to ``memory_gib``, hosts of 64 GiB, in
    the target's framework (Megatron-LM's keeps an fp32 gradient buffer: its GPUs get 0.5 GiB more)."""
    memory = memory_gib + (0.5 if target == "megatron" else 0.0)
    specs = load_gpu_specs(overrides={"a100-80gb": {"memory_bytes": int(memory * GIB)}})
    cluster = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": size, "count": count,
                                            "free_gpus": free, "host_memory_bytes": 64 * GIB}]}, specs=specs)
    framework = Framework.MEGATRON if target == "megatron" else Framework.TORCH
    training = TrainingConfig(seq_len=256, global_batch_size=gbs, framework=framework)
    return cluster, training, {"micro_batch_sizes": [1], "recompute": ["none"], "num_gpus": num_gpus}


def _accepted(target: str, asked: tuple[Cluster, TrainingConfig, dict[str, Any]], tmp_path: Path,
              request: pytest.FixtureRequest) -> bool | None:
    """Plans ``asked`` as ``frenzy plan --emit`` does for ``target``; the adapter accepts the plan and, where the
    fallback made it, the consumer check passes (True); False: a plan without offload; None: nothing fits."""
    cluster, training, constraints = asked
    launcher, options = _adapter(target)
    try:
        plan = plan_job(WIDE, cluster, training, constraints=constraints, top_k=0, time_limit_s=5,
                        launcher=ADAPTERS[launcher].scope_for(**options))
    except InfeasiblePlanError:
        return None
    ADAPTERS[launcher](plan, **options)  # raises ConfigError if it cannot launch it
    if not plan.training.offloads:
        return False
    if target in ("accelerate", "torchtitan"):
        assert offload_kind(plan.training) == FULL_OFFLOAD
    CHECKS[target](plan, tmp_path, request)
    return True


def test_every_target_has_its_consumer_check() -> None:
    assert set(CHECKS) == set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_a_plan_the_fallback_makes_for_a_launcher_is_read_by_its_consumer(target: str, tmp_path: Path,
                                                                         request: pytest.FixtureRequest) -> None:
    """2 free GPUs of 1.2 GiB on one node: too small without offload, so each plan offloads."""
    assert _accepted(target, _request(target, 1.2, 2, 1, 2, 8, 2), tmp_path, request) is True


def test_a_recipe_the_launcher_writes_at_no_layout_gives_no_plan_not_an_error(tmp_path: Path,
                                                                            request: pytest.FixtureRequest) -> None:
    """4 GPUs asked of two 1-GPU nodes: the full offload's ZeRO 3 leaves DeepSpeed no layout it writes (found by
    the hundred below: a ConfigError about the request's pins, which the fallback set itself)."""
    assert _accepted("deepspeed", _request("deepspeed", 1.49, 1, 2, 1, 8, 4), tmp_path, request) is None


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_hundred_fallback_requests_per_launcher_are_launchable(target: str, tmp_path: Path,
                                                                 request: pytest.FixtureRequest) -> None:
    """GPUs of 0.9 to 2 GiB (some hold the model as it is), nodes of 1 to 8 with some GPUs busy, any GPU count or a
    pinned one: whatever is planned is launchable, and most plans offload."""
    rng = random.Random(2026)
    outcomes = []
    for k in range(100):
        size = rng.choice([1, 2, 4, 8])
        asked = _request(target, rng.uniform(0.9, 2.0), size, rng.randint(1, 2), rng.randint(1, size),
                         rng.choice([4, 8, 16]), rng.choice([None, 1, 2, 4]))
        (tmp_path / str(k)).mkdir()
        outcomes.append(_accepted(target, asked, tmp_path / str(k), request))
    assert outcomes.count(True) >= 25, outcomes
