"""The ``frenzy`` application: one sub-command per module, registered here."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

try:  # typer >= 0.24 carries its own copy of click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer on click
    from click.exceptions import UsageError  # type: ignore[assignment,no-redef]

from frenzy_core.cli import calibrate_cmd, catalogues, memory_cmd, plan_cmd, simulate_cmd
from frenzy_core.cli._common import EXIT_BAD_INPUT, err_console

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


def main() -> None:
    """Console-script entry point: parser errors (bad option, bad choice, missing MODEL) as one ``error:`` line on
    stderr with exit code 2, as the docs promise, instead of click's boxed usage text."""
    try:
        code = app(standalone_mode=False)  # returns the exit code of typer.Exit instead of raising it
    except UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        err_console.print(f"[bold red]error:[/] {exc.format_message()}{hint}", highlight=False, soft_wrap=True,
                          markup=True)
        sys.exit(EXIT_BAD_INPUT)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted", highlight=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
