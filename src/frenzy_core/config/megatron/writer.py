"""Write the three configs as a Megatron-LM command line that :func:`from_megatron_args` reads back, with the
environment Megatron-LM's ``validate_args`` needs for it on a given GPU type."""

from __future__ import annotations

from typing import Any

from frenzy_core._base import FrozenModel
from frenzy_core.config.architecture import ArchKind, MLPKind, PositionEmbedding
from frenzy_core.config.megatron.args import flag_table
from frenzy_core.config.megatron.model_flags import LLAMA3_ROPE
from frenzy_core.config.megatron.pattern import moe_layer_flag
from frenzy_core.config.megatron.reader import megatron_split
from frenzy_core.config.megatron.tables import (
    MAKE_VOCAB_DIVISIBLE_BY,
    MLP_SWITCHES,
    NORM_NAMES,
    POSITION_NAMES,
    PRECISION_SWITCHES,
    megatron_padded_vocab_size,
)
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import Attention, OffloadDevice, Optimizer, Recompute, RecomputeModule, TrainingConfig
from frenzy_core.errors import ConfigError

__all__ = ["MegatronLaunch", "megatron_launch", "to_megatron_args"]

_FLASH_MIN_CAPABILITY = 8.0  # FlashAttention-2 and TE's cuDNN fused attention: Ampere (sm80) or later
_CONNECTIONS_FREE_ARCH = 10  # validate_args: no CUDA_DEVICE_MAX_CONNECTIONS rule from Blackwell (arch 10) on


class MegatronLaunch(FrozenModel):
    """A Megatron-LM command line and what must surround it."""

    args: tuple[str, ...]
    """The flag tokens (model, recipe, layout); tokenizer, data and schedule flags are the caller's."""
    env: dict[str, str]
    """Environment every rank needs (``validate_args`` asserts on it)."""
    padded_vocab_size: int
    """Embedding rows Megatron will allocate (``_vocab_size_with_padding``)."""
    notes: tuple[str, ...] = ()
    """What the caller should know (e.g. padding that differs from the model's vocabulary)."""


def to_megatron_args(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig,
                     gpu_type: str | None = None) -> list[str]:
    """A Megatron-LM command line that :func:`from_megatron_args` reads back to the same three configs.

    The vocabulary is written as ``--vocab-size`` with the largest ``--make-vocab-size-divisible-by`` (at most
    Megatron's 128) under which Megatron keeps it as is; a size no such divisor keeps (GPT-2's 50,257 tokens
    with tp > 1) is left to Megatron to pad, and reads back padded. ``zero_stage=1`` is written as
    ``--use-distributed-optimizer``, ``zero_stage=3`` as torch FSDP2 with the flags it requires; see
    :func:`megatron_launch` for the environment and ``gpu_type`` checks.
    """
    return list(megatron_launch(model, training, parallel, gpu_type).args)


def megatron_launch(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig,
                    gpu_type: str | None = None) -> MegatronLaunch:
    """The command line, the environment and the padded vocabulary for running the configs on ``gpu_type``
    (None: no device checks, pre-Blackwell environment rules)."""
    _check_expressible(model, training, parallel)
    capability = _capability(gpu_type)
    if training.attention is not Attention.EAGER and capability is not None and capability < _FLASH_MIN_CAPABILITY:
        raise ConfigError(
            f"{gpu_type} (compute capability {capability}) runs neither FlashAttention nor cuDNN fused attention "
            f"(both need {_FLASH_MIN_CAPABILITY}), so Megatron would run unfused attention, which keeps the score "
            "matrix the plan's memory estimate left out", field="training.attention", value=training.attention.value,
            hint="plan with --attention eager for this GPU type")
    divisible_by = _vocab_divisor(model.vocab_size, parallel.tp)
    padded = megatron_padded_vocab_size(model.vocab_size, parallel.tp, divisible_by)
    notes = () if padded == model.vocab_size else (
        f"Megatron pads the {model.vocab_size:,}-token vocabulary to {padded:,} rows (a multiple of "
        f"{divisible_by} x tp={parallel.tp}); the memory estimate counted {model.vocab_size:,}",)
    args = [*_model_flags(model, divisible_by), *_training_flags(training), *_parallel_flags(parallel, model.num_layers)]
    env = {}
    fsdp = training.zero_stage == 3
    if (parallel.tp > 1 or parallel.cp > 1) and not fsdp and (capability or 0) < _CONNECTIONS_FREE_ARCH:
        # validate_args asserts it (one hardware queue keeps tensor-parallel communication ahead of compute)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return MegatronLaunch(args=tuple(args), env=env, padded_vocab_size=padded, notes=notes)


def _capability(gpu_type: str | None) -> float | None:
    if gpu_type is None:
        return None
    facts = flag_table().gpus.get(gpu_type)
    if facts is None:
        raise ConfigError(f"no Megatron device facts for GPU type {gpu_type!r}", field="gpu_type", value=gpu_type,
                          hint="add it to data/megatron_flags.yaml (gpus)")
    return facts.compute_capability


def _vocab_divisor(vocab_size: int, tp: int) -> int:
    """The largest power of two up to Megatron's default whose padding keeps ``vocab_size``; else the default."""
    d = MAKE_VOCAB_DIVISIBLE_BY
    while d >= 1:
        if vocab_size % (d * tp) == 0:
            return d
        d //= 2
    return MAKE_VOCAB_DIVISIBLE_BY


def _model_flags(model: ModelConfig, divisible_by: int) -> list[str]:
    out = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
           "--num-attention-heads", str(model.num_attention_heads), "--ffn-hidden-size", str(model.ffn_hidden_size),
           "--kv-channels", str(model.head_dim)]
    if model.num_kv_heads != model.num_attention_heads:
        out += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    switch = MLP_SWITCHES[model.mlp]
    out += [switch] if switch else []
    out += ["--normalization", NORM_NAMES[model.norm], "--norm-epsilon", repr(model.norm_eps)]
    position = next(name for name, kind in POSITION_NAMES.items() if kind is model.position_embedding)
    out += ["--position-embedding-type", position, *_rope_flags(model)]
    out += ["--max-position-embeddings", str(model.max_position_embeddings), "--vocab-size", str(model.vocab_size)]
    if divisible_by != MAKE_VOCAB_DIVISIBLE_BY:
        out += ["--make-vocab-size-divisible-by", str(divisible_by)]
    if not model.tied_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if not model.linear_bias:
        out += ["--disable-bias-linear", *(["--add-qkv-bias"] if model.qkv_bias else [])]
    out += ["--hidden-dropout", repr(model.hidden_dropout), "--attention-dropout", repr(model.attention_dropout)]
    out += ["--qk-layernorm"] if model.qk_norm else []
    out += _mla_flags(model)
    out += ["--bert-no-binary-head"] if model.arch is ArchKind.ENCODER and not model.pooler else []
    return out + _moe_flags(model)


def _mla_flags(model: ModelConfig) -> list[str]:
    """Latent attention: its ranks and head widths; --qk-layernorm gives it the latent norms."""
    mla = model.mla
    if mla is None:
        return []
    out = ["--multi-latent-attention", "--qk-layernorm"]
    out += ["--q-lora-rank", str(mla.q_lora_rank)] if mla.q_lora_rank is not None else []
    return out + ["--kv-lora-rank", str(mla.kv_lora_rank), "--qk-head-dim", str(mla.qk_nope_head_dim),
                  "--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim), "--v-head-dim", str(mla.v_head_dim)]


def _rope_flags(model: ModelConfig) -> list[str]:
    if model.position_embedding is not PositionEmbedding.ROTARY:
        return []
    out = ["--rotary-base", str(int(model.rope_theta))]
    s = model.rope_scaling
    if s is not None and s.kind == "llama3":
        out += ["--use-rope-scaling", "--rope-scaling-factor", repr(s.factor)]
    elif s is not None:  # linear, checked by _check_expressible
        out += ["--rotary-seq-len-interpolation-factor", str(int(s.factor or 1))]
    return out


def _moe_flags(model: ModelConfig) -> list[str]:
    moe = model.moe
    if moe is None:
        return []
    out = ["--num-experts", str(moe.num_experts), "--moe-router-topk", str(moe.top_k),
           "--moe-ffn-hidden-size", str(moe.expert_ffn_hidden_size)]
    if moe.shared_expert_ffn_hidden_size:
        out += ["--moe-shared-expert-intermediate-size", str(moe.shared_expert_ffn_hidden_size)]
    out += ["--moe-shared-expert-gate"] if moe.shared_expert_gate else []
    pattern = moe_layer_flag(model)
    out += ["--moe-layer-freq", pattern] if pattern else []
    if moe.capacity_factor is not None:
        out += ["--moe-expert-capacity-factor", repr(moe.capacity_factor)]
    # the estimate counts TE's grouped-GEMM experts (their workspaces, data/memory_overhead.yaml, and the
    # activation moe_act recomputes), so the launch runs them
    out += ["--moe-grouped-gemm"]
    return out


def _training_flags(training: TrainingConfig) -> list[str]:
    out = ["--seq-length", str(training.seq_len), "--micro-batch-size", str(training.micro_batch_size)]
    if training.global_batch_size is not None:
        out += ["--global-batch-size", str(training.global_batch_size)]
    out += list(PRECISION_SWITCHES[training.precision])
    out += ["--fp8-param-gather"] if training.fp8_param_gather else []
    if training.optimizer in (Optimizer.SGD_MOMENTUM, Optimizer.SGD):
        out += ["--optimizer", "sgd", *(["--sgd-momentum", "0.0"] if training.optimizer is Optimizer.SGD else [])]
    if training.effective_zero_stage == 1:  # Megatron's distributed optimizer is ZeRO-1
        out.append("--use-distributed-optimizer")
    if training.zero_stage == 3:  # validate_args: FSDP2 asserts no gradient-accumulation fusion, torch_dist ckpts
        out += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion", "--ckpt-format", "torch_dist"]
    if training.recompute is Recompute.SELECTIVE:
        out += ["--recompute-granularity", "selective"]
        if training.recompute_modules != (RecomputeModule.CORE_ATTN,):
            out += ["--recompute-modules", *(m.value for m in training.recompute_modules)]
    elif training.recompute is Recompute.FULL:
        out += ["--recompute-granularity", "full", "--recompute-method", training.recompute_method.value,
                "--recompute-num-layers", str(training.recompute_num_layers or 1)]
    out += ["--cross-entropy-loss-fusion"] if training.cross_entropy_fusion else []
    # auto: Transformer Engine picks flash or cuDNN fused attention (neither keeps the score matrix)
    out += ["--attention-backend", "unfused" if training.attention is Attention.EAGER else "auto"]
    out += ["--sequence-parallel"] if training.sequence_parallel else []
    out += ["--tp-comm-overlap"] if training.tp_comm_overlap else []
    if training.offload_optimizer is not OffloadDevice.NONE:
        # Megatron-Core's HybridDeviceOptimizer, all of it on the host, its copies overlapped with the CPU step
        # (megatron/core/optimizer/cpu_offloading/README.md; validate_args asserts the precision-aware optimizer)
        out += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0", "--use-precision-aware-optimizer",
                "--overlap-cpu-optimizer-d2h-h2d"]
    return out


def split_flags(num_layers: int, parallel: ParallelConfig) -> list[str]:
    """The flags that make Megatron-LM cut the layers as ``parallel.stage_layers`` (``[]`` for the even split):
    --decoder-first/last-pipeline-num-layers or --account-for-* where they do, else the layout."""
    if parallel.stage_layers is None:
        return []
    pp, vpp, split = parallel.pp, parallel.vpp, parallel.stage_layers
    stage = [sum(split[s::pp]) for s in range(pp)]
    tries: list[tuple[dict[str, Any], list[str]]] = [
        ({"embedding": e, "loss": lo}, ["--account-for-embedding-in-pipeline-split"] * e
         + ["--account-for-loss-in-pipeline-split"] * lo) for e in (True, False) for lo in (True, False) if e or lo]
    for f, lst in ((stage[0], None), (None, stage[-1]), (stage[0], stage[-1])):
        tries.append(({"first": f, "last": lst},
                      (["--decoder-first-pipeline-num-layers", str(f)] if f is not None else [])
                      + (["--decoder-last-pipeline-num-layers", str(lst)] if lst is not None else [])))
    for kwargs, flags in tries:
        try:
            if megatron_split(num_layers, pp, vpp, **kwargs) == tuple(split):
                return flags
        except ConfigError:
            continue
    chunks = ["t" * n for n in split]
    chunks[0], chunks[-1] = "E" + chunks[0], chunks[-1] + "L"
    return ["--pipeline-model-parallel-layout", "|".join(chunks)]


def _parallel_flags(parallel: ParallelConfig, num_layers: int) -> list[str]:
    out = ["--tensor-model-parallel-size", str(parallel.tp), "--pipeline-model-parallel-size", str(parallel.pp)]
    split = split_flags(num_layers, parallel)
    if parallel.vpp > 1 and "--pipeline-model-parallel-layout" not in split:  # a layout fixes the virtual stages
        out += ["--num-virtual-stages-per-pipeline-rank", str(parallel.vpp)]
    if parallel.microbatch_group_size is not None:
        out += ["--microbatch-group-size-per-virtual-pipeline-stage", str(parallel.microbatch_group_size)]
    out += split
    out += ["--context-parallel-size", str(parallel.cp)]
    out += ["--expert-tensor-parallel-size", str(parallel.etp)] if parallel.etp is not None else []
    return out + (["--expert-model-parallel-size", str(parallel.ep)] if parallel.ep > 1 else [])


def _blockers(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> list[tuple[bool, str, object, str]]:
    """(blocked, field, value, why) for everything Megatron-LM's flags cannot reproduce."""
    moe_shared = model.moe.num_shared_experts if model.moe else 0
    scaling = model.rope_scaling
    fsdp = training.zero_stage == 3
    return [
        (model.mlp is MLPKind.RELU, "model.mlp", model.mlp.value, "Megatron has no plain ReLU MLP flag"),
        (model.parallel_block, "model.parallel_block", True, "Megatron has no parallel attention/MLP block"),
        (model.embedding_norm, "model.embedding_norm", True, "Megatron has no embedding norm"),
        (not model.final_norm, "model.final_norm", False, "Megatron always has a final norm"),
        (not model.lm_head, "model.lm_head", False, "Megatron always has the language-model head"),
        (model.linear_bias and not model.qkv_bias, "model.linear_bias", True,
         "Megatron cannot have output/MLP biases without qkv biases"),
        (moe_shared > 1, "model.moe.num_shared_experts", moe_shared, "Megatron has one shared-expert MLP"),
        (model.arch is ArchKind.ENCODER and model.type_vocab_size != (2 if model.pooler else 0),
         "model.type_vocab_size", model.type_vocab_size,
         "Megatron's BERT has 2 token types with the binary head, else none"),
        (model.arch is ArchKind.DECODER and (model.pooler or model.type_vocab_size > 0), "model.pooler",
         model.pooler, "Megatron's GPT has no pooler or token types"),
        (model.position_embedding is PositionEmbedding.ROTARY and not float(model.rope_theta).is_integer(),
         "model.rope_theta", model.rope_theta, "Megatron's --rotary-base takes an integer"),
        (scaling is not None and not (
            (scaling.kind == "llama3" and all(getattr(scaling, k) == v for k, v in LLAMA3_ROPE.items()))
            or (scaling.kind == "linear" and float(scaling.factor or 0).is_integer())),
         "model.rope_scaling", scaling and scaling.kind,
         "Megatron scales rotary frequencies as Llama 3 does (low 1, high 4, original 8192) or by an integer "
         "interpolation factor"),
        (training.precision not in PRECISION_SWITCHES, "training.precision", training.precision.value,
         "Megatron runs fp32, bf16/fp16/fp8 mixed precision"),
        (training.optimizer is Optimizer.ADAM_8BIT, "training.optimizer", training.optimizer.value,
         "Megatron's optimizers are adam and sgd"),
        (training.zero_stage == 2, "training.zero_stage", 2,
         "Megatron shards with the distributed optimizer (ZeRO-1) or FSDP2 (ZeRO-3)"),
        (fsdp and model.tied_embeddings, "training.zero_stage", 3,
         "Megatron's FSDP2 requires --untie-embeddings-and-output-weights, and untying would add the output "
         "matrix the model does not have"),
        (fsdp and parallel.pp > 1, "training.zero_stage", 3, "Megatron's FSDP2 does not run with pipeline parallelism"),
        (fsdp and parallel.ep > 1, "training.zero_stage", 3, "Megatron's FSDP2 does not run with expert parallelism"),
        (fsdp and training.distributed_optimizer, "training.zero_stage", 3,
         "Megatron's FSDP2 does not run with the distributed optimizer"),
        (fsdp and training.precision.value.startswith("fp16"), "training.zero_stage", 3,
         "Megatron's FSDP2 does not run fp16 yet"),
        (training.attention in (Attention.SDPA, Attention.TRITON), "training.attention", training.attention.value,
         "Megatron's backends are flash/fused or unfused"),
        (parallel.schedule.value == "gpipe", "parallel.schedule", parallel.schedule.value,
         "Megatron runs 1F1B or interleaved 1F1B"),
        (training.offload_optimizer is not OffloadDevice.NONE and training.effective_zero_stage != 1,
         "training.offload_optimizer", training.offload_optimizer.value,
         "this writer offloads the optimizer with the distributed optimizer only (the precision-aware optimizer "
         "path Megatron-Core's HybridDeviceOptimizer reuses); plan with distributed_optimizer=True"),
        (training.activation_offload_layers > 0, "training.activation_offload_layers",
         training.activation_offload_layers, "Megatron's --cpu-offloading is not written: the plan's time does not "
         "charge activation offload"),
    ]


def _check_expressible(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> None:
    """Raise ConfigError naming the first field Megatron-LM's flags cannot reproduce."""
    for blocked, field, value, why in _blockers(model, training, parallel):
        if blocked:
            hint = ("plan with --framework megatron (distributed optimizer), or use the deepspeed adapter"
                    if field == "training.zero_stage" else None)
            raise ConfigError(f"{field}={value!r} cannot be written as Megatron-LM flags: {why}", field=field,
                              value=value, hint=hint)
