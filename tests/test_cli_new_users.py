"""What a new user types, run as the ``frenzy`` console script runs it: typos, missing arguments, bad values,
files that do not exist or are not what they claim, ``--json`` everywhere, ``--emit`` for every launcher,
``--plot``, piping. Never a traceback or a numpy warning; an error is one line on stderr; exit codes as
docs/cli.md documents them (0 done, 1 infeasible, 2 bad input, 141 a closed pipe)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from frenzy_core.adapters import LAUNCHERS
from frenzy_core.cli.app import Captured, capture

SMALL = "nodes:\n  - {gpu: a100-80gb, gpus_per_node: 8, count: 1}\n  - {gpu: rtx-3090, gpus_per_node: 4, count: 1}\n"
PHILLY = ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-03 00:00:00,600,1,600,vcA\n"
          "2017-10-03 00:01:00,1200,2,2400,vcA\n")
pytestmark = pytest.mark.filterwarnings("error")  # a numpy or library warning fails the command's test

FAST = ("--cluster", "small.yaml", "--time-limit", "2")
"""A plan in milliseconds: two small nodes (a100-80gb x 8, rtx-3090 x 4)."""


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the files the commands below name, as a user's working folder would have them."""
    (tmp_path / "small.yaml").write_text(SMALL, encoding="utf-8")
    (tmp_path / "philly.csv").write_text(PHILLY, encoding="utf-8")
    (tmp_path / "config.json").write_text("{'model_type': 'llama',", encoding="utf-8")  # not JSON
    (tmp_path / "list.yaml").write_text("- a100-80gb\n- h100-sxm\n", encoding="utf-8")  # a list, not nodes
    (tmp_path / "jobs.csv").write_text("id,when,gpus\n1,2,3\n", encoding="utf-8")  # no known trace header
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(PHILLY.encode())[:40])  # a truncated download
    (tmp_path / "train.log").write_text("step 10 loss 2.3\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str) -> Captured:
    """``frenzy ARGS``; whatever it does, no traceback and no warning reaches the user."""
    result = capture(list(args))
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream and "Warning" not in stream, stream
    return result


def assert_error(result: Captured, code: int, *fragments: str) -> None:
    """Exit ``code``, stdout empty, one line on stderr (``error:`` or ``infeasible:``) holding ``fragments``."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("infeasible: " if code == 1 else "error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


MISTAKES: list[tuple[str, tuple[str, ...], int, tuple[str, ...]]] = [
    # typos: the closest names, as options
    ("model preset typo", ("plan", "lama-3.1-8b"), 2, ("did you mean 'llama-3.1-8b'",)),
    ("cluster preset typo", ("plan", "gpt2", "--cluster", "aws-mix"), 2, ("did you mean 'aws-mixed'",)),
    ("GPU type typo", ("plan", "gpt2", *FAST, "--gpu-types", "a100-80"), 2, ("unknown GPU type",)),
    ("command typo", ("pln", "gpt2"), 2, ("No such command 'pln'", "plan")),
    ("option typo", ("plan", "gpt2", "--objectve", "cost"), 2, ("--objectve", "--objective")),
    ("launcher typo", ("plan", "gpt2", "--emit", "slrum"), 2, ("unknown launcher", "slurm")),
    ("launcher option typo", ("plan", "gpt2", "--emit", "slurm", "-o", "partiton=gpu"), 2,
     ("did you mean -o partition=...?",)),
    ("policy typo", ("simulate", "philly.csv", "--policies", "fifo"), 2, ("unknown policies",)),
    # missing arguments and values
    ("plan without MODEL", ("plan",), 2, ("Missing argument 'MODEL'",)),
    ("memory without MODEL", ("memory",), 2, ("MODEL",)),
    ("simulate without TRACE", ("simulate",), 2, ("TRACE",)),
    ("option without its value", ("plan", "gpt2", "--seq-len"), 2, ("'--seq-len' requires an argument",)),
    ("time to train without tokens", ("plan", "gpt2", "--objective", "time_to_train"), 2,
     ("needs --tokens", "--tokens 10B")),
    ("a log without its layout", ("calibrate", "train.log"), 2, ("--model", "--gpu")),
    ("-o without --emit", ("plan", "gpt2", "-o", "script=train.py"), 2, ("--emit-option needs --emit",)),
    ("--emit-to without --emit", ("plan", "gpt2", "--emit-to", "job.yaml"), 2, ("--emit-to needs --emit",)),
    # bad values
    ("ZeRO stage 4", ("memory", "gpt2", "--zero", "4"), 2, ("'--zero'", "less than or equal to 3")),
    ("a precision that does not exist", ("memory", "gpt2", "--precision", "bf17"), 2, ("bf17",)),
    ("tp 0", ("plan", "gpt2", "--tp", "0"), 2, ("'--tp'",)),
    ("headroom over 1", ("plan", "gpt2", "--headroom", "1.5"), 2, ("'--headroom'",)),
    ("tokens in words", ("plan", "gpt2", "--objective", "cost", "--tokens", "lots"), 2, ("--tokens", "1B")),
    ("a negative price", ("plan", "gpt2", "--max-price-per-hour", "-3"), 2, ("--max-price-per-hour",)),
    ("a zero time limit", ("plan", "gpt2", "--time-limit", "0"), 2, ("--time-limit must be > 0",)),
    ("heads not divisible by tp", ("memory", "gpt2", "--tp", "5", "--seq-len", "1024"), 2,
     ("not divisible by tp=5",)),
    ("longer than the position table", ("memory", "gpt2", "--seq-len", "4096"), 2,
     ("max_position_embeddings=1024",)),
    ("an unknown error policy", ("simulate", "philly.csv", "--on-error", "ignore"), 2, ("--on-error",)),
    ("a figure type matplotlib cannot write", ("plan", "gpt2", "--plot", "plan.jpg"), 2,
     ("must end in .png, .svg or .pdf",)),
    ("a figure in a folder that does not exist", ("memory", "gpt2", "--plot", "figs/memory.png"), 2,
     ("the folder 'figs' does not exist",)),
    ("a launcher file in a folder that does not exist (checked before planning)",
     ("plan", "gpt2", "--emit", "torchrun", "--emit-to", "jobs/train.sh"), 2, ("the folder 'jobs' does not exist",)),
    ("a time-model file in a folder that does not exist (checked before the fit)",
     ("calibrate", "runs.csv", "--out", "models/tm.yaml"), 2, ("--out 'models/tm.yaml': the folder 'models'",)),
    # files that do not exist
    ("a config.json that does not exist", ("plan", "./models/config.json"), 2, ("does not exist",)),
    ("a cluster file that does not exist", ("plan", "gpt2", "--cluster", "my-cluster.yaml"), 2,
     ("does not exist",)),
    ("a trace that does not exist", ("simulate", "philly_2017.csv"), 2, ("does not exist",)),
    ("a time-model file that does not exist", ("plan", "gpt2", "--time-model", "tm.yaml"), 2,
     ("--time-model 'tm.yaml' does not exist", "frenzy calibrate")),
    ("runs that do not exist", ("calibrate", "runs.csv"), 2, ("runs.csv",)),
    # files that are not what they claim
    ("a config.json that is not JSON", ("plan", "config.json"), 2, ("config.json",)),
    ("a cluster file that is a list", ("plan", "gpt2", "--cluster", "list.yaml"), 2, ("list.yaml",)),
    ("a CSV that is no known trace", ("simulate", "jobs.csv"), 2, ("not one of the known trace formats",
                                                                   "--format")),
    ("a truncated .gz trace", ("simulate", "cut.csv.gz"), 2, ("cut.csv.gz",)),
    ("a trace read as the wrong format", ("simulate", "philly.csv", "--format", "sia"), 2, ("sia",)),
    # errors stay off stdout with --json too
    ("a typo with --json", ("plan", "lama-3.1-8b", "--json"), 2, ("did you mean",)),
    # nothing fits: exit 1 with what would help
    # (llama-3.1-70b fits the 8 A100s by offloading its optimizer; 405B does not, even its parameters offloaded)
    ("a model too large for the GPUs allowed", ("plan", "llama-3.1-405b", *FAST), 1, ("no plan fits",)),
    ("a price limit below every GPU", ("plan", "qwen2.5-0.5b", *FAST, "--max-price-per-hour", "1"), 1,
     ("--max-price-per-hour 5.12 (or more)",)),
]


@pytest.mark.parametrize(("args", "code", "fragments"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_one_line_and_its_exit_code(args: tuple[str, ...], code: int, fragments: tuple[str, ...]) -> None:
    result = run(*args)
    assert_error(result, code, *fragments)
    assert result.stdout.strip() == "" or not result.stdout.lstrip().startswith("{")  # no half JSON document


JSON_COMMANDS = [
    ("models",), ("gpus",), ("clusters",), ("clusters", "aws-mixed", "--scale", "64"), ("clusters", "small.yaml"),
    ("memory", "gpt2", "--pp", "2"), ("plan", "qwen2.5-0.5b", *FAST),
    ("simulate", "philly.csv", "--cluster", "small.yaml", "--policies", "fifo-requested"),
]


@pytest.mark.parametrize("args", JSON_COMMANDS, ids=[" ".join(a[:2]) for a in JSON_COMMANDS])
def test_json_everywhere_is_one_document_on_stdout(args: tuple[str, ...]) -> None:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)  # the whole of stdout is one JSON document


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_emit_each_launcher_after_the_plan_and_in_json(launcher: str) -> None:
    shown = run("plan", "qwen2.5-0.5b", *FAST, "--emit", launcher)
    assert shown.exit_code == 0, shown.stderr
    lines = [line.rstrip() for line in shown.stdout.splitlines()]
    rule = next(i for i, line in enumerate(lines) if line.startswith("─") and f" {launcher} (" in line)
    assert lines.index("Why the other GPU types lost") < rule < len(lines) - 1  # the launcher text follows
    data = json.loads(run("plan", "qwen2.5-0.5b", *FAST, "--emit", launcher, "--json").stdout)
    assert data["launch"]["launcher"] == launcher and data["launch"]["text"]


def test_plot_files_and_where_they_went(workdir: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    plan = run("plan", "qwen2.5-0.5b", *FAST, "--plot", "plan.svg")
    assert plan.exit_code == 0 and "Saved the plan figure to plan.svg" in plan.stdout
    assert (workdir / "plan.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    memory = json.loads(run("memory", "gpt2", "--pp", "4", "--plot", "memory.png", "--json").stdout)
    assert memory["plot"] == "memory.png" and (workdir / "memory.png").read_bytes().startswith(b"\x89PNG")


def test_the_friendly_basics() -> None:
    alone = run()
    assert alone.exit_code == 0 and "Usage" in alone.stdout and alone.stderr == ""  # plain `frenzy`: the help
    version = run("--version")
    assert version.exit_code == 0 and version.stdout.startswith("frenzy ")
    for command in ("plan", "memory", "simulate", "calibrate", "models", "gpus", "clusters"):
        helped = run(command, "--help")
        assert helped.exit_code == 0 and "Examples" in helped.stdout


def test_a_reader_that_leaves_early_ends_it_quietly() -> None:
    """``frenzy gpus | head -1``: the pipe closes under the writer; no traceback, exit 141 (128 + SIGPIPE)."""
    with subprocess.Popen([sys.executable, "-m", "frenzy_core.cli", "gpus"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        assert proc.wait(timeout=120) == 141
        assert proc.stderr.read() == b""
