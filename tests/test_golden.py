"""The golden corpus: ~200 fixed requests (memory, time, plans, simulations, layout errors) answer as committed.

Integers and strings must match exactly; floats to 1e-9 relative, because an equal formula may be evaluated in
another order (numpy's pairwise sums, a refactored expression) and differ in the last bits, which no result of
the library depends on. A deliberate change to the models regenerates the corpus; see REGENERATE.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from golden.cases import cases

CORPUS = Path(__file__).parent / "golden" / "corpus.json"
REL_TOL = 1e-9
ABS_TOL = 1e-12
REGENERATE = (
    "If this change of answer is intended (a memory or time model fix, a new layout rule), regenerate the corpus "
    "with `python tests/golden/generate.py` from the repository root, check `git diff tests/golden/corpus.json` "
    "shows only the entries you meant to change, and commit it on its own with a message saying which entries "
    "changed and why (docs/architecture.md, 'The golden corpus'). Otherwise the change broke behaviour."
)


def _differences(expected: Any, got: Any, path: str = "") -> list[str]:
    """Where ``got`` departs from ``expected`` (JSON paths), at most a few."""
    if isinstance(expected, bool) or isinstance(got, bool) or isinstance(expected, str) or expected is None:
        return [] if type(expected) is type(got) and expected == got else [f"{path}: {expected!r} -> {got!r}"]
    if isinstance(expected, int) and isinstance(got, int):
        return [] if expected == got else [f"{path}: {expected} -> {got}"]
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        same = math.isclose(expected, got, rel_tol=REL_TOL, abs_tol=ABS_TOL) or (math.isnan(expected)
                                                                                 and math.isnan(got))
        return [] if same else [f"{path}: {expected!r} -> {got!r}"]
    if isinstance(expected, dict) and isinstance(got, dict):
        if set(expected) != set(got):
            return [f"{path}: keys {sorted(expected)} -> {sorted(got)}"]
        return [d for k in expected for d in _differences(expected[k], got[k], f"{path}.{k}")][:5]
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{path}: {len(expected)} items -> {len(got)}"]
        return [d for i, (e, g) in enumerate(zip(expected, got)) for d in _differences(e, g, f"{path}[{i}]")][:5]
    return [f"{path}: {expected!r} -> {got!r}"]


EXPECTED: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))
CASES = dict(cases())


def test_corpus_lists_every_case() -> None:
    assert sorted(CASES) == sorted(EXPECTED), f"the corpus and tests/golden/cases.py list different cases. {REGENERATE}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_answer_is_unchanged(name: str) -> None:
    if name not in EXPECTED:
        pytest.fail(f"{name} is not in the corpus. {REGENERATE}")
    # through JSON, so that tuples, enums and numpy values compare as they were written
    got = json.loads(json.dumps(CASES[name]()))
    diffs = _differences(EXPECTED[name], got, name)
    assert not diffs, "the answer changed:\n  " + "\n  ".join(diffs) + f"\n{REGENERATE}"
