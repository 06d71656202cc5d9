"""What every figure shares: the output formats, matplotlib loaded on first use, one palette, saving."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from frenzy_core import _limits as limits
from frenzy_core._files import PLOT_SUFFIXES, figure_path
from frenzy_core.errors import ConfigError, OptionalDependencyError, short_repr

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["GIB", "PLOT_SUFFIXES", "category_colour", "check_plot_path", "figure_text", "new_figure", "save"]

GIB = 2**30


_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
            "#bab0ac", "#86bcb6", "#d4a6c8")
"""Tableau 10 and two of its light tints: distinguishable, and safe for the common colour-vision deficiencies."""


def category_colour(index: int) -> str:
    """The colour of the ``index``-th category of a figure."""
    return _PALETTE[index % len(_PALETTE)]


def figure_text(field: str, value: object) -> str:
    """``value``, a text given by the user, as a figure draws it literally: every ``$`` escaped, since matplotlib
    would parse the text between two as mathtext and fail at save time on ``$$`` or ``$x^$``. ConfigError naming
    ``field`` unless it is a str, encodable as UTF-8 (a lone surrogate makes matplotlib's text layout raise) and
    within :data:`~frenzy_core._limits.FIGURE_TEXT_CHARS` (drawing time grows with its length)."""
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be a string, got {type(value).__name__} {short_repr(value)}", field=field,
                          value=value)
    if len(value) > limits.FIGURE_TEXT_CHARS.high:
        raise ConfigError(f"{field} has {len(value):,} characters, more than {limits.FIGURE_TEXT_CHARS.high:,}, "
                          f"the most frenzy_core draws ({limits.FIGURE_TEXT_CHARS.why})", field=field,
                          value=value, hint="shorten it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{field} {short_repr(value)} holds a lone surrogate at {exc.start}, which no font draws",
                          field=field, value=value, hint="pass valid Unicode text") from None
    return value.replace("$", r"\$")


def check_plot_path(path: str | Path, field: str = "path") -> Path:
    """``path`` as a Path when a file can be written there (``_files.output_path``) and its suffix is a figure
    type (checked before any drawing); ConfigError naming ``field`` otherwise."""
    return figure_path(path, field)


def new_figure(feature: str, **kwargs: Any) -> Figure:
    """A matplotlib figure drawn off-screen (no display needed); OptionalDependencyError without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise OptionalDependencyError("matplotlib", "plot", feature) from None
    return Figure(**kwargs)


def save(fig: Figure, path: Path) -> None:
    """Write ``fig`` as the path's type; no timestamp in SVG or PDF, so the same figure gives the same file."""
    import matplotlib

    try:
        with matplotlib.rc_context({"svg.hashsalt": "frenzy"}):  # SVG ids from a fixed salt, not a random one
            fig.savefig(path, dpi=120, bbox_inches="tight",
                        metadata={"Date": None} if path.suffix.lower() != ".png" else None)
    except OSError as exc:  # a missing folder, a name too long, no permission
        raise ConfigError(f"cannot write the figure {short_repr(str(path), 200)}: {exc.strerror or exc}",
                          field="path", value=str(path), hint="write into a folder that exists") from None
