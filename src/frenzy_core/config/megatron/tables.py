"""Megatron-LM flag values <-> our enums, one table per idea, read by both the reader and the writer."""

from __future__ import annotations

from frenzy_core.config.architecture import MLPKind, NormKind, PositionEmbedding
from frenzy_core.config.training import Precision

__all__ = [
    "BERT_WORDPIECE_VOCAB_SIZE",
    "FIELD_FLAGS",
    "GPT2_BPE_VOCAB_SIZE",
    "MAKE_VOCAB_DIVISIBLE_BY",
    "MLP_SWITCHES",
    "NORM_NAMES",
    "POSITION_NAMES",
    "PRECISION_SWITCHES",
    "megatron_padded_vocab_size",
]

GPT2_BPE_VOCAB_SIZE = 50257
"""Tokens of the GPT-2 BPE vocabulary (``gpt2-vocab.json``), Megatron's GPT default (GPT2BPETokenizer)."""

BERT_WORDPIECE_VOCAB_SIZE = 30522
"""Tokens of the BERT uncased WordPiece vocabulary (``bert-large-uncased-vocab.txt``, BertWordPieceLowerCase),
the vocabulary Megatron-LM's BERT examples use; a guess where a command line names only ``--vocab-file``."""

MAKE_VOCAB_DIVISIBLE_BY = 128
"""arguments.py: the ``--make-vocab-size-divisible-by`` default."""

MLP_SWITCHES: dict[MLPKind, str | None] = {
    MLPKind.GELU: None,  # Megatron's default MLP (gelu)
    MLPKind.SWIGLU: "--swiglu",
    MLPKind.SQUARED_RELU: "--squared-relu",
    MLPKind.GEGLU: "--quick-geglu",
    MLPKind.RELU: None,  # no flag: the writer refuses it
}
"""The switch that selects each feed-forward kind (None: the default, or none exists)."""

NORM_NAMES: dict[NormKind, str] = {NormKind.LAYERNORM: "LayerNorm", NormKind.RMSNORM: "RMSNorm"}
"""``--normalization`` values."""

POSITION_NAMES: dict[str, PositionEmbedding] = {
    "learned_absolute": PositionEmbedding.LEARNED,
    "rope": PositionEmbedding.ROTARY,
    "mrope": PositionEmbedding.ROTARY,
    "yarn": PositionEmbedding.ROTARY,
    "none": PositionEmbedding.NONE,
}
"""``--position-embedding-type`` values (the first of each kind is the one written)."""

PRECISION_SWITCHES: dict[Precision, tuple[str, ...]] = {
    Precision.FP32: (),
    Precision.BF16_MIXED: ("--bf16",),
    Precision.FP16_MIXED: ("--fp16",),
    Precision.FP8_MIXED: ("--bf16", "--fp8-format", "hybrid"),
}
"""The tokens of each recipe Megatron runs (Megatron keeps fp32 main weights for --bf16/--fp16: our *-mixed)."""

FIELD_FLAGS: dict[str, str] = {
    "model.num_layers": "--num-layers",
    "model.num_attention_heads": "--num-attention-heads",
    "model.num_kv_heads": "--num-query-groups",
    "model.max_position_embeddings": "--max-position-embeddings",
    "model.moe.num_experts": "--num-experts",
    "training.seq_len": "--seq-length",
    "training.micro_batch_size": "--micro-batch-size",
    "training.global_batch_size": "--global-batch-size",
    "training.recompute_num_layers": "--recompute-num-layers",
    "training.distributed_optimizer": "--use-distributed-optimizer",
    "parallel.dp": "data-parallel size (world / (tp x pp x cp))",
    "parallel.tp": "--tensor-model-parallel-size",
    "parallel.pp": "--pipeline-model-parallel-size",
    "parallel.vpp": "--num-virtual-stages-per-pipeline-rank",
    "parallel.cp": "--context-parallel-size",
    "parallel.ep": "--expert-model-parallel-size",
    "parallel.etp": "--expert-tensor-parallel-size",
}
"""Config field path (as a layout rule names it) -> the Megatron flag that sets it: the reader renders the shared
layout rules (:data:`~frenzy_core.config.layout.LAYOUT_RULES`) in flags through it."""


def megatron_padded_vocab_size(vocab_size: int, tp: int, divisible_by: int = MAKE_VOCAB_DIVISIBLE_BY) -> int:
    """Vocabulary rows as Megatron stores them: padded up to a multiple of ``divisible_by`` x tp.

    Source: ``_vocab_size_with_padding`` in ``megatron/training/tokenizer/tokenizer.py``.
    """
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple
