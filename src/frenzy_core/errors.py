"""The library's exceptions: one base class, bad input subclasses ``ValueError``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

__all__ = [
    "ConfigError",
    "FrenzyError",
    "InfeasiblePlanError",
    "MeasurementError",
    "OptionalDependencyError",
    "UnknownNameError",
    "closest_names",
    "require_instance",
    "require_name",
]


class FrenzyError(Exception):
    """Base class of every error frenzy_core raises on purpose."""


class ConfigError(FrenzyError, ValueError):
    """An input is invalid: ``field`` names it, ``value`` is what was given, ``hint`` what would work."""

    def __init__(self, message: str, *, field: str | None = None, value: object = None, hint: str | None = None):
        self.field = field
        self.value = value
        self.hint = hint
        full = message if hint is None else f"{message}; {hint}"
        super().__init__(full)


class UnknownNameError(ConfigError, KeyError):
    """A name (preset, GPU type, family) is not known; ``suggestions`` lists the closest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known_list = sorted(known)
        self.kind = kind
        self.name = name
        self.suggestions = closest_names(name, known_list)
        if self.suggestions:
            hint = "did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        else:
            hint = "known: " + ", ".join(known_list[:40]) + (" ..." if len(known_list) > 40 else "")
        super().__init__(f"unknown {kind} {name!r}", field=kind, value=name, hint=hint)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class InfeasiblePlanError(FrenzyError):
    """No layout of the request fits the cluster; the message says what blocked it and what would help."""

    def __init__(self, message: str, *, reasons: Sequence[str] = (), suggestions: Sequence[str] = ()):
        self.reasons = list(reasons)
        self.suggestions = list(suggestions)
        super().__init__(message)


class MeasurementError(FrenzyError, RuntimeError):
    """A training step being measured raised: ``case`` names what was measured, ``where`` the step and phase,
    and the original exception is chained as ``__cause__``."""

    def __init__(self, case: str, where: str, cause: BaseException):
        self.case = case
        self.where = where
        super().__init__(f"{case}: the training step raised {type(cause).__name__} at {where}: {cause}")


class OptionalDependencyError(FrenzyError, ImportError):
    """A feature needs an optional extra that is not installed."""

    def __init__(self, package: str, extra: str, feature: str):
        self.package = package
        self.extra = extra
        super().__init__(
            f"{feature} needs {package!r}, which is not installed; "
            f"install it with: pip install 'frenzy_core[{extra}]'"
        )


def require_instance(field: str, value: object, cls: type, hint: str | None = None) -> None:
    """A ConfigError naming ``field`` when ``value`` is not a ``cls`` (entry points check their arguments)."""
    if not isinstance(value, cls):
        raise ConfigError(f"{field} must be a {cls.__name__}, got {type(value).__name__}", field=field, value=value,
                          hint=hint)


def require_name(kind: str, name: object) -> str:
    """``name`` as given, when it is a string; a ConfigError naming ``kind`` otherwise."""
    if not isinstance(name, str):
        raise ConfigError(f"a {kind} name must be a string, got {type(name).__name__} {name!r}", field=kind,
                          value=name)
    return name


def closest_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name`` (case-insensitive), best first."""
    known_list = list(known)
    lowered = {k.lower(): k for k in known_list}
    key = name.lower()
    matches = difflib.get_close_matches(key, list(lowered), n=n, cutoff=0.5)
    prefix = [k for k in known_list if k.lower().startswith(key) and k not in matches]
    out = [lowered[m] for m in matches] + prefix
    return out[:n]
