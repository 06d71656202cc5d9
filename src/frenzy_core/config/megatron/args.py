"""Megatron-LM command lines as typed flag values, and the table of flags the reader does not model."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import yaml

from frenzy_core._base import FrozenModel
from frenzy_core._data import data_text
from frenzy_core.errors import ConfigError

__all__ = ["OFF_VALUES", "FlagReader", "FlagTable", "GpuFacts", "MegatronArgs", "flag_table", "tokens_to_dict"]

MegatronArgs = Mapping[str, object] | Sequence[str]
"""A Megatron command line: ``{"--num-layers": 24, "--bf16": True}`` or ``["--num-layers", "24", "--bf16"]``."""

OFF_VALUES: tuple[object, ...] = (False, None, 0, "0", "none", "false", "False")
"""Values of an unsupported flag that switch it off (``--mtp-num-layers 0``, ``--cuda-graph-impl none``)."""


class GpuFacts(FrozenModel):
    """What Megatron-LM decides from the device: its compute capability (``get_device_arch_version``)."""

    compute_capability: float
    """CUDA compute capability (ROCm: what torch reports for the gfx target)."""


class FlagTable(FrozenModel):
    """``data/megatron_flags.yaml``: flags not modelled (with why), flags without a memory effect, GPU facts."""

    unsupported: dict[str, str]
    ignored: frozenset[str]
    ignored_prefixes: tuple[str, ...]
    gpus: dict[str, GpuFacts]
    gpu_sources: str


@functools.lru_cache(maxsize=1)
def flag_table() -> FlagTable:
    """The packaged flag table (read once)."""
    table: FlagTable = FlagTable.model_validate(yaml.safe_load(data_text("megatron_flags.yaml")))
    return table


def tokens_to_dict(tokens: Sequence[str]) -> dict[str, object]:
    """``["--a", "1", "--b", "--c", "x", "y"]`` -> ``{"--a": "1", "--b": True, "--c": ["x", "y"]}``."""
    out: dict[str, object] = {}
    key: str | None = None
    values: list[str] = []

    def flush() -> None:
        if key is not None:
            out[key] = True if not values else values[0] if len(values) == 1 else list(values)

    for token in tokens:
        if not isinstance(token, str):
            raise ConfigError(f"command-line token {token!r} is not a string", field="args", value=token)
        if token.startswith("--"):
            flush()
            key, _, inline = token.partition("=")
            values = [inline] if inline else []
        elif key is None:
            raise ConfigError(f"value {token!r} comes before any --flag", field="args", value=token,
                              hint="start the command line with a --flag")
        else:
            values.append(token)
    flush()
    return out


class FlagReader:
    """Typed access to the flags of one command line; remembers which ones were read."""

    def __init__(self, args: MegatronArgs):
        if isinstance(args, Mapping):
            raw = {str(k) if str(k).startswith("--") else "--" + str(k): v for k, v in args.items()}
        elif isinstance(args, (list, tuple)):
            raw = tokens_to_dict(args)
        else:
            raise ConfigError(
                f"args must be a dict of flags or a list of command-line tokens, got {type(args).__name__}",
                field="args", value=args)
        self.raw = {k.replace("_", "-"): v for k, v in raw.items()}
        self.used: set[str] = set()

    def has(self, flag: str) -> bool:
        """Whether the command line names ``flag`` (not marked as read)."""
        return flag in self.raw

    def switch(self, flag: str) -> bool:
        """A ``store_true`` flag (dict form: True/False; list form: present)."""
        self.used.add(flag)
        value = self.raw.get(flag, False)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{flag} is a switch and takes no value, got {value!r}", field=flag, value=value,
                          hint=f"pass {flag} alone (or true/false in a dict)")

    def _value(self, flag: str) -> object:
        self.used.add(flag)
        value = self.raw[flag]
        if isinstance(value, (bool, list)):
            raise ConfigError(f"{flag} needs one value, got {value!r}", field=flag, value=value)
        return value

    def integer(self, flag: str, default: int | None = None) -> int | None:
        """An integer flag (``default`` when absent)."""
        if flag not in self.raw:
            self.used.add(flag)
            return default
        value = self._value(flag)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value))
        except ValueError:
            raise ConfigError(f"{flag} must be an integer, got {value!r}", field=flag, value=value) from None

    def positive(self, flag: str, default: int | None = None) -> int | None:
        """A positive integer flag."""
        value = self.integer(flag, default)
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}", field=flag, value=value)
        return value

    def required(self, flag: str) -> int:
        """A positive integer flag Megatron-LM's validate_args insists on."""
        value = self.positive(flag)
        if value is None:
            raise ConfigError(f"{flag} is required (Megatron-LM's validate_args asserts it)", field=flag)
        return value

    def number(self, flag: str, default: float) -> float:
        """A float flag."""
        if flag not in self.raw:
            self.used.add(flag)
            return default
        value = self._value(flag)
        try:
            return float(str(value))
        except ValueError:
            raise ConfigError(f"{flag} must be a number, got {value!r}", field=flag, value=value) from None

    def choice(self, flag: str, default: str | None, choices: Sequence[str] | None = None) -> str | None:
        """A string flag, one of ``choices`` when given."""
        if flag not in self.raw:
            self.used.add(flag)
            return default
        value = str(self._value(flag))
        if choices is not None and value not in choices:
            raise ConfigError(f"{flag} must be one of {list(choices)}, got {value!r}", field=flag, value=value)
        return value

    def words(self, flag: str) -> list[str] | None:
        """A list-valued flag (``nargs='+'``): a list, or a string like ``"[a b]"``."""
        self.used.add(flag)
        if flag not in self.raw:
            return None
        value = self.raw[flag]
        items = value if isinstance(value, list) else [str(value)]
        return [w for item in items for w in re.split(r"[\s,\[\]]+", str(item)) if w]
