"""BERT: the encoder family."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import ArchKind, MLPKind, NormKind, PositionEmbedding
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.source import Fields, HFSource, plain_mlp

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES"]


def _read_bert(src: HFSource, lm_head: bool) -> Fields:
    # BertForMaskedLM: BertModel without pooler plus the MLM head; BertModel: with pooler, no head.
    return {
        "arch": ArchKind.ENCODER,
        "num_layers": src.req_layers("num_hidden_layers"),
        "hidden_size": src.req_int("hidden_size"),
        "num_attention_heads": src.req_int("num_attention_heads"),
        "ffn_hidden_size": src.req_int("intermediate_size"),
        "mlp": plain_mlp(src, "hidden_act", "gelu"),
        "norm": NormKind.LAYERNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.get_int("max_position_embeddings", 512),
        "position_embedding": PositionEmbedding.LEARNED,
        "type_vocab_size": src.get_int("type_vocab_size", 2),
        "tied_embeddings": src.get_bool("tie_word_embeddings", True),
        "qkv_bias": True,
        "linear_bias": True,
        "embedding_norm": True,
        "final_norm": False,
        "pooler": not lm_head,
        "hidden_dropout": src.get_float("hidden_dropout_prob", 0.1),
        "attention_dropout": src.get_float("attention_probs_dropout_prob", 0.1),
    }


def _write_bert(model: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "intermediate_size": model.ffn_hidden_size,
        "hidden_act": "relu" if model.mlp is MLPKind.RELU else "gelu",
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "type_vocab_size": model.type_vocab_size,
        "tie_word_embeddings": model.tied_embeddings,
        "hidden_dropout_prob": model.hidden_dropout,
        "attention_probs_dropout_prob": model.attention_dropout,
    }


FAMILIES = (HFFamily("bert", "BertForMaskedLM", "BertModel", ModuleLayout.BERT, _read_bert, _write_bert),)
"""The encoder family."""
