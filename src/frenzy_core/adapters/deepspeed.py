"""``deepspeed``: the DeepSpeed JSON config of a plan (batch sizes, ZeRO stage and offload, precision, checkpointing).

Plain DeepSpeed counts data-parallel ranks as the world size divided by what splits the model, so the config
names those splits: ``tensor_parallel.autotp_size`` (DeepSpeed's AutoTP) for tp and ``expert_parallel`` (AutoEP)
for ep. Pipeline stages are DeepSpeed's ``PipelineModule(num_stages=pp)``, built in the script (no config key).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import Adapter, AdapterOptions, OutputFormat
from frenzy_core.config.layout import global_batch_size, num_microbatches
from frenzy_core.config.training import Framework, OffloadDevice, Precision, Recompute
from frenzy_core.errors import ConfigError
from frenzy_core.planning.plan import Plan

__all__ = ["DEEPSPEED", "DeepSpeedOptions"]


class DeepSpeedOptions(AdapterOptions):
    """Options of the deepspeed adapter."""

    gradient_clipping: float | None = Field(default=None, gt=0, description="Max gradient norm (None: off).")
    steps_per_print: int | None = Field(default=None, gt=0, description="DeepSpeed's logging interval.")


def _precision_blocks(precision: Precision) -> dict[str, Any]:
    """DeepSpeed's ``bf16``/``fp16`` blocks: both keep fp32 master weights, i.e. our *-mixed recipes."""
    if precision is Precision.BF16_MIXED:
        return {"bf16": {"enabled": True}}
    if precision is Precision.FP16_MIXED:
        # loss_scale 0 selects dynamic loss scaling (DeepSpeed config docs, "fp16" section)
        return {"fp16": {"enabled": True, "loss_scale": 0}}
    if precision is Precision.FP32:
        return {}
    raise ConfigError(
        f"DeepSpeed has no config for precision {precision.value!r}", field="training.precision",
        value=precision.value, hint="plan with precision bf16-mixed, fp16-mixed or fp32")


def _check_expressible(plan: Plan) -> None:
    t, p = plan.training, plan.parallel
    if p.cp > 1:
        raise ConfigError(f"DeepSpeed has no context parallelism (cp={p.cp}); its Ulysses sequence parallelism splits "
                          "attention heads, not sequence chunks", field="plan.parallel.cp", value=p.cp,
                          hint="use the megatron adapter, or plan with cp=1")
    if t.sequence_parallel and p.tp > 1 and t.framework is Framework.TORCH:  # Megatron-DeepSpeed brings its own
        raise ConfigError("DeepSpeed's AutoTP (tensor_parallel.autotp_size) shards the linear layers only: it has no "
                          "sequence parallelism of the norms and the residual stream", field="training.sequence_parallel",
                          value=True, hint="plan with sequence_parallel=False, or use the torchrun or torchtitan adapter")
    if p.pp > 1 and t.effective_zero_stage > 1:
        raise ConfigError(f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1, not {t.effective_zero_stage}",
                          field="training.zero_stage", value=t.effective_zero_stage,
                          hint="plan with pp=1 for ZeRO-2/3, or ZeRO-1 with pipelines")


def _offload_blocks(plan: Plan) -> dict[str, Any]:
    """``zero_optimization``'s offload_optimizer / offload_param blocks (DeepSpeed config docs: the optimizer at
    ZeRO stage 1-3, parameters at stage 3, both here to pinned host memory); ConfigError for what the config
    cannot say as the plan was estimated."""
    t = plan.training
    if not t.offloads:
        return {}
    stage = t.effective_zero_stage
    refusal = None
    if OffloadDevice.NVME in (t.offload_optimizer, t.offload_params):
        refusal = "NVMe offload needs an nvme_path on every node, which a plan does not know"
    elif t.activation_offload_layers > 0:
        refusal = (f"activation_offload_layers={t.activation_offload_layers} has no DeepSpeed key (its "
                   "cpu_checkpointing offloads recomputation checkpoints, which the estimate does not model)")
    elif t.offload_optimizer is OffloadDevice.NONE:
        refusal = "DeepSpeed offloads parameters only with the optimizer (offload_param needs offload_optimizer)"
    elif stage < 1 or (t.offload_params is not OffloadDevice.NONE and stage < 3):
        refusal = (f"DeepSpeed offloads the optimizer at ZeRO stage 1-3 and parameters at stage 3, not at stage "
                   f"{stage}")
    if refusal is not None:
        raise ConfigError(refusal, field="training.offload_optimizer", value=t.offload_optimizer.value,
                          hint="plan with offload_optimizer='cpu' at ZeRO 1-3 (offload_params='cpu' at ZeRO 3), or "
                               "launch with torchrun (it passes the recipe in FRENZY_OFFLOAD_*)")
    blocks: dict[str, Any] = {"offload_optimizer": {"device": "cpu", "pin_memory": True}}
    if t.offload_params is OffloadDevice.CPU:
        blocks["offload_param"] = {"device": "cpu", "pin_memory": True}
    return blocks


def build_deepspeed(plan: Plan, options: DeepSpeedOptions) -> dict[str, Any]:
    """The config dict; DeepSpeed checks train_batch_size = micro x accumulation x data-parallel size, the last
    being world / (tp x pp) once the config's autotp_size and the script's PipelineModule say so."""
    _check_expressible(plan)
    t, p = plan.training, plan.parallel
    config: dict[str, Any] = {
        "train_batch_size": global_batch_size(t, p),
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": num_microbatches(t, p),
        "zero_optimization": {"stage": t.effective_zero_stage, **_offload_blocks(plan)},
        **_precision_blocks(t.precision),
    }
    if p.tp > 1:
        config["tensor_parallel"] = {"autotp_size": p.tp}
    if p.ep > 1:
        config["expert_parallel"] = {"enabled": True, "autoep_size": p.ep}
    if t.recompute is not Recompute.NONE:
        # DeepSpeed's checkpointing (deepspeed.checkpointing) recomputes whole layers; partitioning the saved
        # inputs across tensor-parallel ranks matches Megatron's, which the memory model assumes when tp > 1.
        config["activation_checkpointing"] = {
            "partition_activations": p.tp > 1, "contiguous_memory_optimization": False,
            "cpu_checkpointing": False}
    if options.gradient_clipping is not None:
        config["gradient_clipping"] = options.gradient_clipping
    if options.steps_per_print is not None:
        config["steps_per_print"] = options.steps_per_print
    return config


DEEPSPEED: Adapter[DeepSpeedOptions] = Adapter(
    name="deepspeed", summary="DeepSpeed JSON config (batch sizes, ZeRO stage, bf16/fp16, activation checkpointing)",
    output=OutputFormat.JSON, options=DeepSpeedOptions, build=build_deepspeed)
