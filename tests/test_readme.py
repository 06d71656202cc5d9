"""README.md: its Python example runs, and its two quick-start commands are the ones CI and users run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_examples_run(capsys: object) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README has no Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - our own documentation


def test_quick_start_has_exactly_two_commands() -> None:
    first = re.search(r"```bash\n(.*?)```", README, flags=re.S)
    assert first is not None
    commands = [line for line in first.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    assert "frenzy plan" in commands[0] and "pip install" in commands[0]
    assert "pytest" in commands[1]
    # .ci/run executes the second command of this block.
    assert "sed -n 2p" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
