"""Issue 15's reproducers, timed: each must give its ConfigError in under a second (the acceptance target,
reported here, never asserted in a unit test). The cases are ``tests/hostile_cases.py``; the first call of each
process pays for imports and caches, so every case runs twice and the second time is reported.

Run: ``python benchmarks/hostile_inputs.py`` (prints a Markdown table for docs/benchmarks.md).
"""

from __future__ import annotations

import platform
import re
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from frenzy_core import ConfigError  # noqa: E402
from hostile_cases import CASES  # noqa: E402

TARGET_S = 1.0


def main() -> int:
    print(f"{date.today()} {platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| reproducer | result | seconds |\n|---|---|---|")
    slow = 0
    for case in CASES:
        outcome, seconds = "", 0.0
        for _ in range(2):
            with tempfile.TemporaryDirectory() as tmp:
                began = time.perf_counter()
                try:
                    case.run(Path(tmp))
                    outcome = "no error"
                except ConfigError as exc:
                    outcome = "ConfigError" if re.search(case.match, str(exc)) else f"other message: {exc}"
                seconds = time.perf_counter() - began
        slow += seconds >= TARGET_S or outcome != "ConfigError"
        print(f"| {case.name} | {outcome} | {seconds:.3f} |")
    print(f"\n{len(CASES)} reproducers, {slow} slower than {TARGET_S:g} s or without their ConfigError")
    return slow


if __name__ == "__main__":
    sys.exit(main())
