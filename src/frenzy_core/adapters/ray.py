"""``ray``: Ray Train ``ScalingConfig`` keyword arguments for the plan, and a runnable ``TorchTrainer`` snippet.

Ray Train starts one worker per GPU and sets up torch.distributed itself; the recipe reaches the training
function as ``train_loop_config`` and as the :data:`~frenzy_core.adapters.base.RECIPE_ENV` variables.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from frenzy_core.adapters.base import Adapter, AdapterOptions, OutputFormat, launcher_gpu_name, recipe_env
from frenzy_core.config.layout import global_batch_size, num_microbatches
from frenzy_core.planning.plan import Plan

__all__ = ["RAY", "RayOptions"]


class RayOptions(AdapterOptions):
    """Options of the ray adapter."""

    accelerator_type: str | None = Field(default=None, description=(
        "Ray's accelerator type (default: ray.util.accelerators' name for the plan's GPU type)."))
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        default="PACK", description="Ray placement group strategy (PACK keeps tensor-parallel groups together).")
    train_module: str = Field(default="train", pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$",
                              description="Module the snippet imports the training function from.")
    train_function: str = Field(default="train_loop_per_worker", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    use_gpu: bool = Field(default=True, description=(
        "False: one CPU worker per planned rank (a dry run of the job's wiring on a machine without GPUs)."))


def build_ray(plan: Plan, options: RayOptions) -> dict[str, Any]:
    """``scaling_config``: ScalingConfig(**kwargs); ``train_loop_config`` and ``runtime_env``; ``snippet``."""
    t, p = plan.training, plan.parallel
    scaling: dict[str, Any] = {"num_workers": plan.num_gpus, "use_gpu": options.use_gpu}
    if options.use_gpu:
        scaling |= {"resources_per_worker": {"GPU": 1},
                    "accelerator_type": launcher_gpu_name(plan.gpu_type, "ray", "accelerator_type",
                                                          options.accelerator_type)}
    scaling["placement_strategy"] = options.placement_strategy
    loop_config = {
        "micro_batch_size": t.micro_batch_size, "gradient_accumulation_steps": num_microbatches(t, p),
        "global_batch_size": global_batch_size(t, p), "seq_len": t.seq_len, "dp": p.dp, "tp": p.tp, "pp": p.pp,
        "zero_stage": t.effective_zero_stage, "recompute": t.recompute.value, "precision": t.precision.value,
    }
    runtime_env = {"env_vars": recipe_env(plan)}
    snippet = "\n".join([
        "import ray",
        "from ray.train import ScalingConfig",
        "from ray.train.torch import TorchTrainer",
        "",
        f"from {options.train_module} import {options.train_function}",
        "",
        f"ray.init(runtime_env={runtime_env!r})",
        f"scaling_config = ScalingConfig(**{scaling!r})",
        f"trainer = TorchTrainer({options.train_function}, train_loop_config={loop_config!r},",
        "                       scaling_config=scaling_config)",
        "result = trainer.fit()",
    ]) + "\n"
    return {"scaling_config": scaling, "train_loop_config": loop_config, "runtime_env": runtime_env,
            "snippet": snippet}


RAY: Adapter[RayOptions] = Adapter(
    name="ray", summary="Ray Train ScalingConfig kwargs and a TorchTrainer snippet", output=OutputFormat.TEXT,
    options=RayOptions, build=build_ray, render=lambda data: str(data["snippet"]))
