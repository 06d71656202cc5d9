"""The package's data files (``frenzy_core/data/``), read through importlib.resources so wheels work."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from typing import Any

from frenzy_core._files import load_yaml_mapping

__all__ = ["data_text", "data_yaml_files"]


def data_text(relative: str) -> str:
    """The text of ``frenzy_core/data/<relative>``."""
    return (resources.files("frenzy_core") / "data" / relative).read_text(encoding="utf-8")


def data_yaml_files(folder: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(stem, file name, mapping) of every ``*.yaml`` in ``frenzy_core/data/<folder>``, sorted by name."""
    root = resources.files("frenzy_core") / "data" / folder
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            text = entry.read_text(encoding="utf-8")
            yield entry.name[: -len(".yaml")], entry.name, load_yaml_mapping(text, f"{folder} file {entry.name}")
