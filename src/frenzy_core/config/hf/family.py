"""One Hugging Face family as a record: what identifies it, which classes it builds, how to read and write it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.source import Fields, HFSource

if TYPE_CHECKING:  # writers take a model; this package never builds one itself
    from frenzy_core.config.model import ModelConfig

__all__ = ["HFFamily", "Reader", "Writer"]

Reader = Callable[[HFSource, bool], Fields]
"""(config, whether the named class has the LM head) -> ``ModelConfig`` fields, ``lm_head`` excluded."""
Writer = Callable[["ModelConfig"], dict[str, Any]]
"""A model -> the family's config keys (``model_type``, ``architectures`` and ``use_cache`` are added around them)."""


@dataclass(frozen=True)
class HFFamily:
    """A Transformers family: ``model_type``, the classes it builds, its module lineage, its reader and writer.

    The reader follows ``transformers/models/<family>/modeling_<family>.py`` (5.x): which modules exist and which
    config keys size them, with the family's own defaults for absent keys. The writer is its inverse where the family
    can express a model (None: read only); a written config is always read back and compared.
    """

    model_type: str
    """``model_type`` in config.json."""
    head_class: str
    """The class with the language-model head (``...ForCausalLM``, ``BertForMaskedLM``)."""
    bare_class: str
    """The backbone without a head (``...Model``)."""
    layout: ModuleLayout
    read: Reader
    write: Writer | None
    other_head_classes: tuple[str, ...] = field(default=())
    """Other class names with the same parameters as ``head_class`` (read, never written)."""
    sdpa: bool = True
    """Transformers runs the family with SDPA (Gemma 2 cannot: its soft-capping needs the eager path, its default)."""

    def has_lm_head(self, src: HFSource) -> bool:
        """Whether the class ``architectures`` names has the head (or is the bare backbone)."""
        arch = src.architecture(self.head_class)
        if arch == self.bare_class:
            return False
        if arch == self.head_class or arch in self.other_head_classes:
            return True
        known = [self.head_class, *self.other_head_classes, self.bare_class]
        raise src.fail(f"architecture {arch!r} is not supported", field="architectures", value=arch,
                       hint=f"use one of {known} (other heads add parameters this library does not model)")
