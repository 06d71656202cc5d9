"""``--emit``: a plan written as the config one launcher reads, through the adapter registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from frenzy_core._files import load_yaml
from frenzy_core.errors import ConfigError
from frenzy_core.planning.launchers import LaunchScope
from frenzy_core.planning.plan import Plan

__all__ = ["LaunchOutput", "emit_launcher", "launch_scope", "launcher_options", "parse_emit_options"]


@dataclass(frozen=True)
class LaunchOutput:
    """What one adapter made of a plan: its config as data and as the text the launcher reads."""

    launcher: str
    summary: str
    data: dict[str, Any]
    text: str

    def to_json(self) -> dict[str, Any]:
        """For ``--json``: the launcher, its config as data, and the text."""
        return {"launcher": self.launcher, "summary": self.summary, "config": self.data, "text": self.text}


def parse_emit_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as options; each value is read as YAML (``8``, ``[a, b]``, ``{K: v}``), so lists
    and mappings can be given, and falls back to the plain string where that fails."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(
                f"--emit-option {pair!r} is not KEY=VALUE",
                field="--emit-option",
                value=pair,
                hint="e.g. -o script=train.py or -o script_args='[--lr, 3e-4]'",
            )
        try:
            value = load_yaml(raw, f"--emit-option {key}")
        except ConfigError:  # not YAML (or a hostile document): the plain string
            value = raw
        out[key] = raw if value is None else value
    return out


def launcher_options(launcher: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options for ``launcher``, checked before planning: an unknown launcher or an option it does not take
    is a ConfigError."""
    from frenzy_core.adapters import get_adapter
    from frenzy_core.errors import closest_names

    known = sorted(get_adapter(launcher).options.model_fields)
    for key in options:
        if key not in known:
            close = closest_names(key, known)
            hint = f"did you mean -o {close[0]}=...?" if close else "the options are " + ", ".join(known)
            raise ConfigError(f"--emit {launcher} has no option {key!r}", field="--emit-option", value=key, hint=hint)
    get_adapter(launcher).options.model_validate(options)
    return options


def launch_scope(launcher: str, options: dict[str, Any]) -> LaunchScope:
    """What ``launcher`` with ``options`` can run (the plan is made within it: torchrun's ``torchtitan=true``
    writes only what torchtitan runs)."""
    from frenzy_core.adapters import get_adapter

    return get_adapter(launcher).scope_for(**options)


def emit_launcher(plan: Plan, launcher: str, options: dict[str, Any]) -> LaunchOutput:
    """Run the named adapter on ``plan`` (options from :func:`launcher_options`); ConfigError when the adapter
    cannot express the plan (e.g. a GPU type the launcher has no name for)."""
    from frenzy_core.adapters import get_adapter

    adapter = get_adapter(launcher)
    data = adapter(plan, **options)
    return LaunchOutput(
        launcher=adapter.name, summary=adapter.summary, data=data, text=adapter.emit(plan, **options)
    )
