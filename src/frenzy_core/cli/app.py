"""The ``frenzy`` application: one sub-command per module, registered here."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

try:  # typer >= 0.24 carries its own copy of click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer on click
    from click.exceptions import UsageError  # type: ignore[assignment,no-redef]

from frenzy_core.cli import calibrate_cmd, catalogues, memory_cmd, plan_cmd, simulate_cmd
from frenzy_core.cli._common import EXIT_BAD_INPUT, console, err_console

app = typer.Typer(
    name="frenzy",
    help=(
        "How much memory each GPU of an LLM training job needs, and which GPUs and layout it should get.\n\n"
        "Start with: frenzy plan llama-3.1-8b"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"frenzy {version('frenzy_core')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            typer.echo("frenzy (not installed)")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                 help="Print the version and exit.")] = False) -> None:
    """How much memory each GPU of an LLM training job needs, and which GPUs and layout it should get."""


app.command("plan")(plan_cmd.plan)
app.command("memory")(memory_cmd.memory)
app.command("simulate")(simulate_cmd.simulate)
app.command("calibrate")(calibrate_cmd.calibrate)
app.command("models")(catalogues.models)
app.command("gpus")(catalogues.gpus)
app.command("clusters")(catalogues.clusters)


def main(args: list[str] | None = None) -> int:
    """The ``frenzy`` command on ``args`` (default: the process's arguments); returns the exit code, which the
    console script exits with.

    Parser errors (bad option, bad choice, missing MODEL) are one ``error:`` line on stderr with exit code 2, as
    the docs promise, instead of click's boxed usage text.
    """
    try:
        code = app(args=args, prog_name="frenzy", standalone_mode=False)  # returns typer.Exit's code, not raising
    except UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `frenzy`: the help is the answer, not an error
            typer.echo(exc.format_message(), nl=False)  # (rich has printed it already; plain click has not)
            return 0
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        err_console.print(f"[bold red]error:[/] {exc.format_message()}{hint}", highlight=False, soft_wrap=True,
                          markup=True)
        return EXIT_BAD_INPUT
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted", highlight=False)
        return 130
    return code if isinstance(code, int) else 0



@dataclass(frozen=True)
class Captured:
    """What one ``frenzy`` command printed, and its exit code."""

    exit_code: int
    stdout: str
    stderr: str


def capture(args: list[str], columns: int = 100) -> Captured:
    """Run ``frenzy ARGS`` in this process as the console script does, ``columns`` wide whatever the terminal,
    and return what it printed (docs/gen_cli.py's examples, the CLI tests)."""
    out, err = io.StringIO(), io.StringIO()
    with _width(columns), redirect_stdout(out), redirect_stderr(err):
        code = main(args)
    return Captured(code, out.getvalue(), err.getvalue())


@contextmanager
def _width(columns: int) -> Iterator[None]:
    saved = console.width, err_console.width
    console.width = err_console.width = columns
    try:
        yield
    finally:
        console.width, err_console.width = saved
