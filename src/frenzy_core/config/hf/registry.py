"""The one list of Hugging Face families, and reading, writing and matching models through it.

Adding a family is one record in its lineage module (``llama.py``, ``moe.py``, ``gemma.py``, ...); the order of
:data:`FAMILIES` is the order in which :func:`write_hf_config` tries them, most general first.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from frenzy_core.config.architecture import ArchKind, PositionEmbedding
from frenzy_core.config.hf import bert, deepseek, gemma, gpt, llama, ln_rotary, moe
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.rope_norm import read_rope_norm, write_rope_norm
from frenzy_core.config.hf.source import HFSource, load_source
from frenzy_core.config.hf.writing import Unwritable
from frenzy_core.errors import ConfigError, closest_names

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES", "SUPPORTED_HF_FAMILIES", "canonical_fields", "family", "hf_family_of", "module_layout", "read_model",
           "write_hf_config"]

FAMILIES: tuple[HFFamily, ...] = (
    *bert.FAMILIES, *gpt.FAMILIES, *gemma.FAMILIES, *llama.FAMILIES, *moe.FAMILIES, *ln_rotary.FAMILIES,
    *deepseek.FAMILIES,
)
"""Every supported family, in the order :func:`write_hf_config` tries them."""

_BY_TYPE = {f.model_type: f for f in FAMILIES}

SUPPORTED_HF_FAMILIES: tuple[str, ...] = tuple(sorted(_BY_TYPE))
"""``model_type`` values :func:`read_model` reads."""

M = TypeVar("M", bound="ModelConfig")


def family(model_type: str) -> HFFamily:
    """The record of ``model_type``; a ConfigError naming the supported ones and the closest otherwise."""
    record = _BY_TYPE.get(model_type)
    if record is None:
        close = closest_names(model_type, SUPPORTED_HF_FAMILIES)
        closest = f"closest: {', '.join(close)}; " if close else ""
        raise ConfigError(f"unsupported model_type {model_type!r}", field="model_type", value=model_type,
                          hint=f"{closest}supported: {', '.join(SUPPORTED_HF_FAMILIES)}")
    return record


def _fields(src: HFSource, record: HFFamily) -> dict[str, Any]:
    lm_head = record.has_lm_head(src)
    fields = record.read(src, lm_head)
    fields["lm_head"] = lm_head
    fields |= read_rope_norm(src.data, fields.get("position_embedding", PositionEmbedding.LEARNED), src.origin)
    if fields.get("arch", ArchKind.DECODER) is ArchKind.DECODER:
        # Every supported decoder family's config defaults use_cache to true (transformers 5); a reader whose
        # family keeps it elsewhere (Gemma 3's text_config) sets it itself.
        fields.setdefault("returns_kv_cache", src.get_bool("use_cache", True))
    return fields


def read_model(model_class: type[M], config: dict[str, Any] | str | os.PathLike[str] | Path) -> M:
    """A ``model_class`` instance from a Hugging Face config (dict, ``config.json`` path, or its folder)."""
    src = load_source(config)
    model_type = src.req("model_type")
    try:
        record = family(str(model_type))
    except ConfigError as exc:
        raise ConfigError(f"{src.origin}: {exc}", field="model_type", value=model_type) from None
    fields = _fields(src, record)
    name = src.data.get("_name_or_path") or src.folder_name
    try:
        return model_class.model_validate({"name": name or None, **fields})
    except ConfigError as exc:
        raise src.fail(f"{record.model_type} config is not a valid model: {exc}", field=exc.field or "config",
                       value=exc.value, hint="check the sizes against the published config.json") from None


def _written(record: HFFamily, model: ModelConfig) -> dict[str, Any]:
    """The config dict ``record`` writes for ``model`` (Unwritable when it cannot)."""
    if record.write is None:
        raise Unwritable(f"{record.model_type} is read only", field="model_type", value=record.model_type)
    d: dict[str, Any] = {"model_type": record.model_type,
                         "architectures": [record.head_class if model.lm_head else record.bare_class]}
    if model.name:
        d["_name_or_path"] = model.name
    d.update(record.write(model))
    d.update(write_rope_norm(model, record.model_type))
    if model.arch is ArchKind.DECODER:
        d["use_cache"] = model.returns_kv_cache
    return d


def canonical_fields(model: ModelConfig) -> dict[str, Any]:
    """The fields that shape the model's modules: no name, MoE layers as a per-layer pattern, and no dense MLP
    size when every layer is MoE (nothing uses it)."""
    d = model.model_dump(mode="json", exclude={"name"})
    if model.moe is not None:
        for key in ("first_dense_layers", "layer_interval"):
            del d["moe"][key]
        d["moe_layers"] = [model.is_moe_layer(i) for i in range(model.num_layers)]
        if all(d["moe_layers"]):
            del d["ffn_hidden_size"]
    return d


def _differences(model: M, record: HFFamily) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """The config ``record`` writes for ``model`` and the fields in which reading it back differs."""
    d = _written(record, model)
    back = read_model(type(model), d)
    ours, theirs = canonical_fields(model), canonical_fields(back)
    return d, {k: (ours.get(k), theirs.get(k)) for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}


def _match(model: ModelConfig) -> tuple[HFFamily, dict[str, Any] | None, dict[str, tuple[Any, Any]], ConfigError | None]:
    """The first family that writes ``model`` exactly, or else the closest: fewest differing fields (then the
    first rejecting family when none reads its own config back), in :data:`FAMILIES` order."""
    best: tuple[HFFamily, dict[str, tuple[Any, Any]]] | None = None
    rejected: tuple[HFFamily, ConfigError] | None = None
    for record in FAMILIES:
        try:
            d, differ = _differences(model, record)
        except Unwritable:
            continue
        except ConfigError as exc:
            rejected = rejected or (record, exc)
            continue
        if not differ:
            return record, d, {}, None
        if best is None or len(differ) < len(best[1]):
            best = (record, differ)
    if best is not None:
        return best[0], None, best[1], None
    assert rejected is not None, "the decoder and encoder families write every model"
    return rejected[0], None, {}, rejected[1]


@functools.lru_cache(maxsize=512)
def hf_family_of(model: ModelConfig) -> HFFamily:
    """The family :func:`write_hf_config` builds ``model`` as, or the closest one when none builds it."""
    return _match(model)[0]


def module_layout(model: ModelConfig) -> ModuleLayout:
    """The module lineage the eager-PyTorch memory terms follow for ``model``."""
    return hf_family_of(model).layout


def write_hf_config(model: ModelConfig) -> dict[str, Any]:
    """A config dict (with ``model_type`` and ``architectures``) of the family whose own class builds ``model``.

    ``transformers.AutoConfig.for_model(**d)`` then builds a model with exactly ``model.num_params()``
    parameters. Raises :class:`ConfigError` naming the fields no Hugging Face family can express.
    """
    record, d, differ, rejection = _match(model)
    if d is not None:
        return d
    name = record.model_type
    if rejection is not None:
        raise ConfigError(f"no Hugging Face family expresses this model; closest is {name!r}, which rejects it: "
                          f"{rejection}", field=rejection.field, value=rejection.value,
                          hint=f"change the model to fit {name!r}") from None
    shown = ", ".join(f"{k}={differ[k][0]!r} (would be {differ[k][1]!r})" for k in sorted(differ))
    first = sorted(differ)[0]
    raise ConfigError(f"no Hugging Face family expresses this model; closest is {name!r}, which differs in {shown}",
                      field=first, value=differ[first][0], hint=f"change those fields to the {name!r} values to export it")
