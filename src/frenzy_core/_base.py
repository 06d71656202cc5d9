"""Frozen pydantic base model whose validation errors become :class:`ConfigError`."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from frenzy_core.errors import ConfigError

__all__ = ["CodedEnum", "FrozenModel", "config_error_from_validation", "load_yaml_mapping"]

_E = TypeVar("_E", bound="CodedEnum")


class CodedEnum(str, enum.Enum):
    """A string enum whose members also have an integer ``code``: their position in the class, so that arrays
    of layouts can hold them as int64 (new members go at the end, keeping the codes of the old ones)."""

    @property
    def code(self) -> int:
        """This member's integer code (0 for the first member)."""
        return list(type(self)).index(self)

    @classmethod
    def from_code(cls: type[_E], code: int) -> _E:
        """The member with integer ``code``; ConfigError for a code no member has."""
        members = list(cls)
        if not 0 <= int(code) < len(members):
            raise ConfigError(f"{code} is not a {cls.__name__} code (0..{len(members) - 1})", field=cls.__name__,
                              value=code, hint="use one of " + ", ".join(f"{m.code}: {m.value}" for m in members))
        return members[int(code)]


_INT_ANNOTATIONS: tuple[Any, ...] = (int, int | None)


def config_error_from_validation(model_name: str, exc: ValidationError) -> ConfigError:
    """One readable ConfigError out of pydantic's error list: every field, value and reason."""
    parts = []
    first_field: str | None = None
    first_value: object = None
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigError):
            # Raised by a nested frozen model or a validator of ours: keep its message, drop its own prefix.
            msg = str(inner)
            head, sep, rest = msg.partition(": ")
            if sep and loc and " " not in head:
                # "Node.free_gpus: ..." inside nodes.1 becomes "Cluster.nodes.1.free_gpus: ...".
                _, dot, sub = head.partition(".")
                loc = f"{loc}.{sub}" if dot else loc
                msg = rest
        else:
            msg = err["msg"].removeprefix("Value error, ")
        where = f"{model_name}.{loc}" if loc else model_name
        if not loc and isinstance(inner, ConfigError) and inner.field:
            where = inner.field  # a nested validation already named the field
        value = err.get("input")
        if first_field is None:
            first_field, first_value = where, value
        if not loc:
            parts.append(msg if msg.startswith(model_name) else f"{model_name}: {msg}")
            continue
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        parts.append(f"{where}: {msg}" if isinstance(value, dict) else f"{where}: {msg} (got {shown})")
    return ConfigError("; ".join(parts), field=first_field, value=first_value)


class FrozenModel(BaseModel):
    """Immutable, strict-about-extras model; every validation failure is a ConfigError."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_int(cls, data: Any) -> Any:
        # pydantic's lax mode turns True into 1 for int fields; a bool there is always a mistake.
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                if field.annotation in _INT_ANNOTATIONS and isinstance(data.get(name), bool):
                    raise ValueError(f"{name} must be an integer, got {data[name]!r}")
        return data

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error_from_validation(type(self).__name__, exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise config_error_from_validation(cls.__name__, exc) from None

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            raise config_error_from_validation(cls.__name__, exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # pydantic private attributes (caches) stay assignable
            super().__setattr__(name, value)
            return
        raise ConfigError(f"{type(self).__name__} is frozen: {name} cannot be assigned", field=name, value=value,
                          hint=f"make a changed copy with .replace({name}=...)")

    def replace(self, **changes: Any) -> Any:
        """A validated copy with ``changes`` applied (``model_copy`` would skip validation)."""
        data = self.model_dump()
        data.update(changes)
        out = type(self).model_validate(data)
        # Keep track of which fields were given explicitly (the planner pins those): the old ones plus the changes.
        object.__setattr__(out, "__pydantic_fields_set__", set(self.model_fields_set) | set(changes))
        return out

    def to_yaml(self) -> str:
        """YAML text that :meth:`from_yaml` reads back to an equal object."""
        import yaml

        return str(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))

    @classmethod
    def from_yaml(cls, text: str) -> Any:
        """Parse YAML (safe loader only) into a validated object."""
        return cls.model_validate(load_yaml_mapping(text, cls.__name__))


def load_yaml_mapping(text: str, origin: str) -> dict[str, Any]:
    """A YAML mapping parsed with the safe loader; ``origin`` (a file or class name) starts every error."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: YAML must be a mapping, got {type(data).__name__}")
    return data
