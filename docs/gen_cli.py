"""Regenerate the example outputs in docs/cli.md by running the real commands, or check that they are current.

    python docs/gen_cli.py           # rewrite the outputs (and the figures the examples draw)
    python docs/gen_cli.py --check   # exit 1 and show what changed when an output is stale

A generated example is one or more marker lines, then a ``console`` fence whose content this script owns::

    <!-- cli: frenzy plan llama-3.1-8b | head 12 -->
    <!-- cli: cat job.sbatch -->
    ```console
    $ frenzy plan llama-3.1-8b
    ...
    ```

The fence gets, per marker, ``$ COMMAND`` (with ``  # exit N`` when N is not 0) and the command's stdout (its
stderr when it fails; ``cat FILE`` shows a file an earlier example wrote), cut to the first and/or last lines
asked for (``| head N``, ``| tail N``, both: the middle becomes ``...``). Commands run in-process as the console
script runs them (``frenzy_core.cli.app.capture``), 100 columns wide, in a scratch folder holding every file the
page declares with ``<!-- cli-file: NAME -->`` above a fence (written as shown), so relative paths read as in the
page. A figure an example draws into ``img/`` (``--plot img/x.png``) is copied beside the page. Solver times vary from run to
run, so they are masked when outputs are compared.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "cli.md"
COLUMNS = 100
"""Width of every generated output: wide enough for the tables, narrow enough to read on a page."""

_MARKER = re.compile(r"<!-- cli: ((?:frenzy|cat) [^|]+?)(?: \| (head \d+(?: tail \d+)?|tail \d+))? -->")
_FILE = re.compile(r"<!-- cli-file: (\S+) -->\n```[a-z]*\n(.*?)```\n", re.DOTALL)
_BLOCK = re.compile(r"((?:<!-- cli: .+? -->\n)+)```console\n(.*?)```\n", re.DOTALL)
_VARYING = (re.compile(r"\b\d+ ms\b"), re.compile(r'"solve_time_s": [0-9.e+-]+'))
"""Solver times: the only parts of an output that change between two runs of the same command."""


@dataclass(frozen=True)
class Example:
    """One marker: the command line as shown and how much of its output the page keeps."""

    command: str
    head: int | None
    tail: int | None

    @classmethod
    def parse(cls, line: str) -> Example:
        match = _MARKER.fullmatch(line)
        if match is None:
            raise SystemExit(f"{PAGE.name}: not a marker: {line!r} (expected '<!-- cli: frenzy ... [| head N]"
                             " [tail N] -->')")
        cut = dict(zip(*[iter((match.group(2) or "").split())] * 2))
        return cls(match.group(1), int(cut["head"]) if "head" in cut else None,
                   int(cut["tail"]) if "tail" in cut else None)

    def shown(self, code: int, output: str) -> str:
        """The fence lines of this example: the command and the kept part of its output."""
        lines = output.rstrip("\n").splitlines()
        lines = [line.rstrip() for line in lines]
        head, tail = self.head, self.tail
        if head is not None or tail is not None:
            keep_head, keep_tail = head or 0, tail or 0
            if keep_head + keep_tail < len(lines):
                lines = lines[:keep_head] + ["..."] + (lines[-keep_tail:] if keep_tail else [])
        exit_note = f"  # exit {code}" if code else ""
        return "\n".join([f"$ {self.command}{exit_note}", *lines]) + "\n"


@contextmanager
def _scratch(files: dict[str, str]) -> Iterator[Path]:
    """A temporary working folder holding ``files`` (and an ``img/`` folder for figures)."""
    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="frenzy-docs-") as tmp:
        root = Path(tmp)
        for name, text in files.items():
            (root / name).write_text(text, encoding="utf-8")
        (root / "img").mkdir()
        os.chdir(root)
        try:
            yield root
        finally:
            os.chdir(here)


def _run(example: Example) -> str:
    """The example's fence lines from running it now (in the current folder); ``cat FILE`` shows a file an
    earlier example wrote."""
    from frenzy_core.cli.app import capture

    words = shlex.split(example.command)
    if words[0] == "cat":
        return example.shown(0, Path(words[1]).read_text(encoding="utf-8"))
    result = capture(words[1:], COLUMNS)
    return example.shown(result.exit_code, result.stdout if result.exit_code == 0 else result.stderr)


def _figures(command: str) -> list[str]:
    """The figures a command draws into ``img/``: those are the page's pictures (others stay in the scratch)."""
    words = shlex.split(command)
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--plot" and words[i + 1].startswith("img/")]


def _keep_figure(made: Path, kept: Path) -> None:
    """Copy a figure beside the page; a PNG as 256 colours (a fifth of the bytes, the same picture to the eye)."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    if made.suffix.lower() != ".png":
        shutil.copyfile(made, kept)
        return
    from PIL import Image  # matplotlib's own dependency

    with Image.open(made) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(kept, optimize=True)


def render(page: str, *, copy_figures: bool = False) -> str:
    """``page`` with every generated fence rewritten from the commands' output now."""
    files = {name: text for name, text in _FILE.findall(page)}
    with _scratch(files) as root:
        def block(match: re.Match[str]) -> str:
            examples = [Example.parse(line) for line in match.group(1).splitlines()]
            body = "".join(_run(e) for e in examples)
            if copy_figures:
                for e in examples:
                    for figure in _figures(e.command):
                        _keep_figure(root / figure, PAGE.parent / figure)
            return f"{match.group(1)}```console\n{body}```\n"

        return _BLOCK.sub(block, page)


def masked(text: str) -> str:
    """``text`` with the solver times replaced, for comparing two runs."""
    for pattern in _VARYING:
        text = pattern.sub(lambda m: re.sub(r"[0-9.e+-]+", "N", m.group(0)), text)
    return text


def stale(page: str) -> list[str]:
    """A unified diff of what regenerating ``page`` would change (solver times aside); empty when current."""
    fresh = render(page)
    if masked(fresh) == masked(page):
        return []
    return list(difflib.unified_diff(page.splitlines(), fresh.splitlines(), "docs/cli.md", "regenerated",
                                     lineterm="", n=1))


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    if "--check" in argv:
        diff = stale(page)
        print("\n".join(diff) if diff else f"{PAGE.name} is current")
        return 1 if diff else 0
    PAGE.write_text(render(page, copy_figures=True), encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
