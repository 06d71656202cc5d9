"""Shared CLI plumbing: reading a model argument and turning library errors into one-line exits."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console

from frenzy_core.config.model import ModelConfig
from frenzy_core.errors import ConfigError, FrenzyError, InfeasiblePlanError

__all__ = ["EXIT_BAD_INPUT", "EXIT_INFEASIBLE", "console", "err_console", "load_model_arg", "handle_errors",
           "print_json", "gib"]

EXIT_INFEASIBLE = 1
"""Exit code for a request no layout can satisfy."""
EXIT_BAD_INPUT = 2
"""Exit code for invalid input (unknown names, bad values)."""

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def load_model_arg(model: str) -> ModelConfig:
    """A preset name, or a path to a Hugging Face ``config.json`` (or its folder)."""
    path = Path(model)
    if path.suffix == ".json" or path.is_dir() or path.exists():
        if not path.exists():
            raise ConfigError(f"model file {model!r} does not exist", field="MODEL", value=model,
                              hint="give a preset name (frenzy models) or a path to a config.json")
        return ModelConfig.from_hf_config(path)
    return ModelConfig.preset(model)


def handle_errors(func: F) -> F:
    """Run a command; print library errors as one line and exit 2 (bad input) or 1 (infeasible)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InfeasiblePlanError as exc:
            err_console.print(f"[bold red]infeasible:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INFEASIBLE) from None
        except (ConfigError, FrenzyError) as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper  # type: ignore[return-value]


def print_json(data: Any) -> None:
    """Machine-readable output on stdout, nothing else."""
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


def gib(n_bytes: float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n_bytes / 2**30:.2f}"
