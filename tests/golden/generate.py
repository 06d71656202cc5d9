"""Write the golden corpus: ``python tests/golden/generate.py`` (from the repository root).

Run it only after a deliberate change to what the library answers (a memory or time model fix, a new rule),
and commit the new ``corpus.json`` on its own, saying which entries changed and why (docs/architecture.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from golden.cases import cases  # noqa: E402

CORPUS = HERE / "corpus.json"


def main() -> None:
    corpus = {name: run() for name, run in cases()}
    CORPUS.write_text(json.dumps(corpus, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(corpus)} entries to {CORPUS}")


if __name__ == "__main__":
    main()
