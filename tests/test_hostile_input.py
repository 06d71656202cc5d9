"""Issue 15's reproducers: each gives the library's ConfigError, naming what was wrong, and not after unbounded
work (the alias bomb took 15 s and 550 MB; the bound here is loose on purpose, the figures are in
docs/benchmarks.md from benchmarks/hostile_inputs.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from frenzy_core import ConfigError
from hostile_cases import CASES, Case

WALL_BOUND_S = 10.0
"""Not a speed target: far above the < 1 s each takes, far below what unbounded work would take."""


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reproducer_gives_config_error(case: Case, tmp_path: Path) -> None:
    for module in case.needs:
        pytest.importorskip(module)
    began = time.perf_counter()
    with pytest.raises(ConfigError, match=case.match):
        case.run(tmp_path)
    assert time.perf_counter() - began < WALL_BOUND_S
