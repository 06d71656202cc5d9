"""The launcher registry: every adapter by name, and :func:`emit` to write a plan for one of them."""

from __future__ import annotations

from typing import Any

from frenzy_core.adapters.accelerate import ACCELERATE
from frenzy_core.adapters.base import Adapter
from frenzy_core.adapters.deepspeed import DEEPSPEED
from frenzy_core.adapters.kubernetes import KUBERNETES
from frenzy_core.adapters.megatron import MEGATRON
from frenzy_core.adapters.ray import RAY
from frenzy_core.adapters.skypilot import SKYPILOT
from frenzy_core.adapters.slurm import SLURM
from frenzy_core.adapters.torchrun import TORCHRUN
from frenzy_core.adapters.trainjob import TRAINJOB
from frenzy_core.errors import UnknownNameError
from frenzy_core.planning.plan import Plan

__all__ = ["ADAPTERS", "LAUNCHERS", "emit", "get_adapter"]

ADAPTERS: dict[str, Adapter[Any]] = {
    adapter.name: adapter
    for adapter in (TORCHRUN, MEGATRON, DEEPSPEED, ACCELERATE, SLURM, KUBERNETES, TRAINJOB, RAY, SKYPILOT)
}
"""Launcher name -> adapter; ``ADAPTERS[name](plan, **options)`` gives plain data, ``.emit(...)`` text."""

LAUNCHERS: tuple[str, ...] = tuple(ADAPTERS)
"""The launcher names, in the order the documentation lists them."""


def get_adapter(launcher: str) -> Adapter[Any]:
    """The adapter named ``launcher``; UnknownNameError (a ConfigError) lists the known names."""
    adapter = ADAPTERS.get(launcher.strip().lower()) if isinstance(launcher, str) else None
    if adapter is None:
        raise UnknownNameError("launcher", str(launcher), LAUNCHERS)
    return adapter


def emit(plan: Plan, launcher: str, **options: Any) -> str:
    """``plan`` written for ``launcher`` (one of :data:`LAUNCHERS`) as the text that launcher reads."""
    return get_adapter(launcher).emit(plan, **options)
