"""A ``config.json`` being read: typed access to its keys, and errors that name the key and the file.

Also the readings several families share (activations, rotary share, sliding windows, the common Llama-like
fields). Nothing here knows the model class: readers return :class:`ModelConfig` fields as a dict.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from frenzy_core import _limits as limits
from frenzy_core._files import is_dir, is_file, load_json, read_text
from frenzy_core._limits import beyond_message
from frenzy_core.config.architecture import ArchKind, MLPKind, NormKind, PositionEmbedding
from frenzy_core.errors import ConfigError, short_repr

__all__ = ["Fields", "HFSource", "gated_mlp", "load_source", "plain_mlp", "rotary_decoder", "rotary_fraction",
           "sliding_window"]

Fields = dict[str, Any]
"""``ModelConfig`` fields as a reader returns them."""


class HFSource:
    """A config.json dict plus where it came from, so that every error names the file and the key."""

    def __init__(self, data: dict[str, Any], origin: str, folder_name: str | None = None):
        self.data = data
        self.origin = origin
        self.folder_name = folder_name

    def fail(self, message: str, *, field: str, value: object, hint: str) -> ConfigError:
        """A ConfigError about ``field`` of this file."""
        return ConfigError(f"{self.origin}: {message}", field=field, value=value, hint=hint)

    def req(self, key: str) -> Any:
        """A key the config must have."""
        if self.data.get(key) is None:
            raise self.fail(f"required key {key!r} is missing (model_type {short_repr(self.data.get('model_type'))})",
                            field=key, value=None, hint=f"add {key!r} as in the model's published config.json")
        return self.data[key]

    def get(self, key: str, default: Any) -> Any:
        """An optional key; ``default`` is transformers' default for the family when absent or null."""
        value = self.data.get(key)
        return default if value is None else value

    def req_int(self, key: str) -> int:
        """A whole number the config must have."""
        return self._int(key, self.req(key))

    def req_layers(self, key: str) -> int:
        """The layer count, refused above :data:`frenzy_core._limits.LAYERS` as soon as it is read: family readers
        build per-layer lists from it (sliding-window and MoE patterns) before ``ModelConfig`` checks its fields."""
        n = self.req_int(key)
        if n > limits.LAYERS.high:
            raise self.fail(beyond_message(n, limits.LAYERS, key), field=key, value=n,
                            hint=f"give {key} as at most {int(limits.LAYERS.high):,}")
        return n

    def get_int(self, key: str, default: int) -> int:
        """An optional whole number (``default`` when absent or null)."""
        return self._int(key, self.get(key, default))

    def opt_int(self, key: str) -> int | None:
        """A whole number that may be null or absent."""
        value = self.data.get(key)
        return None if value is None else self._int(key, value)

    def _int(self, key: str, value: Any) -> int:
        # bool is an int subclass and 2.7 would truncate silently: both are mistakes in a config.json; a float
        # beyond 2^53 is not a count anyone wrote, and NaN or infinity none at all.
        whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer()
                                           and abs(value) <= 2**53)
        if isinstance(value, bool) or not whole:
            raise self.fail(f"{key}={short_repr(value)} is not a whole number", field=key, value=value,
                            hint=f"give {key} as an integer")
        return int(value)

    def get_float(self, key: str, default: float) -> float:
        """An optional number."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"{key}={short_repr(value)} is not a number", field=key, value=value,
                            hint=f"give {key} as a number")
        if not math.isfinite(value):
            raise self.fail(f"{key}={value} is not a finite number", field=key, value=value,
                            hint=f"give {key} as a number")
        return float(value)

    def opt_float(self, key: str, default: float | None = None) -> float | None:
        """A number that may be null (None); ``default`` when the key is absent."""
        if key not in self.data:
            return default
        return None if self.data[key] is None else self.get_float(key, 0.0)

    def get_bool(self, key: str, default: bool) -> bool:
        """An optional true/false (a string such as "false" is a mistake, not True)."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"{key}={short_repr(value)} is not true or false", field=key, value=value,
                            hint=f"give {key} as a JSON boolean")
        return value

    def get_str(self, key: str, default: str) -> str:
        """An optional string."""
        value = self.get(key, default)
        if not isinstance(value, str):
            raise self.fail(f"{key}={short_repr(value)} is not a string", field=key, value=value, hint=f"give {key} as a string")
        return value

    def get_list(self, key: str) -> list[Any]:
        """An optional list (empty when absent or null)."""
        value = self.get(key, [])
        if not isinstance(value, list):
            raise self.fail(f"{key}={short_repr(value)} is not a list", field=key, value=value, hint=f"give {key} as a list")
        return value

    def get_int_list(self, key: str) -> list[int]:
        """An optional list of whole numbers (empty when absent or null)."""
        return [self._int(f"{key}[{i}]", v) for i, v in enumerate(self.get_list(key))]

    def get_dict(self, key: str) -> dict[str, Any]:
        """An optional mapping (empty when absent or null)."""
        value = self.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"{key}={short_repr(value)} is not a mapping", field=key, value=value,
                            hint=f"give {key} as a JSON object")
        return value

    def sub(self, key: str, defaults: dict[str, Any]) -> HFSource:
        """A nested config (Gemma 3's ``text_config``) with transformers' defaults for the keys it leaves out."""
        return HFSource({**defaults, **self.get_dict(key)}, f"{self.origin} ({key})", self.folder_name)

    def architecture(self, default: str) -> str:
        """The model class named by ``architectures`` (its first entry), or the family's usual one."""
        archs = self.data.get("architectures") or [default]
        if isinstance(archs, str):
            archs = [archs]
        if not isinstance(archs, list) or not archs:
            raise self.fail(f"architectures={short_repr(archs)} is not a list of class names", field="architectures",
                            value=archs, hint='e.g. "architectures": ["LlamaForCausalLM"]')
        return str(archs[0])


def load_source(config: dict[str, Any] | str | os.PathLike[str]) -> HFSource:
    """A config given as a dict, a ``config.json`` path, or the folder holding one."""
    if isinstance(config, dict):
        return HFSource(config, "config dict")
    if not isinstance(config, (str, os.PathLike)):
        raise ConfigError(f"a Hugging Face config must be a dict or a path, got {type(config).__name__}",
                          field="config", value=config, hint="pass a config.json file, a folder holding one, or a dict")
    path = Path(config)
    folder_name = None
    if is_dir(path):
        folder_name = path.resolve().name
        path = path / "config.json"
    if not is_file(path):
        raise ConfigError(f"no Hugging Face config at {path}", field="config", value=str(config),
                          hint="pass a config.json file, a folder holding one, or the parsed dict")
    try:
        data = load_json(read_text(path, "Hugging Face config"), str(path))
    except ConfigError as exc:
        raise ConfigError(str(exc), field="config", value=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}", field="config",
                          value=str(path))
    return HFSource(data, str(path), folder_name)


def gated_mlp(src: HFSource, key: str, default: str) -> MLPKind:
    """A gated MLP from its activation name: SiLU gates (SwiGLU) or GeLU gates (GeGLU)."""
    act = src.get_str(key, default)
    if act in ("silu", "swish"):
        return MLPKind.SWIGLU
    if act.startswith("gelu"):
        return MLPKind.GEGLU
    raise src.fail(f"{key}={act!r} is not supported for a gated MLP", field=key, value=act,
                   hint="use 'silu' (SwiGLU) or a 'gelu' variant (GeGLU)")


def plain_mlp(src: HFSource, key: str, default: str) -> MLPKind:
    """A two-matrix MLP from its activation name."""
    act = src.get_str(key, default)
    if act.startswith("gelu"):
        return MLPKind.GELU
    if act == "relu":
        return MLPKind.RELU
    raise src.fail(f"{key}={act!r} is not supported", field=key, value=act, hint="use a 'gelu' variant or 'relu'")


def rotary_fraction(src: HFSource, default: float) -> float:
    """The share of each head rotary embeddings rotate, from any spelling the releases use.

    Transformers 5 keeps it in ``rope_parameters["partial_rotary_factor"]``; earlier config.json files have a
    top-level ``partial_rotary_factor`` (Phi-2, StableLM, Phi-3) or GPT-NeoX's ``rotary_pct``.
    """
    rope = src.get_dict("rope_parameters")
    if rope.get("partial_rotary_factor") is not None:
        value = rope["partial_rotary_factor"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise src.fail(f"rope_parameters.partial_rotary_factor={short_repr(value)} is not a number",
                           field="rope_parameters", value=value, hint="give it as a number in (0, 1]")
        return float(value)
    for key in ("partial_rotary_factor", "rotary_pct"):
        if src.data.get(key) is not None:
            return src.get_float(key, default)
    return default


def sliding_window(src: HFSource, num_layers: int, *, enabled: bool, default_local: list[bool] | None = None,
                   per_layer: bool = True, default_window: int | None = None) -> Fields:
    """``sliding_window`` and ``sliding_window_layers`` as the family's attention modules use them.

    A layer is local when ``layer_types`` (Transformers 5; read only where the family's attention reads them,
    ``per_layer``) says ``sliding_attention``, or else when the family's own rule (``default_local``; None: every
    layer) says so, and only while ``enabled`` (Qwen's ``use_sliding_window``) and a window is given.
    """
    window = src.opt_int("sliding_window") if "sliding_window" in src.data else default_window
    if not enabled or not window:
        return {}
    types = src.get_list("layer_types") if per_layer else []
    if types:
        if len(types) != num_layers or any(t not in ("sliding_attention", "full_attention") for t in types):
            raise src.fail(f"layer_types={short_repr(types)} is not one of 'sliding_attention' / 'full_attention' per layer",
                           field="layer_types", value=types, hint=f"give {num_layers} entries")
        local = [t == "sliding_attention" for t in types]
    else:
        local = default_local if default_local is not None else [True] * num_layers
    layers = tuple(i for i, is_local in enumerate(local) if is_local)
    if not layers:
        return {}
    return {"sliding_window": window, "sliding_window_layers": None if len(layers) == num_layers else layers}


def rotary_decoder(src: HFSource, *, mlp: MLPKind, qkv_bias: bool, linear_bias: bool, tied_default: bool,
                   head_dim: int | None = None, hidden_dropout: float = 0.0) -> Fields:
    """Fields shared by the Llama-like families: RMSNorm, rotary positions, gated MLP."""
    hidden = src.req_int("hidden_size")
    heads = src.req_int("num_attention_heads")
    return {
        "arch": ArchKind.DECODER,
        "num_layers": src.req_layers("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": src.get_int("num_key_value_heads", heads),
        "head_dim": src.get_int("head_dim", head_dim or (hidden // heads if heads > 0 else 0)),
        "ffn_hidden_size": src.req_int("intermediate_size"),
        "mlp": mlp,
        "norm": NormKind.RMSNORM,
        "vocab_size": src.req_int("vocab_size"),
        "max_position_embeddings": src.get_int("max_position_embeddings", 2048),
        "position_embedding": PositionEmbedding.ROTARY,
        "tied_embeddings": src.get_bool("tie_word_embeddings", tied_default),
        "qkv_bias": qkv_bias,
        "linear_bias": linear_bias,
        "hidden_dropout": hidden_dropout,
        "attention_dropout": src.get_float("attention_dropout", 0.0),
    }
