"""docs/adapters.md: every example output is what ``emit`` writes today for the named test plan and options."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from adapter_plans import FIVE_PLANS, mixed_small, stage_uneven
from frenzy_core.adapters import LAUNCHERS, emit
from frenzy_core.config import ModelConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "adapters.md"
DOC_PLANS = {**FIVE_PLANS, "mixed_small": mixed_small, "stage_uneven": stage_uneven}
"""The plans the page's examples name."""
EXAMPLE = re.compile(r"<!-- emit: (\S+) (\S+) (\{.*?\}) -->\n```\n(.*?)```\n", re.DOTALL)


def _examples() -> list[tuple[str, str, str, str]]:
    if not DOC.is_file():
        pytest.skip(f"{DOC} is not in this checkout")
    return EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def test_every_launcher_has_an_example() -> None:
    assert {launcher for launcher, *_ in _examples()} == set(LAUNCHERS)


def test_examples_are_current() -> None:
    for launcher, plan_name, options_json, shown in _examples():
        options = json.loads(options_json)
        if "model" in options:
            options["model"] = ModelConfig.preset(options["model"])
        assert emit(DOC_PLANS[plan_name](), launcher, **options) == shown, f"{launcher} {plan_name} example is stale"


def test_usage_example_runs() -> None:
    """The first Python block (plan a job, write it for Slurm and DeepSpeed) runs as written."""
    if not DOC.is_file():
        pytest.skip(f"{DOC} is not in this checkout")
    code = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert code is not None
    namespace: dict[str, object] = {"print": lambda *_: None}
    exec(compile(code.group(1), str(DOC), "exec"), namespace)  # noqa: S102  (the documented example is the test)
    assert isinstance(namespace["config"], dict) and "train_batch_size" in namespace["config"]
