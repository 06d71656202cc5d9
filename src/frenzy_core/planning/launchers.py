"""What each launcher can launch, in one table the planner reads: ``plan_job(..., launcher=name)`` plans only
within it, so every plan it returns is one the launcher's adapter accepts.

The adapters (:mod:`frenzy_core.adapters`, a higher layer) each refer to their row here (``Adapter.scope``);
a test in the adapters' tests checks that every adapter accepts every plan made within its row.
"""

from __future__ import annotations

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.training import Framework, TrainingConfig
from frenzy_core.errors import ConfigError, UnknownNameError
from frenzy_core.planning.request import PlacementMode

__all__ = ["LAUNCH_SCOPES", "LaunchScope", "get_launch_scope"]


class LaunchScope(FrozenModel):
    """The plans one launcher can run: a placement rule, whether it splits the model, and the recipe values it
    can express (None: any)."""

    name: str
    placement: PlacementMode = Field(description="any: per-node process counts may differ; even: the same "
                                     "number of GPUs on every node; whole_nodes: every GPU of each node.")
    model_parallel: bool = Field(default=True, description="False: data parallelism only (tp = pp = cp = ep = 1).")
    frameworks: tuple[Framework, ...] = Field(default=tuple(Framework), description="Runtimes it starts.")
    recipe: dict[str, tuple[str, ...]] = Field(default_factory=dict, description=(
        "Training field -> the values it can express (fields not listed: any)."))
    zero_stages: tuple[int, ...] = Field(default=(0, 1, 2, 3), description="ZeRO stages it can express.")

    def check(self, training: TrainingConfig) -> None:
        """ConfigError naming the first fixed training field this launcher cannot express."""
        if training.framework not in self.frameworks:
            names = ", ".join(f.value for f in self.frameworks)
            raise ConfigError(f"launcher {self.name} runs framework {names}, not {training.framework.value!r}",
                              field="training.framework", value=training.framework.value,
                              hint=f"plan with framework {self.frameworks[0].value!r}")
        for field, allowed in self.recipe.items():
            value = getattr(training, field)
            value = getattr(value, "value", value)
            if value not in allowed:
                raise ConfigError(f"launcher {self.name} cannot express {field}={value!r}", field=f"training.{field}",
                                  value=value, hint="use one of " + ", ".join(allowed))


_MEGATRON_PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "fp8-mixed")
"""Megatron-LM's --fp16/--bf16/--fp8-format recipes, all with fp32 master weights (config/megatron_writer.py)."""

LAUNCH_SCOPES: dict[str, LaunchScope] = {scope.name: scope for scope in (
    # torchrun --nproc-per-node is given per node: uneven nodes are fine
    LaunchScope(name="torchrun", placement=PlacementMode.ANY),
    # Megatron-LM's arguments are started by torchrun on each node (per-node counts may differ)
    LaunchScope(name="megatron", placement=PlacementMode.ANY, frameworks=(Framework.MEGATRON,),
                recipe={"precision": _MEGATRON_PRECISIONS, "attention": ("eager", "flash"),
                        "optimizer": ("adamw", "adam", "sgd", "sgd-momentum")},
                zero_stages=(0, 1, 3)),
    # a DeepSpeed config: its precision blocks keep fp32 master weights; the hostfile gives slots per host
    LaunchScope(name="deepspeed", placement=PlacementMode.ANY, frameworks=(Framework.TORCH,),
                recipe={"precision": ("bf16-mixed", "fp16-mixed", "fp32")}),
    # Accelerate starts num_processes / num_machines per machine, data parallel (DDP or FSDP) only
    LaunchScope(name="accelerate", placement=PlacementMode.EVEN, model_parallel=False,
                frameworks=(Framework.TORCH,),
                recipe={"precision": ("fp32", "amp-bf16", "amp-fp16", "bf16-mixed", "fp16-mixed", "fp8-mixed")}),
    # sbatch --ntasks-per-node / a pod per node / SkyPilot's accelerators per node: one count for all nodes
    LaunchScope(name="slurm", placement=PlacementMode.EVEN),
    LaunchScope(name="kubernetes", placement=PlacementMode.EVEN),
    # Ray places one-GPU bundles anywhere (PACK keeps them together where it can)
    LaunchScope(name="ray", placement=PlacementMode.ANY),
    LaunchScope(name="skypilot", placement=PlacementMode.EVEN),
)}
"""Launcher name -> what it can launch (the names of :data:`frenzy_core.adapters.LAUNCHERS`)."""


def get_launch_scope(launcher: str | LaunchScope) -> LaunchScope:
    """The scope of a launcher by name (or a scope as given); UnknownNameError lists the known ones."""
    if isinstance(launcher, LaunchScope):
        return launcher
    scope = LAUNCH_SCOPES.get(launcher.strip().lower()) if isinstance(launcher, str) else None
    if scope is None:
        raise UnknownNameError("launcher", str(launcher), LAUNCH_SCOPES)
    return scope
