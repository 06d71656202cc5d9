"""Built-in model presets, one YAML file each under ``frenzy_core/data/models/``."""

from __future__ import annotations

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.preset_files import model_preset_file, model_preset_names

__all__ = ["ModelPreset", "load_model_preset", "model_preset_info", "model_preset_names"]


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


def model_preset_info(name: str) -> ModelPreset:
    """The preset with its published parameter count and source."""
    entry = model_preset_file(name)
    return ModelPreset(name=entry.name, model=ModelConfig.preset(entry.name), published_params=entry.published_params,
                       source=entry.source, pretrain_batch_tokens=entry.pretrain_batch_tokens,
                       pretrain_batch_source=entry.pretrain_batch_source)


def load_model_preset(name: str) -> ModelConfig:
    """The :class:`ModelConfig` of a built-in preset."""
    return ModelConfig.preset(name)
