"""The model preset files (``frenzy_core/data/models/*.yaml``) as plain data: one home for reading them.

:meth:`ModelConfig.preset` validates an entry into a model; :mod:`frenzy_core.config.presets` adds the published
parameter count and source. Neither this module nor the files know the model class.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from frenzy_core._data import data_yaml_files
from frenzy_core.errors import ConfigError, UnknownNameError, require_name

__all__ = ["PresetFile", "model_preset_file", "model_preset_names"]

_META_KEYS = ("published_params", "source", "pretrain_batch_tokens", "pretrain_batch_source")


@dataclass(frozen=True)
class PresetFile:
    """One preset file: the model's fields and what they are checked against."""

    name: str
    fields: dict[str, Any]
    """The ``ModelConfig`` fields, ``name`` included."""
    published_params: int
    """Parameter count as published (model card or paper)."""
    source: str
    """Where the architecture and the count come from."""
    pretrain_batch_tokens: int | None = None
    """Tokens per optimizer step of the model's published pre-training run, where the paper gives one."""
    pretrain_batch_source: str | None = None
    """Where ``pretrain_batch_tokens`` comes from (paper, table or section, and how it was read)."""


@functools.lru_cache(maxsize=1)
def _load_all() -> dict[str, PresetFile]:
    out: dict[str, PresetFile] = {}
    for name, file_name, data in data_yaml_files("models"):
        meta = {k: data.pop(k, None) for k in _META_KEYS}
        if meta["published_params"] is None or meta["source"] is None:
            raise ConfigError(f"model preset file {file_name} lacks published_params or source")
        if (meta["pretrain_batch_tokens"] is None) != (meta["pretrain_batch_source"] is None):
            raise ConfigError(f"model preset file {file_name}: pretrain_batch_tokens and pretrain_batch_source "
                              "go together")
        data.setdefault("name", name)
        out[name] = PresetFile(name=name, fields=data, published_params=int(meta["published_params"]),
                               source=str(meta["source"]), pretrain_batch_tokens=meta["pretrain_batch_tokens"],
                               pretrain_batch_source=meta["pretrain_batch_source"])
    return out


def model_preset_names() -> list[str]:
    """Names of the built-in model presets, sorted."""
    return sorted(_load_all())


def model_preset_file(name: str) -> PresetFile:
    """The preset file called ``name`` (case and surrounding spaces ignored)."""
    presets = _load_all()
    key = require_name("model preset", name).strip().lower()
    if key not in presets:
        raise UnknownNameError("model preset", name, presets)
    return presets[key]
