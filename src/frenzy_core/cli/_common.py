"""Shared CLI plumbing: reading model and cluster arguments, parsing option values, one-line error exits."""

from __future__ import annotations

import errno
import functools
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from frenzy_core._files import exists, is_file
from frenzy_core.config.model import ModelConfig
from frenzy_core.errors import ConfigError, FrenzyError, InfeasiblePlanError, UnknownNameError, short_repr
from frenzy_core.hardware.cluster import DEFAULT_PRESET, Cluster, cluster_preset_info

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_INFEASIBLE",
    "EXIT_INTERNAL",
    "ClusterArg",
    "console",
    "err_console",
    "gib",
    "handle_errors",
    "load_cluster_arg",
    "load_model_arg",
    "new_table",
    "parse_count",
    "parse_names",
    "plot_target",
    "print_json",
    "require_file",
    "require_matplotlib",
    "require_positive",
]

EXIT_INFEASIBLE = 1
"""Exit code for a request no layout can satisfy."""
EXIT_BAD_INPUT = 2
"""Exit code for invalid input (unknown names, bad values); click's own usage errors use it too."""
EXIT_INTERNAL = 3
"""Exit code for an error that is frenzy_core's own bug (reported in one line; FRENZY_DEBUG=1 shows the traceback)."""
EXIT_BROKEN_PIPE = 141
"""Exit code when the reader of stdout goes away (``| head``): 128 + SIGPIPE, what the shell reports for a
writer whose pipe closed (``yes | head -1``)."""

_PIPE_WIDTH = 240
"""Columns when stdout is not a terminal (a pipe, a file): rich would otherwise cut tables at 80."""

class _Console(Console):
    """A rich console that leaves a closed pipe (``frenzy gpus | head -1``) to :func:`handle_errors` instead of
    exiting with 1, which is this command's code for an infeasible plan."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


console = _Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else _PIPE_WIDTH)
"""Human-readable output (stdout); rich picks the stream at print time, so test runners capture it."""
err_console = _Console(stderr=True, width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else _PIPE_WIDTH)
"""Errors, notes and progress that must not mix into ``--json`` output."""

F = TypeVar("F", bound=Callable[..., Any])


def _looks_like_path(value: str, suffixes: tuple[str, ...]) -> bool:
    path = Path(value)
    return path.suffix.lower() in suffixes or "/" in value or "\\" in value or exists(path)


def load_model_arg(model: str) -> ModelConfig:
    """A preset name, or a path to a Hugging Face ``config.json`` (or the folder holding one)."""
    if _looks_like_path(model, (".json",)):
        path = Path(model)
        if not exists(path):
            raise ConfigError(
                f"model file {model!r} does not exist",
                field="MODEL",
                value=model,
                hint="give a preset name (frenzy models) or a path to a config.json",
            )
        return ModelConfig.from_hf_config(path)
    try:
        return ModelConfig.preset(model)
    except UnknownNameError as exc:
        raise _unknown(
            exc, "frenzy models", "MODEL may also be a path to a Hugging Face config.json"
        ) from None


def _unknown(exc: UnknownNameError, lister: str, alternative: str) -> ConfigError:
    """An unknown preset name: the closest names (or the command that lists them), then the other way in."""
    if exc.suggestions:
        known = "did you mean " + ", ".join(repr(s) for s in exc.suggestions) + "?"
    else:
        known = f"list them with '{lister}';"
    return ConfigError(
        f"unknown {exc.kind} {exc.name!r}", field=exc.field, value=exc.name, hint=f"{known} {alternative}"
    )


@dataclass(frozen=True)
class ClusterArg:
    """A cluster read from a ``--cluster`` value, with the words that say where it came from."""

    cluster: Cluster
    label: str
    """E.g. ``cluster 'aws-mixed'`` or ``cluster file my.yaml``."""
    preset: str | None
    """The preset's name; None for a file."""

    def describe(self) -> str:
        """One line: where the cluster comes from and what it holds."""
        counts: dict[str, int] = {}
        for node in self.cluster.nodes:
            counts[node.gpu] = counts.get(node.gpu, 0) + node.gpus_per_node * node.count
        types = ", ".join(f"{n} x {gpu}" for gpu, n in counts.items())
        free = self.cluster.free_gpus
        free_note = "" if free == self.cluster.total_gpus else f", {free} free"
        return (
            f"{self.label}: {self.cluster.total_gpus} GPUs on {self.cluster.num_nodes} nodes{free_note} "
            f"({types})"
        )

    def to_json(self) -> dict[str, Any]:
        """Name, origin and size, for ``--json`` output."""
        return {
            "name": self.cluster.name or self.label,
            "preset": self.preset,
            "total_gpus": self.cluster.total_gpus,
            "free_gpus": self.cluster.free_gpus,
            "nodes": self.cluster.num_nodes,
            "gpu_types": self.cluster.gpu_types,
        }


def load_cluster_arg(value: str | None, scale: int | None = None) -> ClusterArg:
    """A cluster preset name (None: the default preset) or a path to a cluster YAML file."""
    if value is None or value.strip().lower() == "default":
        info = cluster_preset_info(DEFAULT_PRESET)
        cluster = info.cluster if scale is None else info.cluster.scaled(scale)
        return ClusterArg(
            cluster, f"cluster '{info.name}' (the default preset; choose another with --cluster)", info.name
        )
    if _looks_like_path(value, (".yaml", ".yml")):
        path = Path(value)
        if not is_file(path):
            raise ConfigError(
                f"cluster file {value!r} does not exist",
                field="--cluster",
                value=value,
                hint="give a preset name (frenzy clusters) or a path to a cluster YAML file",
            )
        try:
            cluster = Cluster.from_yaml(path)
        except ConfigError as exc:
            raise ConfigError(
                str(exc) if value in str(exc) else f"cluster file {value!r}: {exc}",
                field="--cluster",
                value=value,
                hint="expected 'nodes: [{gpu: a100-80gb, gpus_per_node: 8, count: 2}]'",
            ) from None
        cluster = cluster if scale is None else cluster.scaled(scale)
        label = f"cluster '{cluster.name}' (file {value})" if cluster.name else f"cluster file {value}"
        return ClusterArg(cluster, label, None)
    try:
        info = cluster_preset_info(value)
    except UnknownNameError as exc:
        raise _unknown(
            exc, "frenzy clusters", "--cluster may also be a path to a cluster YAML file"
        ) from None
    cluster = info.cluster if scale is None else info.cluster.scaled(scale)
    return ClusterArg(cluster, f"cluster '{info.name}'", info.name)


def parse_names(value: str | None, option: str) -> list[str] | None:
    """A comma-separated list (``a100-80gb,h100``) as a list of stripped names; None stays None."""
    if value is None:
        return None
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise ConfigError(
            f"{option} got {value!r}, an empty list",
            field=option,
            value=value,
            hint="give comma-separated names, e.g. a100-80gb,h100-sxm",
        )
    return names


_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
"""Decimal multipliers accepted after a count: 300M tokens, 2T tokens (G and B both mean 1e9)."""


def parse_count(value: str | None, option: str) -> int | None:
    """A positive count written as ``1000000``, ``1e9``, ``300M``, ``10B`` or ``2T``; None stays None."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", value)
    number = float(match.group(1)) * _SUFFIXES[match.group(2).lower()] if match else math.nan
    if not (math.isfinite(number) and number >= 1):
        raise ConfigError(
            f"{option} got {value!r}, not a positive count",
            field=option,
            value=value,
            hint="write it as 1000000000, 1e9 or 1B (suffixes K, M, B, T)",
        )
    return round(number)


def require_matplotlib(option: str) -> None:
    """ConfigError before any work when ``option`` (a plot) is asked for without matplotlib installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"{option} needs matplotlib, which is not installed", field=option,
                          hint="pip install 'frenzy_core[plot]', or leave out " + option)


def plot_target(path: Path | None, option: str = "--plot") -> Path | None:
    """A ``--plot`` path checked before any work: a figure suffix, a folder that exists, matplotlib installed."""
    if path is None:
        return None
    from frenzy_core.plotting import check_plot_path

    check_plot_path(path, option)
    require_matplotlib(option)
    return path


def require_file(path: Path | None, option: str, hint: str) -> None:
    """ConfigError naming ``option`` before any work when ``path`` is given but is not a file."""
    if path is not None and not is_file(path):
        raise ConfigError(f"{option} {str(path)!r} does not exist", field=option, value=str(path), hint=hint)


def require_positive(value: float | None, option: str) -> None:
    """ConfigError naming ``option`` unless ``value`` is None or > 0 (typer ranges cannot exclude 0)."""
    if value is not None and not value > 0:
        raise ConfigError(f"{option} must be > 0, got {value:g}", field=option, value=value)


def handle_errors(func: F) -> F:
    """Run a command; print library errors as one line on stderr and exit 2 (bad input) or 1 (infeasible)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InfeasiblePlanError as exc:
            err_console.print(f"[bold red]infeasible:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INFEASIBLE) from None
        except FrenzyError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except BrokenPipeError:  # the reader of stdout left (| head): end quietly
            _discard_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except OSError as exc:  # unreadable files, a plot path in a missing folder
            where = f" {exc.filename!r}" if exc.filename else ""
            err_console.print(
                f"[bold red]error:[/] cannot use{escape(where)}: {escape(exc.strerror or str(exc))}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except Exception as exc:  # a bug of ours: one line, never a traceback (unless asked for)
            if os.environ.get("FRENZY_DEBUG") or type(exc).__module__.startswith(("typer", "click")):
                raise  # typer's own exits and usage errors are handled by the app
            err_console.print(
                f"[bold red]internal error:[/] {type(exc).__name__}: {escape(short_repr(str(exc), 300))} (a bug in "
                "frenzy_core; please report it with the command; FRENZY_DEBUG=1 shows the traceback)",
                highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush into the closed pipe raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # stdout is no file descriptor (a test runner's)
        pass
    finally:
        os.close(devnull)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout, nothing else."""
    typer.echo(json.dumps(data, indent=2))


def new_table(
    title: str | None, columns: list[str], *, left: tuple[str, ...] = (), show_header: bool = True
) -> Table:
    """The house table: title on the left, light rules, the first column (names) never wrapped, numbers
    right-aligned except the ``left`` columns."""
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        show_header=show_header,
    )
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 or col in left else "right", no_wrap=i == 0)
    return table


def gib(n_bytes: float) -> str:
    """Bytes as GiB (2**30) with two decimals."""
    return f"{n_bytes / 2**30:.2f}"
