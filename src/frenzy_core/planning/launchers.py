"""What each launcher can launch, in one table the planner reads: ``plan_job(..., launcher=name)`` plans only
within it, so every plan it returns is one the launcher's adapter accepts.

The adapters (:mod:`frenzy_core.adapters`, a higher layer) each refer to their row here (``Adapter.scope``);
a test in the adapters' tests checks that every adapter accepts random plans made within its row and refuses
plans outside it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.megatron import megatron_launch
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Framework, OffloadDevice, TrainingConfig
from frenzy_core.errors import ConfigError, UnknownNameError
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.planning.request import PlacementMode

__all__ = ["FULL_OFFLOAD", "LAUNCH_SCOPES", "OFFLOAD_ZERO_STAGES", "OPTIMIZER_OFFLOAD", "TORCHTITAN", "LaunchScope",
           "get_launch_scope", "launchers_where", "offload_kind"]

BoolArray = npt.NDArray[np.bool_]
LayoutCheck = Callable[[LayoutArrays], BoolArray]
"""Which layouts (vectorised) a launcher can write."""
GPUCheck = Callable[[ModelConfig, TrainingConfig, GPUSpec], None]
"""Raises ConfigError when the launcher cannot run the model and recipe on that GPU type."""


class LaunchScope(FrozenModel):
    """The plans one launcher can run: a placement rule, the runtimes and recipe values it can express, and
    which layouts and GPU types it can write (None: all)."""

    name: str
    placement: PlacementMode = Field(description="any: per-node process counts may differ; even: the same "
                                     "number of GPUs on every node; whole_nodes: every GPU of each node.")
    frameworks: tuple[Framework, ...] = Field(default=tuple(Framework), description="Runtimes it starts.")
    recipe: dict[str, tuple[str, ...]] = Field(default_factory=dict, description=(
        "Training field -> the values it can express (fields not listed: any)."))
    layouts: LayoutCheck | None = Field(default=None, description="Which layouts it can write (vectorised).")
    gpu: GPUCheck | None = Field(default=None, description=(
        "Raises ConfigError for a GPU type it cannot run the model and recipe on."))
    mixed: bool = Field(default=False, description=(
        "Whether it launches plans spanning GPU types (replica groups with their own micro-batch counts), with "
        "any placement: it writes one part per GPU type and node size, so the placement rule is for single-type "
        "plans. Also whether data-parallel ranks may run different micro-batch counts (Search.uneven)."))
    offload: tuple[str, ...] | None = Field(default=None, description=(
        "The offload recipes (:func:`offload_kind`) its files can say; None: any, passed to the script in "
        "FRENZY_OFFLOAD_* (adapters/base.py, RECIPE_ENV)."))
    stages: bool = Field(default=False, description=(
        "Whether it launches a pipeline whose stages run on different GPU types with their own layer counts "
        "(issue 12, form a): every stage's ranks with that stage's environment; plan_job(..., launcher=...) "
        "searches such pipelines only for these launchers."))
    stage_tp: bool = Field(default=False, description=(
        "With stages: whether each stage may run its own tensor-parallel degree (False: one tp on every stage, "
        "as Megatron-LM's one --tensor-model-parallel-size)."))
    sharded_offload: tuple[str, ...] = Field(default=(), description=(
        "Offload recipes (:func:`offload_kind`) it writes only where data- or context-parallel ranks shard the "
        "model (dp x cp > 1): torchtitan applies FSDP2, and with it the CPU offload, only then. The planner and "
        "the adapter both read this."))

    def check(self, training: TrainingConfig) -> None:
        """ConfigError naming the first fixed training field this launcher cannot express."""
        if training.framework not in self.frameworks:
            names = ", ".join(f.value for f in self.frameworks)
            raise ConfigError(f"launcher {self.name} runs framework {names}, not {training.framework.value!r}",
                              field="training.framework", value=training.framework.value,
                              hint=f"plan with framework {self.frameworks[0].value!r}")
        kind = offload_kind(training)
        if self.offload is not None and kind not in self.offload:
            raise ConfigError(f"launcher {self.name} cannot express offload {kind!r} (offload_optimizer="
                              f"{training.offload_optimizer.value!r}, offload_params={training.offload_params.value!r}, "
                              f"activation_offload_layers={training.activation_offload_layers})",
                              field="training.offload_optimizer", value=kind,
                              hint="use one of " + ", ".join(self.offload) + ", or the torchrun launcher (it passes "
                                   "the recipe to the script)")
        for field, allowed in self.recipe.items():
            value = getattr(training, field)
            value = getattr(value, "value", value)
            if value not in allowed:
                raise ConfigError(f"launcher {self.name} cannot express {field}={value!r}", field=f"training.{field}",
                                  value=value, hint="use one of " + ", ".join(allowed))

    def allows(self, layouts: LayoutArrays, training: TrainingConfig | None = None) -> BoolArray:
        """True for each layout this launcher can write (with ``training``'s offload, where given)."""
        kept = np.ones(len(layouts), dtype=bool) if self.layouts is None else np.asarray(self.layouts(layouts), bool)
        if training is not None and offload_kind(training) in self.sharded_offload:
            kept &= (layouts.dp * layouts.cp) > 1
        return kept

    def refusal(self, model: ModelConfig, training: TrainingConfig, gpu: GPUSpec) -> str | None:
        """Why this launcher cannot run ``model`` with ``training`` on ``gpu`` (None: it can)."""
        if self.gpu is None:
            return None
        try:
            self.gpu(model, training, gpu)
        except ConfigError as exc:
            return str(exc)
        return None


OPTIMIZER_OFFLOAD = "optimizer-cpu"
"""Master weights, optimizer states and the step on the host (ZeRO-Offload, Megatron --optimizer-cpu-offload)."""
FULL_OFFLOAD = "optimizer-cpu+params-cpu"
"""The parameters (and gradients) on the host too (FSDP CPUOffload, ZeRO-Infinity offload_param to the CPU)."""


OFFLOAD_ZERO_STAGES = {OPTIMIZER_OFFLOAD: (1, 2, 3), FULL_OFFLOAD: (3,)}
"""ZeRO stages each torch offload recipe runs at: DeepSpeed offloads the optimizer at ZeRO stage 1-3 and parameters
at stage 3 only (its config docs, zero_optimization.offload_optimizer / offload_param); FSDP's CPUOffload moves the
parameters of a sharded model."""


def offload_kind(training: TrainingConfig) -> str:
    """The recipe's offload in one word: ``none``, ``optimizer-<device>``, ``params-<device>``, the two joined
    with ``+``, and ``+activations`` when saved activations go to the host."""
    parts = [f"{name}-{device.value}" for name, device in (("optimizer", training.offload_optimizer),
                                                           ("params", training.offload_params))
             if device is not OffloadDevice.NONE]
    parts += ["activations"] if training.activation_offload_layers > 0 else []
    return "+".join(parts) or "none"


def _megatron_gpu(model: ModelConfig, training: TrainingConfig, gpu: GPUSpec) -> None:
    """Megatron-LM's own device and model checks (the writer's), on the trivial layout."""
    megatron_launch(model, training.replace(micro_batch_size=1, global_batch_size=None), ParallelConfig(), gpu.id)


def _megatron_layouts(a: LayoutArrays) -> BoolArray:
    # ZeRO-1 is the distributed optimizer; ZeRO-2 has no flag and FSDP2 (ZeRO-3) runs only without pipelines,
    # experts and the distributed optimizer (config/megatron/writer.py): the planner keeps to ZeRO 0/1
    return np.asarray(a.zero_stage <= 1)


def _deepspeed_layouts(a: LayoutArrays) -> BoolArray:
    # no context parallelism, no sequence parallelism (AutoTP); its pipeline engine runs ZeRO 0 or 1 only
    # (adapters/deepspeed.py)
    return np.asarray((a.cp == 1) & (a.active_sequence_parallel == 0) & ((a.pp == 1) | (a.effective_zero_stage <= 1)))


def _accelerate_layouts(a: LayoutArrays) -> BoolArray:
    # a split model goes through the Megatron-LM plugin: no virtual pipeline field, no ZeRO-2/3 (adapters/accelerate.py)
    splits = np.maximum(np.maximum(a.tp, a.pp), np.maximum(a.cp, a.ep)) > 1
    return np.asarray(~splits | ((a.vpp == 1) & (a.zero_stage <= 1)))


_MEGATRON_PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "fp8-mixed")
"""Megatron-LM's --fp16/--bf16/--fp8-format recipes, all with fp32 master weights (config/megatron/writer.py)."""

LAUNCH_SCOPES: dict[str, LaunchScope] = {scope.name: scope for scope in (
    # torchrun --nproc-per-node is given per node: uneven nodes are fine; each node's line carries its group
    LaunchScope(name="torchrun", placement=PlacementMode.ANY, mixed=True, stages=True, stage_tp=True),
    # Megatron-LM's arguments are started by torchrun on each node (per-node counts may differ)
    # pipeline stages on different types: one --tensor-model-parallel-size for all stages (config/megatron/
    # writer.py); the split through the first/last-stage flags or --pipeline-model-parallel-layout
    LaunchScope(name="megatron", placement=PlacementMode.ANY, frameworks=(Framework.MEGATRON,), stages=True,
                recipe={"precision": _MEGATRON_PRECISIONS, "attention": ("eager", "flash"),
                        "optimizer": ("adamw", "adam", "sgd", "sgd-momentum")},
                offload=("none", OPTIMIZER_OFFLOAD), layouts=_megatron_layouts, gpu=_megatron_gpu),
    # a DeepSpeed config: its precision blocks keep fp32 master weights; the hostfile gives slots per host
    LaunchScope(name="deepspeed", placement=PlacementMode.ANY, frameworks=(Framework.TORCH,),
                recipe={"precision": ("bf16-mixed", "fp16-mixed", "fp32")}, offload=("none", OPTIMIZER_OFFLOAD, FULL_OFFLOAD),
                layouts=_deepspeed_layouts),
    # Accelerate starts num_processes / num_machines per machine
    LaunchScope(name="accelerate", placement=PlacementMode.EVEN, frameworks=(Framework.TORCH,),
                recipe={"precision": ("fp32", "amp-bf16", "amp-fp16", "bf16-mixed", "fp16-mixed", "fp8-mixed")},
                offload=("none", FULL_OFFLOAD), layouts=_accelerate_layouts),
    # sbatch --ntasks-per-node / a pod per node / a TrainJob's numProcPerNode / SkyPilot's accelerators per
    # node: one count for every node; a mixed plan is a Slurm heterogeneous job or a JobSet, one component or
    # replicated job per (group, node size)
    LaunchScope(name="slurm", placement=PlacementMode.EVEN, mixed=True, stages=True, stage_tp=True),
    LaunchScope(name="kubernetes", placement=PlacementMode.EVEN, mixed=True, stages=True, stage_tp=True),
    LaunchScope(name="kubeflow-trainjob", placement=PlacementMode.EVEN),
    # Ray places one-GPU bundles anywhere (PACK keeps them together where it can)
    LaunchScope(name="ray", placement=PlacementMode.ANY),
    LaunchScope(name="skypilot", placement=PlacementMode.EVEN),
)}
"""Launcher name -> what it can launch (the names of :data:`frenzy_core.adapters.LAUNCHERS`)."""


def _torchtitan_layouts(a: LayoutArrays) -> BoolArray:
    # what adapters/torchtitan.py writes: the pipeline and tp degrees (no cp or ep), one stage per pp rank under
    # 1F1B or GPipe
    single = (a.schedule == PipelineSchedule.ONE_F_ONE_B.code) | (a.schedule == PipelineSchedule.GPIPE.code)
    return np.asarray((a.cp == 1) & (a.ep == 1) & (a.vpp == 1) & single)


TORCHTITAN = LaunchScope(name="torchtitan", placement=PlacementMode.ANY, frameworks=(Framework.TORCH,),
                         offload=("none", FULL_OFFLOAD), sharded_offload=(FULL_OFFLOAD,), layouts=_torchtitan_layouts,
                         stages=True)
"""torchrun with torchtitan's flags (``emit(plan, "torchrun", torchtitan=True)``, ``frenzy plan --emit torchrun -o
torchtitan=true``): torch's pp x dp x tp mesh with one tp on every stage, one local batch per rank (no replica
groups), the offload only as FSDP2's CPUOffloadPolicy (parameters, gradients and optimizer together,
torchtitan/models/llama3/infra/parallelize.py passes it to apply_fsdp only when FSDP is enabled)."""


def launchers_where(test: Callable[[LaunchScope], bool]) -> list[str]:
    """The names of the launchers whose scope passes ``test`` (the lists refusals and hints name, derived from
    the declarations above, never written by hand)."""
    return [name for name, scope in LAUNCH_SCOPES.items() if test(scope)]


def get_launch_scope(launcher: str | LaunchScope) -> LaunchScope:
    """The scope of a launcher by name (or a scope as given); UnknownNameError lists the known ones."""
    if isinstance(launcher, LaunchScope):
        return launcher
    scope = LAUNCH_SCOPES.get(launcher.strip().lower()) if isinstance(launcher, str) else None
    if scope is None:
        raise UnknownNameError("launcher", str(launcher), LAUNCH_SCOPES)
    return scope
