"""``accelerate``: a Hugging Face Accelerate config: DDP or FSDP for data-parallel plans, Accelerate's Megatron-LM
plugin for plans that split the model (tensor, pipeline, context or expert parallelism)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import Adapter, AdapterOptions, OutputFormat, node_slots, uniform_gpus_per_node
from frenzy_core.adapters.torchrun import DEFAULT_RDZV_PORT
from frenzy_core.config.layout import num_microbatches
from frenzy_core.config.training import Precision, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning.plan import Plan

__all__ = ["ACCELERATE", "FSDP_SHARDING", "AccelerateOptions"]

FSDP_SHARDING: dict[int, str] = {
    1: "SHARD_GRAD_OP",  # FSDP has no optimizer-state-only mode; SHARD_GRAD_OP shards more, so it still fits
    2: "SHARD_GRAD_OP",  # gradients + optimizer states (ZeRO-2)
    3: "FULL_SHARD",  # + parameters (ZeRO-3)
}
"""FSDP ``sharding_strategy`` for each ZeRO stage (torch.distributed.fsdp.ShardingStrategy)."""

_MIXED_PRECISION: dict[Precision, str] = {
    Precision.FP32: "no",
    Precision.AMP_BF16: "bf16",
    Precision.AMP_FP16: "fp16",
    Precision.BF16_MIXED: "bf16",
    Precision.FP16_MIXED: "fp16",
    Precision.FP8_MIXED: "fp8",
}
"""Accelerate's ``mixed_precision`` per recipe (pure bf16/fp16 casts the model itself: not expressible here)."""


class AccelerateOptions(AdapterOptions):
    """Options of the accelerate adapter."""

    main_process_ip: str | None = Field(default=None, description=(
        "Address of machine rank 0 (default: the plan's first node as a hostname; unused on one machine)."))
    main_process_port: int = Field(default=DEFAULT_RDZV_PORT, gt=0, lt=65536)
    machine_rank: int = Field(default=0, ge=0, description="Rank of the machine this copy of the file is for.")


def _splits_model(plan: Plan) -> bool:
    p = plan.parallel
    return max(p.tp, p.pp, p.cp, p.ep) > 1


def _check_expressible(plan: Plan) -> None:
    p, t = plan.parallel, plan.training
    if _splits_model(plan) and p.vpp > 1:
        raise ConfigError(
            f"Accelerate's config file has no virtual-pipeline field for vpp={p.vpp}", field="plan.parallel.vpp",
            value=p.vpp, hint=f"use the megatron adapter, or pass MegatronLMPlugin(num_layers_per_virtual_pipeline_"
            f"stage={plan.model.num_layers // (p.pp * p.vpp)}) to Accelerator in the script")
    if _splits_model(plan) and t.zero_stage > 1:
        raise ConfigError(
            f"Accelerate's Megatron-LM plugin shards with the distributed optimizer only, not ZeRO-{t.zero_stage}",
            field="training.zero_stage", value=t.zero_stage, hint="use the deepspeed adapter")
    # recipe fields MegatronLMPlugin has no key for: refused when set away from TrainingConfig's own default
    megatron_only = [f for f in ("recompute_modules", "cross_entropy_fusion", "tp_comm_overlap")
                     if getattr(t, f) != TrainingConfig.model_fields[f].default]
    if _splits_model(plan) and megatron_only:
        field = megatron_only[0]
        value = t.model_dump(mode="json")[field]
        raise ConfigError(f"Accelerate's Megatron-LM plugin config has no key for training.{field}={value!r}",
                          field=f"training.{field}", value=value, hint="use the megatron adapter")
    if t.precision not in _MIXED_PRECISION:
        raise ConfigError(f"Accelerate has no mixed_precision for {t.precision.value!r}",
                          field="training.precision", value=t.precision.value,
                          hint="plan with amp-bf16, bf16-mixed, fp16-mixed, fp8-mixed or fp32")


def build_accelerate(plan: Plan, options: AccelerateOptions) -> dict[str, Any]:
    """The ``accelerate launch --config_file`` mapping; FSDP when the plan shards (ZeRO stage >= 1)."""
    _check_expressible(plan)
    t = plan.training
    slots = node_slots(plan)
    uniform_gpus_per_node(plan, "accelerate")  # Accelerate starts num_processes / num_machines per machine
    if options.machine_rank >= len(slots):
        raise ConfigError(f"machine_rank={options.machine_rank} but the plan has {len(slots)} machine(s)",
                          field="machine_rank", value=options.machine_rank, hint=f"use 0..{len(slots) - 1}")
    stage = t.effective_zero_stage
    if _splits_model(plan):
        distributed = "MEGATRON_LM"
    else:
        distributed = "FSDP" if stage > 0 else ("MULTI_GPU" if plan.num_gpus > 1 else "NO")
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed,
        "num_machines": len(slots),
        "num_processes": plan.num_gpus,
        "machine_rank": options.machine_rank,
        "gpu_ids": ",".join(map(str, slots[options.machine_rank].gpus)),
        "mixed_precision": _MIXED_PRECISION[t.precision],
        "main_training_function": "main",
        "use_cpu": False,
    }
    if len(slots) > 1:
        config |= {"main_process_ip": options.main_process_ip or slots[0].host,
                   "main_process_port": options.main_process_port, "rdzv_backend": "static", "same_network": True}
    if distributed == "MEGATRON_LM":
        config["megatron_lm_config"] = _megatron_lm_config(plan)
    if distributed == "FSDP":
        config["fsdp_config"] = {
            "fsdp_sharding_strategy": FSDP_SHARDING[stage],
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_offload_params": False,
            "fsdp_activation_checkpointing": t.recompute is Recompute.FULL,
            "fsdp_use_orig_params": True,
            "fsdp_sync_module_states": True,
        }
    return config


def _megatron_lm_config(plan: Plan) -> dict[str, Any]:
    """``megatron_lm_config``: the keys ``accelerate launch`` turns into MEGATRON_LM_* for MegatronLMPlugin."""
    p, t = plan.parallel, plan.training
    config: dict[str, Any] = {
        "megatron_lm_tp_degree": p.tp, "megatron_lm_pp_degree": p.pp,
        "megatron_lm_num_micro_batches": num_microbatches(t, p),
        "megatron_lm_sequence_parallelism": t.sequence_parallel,
        "megatron_lm_use_distributed_optimizer": t.effective_zero_stage == 1,
        "megatron_lm_context_parallel_size": p.cp, "megatron_lm_expert_model_parallel_size": p.ep,
        "megatron_lm_recompute_activations": t.recompute is not Recompute.NONE,
        "megatron_lm_gradient_clipping": 1.0,  # MegatronLMPlugin's default, written because launch requires it
    }
    if t.recompute is not Recompute.NONE:
        config["megatron_lm_recompute_granularity"] = t.recompute.value
    if t.recompute is Recompute.FULL:
        config |= {"megatron_lm_recompute_method": t.recompute_method.value,
                   "megatron_lm_recompute_num_layers": t.recompute_num_layers or 1}
    return config


ACCELERATE: Adapter[AccelerateOptions] = Adapter(
    name="accelerate", summary="Accelerate config YAML (DDP, FSDP, or the Megatron-LM plugin for model-parallel plans)",
    output=OutputFormat.YAML, options=AccelerateOptions, build=build_accelerate)
