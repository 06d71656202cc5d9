"""Config keys several families' writers share (the inverse of the readings in :mod:`.source`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import MLPKind
from frenzy_core.errors import ConfigError

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["Unwritable", "layer_types", "rotary_keys", "sliding_keys"]


class Unwritable(ConfigError):
    """A family cannot even be written for this model (say, a mixture-of-experts family for a dense model)."""


def rotary_keys(model: ModelConfig) -> dict[str, Any]:
    """The Llama-like keys: sizes, heads, vocabulary, tying, dropout and the gated activation."""
    return {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "intermediate_size": model.ffn_hidden_size,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "tie_word_embeddings": model.tied_embeddings,
        "attention_dropout": model.attention_dropout,
        "hidden_act": "gelu_pytorch_tanh" if model.mlp is MLPKind.GEGLU else "silu",
    }


def layer_types(model: ModelConfig) -> list[str]:
    """Transformers 5's per-layer attention kinds."""
    return ["sliding_attention" if model.is_sliding_window_layer(i) else "full_attention"
            for i in range(model.num_layers)]


def sliding_keys(model: ModelConfig, *, per_layer: bool, switch: str | None = None) -> dict[str, Any]:
    """``sliding_window`` (and ``layer_types`` where the family reads them; ``switch``: Qwen's use_sliding_window)."""
    d: dict[str, Any] = {"sliding_window": model.sliding_window}
    if switch is not None:
        d[switch] = model.sliding_window is not None
    if per_layer:
        d["layer_types"] = layer_types(model)
    return d
