"""Hugging Face ``config.json`` <-> :class:`ModelConfig`, without importing ``transformers``.

One :class:`HFFamily` record per ``model_type`` (its classes, its :class:`ModuleLayout`, its reader and writer side by
side, in the lineage modules of this package) and one ordered list of them, :data:`FAMILIES`. Readers follow the
modules of that family in ``transformers`` 5.x (``models/<family>/modeling_<family>.py``); writers are their inverse,
and a written config is read back and compared, so :func:`to_hf_config` never returns a config that builds a
different model. Nothing here builds a model class itself: :meth:`ModelConfig.from_hf_config` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.registry import (
    FAMILIES,
    SUPPORTED_HF_FAMILIES,
    family,
    hf_family_of,
    module_layout,
    write_hf_config,
)

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES", "SUPPORTED_HF_FAMILIES", "HFFamily", "ModuleLayout", "family", "hf_family_of",
           "model_from_hf_config", "module_layout", "to_hf_config"]


def model_from_hf_config(config: dict[str, Any] | str | Path) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face config (dict, ``config.json`` path, or its folder).

    ``model_type`` picks the family, ``architectures`` the head (``...ForCausalLM``/``BertForMaskedLM`` or the
    bare ``...Model``). Nothing is downloaded and no remote code runs. Same as :meth:`ModelConfig.from_hf_config`.
    """
    from frenzy_core.config.model import ModelConfig  # the model module imports this package, not the reverse

    return ModelConfig.from_hf_config(config)


def to_hf_config(model: ModelConfig) -> dict[str, Any]:
    """The config dict of the family whose own class builds ``model`` (see :func:`write_hf_config`)."""
    return write_hf_config(model)
