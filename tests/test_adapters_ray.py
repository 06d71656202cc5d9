"""ray adapter: ScalingConfig kwargs, and a snippet that runs against stand-in ray modules and passes them on."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from adapter_plans import GPT2, make_plan, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

ray_adapter = ADAPTERS["ray"]


def _run_snippet(snippet: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Execute the snippet with fake ray, ray.train, ray.train.torch and train modules; return what they got."""
    seen: dict[str, Any] = {}

    def init(**kwargs: Any) -> None:
        seen["init"] = kwargs

    class ScalingConfig:
        def __init__(self, **kwargs: Any):
            seen["scaling"] = kwargs

    class TorchTrainer:
        def __init__(self, fn: Any, *, train_loop_config: dict[str, Any], scaling_config: ScalingConfig):
            seen["trainer"] = (fn, train_loop_config, scaling_config)

        def fit(self) -> str:
            return "fitted"

    def train_loop_per_worker(config: dict[str, Any]) -> None:
        """The user's training function."""

    modules: dict[str, dict[str, Any]] = {"ray": {"init": init}, "ray.train": {"ScalingConfig": ScalingConfig},
               "ray.train.torch": {"TorchTrainer": TorchTrainer},
               "train": {"train_loop_per_worker": train_loop_per_worker}}
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "<ray snippet>", "exec"), namespace)  # noqa: S102  (running the emitted snippet is the test)
    assert namespace["result"] == "fitted"
    assert seen["trainer"][0] is train_loop_per_worker
    return seen


def _check(plan: Plan, monkeypatch: pytest.MonkeyPatch, **options: Any) -> dict[str, Any]:
    data = ray_adapter(plan, **options)
    seen = _run_snippet(ray_adapter.emit(plan, **options), monkeypatch)
    assert seen["scaling"] == data["scaling_config"]
    assert seen["trainer"][1] == data["train_loop_config"]
    assert seen["init"] == {"runtime_env": data["runtime_env"]}
    return data


def test_single_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _check(single_gpu(), monkeypatch)
    assert data["scaling_config"] == {"num_workers": 1, "use_gpu": True, "resources_per_worker": {"GPU": 1},
                                      "accelerator_type": "A100-80G", "placement_strategy": "PACK"}
    assert data["train_loop_config"]["gradient_accumulation_steps"] == 4


def test_multi_node_data_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _check(multi_node_dp(), monkeypatch, placement_strategy="SPREAD")
    assert data["scaling_config"]["num_workers"] == 16
    assert data["scaling_config"]["placement_strategy"] == "SPREAD"
    loop = data["train_loop_config"]
    assert (loop["micro_batch_size"], loop["gradient_accumulation_steps"], loop["zero_stage"]) == (2, 4, 0)
    assert data["runtime_env"]["env_vars"]["FRENZY_DP"] == "16"


def test_tp_pp_across_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _check(tp_pp_nodes(), monkeypatch)
    assert (data["scaling_config"]["num_workers"], data["scaling_config"]["accelerator_type"]) == (16, "H100")
    loop = data["train_loop_config"]
    assert (loop["tp"], loop["pp"], loop["dp"], loop["gradient_accumulation_steps"]) == (4, 2, 2, 16)


def test_gpu_without_ray_name_needs_accelerator_type(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(GPT2, "rtx-4090", {"node:0": [0, 1]}, ParallelConfig(dp=2), TrainingConfig(seq_len=512))
    with pytest.raises(ConfigError, match="accelerator_type="):
        ray_adapter(plan)
    assert _check(plan, monkeypatch, accelerator_type="RTX4090")["scaling_config"]["accelerator_type"] == "RTX4090"


def test_train_module_must_be_an_identifier() -> None:
    with pytest.raises(ConfigError, match="train_module"):
        ray_adapter(single_gpu(), train_module="os; import sys")
