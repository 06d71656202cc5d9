"""The ``frenzy`` application: one sub-command per module, registered here."""

from __future__ import annotations

import typer

from frenzy_core.cli import calibrate_cmd, catalogues, memory_cmd, plan_cmd, simulate_cmd

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
app.command("plan")(plan_cmd.plan)
app.command("memory")(memory_cmd.memory)
app.command("simulate")(simulate_cmd.simulate)
app.command("calibrate")(calibrate_cmd.calibrate)
app.command("models")(catalogues.models)
app.command("gpus")(catalogues.gpus)
app.command("clusters")(catalogues.clusters)


def main() -> None:
    """Console-script entry point."""
    app()
