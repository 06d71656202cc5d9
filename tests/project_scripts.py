"""The project's scripts that are not package modules (benchmarks/, docs/), loaded by path for the tests that check
them: one loader, so each test states only which script it checks."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
DOCS = ROOT / "docs"


@functools.cache
def load_script(path: Path) -> ModuleType:
    """Import the script at ``path`` as a module named after its file, registered in ``sys.modules`` (dataclasses
    and pickling look their module up by name); loaded once per test session."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, f"{path} is not a loadable Python file"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
