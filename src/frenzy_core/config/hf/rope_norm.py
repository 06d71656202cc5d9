"""Hugging Face keys that every family spells alike or nearly: the rotary base and scaling, the norm epsilon.

They change no parameter count or memory, but a launcher that builds the model (Megatron-LM) must reproduce
them, so the registry's ``read_model`` reads them for every family and ``write_hf_config`` writes them back.
Transformers 5 writes ``rope_parameters`` (``{"rope_type", "rope_theta", ...}``); 4.x wrote ``rope_theta`` and
``rope_scaling`` (GPT-NeoX: ``rotary_emb_base``); both are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import PositionEmbedding, RopeScaling
from frenzy_core.errors import ConfigError

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["read_rope_norm", "write_rope_norm"]

_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")
"""Where families keep the norm epsilon (Llama-like: rms_norm_eps; BERT/GPT-NeoX: layer_norm_eps; GPT-2:
layer_norm_epsilon)."""

_EPS_KEY_WRITTEN: dict[str, str | None] = {"gpt2": "layer_norm_epsilon", "gpt_neox": "layer_norm_eps",
                                           "bert": "layer_norm_eps", "opt": None, "falcon": "layer_norm_epsilon",
                                           "phi": "layer_norm_eps", "stablelm": "layer_norm_eps",
                                           "starcoder2": "norm_epsilon"}
"""The key each family's writer uses (default rms_norm_eps); OPT has none (nn.LayerNorm's 1e-5, fixed)."""

_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _scaling(raw: dict[str, Any], origin: str) -> RopeScaling | None:
    kind = raw.get("rope_type", raw.get("type", "default"))
    if kind in (None, "default"):
        return None
    try:
        return RopeScaling(kind=kind, **{k: raw[k] for k in _SCALING_KEYS if raw.get(k) is not None})
    except ConfigError as exc:
        raise ConfigError(f"{origin}: rope scaling {raw!r} is not supported: {exc}", field="rope_scaling",
                          value=raw, hint="rope_type linear, dynamic, yarn, llama3 or longrope with a factor") from None


def read_rope_norm(data: dict[str, Any], position: PositionEmbedding, origin: str) -> dict[str, Any]:
    """``rope_theta``, ``rope_scaling`` and ``norm_eps`` fields from a config dict (absent keys: the defaults)."""
    out: dict[str, Any] = {}
    eps = next((data[k] for k in _EPS_KEYS if data.get(k) is not None), None)
    if eps is not None:
        out["norm_eps"] = eps
    if position is not PositionEmbedding.ROTARY:
        return out
    params = data.get("rope_parameters")
    legacy = data.get("rope_scaling")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    theta = theta if theta is not None else data.get("rope_theta", data.get("rotary_emb_base"))
    if theta is not None:
        out["rope_theta"] = theta
    scaling = params if isinstance(params, dict) else legacy if isinstance(legacy, dict) else None
    if scaling is not None:
        out["rope_scaling"] = _scaling(scaling, origin)
    return out


def write_rope_norm(model: ModelConfig, family: str) -> dict[str, Any]:
    """The keys :func:`read_rope_norm` reads back, in the spelling ``family``'s config class takes."""
    out: dict[str, Any] = {}
    eps_key = _EPS_KEY_WRITTEN.get(family, "rms_norm_eps")
    if eps_key is not None:
        out[eps_key] = model.norm_eps
    if model.position_embedding is PositionEmbedding.ROTARY:
        out["rotary_emb_base" if family == "gpt_neox" else "rope_theta"] = model.rope_theta
        if model.rope_scaling is not None:
            s = model.rope_scaling
            out["rope_scaling"] = {"rope_type": s.kind, **s.model_dump(exclude={"kind"}, exclude_none=True)}
    return out
