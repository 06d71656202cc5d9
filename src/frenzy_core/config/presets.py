"""Built-in model presets, one YAML file each under ``frenzy_core/data/models/``."""

from __future__ import annotations

import functools

from frenzy_core._base import FrozenModel
from frenzy_core._data import data_yaml_files
from frenzy_core.config.model import ModelConfig
from frenzy_core.errors import ConfigError, UnknownNameError, require_name

__all__ = ["ModelPreset", "load_model_preset", "model_preset_info", "model_preset_names"]

_META_KEYS = ("published_params", "source", "pretrain_batch_tokens", "pretrain_batch_source")


class ModelPreset(FrozenModel):
    """A preset: the configuration plus the published parameter count it is checked against."""

    name: str
    model: ModelConfig
    published_params: int
    """Parameter count as published (model card or paper)."""
    source: str
    """Where the architecture and the count come from."""
    pretrain_batch_tokens: int | None = None
    """Tokens per optimizer step of the model's published pre-training run, where the paper gives one."""
    pretrain_batch_source: str | None = None
    """Where ``pretrain_batch_tokens`` comes from (paper, table or section, and how it was read)."""


@functools.lru_cache(maxsize=1)
def _load_all() -> dict[str, ModelPreset]:
    out: dict[str, ModelPreset] = {}
    for name, file_name, data in data_yaml_files("models"):
        meta = {k: data.pop(k, None) for k in _META_KEYS}
        if meta["published_params"] is None or meta["source"] is None:
            raise ConfigError(f"model preset file {file_name} lacks published_params or source")
        if (meta["pretrain_batch_tokens"] is None) != (meta["pretrain_batch_source"] is None):
            raise ConfigError(f"model preset file {file_name}: pretrain_batch_tokens and pretrain_batch_source "
                              "go together")
        data.setdefault("name", name)
        out[name] = ModelPreset(name=name, model=ModelConfig.model_validate(data), published_params=int(
            meta["published_params"]), source=str(meta["source"]),
            pretrain_batch_tokens=meta["pretrain_batch_tokens"], pretrain_batch_source=meta["pretrain_batch_source"])
    return out


def model_preset_names() -> list[str]:
    """Names of the built-in model presets, sorted."""
    return sorted(_load_all())


def model_preset_info(name: str) -> ModelPreset:
    """The preset with its published parameter count and source."""
    presets = _load_all()
    key = require_name("model preset", name).strip().lower()
    if key not in presets:
        raise UnknownNameError("model preset", name, presets)
    return presets[key]


def load_model_preset(name: str) -> ModelConfig:
    """The :class:`ModelConfig` of a built-in preset."""
    return model_preset_info(name).model
