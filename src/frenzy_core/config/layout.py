"""Checks that a model, a recipe and a parallel layout fit together."""

from __future__ import annotations

from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError

__all__ = ["global_batch_size", "num_microbatches", "validate_layout"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def global_batch_size(training: TrainingConfig, parallel: ParallelConfig) -> int:
    """Samples per optimizer step (default: one micro-batch per data-parallel rank)."""
    if training.global_batch_size is None:
        return training.micro_batch_size * parallel.dp
    return training.global_batch_size


def num_microbatches(training: TrainingConfig, parallel: ParallelConfig) -> int:
    """Micro-batches each data-parallel rank runs per optimizer step (gradient accumulation steps)."""
    return global_batch_size(training, parallel) // (training.micro_batch_size * parallel.dp)


def validate_layout(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> None:
    """Raise :class:`ConfigError` naming the fields when the three configs cannot run together."""
    tp, pp = parallel.tp, parallel.pp
    if model.num_attention_heads % tp != 0:
        raise ConfigError(
            f"num_attention_heads={model.num_attention_heads} is not divisible by tp={tp}",
            field="parallel.tp", value=tp, hint=f"use tp in {_divisors(model.num_attention_heads)}",
        )
    if model.num_kv_heads % tp != 0:
        raise ConfigError(
            f"num_kv_heads={model.num_kv_heads} is not divisible by tp={tp} (Megatron splits key/value "
            "groups across tensor-parallel ranks)",
            field="parallel.tp", value=tp, hint=f"use tp in {_divisors(model.num_kv_heads)}",
        )
    if model.num_layers < pp * parallel.vpp:
        raise ConfigError(
            f"num_layers={model.num_layers} is fewer than pp x vpp = {pp * parallel.vpp} pipeline chunks",
            field="parallel.pp", value=pp, hint=f"use pp x vpp <= {model.num_layers}",
        )
    if parallel.ep > 1 and model.moe is None:
        raise ConfigError(f"ep={parallel.ep} needs a mixture-of-experts model", field="parallel.ep",
                          value=parallel.ep, hint="set ep=1 for dense models")
    if model.moe is not None and model.moe.num_experts % parallel.ep != 0:
        raise ConfigError(
            f"moe.num_experts={model.moe.num_experts} is not divisible by ep={parallel.ep}",
            field="parallel.ep", value=parallel.ep, hint=f"use ep in {_divisors(model.moe.num_experts)}",
        )
    if parallel.cp > 1 and training.seq_len % (2 * parallel.cp) != 0:
        raise ConfigError(
            f"seq_len={training.seq_len} is not divisible by 2 x cp = {2 * parallel.cp} (context parallelism "
            "splits each sequence into 2 x cp chunks)",
            field="training.seq_len", value=training.seq_len,
        )
    if model.position_embedding is PositionEmbedding.LEARNED and training.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"seq_len={training.seq_len} exceeds the learned position table of "
            f"max_position_embeddings={model.max_position_embeddings}",
            field="training.seq_len", value=training.seq_len,
            hint=f"use seq_len <= {model.max_position_embeddings}",
        )
    per_step = training.micro_batch_size * parallel.dp
    if training.global_batch_size is not None and training.global_batch_size % per_step != 0:
        raise ConfigError(
            f"global_batch_size={training.global_batch_size} is not divisible by micro_batch_size x dp = "
            f"{training.micro_batch_size} x {parallel.dp} = {per_step}",
            field="training.global_batch_size", value=training.global_batch_size,
            hint=f"use a multiple of {per_step}",
        )
    if parallel.vpp > 1 and num_microbatches(training, parallel) % pp != 0:
        raise ConfigError(
            f"the interleaved schedule needs the number of micro-batches "
            f"({num_microbatches(training, parallel)}) to be a multiple of pp={pp}",
            field="training.global_batch_size", value=training.global_batch_size,
        )
