"""The built-in scheduling policies, by name."""

from __future__ import annotations

from collections.abc import Callable

from frenzy_core.errors import UnknownNameError, require_name
from frenzy_core.scheduling.policies.fifo_requested import FifoRequested
from frenzy_core.scheduling.policies.frenzy_core_policy import FrenzyCore
from frenzy_core.scheduling.policies.gavel_like import GavelLike
from frenzy_core.scheduling.policies.has import FrenzyHAS
from frenzy_core.scheduling.policies.sia_like import SiaLike
from frenzy_core.scheduling.policy import Policy

__all__ = ["POLICIES", "FifoRequested", "FrenzyCore", "FrenzyHAS", "GavelLike", "SiaLike", "get_policy"]

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo-requested": FifoRequested,
    "frenzy-has": FrenzyHAS,
    "gavel-like": GavelLike,
    "sia-like": SiaLike,
    "frenzy-core": FrenzyCore,
}
"""Policy name -> factory of a fresh policy."""


def get_policy(policy: str | Policy) -> Policy:
    """A fresh policy by name, or ``policy`` itself when already an instance."""
    if isinstance(policy, Policy):
        return policy
    if require_name("scheduling policy", policy) not in POLICIES:
        raise UnknownNameError("scheduling policy", policy, POLICIES)
    return POLICIES[policy]()
