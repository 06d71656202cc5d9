"""Write the three configs as a Megatron-LM command line that :func:`from_megatron_args` reads back."""

from __future__ import annotations

from frenzy_core.config.model import ArchKind, MLPKind, ModelConfig, NormKind, PositionEmbedding
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import Attention, Optimizer, Precision, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError

__all__ = ["to_megatron_args"]


def to_megatron_args(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> list[str]:
    """A Megatron-LM command line that :func:`from_megatron_args` reads back to the same three configs.

    The vocabulary is written as ``--vocab-size`` (already padded) with ``--make-vocab-size-divisible-by 1``;
    tokenizer and data flags are left to the caller. ``model.name`` is not written. ``zero_stage=1`` is
    written as ``--use-distributed-optimizer`` (read back as ``distributed_optimizer=True``) and
    ``Optimizer.ADAM`` as Megatron's adam (read back as ADAMW); ``framework`` and ``optimizer_impl`` describe
    Megatron's runtime and are not written.
    """
    _check_expressible(model, training, parallel)
    out: list[str] = []

    def add(flag: str, value: object = None) -> None:
        out.append(flag)
        if value is not None:
            out.append(str(value))

    add("--num-layers", model.num_layers)
    add("--hidden-size", model.hidden_size)
    add("--num-attention-heads", model.num_attention_heads)
    add("--ffn-hidden-size", model.ffn_hidden_size)
    add("--kv-channels", model.head_dim)
    if model.num_kv_heads != model.num_attention_heads:
        add("--group-query-attention")
        add("--num-query-groups", model.num_kv_heads)
    if model.mlp is MLPKind.SWIGLU:
        add("--swiglu")
    elif model.mlp is MLPKind.SQUARED_RELU:
        add("--squared-relu")
    elif model.mlp is MLPKind.GEGLU:
        add("--quick-geglu")
    add("--normalization", "RMSNorm" if model.norm is NormKind.RMSNORM else "LayerNorm")
    add(
        "--position-embedding-type",
        {
            PositionEmbedding.LEARNED: "learned_absolute",
            PositionEmbedding.ROTARY: "rope",
            PositionEmbedding.NONE: "none",
        }[model.position_embedding],
    )
    add("--max-position-embeddings", model.max_position_embeddings)
    add("--vocab-size", model.vocab_size)
    add("--make-vocab-size-divisible-by", 1)
    if not model.tied_embeddings:
        add("--untie-embeddings-and-output-weights")
    if not model.linear_bias:
        add("--disable-bias-linear")
        if model.qkv_bias:
            add("--add-qkv-bias")
    add("--hidden-dropout", model.hidden_dropout)
    add("--attention-dropout", model.attention_dropout)
    if model.qk_norm:
        add("--qk-layernorm")
    if model.arch is ArchKind.ENCODER and not model.pooler:
        add("--bert-no-binary-head")
    if model.moe is not None:
        moe = model.moe
        add("--num-experts", moe.num_experts)
        add("--moe-router-topk", moe.top_k)
        add("--moe-ffn-hidden-size", moe.expert_ffn_hidden_size)
        if moe.shared_expert_ffn_hidden_size:
            add("--moe-shared-expert-intermediate-size", moe.shared_expert_ffn_hidden_size)
        if moe.shared_expert_gate:
            add("--moe-shared-expert-gate")
        if moe.first_dense_layers or moe.layer_interval != 1:
            pattern = [1 if model.is_moe_layer(i) else 0 for i in range(model.num_layers)]
            add("--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]")
        if moe.capacity_factor is not None:
            add("--moe-expert-capacity-factor", moe.capacity_factor)

    add("--seq-length", training.seq_len)
    add("--micro-batch-size", training.micro_batch_size)
    if training.global_batch_size is not None:
        add("--global-batch-size", training.global_batch_size)
    if training.precision is Precision.BF16_MIXED:
        add("--bf16")
    elif training.precision is Precision.FP16_MIXED:
        add("--fp16")
    elif training.precision is Precision.FP8_MIXED:
        add("--bf16")
        add("--fp8-format", "hybrid")
    if training.optimizer is Optimizer.SGD_MOMENTUM or training.optimizer is Optimizer.SGD:
        add("--optimizer", "sgd")
        if training.optimizer is Optimizer.SGD:
            add("--sgd-momentum", 0.0)
    if training.effective_zero_stage == 1:  # Megatron's distributed optimizer is ZeRO-1
        add("--use-distributed-optimizer")
    if training.zero_stage == 3:
        add("--use-torch-fsdp2")
    if training.recompute is Recompute.SELECTIVE:
        add("--recompute-granularity", "selective")
    elif training.recompute is Recompute.FULL:
        add("--recompute-granularity", "full")
        add("--recompute-method", training.recompute_method.value)
        add("--recompute-num-layers", training.recompute_num_layers or 1)
    add("--attention-backend", "unfused" if training.attention is Attention.EAGER else "flash")
    if training.sequence_parallel:
        add("--sequence-parallel")

    add("--tensor-model-parallel-size", parallel.tp)
    add("--pipeline-model-parallel-size", parallel.pp)
    if parallel.vpp > 1:
        add("--num-virtual-stages-per-pipeline-rank", parallel.vpp)
    add("--context-parallel-size", parallel.cp)
    if parallel.ep > 1:
        add("--expert-model-parallel-size", parallel.ep)
    return out


def _check_expressible(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> None:
    """Raise ConfigError naming the first field Megatron-LM's flags cannot reproduce."""
    blockers: list[tuple[str, object, str] | None] = [
        ("model.mlp", model.mlp, "Megatron has no plain ReLU MLP flag")
        if model.mlp is MLPKind.RELU
        else None,
        ("model.parallel_block", True, "Megatron has no parallel attention/MLP block")
        if model.parallel_block
        else None,
        ("model.embedding_norm", True, "Megatron has no embedding norm") if model.embedding_norm else None,
        ("model.final_norm", False, "Megatron always has a final norm") if not model.final_norm else None,
        ("model.lm_head", False, "Megatron always has the language-model head")
        if not model.lm_head
        else None,
        ("model.linear_bias", True, "Megatron cannot have output/MLP biases without qkv biases")
        if model.linear_bias and not model.qkv_bias
        else None,
        ("model.vocab_size", model.vocab_size, f"Megatron needs it divisible by tp={parallel.tp}")
        if model.vocab_size % parallel.tp
        else None,
        (
            "model.moe.num_shared_experts",
            model.moe.num_shared_experts if model.moe else 0,
            "Megatron has one shared-expert MLP",
        )
        if model.moe is not None and model.moe.num_shared_experts > 1
        else None,
        ("training.precision", training.precision.value, "Megatron runs fp32, bf16/fp16/fp8 mixed precision")
        if training.precision
        not in (Precision.FP32, Precision.BF16_MIXED, Precision.FP16_MIXED, Precision.FP8_MIXED)
        else None,
        ("training.optimizer", training.optimizer.value, "Megatron's optimizers are adam and sgd")
        if training.optimizer in (Optimizer.ADAM_8BIT,)
        else None,
        (
            "training.zero_stage",
            training.zero_stage,
            "Megatron shards with the distributed optimizer (ZeRO-1) or FSDP2 (ZeRO-3)",
        )
        if training.zero_stage == 2
        else None,
        ("training.attention", training.attention.value, "Megatron's backends are flash/fused or unfused")
        if training.attention is Attention.SDPA
        else None,
        ("parallel.schedule", parallel.schedule.value, "Megatron runs 1F1B or interleaved 1F1B")
        if parallel.schedule.value == "gpipe"
        else None,
    ]
    if model.arch is ArchKind.ENCODER and model.type_vocab_size != (2 if model.pooler else 0):
        blockers.append(
            (
                "model.type_vocab_size",
                model.type_vocab_size,
                "Megatron's BERT has 2 token types with the binary head, else none",
            )
        )
    if model.arch is ArchKind.DECODER and (model.pooler or model.type_vocab_size):
        blockers.append(("model.pooler", model.pooler, "Megatron's GPT has no pooler or token types"))
    for blocker in blockers:
        if blocker is not None:
            field, value, why = blocker
            raise ConfigError(
                f"{field}={value!r} cannot be written as Megatron-LM flags: {why}", field=field, value=value
            )
