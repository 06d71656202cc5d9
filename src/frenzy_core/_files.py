"""Reading the files users hand in (config.json, cluster YAML, GPU specs, calibration files): every way a file can
be unreadable, too large, not UTF-8, too deeply nested or hostile (YAML alias bombs) ends as one ConfigError that
names the file and the line, before anything expands it. Writing files (figures, launcher files, time-model
files): a path that is not a name the OS can encode, or whose folder does not exist, is one ConfigError too.

One loader for YAML and one for JSON, used everywhere the package parses text (packaged data files included).
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from frenzy_core.errors import ConfigError, short_repr

__all__ = ["MAX_FILE_BYTES", "MAX_JSON_INT_DIGITS", "MAX_YAML_NODES", "PLOT_SUFFIXES", "exists", "figure_path", "is_dir",
           "is_file", "load_csv_rows", "load_json", "load_yaml", "load_yaml_mapping", "output_path", "read_text",
           "write_text"]

MAX_FILE_BYTES = 16 * 2**20
"""Largest config file read (16 MiB): the largest real ones (a cluster of 4,278 nodes written out) are under 1 MiB,
and the pure-Python YAML parser takes about a second per MiB."""

MAX_YAML_NODES = 2**20
"""Most YAML nodes a document may hold once its aliases are expanded: what pydantic and every error message would
walk. A 440-byte alias bomb expands to 9^8 = 43 million; a real cluster file of 4,278 nodes to about 30,000."""

MAX_JSON_INT_DIGITS = 30
"""Longest integer literal read from JSON: every count frenzy_core takes is far below 10^30 (bounds in
config/limits.py), and Python refuses to parse integers beyond 4,300 digits at all."""


def _looks(path: Path, test: str) -> bool:
    """``getattr(path, test)()``, False where the OS cannot even look the name up (longer than a file name may
    be, a NUL byte): no file has such a name, so the caller says so with its own ConfigError, not an OSError."""
    try:
        return bool(getattr(path, test)())
    except (OSError, ValueError):
        return False


def exists(path: Path) -> bool:
    """``path.exists()`` that never raises (:func:`_looks`)."""
    return _looks(path, "exists")


def is_file(path: Path) -> bool:
    """``path.is_file()`` that never raises (:func:`_looks`)."""
    return _looks(path, "is_file")


def is_dir(path: Path) -> bool:
    """``path.is_dir()`` that never raises (:func:`_looks`)."""
    return _looks(path, "is_dir")


def output_path(path: Any, field: str, hint: str) -> Path:
    """``path`` as a Path a file can be written to: a str or PathLike without a NUL byte, a name the OS can
    encode (a lone surrogate such as ``"\\ud800"`` cannot be: open() would raise UnicodeEncodeError), in a
    folder that exists; ConfigError naming ``field`` otherwise, with ``hint`` (an example name). Checked before
    any work, so a long plan or fit never ends in a file it cannot write."""
    try:
        raw = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    except TypeError:  # a PathLike whose __fspath__ returns neither str nor bytes
        raw = None
    if not isinstance(raw, str):  # bytes paths too: file names here are text
        raise ConfigError(f"{field} must be a file path, got {type(path).__name__} {short_repr(path)} (a str, or "
                          "a PathLike that gives one)", field=field, hint=hint)
    out = Path(raw)
    if "\0" in str(out):
        raise ConfigError(f"{field} {short_repr(str(out), 200)} holds a NUL byte, which no file name can",
                          field=field, value=str(out), hint=hint)
    try:
        os.fsencode(out)
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{field} {short_repr(str(out), 200)} holds a character no file name can (at {exc.start})",
                          field=field, value=str(out), hint="use a name of valid Unicode text") from None
    if not is_dir(out.parent):
        raise ConfigError(f"{field} {short_repr(str(out), 200)}: the folder {short_repr(str(out.parent), 200)} does "
                          "not exist", field=field, value=str(out), hint="create it first, or give a path in an "
                          "existing folder")
    return out


PLOT_SUFFIXES: tuple[str, ...] = (".png", ".svg", ".pdf")
"""File types a figure is written as, chosen by the path's suffix."""


def figure_path(path: Any, field: str = "path", hint: str = "e.g. plan.png or plan.svg") -> Path:
    """``path`` as a Path a figure can be written to (:func:`output_path`) whose suffix is a figure type (checked
    before any drawing); ConfigError naming ``field`` otherwise."""
    out = output_path(path, field, hint)
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"{field} {short_repr(str(out), 200)} must end in " + ", ".join(PLOT_SUFFIXES[:-1])
                          + " or " + PLOT_SUFFIXES[-1], field=field, value=str(out), hint=hint)
    return out


def write_text(path: Any, text: str, field: str, hint: str) -> Path:
    """``text`` written to ``path`` as UTF-8 (checked by :func:`output_path`); ConfigError naming ``field`` when
    the OS refuses (no permission, a name too long, a folder in the way)."""
    out = output_path(path, field, hint)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {field} {short_repr(str(out), 200)}: {exc.strerror or exc}", field=field,
                          value=str(out), hint=hint) from None
    return out


def read_text(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark dropped); ConfigError naming ``what`` and the file when it is
    missing, unreadable, larger than ``max_bytes`` or not UTF-8 (with the line of the first bad byte)."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > max_bytes:
            raise ConfigError(f"{what} {str(file)!r} is {size:,} bytes, more than the {max_bytes:,} a config file "
                              "may have", field="path", value=str(file), hint="is it the right file?")
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(file)!r}: {exc.strerror or exc}", field="path",
                          value=str(file)) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{what} {str(file)!r} line {line}: byte {raw[exc.start]:#04x} is not UTF-8",
                          field="path", value=str(file), hint="save the file as UTF-8") from None


class _Loader(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):  # type: ignore[misc, name-defined]
    """The safe loader (no Python tags), refusing duplicate keys and keys that are not strings."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            where = f"line {key_node.start_mark.line + 1}"
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"{where}: key {short_repr(key)} is not a string (quote it)", None)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{where}: key {key!r} is given twice (YAML would keep only the last)", None)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]



def _expanded_nodes(root: yaml.Node, origin: str) -> int:
    """Nodes of the document with every alias expanded (each shared node counted once per reference), without
    expanding anything: sizes are summed bottom-up over the node graph. Recursive aliases are refused."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            size[key] = min(1 + sum(size[id(c)] for c in children), MAX_YAML_NODES + 1)
            continue
        if key in size:
            continue
        if key in on_path:
            raise ConfigError(f"{origin}: invalid YAML: line {node.start_mark.line + 1}: a recursive alias (a node "
                              "that contains itself)", hint="write the structure out without the alias")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)
    return size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, origin: str) -> Any:
    """A YAML document parsed with the safe loader; ``origin`` (a file or class name) starts every error.

    Refused: text over :data:`MAX_FILE_BYTES`, documents over :data:`MAX_YAML_NODES` nodes once aliases are
    expanded, recursive aliases, duplicate keys, keys that are not strings, nesting deeper than Python recurses.
    """
    if not isinstance(text, str):
        raise ConfigError(f"{origin}: YAML text must be a string, got {type(text).__name__}", field="text",
                          value=text)
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError(f"{origin}: the YAML text has {len(text):,} characters, more than {MAX_FILE_BYTES:,}")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, origin) > MAX_YAML_NODES:
            raise ConfigError(f"{origin}: the YAML document expands to more than {MAX_YAML_NODES:,} nodes through its "
                              "aliases (&anchor / *alias)", hint="write the document out without nested aliases")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: invalid YAML: {_yaml_reason(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{origin}: the YAML is nested too deeply to read") from None
    finally:
        loader.dispose()


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: the problem and where it is (line, column), without the quoted context."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return where + " ".join(part for part in (exc.context, exc.problem) if part)
    return short_repr(str(exc), 200)


def load_yaml_mapping(text: str, origin: str) -> dict[str, Any]:
    """A YAML mapping (see :func:`load_yaml`); ConfigError when the document is anything else."""
    data = load_yaml(text, origin)
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: YAML must be a mapping, got {type(data).__name__}")
    return data


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _json_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits.lstrip('-')):,} digits (at most {MAX_JSON_INT_DIGITS} are read)")
    return int(digits)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{short_repr(text)} is beyond the range of a float")
    return value


def load_json(text: str, origin: str) -> Any:
    """A JSON document; ConfigError naming ``origin`` for invalid JSON, NaN / Infinity, integers of more than
    :data:`MAX_JSON_INT_DIGITS` digits, floats beyond float64, nesting deeper than Python recurses."""
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError(f"{origin}: the JSON text has {len(text):,} characters, more than {MAX_FILE_BYTES:,}")
    try:
        return json.loads(text, parse_constant=_json_constant, parse_int=_json_int, parse_float=_json_float)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{origin}: invalid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:
        raise ConfigError(f"{origin}: invalid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{origin}: the JSON is nested too deeply to read") from None


def load_csv_rows(text: str, origin: str) -> list[dict[str, str]]:
    """The rows of a CSV table with a header line, as header -> cell (a short row's missing cells left out);
    ConfigError naming ``origin`` and the line for a row csv cannot read (a field over its 131,072-character limit,
    a stray quote) or one with more cells than the header."""
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader, [])
        rows = []
        for cells in reader:
            if len(cells) > len(header):
                raise ConfigError(f"{origin} line {reader.line_num}: {len(cells)} cells but {len(header)} columns",
                                  hint="quote cells that hold commas; name every column in the header")
            rows.append(dict(zip(header, cells)))
    except csv.Error as exc:
        raise ConfigError(f"{origin} line {reader.line_num}: not CSV that can be read ({exc})") from None
    return rows
