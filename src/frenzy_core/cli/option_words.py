"""The planner's messages in the command line's vocabulary: ``headroom=0`` as ``--headroom 0``,
``max_gpus >= 16`` as ``--max-gpus 16 (or more)``, ``token_budget`` as ``--tokens``."""

from __future__ import annotations

import re

from frenzy_core.cli.options import OPTION_OF_FIELD
from frenzy_core.errors import ConfigError, InfeasiblePlanError

__all__ = ["config_error_in_option_words", "infeasible_in_option_words"]

_PLANNER_FIELDS = ("max_price_per_hour_usd", "max_gpus", "num_gpus", "gpu_types", "token_budget",
                   "micro_batch_sizes", "micro_batch_size", "headroom", "seq_len", "tp", "pp")
"""Request fields that the planner's messages and suggestions name (a layout such as ``dp=8 tp=2`` inside a
message is left alone: only suggestions and these settings are reworded)."""
_CONSTRAINTS = ("max_price_per_hour_usd", "max_gpus", "num_gpus", "token_budget", "headroom")
"""Constraint settings that an infeasibility message quotes as ``field=value``."""
_LIMITS = ("max_price_per_hour_usd", "max_gpus", "num_gpus", "token_budget")
"""Limits that an infeasibility message names bare."""

_NAMES = "|".join(sorted(_PLANNER_FIELDS, key=len, reverse=True))
_SETTING_RE = re.compile(r"\b(?:constraints\.|PlanConstraints\.)?(" + _NAMES + r")\s*(>=|=)\s*([^\s,;)]+)")
_FIELD_RE = re.compile(r"\b(?:constraints\.|PlanConstraints\.)?(" + _NAMES + r")\b")
_CONSTRAINT_SETTING_RE = re.compile(r"\b(" + "|".join(_CONSTRAINTS) + r")=(\S+?)(?=[\s,;)]|$)")
_LIMIT_RE = re.compile(r"\b(" + "|".join(_LIMITS) + r")\b")


def _in_option_words(text: str) -> str:
    """One suggestion with each setting written as the option that makes it."""
    def setting(m: re.Match[str]) -> str:
        more = " (or more)" if m.group(2) == ">=" else ""
        return f"{OPTION_OF_FIELD[m.group(1)]} {m.group(3)}{more}"

    return _SETTING_RE.sub(setting, text)


def infeasible_in_option_words(exc: InfeasiblePlanError) -> InfeasiblePlanError:
    """The same infeasibility, its suggestions and the settings it quotes written as options."""
    text = str(exc)
    for raw in exc.suggestions:
        text = text.replace(raw, _in_option_words(raw))
    text = _CONSTRAINT_SETTING_RE.sub(lambda m: f"{OPTION_OF_FIELD[m.group(1)]} {m.group(2)}", text)
    text = _LIMIT_RE.sub(lambda m: OPTION_OF_FIELD[m.group(1)], text)
    return InfeasiblePlanError(text, reasons=exc.reasons, suggestions=[_in_option_words(s) for s in exc.suggestions])


def config_error_in_option_words(exc: ConfigError) -> ConfigError:
    """The same bad-input error, the request fields it names written as options."""
    return ConfigError(_FIELD_RE.sub(lambda m: OPTION_OF_FIELD[m.group(1)], str(exc)), field=exc.field,
                       value=exc.value)
