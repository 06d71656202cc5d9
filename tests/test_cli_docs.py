"""docs/cli.md shows what the commands print today: regenerating its examples with docs/gen_cli.py changes
nothing but solver times, and no console example on the page is written by hand."""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from project_scripts import DOCS, load_script


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    if not (DOCS / "gen_cli.py").is_file() or not (DOCS / "cli.md").is_file():
        pytest.skip("docs/ is not in this checkout")
    return load_script(DOCS / "gen_cli.py")


def test_the_cli_page_is_current(gen: ModuleType) -> None:
    diff = gen.stale(gen.PAGE.read_text(encoding="utf-8"))
    assert not diff, "docs/cli.md is stale; run: python docs/gen_cli.py\n" + "\n".join(diff)


def test_every_console_example_is_generated(gen: ModuleType) -> None:
    page = gen.PAGE.read_text(encoding="utf-8")
    fences = [m.start() for m in re.finditer(r"^```console\n", page, re.MULTILINE)]
    generated = [m.end(1) for m in gen._BLOCK.finditer(page)]
    assert fences and fences == generated, "a console fence without a '<!-- cli: ... -->' marker"
    for line in re.findall(r"<!-- cli: .*? -->", page):
        gen.Example.parse(line)  # every marker parses
    figures = [f for line in re.findall(r"<!-- cli: (.*?) -->", page) for f in gen._figures(line)]
    assert figures and all((DOCS / f).is_file() for f in figures), "a figure the page draws is not committed"


def test_outputs_are_cut_as_the_marker_says(gen: ModuleType) -> None:
    ten = "".join(f"line {i}\n" for i in range(10))
    both = gen.Example.parse("<!-- cli: frenzy gpus | head 2 tail 1 -->")
    assert both.shown(0, ten) == "$ frenzy gpus\nline 0\nline 1\n...\nline 9\n"
    assert gen.Example.parse("<!-- cli: frenzy gpus | tail 1 -->").shown(2, ten) == (
        "$ frenzy gpus  # exit 2\n...\nline 9\n")
    assert gen.Example.parse("<!-- cli: frenzy gpus | head 20 -->").shown(0, ten) == "$ frenzy gpus\n" + ten
    with pytest.raises(SystemExit, match="not a marker"):
        gen.Example.parse("<!-- cli: frenzy gpus | grep x -->")


def test_only_solver_times_are_masked(gen: ModuleType) -> None:
    assert gen.masked("(proven optimal by cp-sat in 17 ms)") == gen.masked("(proven optimal by cp-sat in 4 ms)")
    assert gen.masked('"solve_time_s": 0.0171,') == gen.masked('"solve_time_s": 1e-05,')
    assert gen.masked("117,817 tokens/s") != gen.masked("117,818 tokens/s")
    assert gen.masked("2.225 s per step") != gen.masked("2.226 s per step")
