"""The global batch a request without one trains with: the model's published pre-training batch, else 2^20
tokens, in whole sequences. The planner and the scheduler's job mapping both use :func:`default_global_batch`, so
every layout they compare trains the same number of tokens per step."""

from __future__ import annotations

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.presets import model_preset_info, model_preset_names
from frenzy_core.errors import ConfigError

__all__ = ["DEFAULT_BATCH_TOKENS", "DefaultBatch", "default_batch", "default_global_batch"]

DEFAULT_BATCH_TOKENS = 2**20
"""Tokens per step for a model without a published pre-training batch: 2^20, the 1M-token batch GPT-3 XL and
OPT-1.3B were trained with (Brown et al. 2020, Table 2.1; Zhang et al. 2022, Table 1), read as 2^20 like the
preset figures (docs/planner.md); our choice for models of unknown recipe."""


class DefaultBatch(FrozenModel):
    """The default global batch of one model at one sequence length, and where it comes from."""

    global_batch_size: int = Field(gt=0, description="Samples per step: tokens / seq_len, rounded, at least 1.")
    tokens: int = Field(gt=0, description="The tokens-per-step figure it is rounded from.")
    source: str = Field(description="The published figure's source, or why the generic one is used.")


def _published(model: ModelConfig) -> tuple[int, str] | None:
    """The preset's published batch when ``model`` is a preset unchanged (a modified preset is another model)."""
    if model.name is None or model.name not in model_preset_names():
        return None
    info = model_preset_info(model.name)
    if info.model != model or info.pretrain_batch_tokens is None or info.pretrain_batch_source is None:
        return None
    return info.pretrain_batch_tokens, info.pretrain_batch_source


def default_batch(model: ModelConfig, seq_len: int) -> DefaultBatch:
    """The default global batch of ``model`` at ``seq_len`` tokens per sample, with its source."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise ConfigError(f"seq_len must be a positive integer, got {seq_len!r}", field="seq_len", value=seq_len)
    published = _published(model)
    if published is None:
        tokens, source = DEFAULT_BATCH_TOKENS, "2^20 tokens, no published pre-training batch for this model"
    else:
        tokens, source = published
    samples = max(1, (2 * tokens + seq_len) // (2 * seq_len))  # nearest whole sequence, halves up
    return DefaultBatch(global_batch_size=samples, tokens=tokens, source=source)


def default_global_batch(model: ModelConfig, seq_len: int) -> int:
    """Samples per step when none is given: the published pre-training batch in tokens where the preset records
    one, else :data:`DEFAULT_BATCH_TOKENS`, divided by ``seq_len`` and rounded to whole sequences."""
    return default_batch(model, seq_len).global_batch_size
