"""What every figure shares: the output formats, matplotlib loaded on first use, one palette, saving."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from frenzy_core.errors import ConfigError, OptionalDependencyError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["GIB", "PLOT_SUFFIXES", "category_colour", "check_plot_path", "new_figure", "save"]

GIB = 2**30

PLOT_SUFFIXES: tuple[str, ...] = (".png", ".svg", ".pdf")
"""File types a figure is written as, chosen by the path's suffix."""

_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
            "#bab0ac", "#86bcb6", "#d4a6c8")
"""Tableau 10 and two of its light tints: distinguishable, and safe for the common colour-vision deficiencies."""


def category_colour(index: int) -> str:
    """The colour of the ``index``-th category of a figure."""
    return _PALETTE[index % len(_PALETTE)]


def check_plot_path(path: str | Path, field: str = "path") -> Path:
    """``path`` as a Path when its suffix is a figure type; ConfigError naming ``field`` otherwise."""
    out = Path(path)
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"{field} {str(out)!r} must end in " + ", ".join(PLOT_SUFFIXES[:-1]) + " or "
                          + PLOT_SUFFIXES[-1], field=field, value=str(out), hint="e.g. plan.png or plan.svg")
    return out


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

    with matplotlib.rc_context({"svg.hashsalt": "frenzy"}):  # SVG element ids from a fixed salt, not a random one
        fig.savefig(path, dpi=120, bbox_inches="tight",
                    metadata={"Date": None} if path.suffix.lower() != ".png" else None)
