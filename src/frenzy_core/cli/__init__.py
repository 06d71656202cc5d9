"""The ``frenzy`` command line: plans, memory reports and catalogues (typer + rich)."""

from frenzy_core.cli.app import app, main

__all__ = ["app", "main"]
