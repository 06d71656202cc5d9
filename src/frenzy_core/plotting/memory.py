"""Memory per pipeline stage as stacked bars by category, against the GPU's memory and what the headroom
leaves of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from frenzy_core.errors import ConfigError, require_instance
from frenzy_core.hardware import get_gpu_spec
from frenzy_core.hardware.gpu import usable_bytes
from frenzy_core.memory.result import MEMORY_CATEGORIES, OVERHEAD_CATEGORIES, MemoryEstimate
from frenzy_core.planning.request import DEFAULT_HEADROOM, PlanConstraints
from frenzy_core.plotting.figure import GIB, category_colour, check_plot_path, figure_text, new_figure, save

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["GPULimit", "draw_memory", "memory_figure", "plot_memory"]


_LIMIT_COLOURS = ("black", "#d62728", "#17becf", "#7f7f7f")
"""Lines of the GPU limits: outside the category palette, so a line never reads as a category."""


@dataclass(frozen=True)
class GPULimit:
    """A GPU's memory and the part of it a job may use (less the headroom), drawn as two lines."""

    gpu: str
    memory_bytes: int
    usable_bytes: int

    @classmethod
    def of(cls, gpu: str, headroom: float) -> GPULimit:
        """The catalogue GPU ``gpu`` with ``headroom`` of its memory kept free."""
        spec = get_gpu_spec(gpu)
        return cls(figure_text("gpus", spec.id), spec.memory_bytes, usable_bytes(spec.memory_bytes, headroom))


def draw_memory(ax: Axes, estimate: MemoryEstimate, limits: Sequence[GPULimit] = ()) -> None:
    """Stacked GiB per category for each stage's busiest rank (live tensors solid, runtime overhead hatched), a
    line at each limit's memory and a dashed one where its headroom starts."""
    stages = estimate.stages
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    layers = [(c, False) for c in MEMORY_CATEGORIES] + [(c, True) for c in OVERHEAD_CATEGORIES]
    for i, (cat, overhead) in enumerate(layers):
        values = [(st.overhead if overhead else st.breakdown).get(cat, 0) / GIB for st in stages]
        if not any(values):
            continue
        top_bars = ax.bar(x, values, bottom=bottom, width=0.7, color=category_colour(i), hatch="//" if overhead else None,
               edgecolor="white", linewidth=0.5, label=cat.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    top = max(bottom)
    for j, limit in enumerate(limits):
        memory, usable = limit.memory_bytes / GIB, limit.usable_bytes / GIB
        colour = _LIMIT_COLOURS[j % len(_LIMIT_COLOURS)]
        ax.axhline(memory, color=colour, linewidth=1.2, label=f"{limit.gpu}: {memory:.1f} GiB")
        ax.axhline(usable, color=colour, linewidth=1.2, linestyle="--", label=f"less headroom: {usable:.1f} GiB")
        if j == 0:
            ax.axhspan(usable, memory, color="grey", alpha=0.12, linewidth=0)
        top = max(top, memory)
    ax.set_ylim(0, top * 1.12)
    busiest = estimate.busiest_stage
    ax.set_xticks(x, [f"{s.stage}*" if s.stage == busiest else str(s.stage) for s in stages])
    if len(stages) > 16:  # label every few stages of a deep pipeline
        for i, label in enumerate(ax.get_xticklabels()):
            label.set_visible(i % -(-len(stages) // 16) == 0 or i == busiest)
    ax.set_xlabel("pipeline stage (* busiest)")
    ax.set_ylabel("GiB per GPU")
    ax.bar_label(top_bars, [f"{b:.1f}" for b in bottom], padding=2, fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    pad = 1.0 if len(stages) < 3 else 0.5  # a bar or two do not fill the whole width
    ax.set_xlim(-pad, len(stages) - 1 + pad)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def memory_figure(estimate: MemoryEstimate, *, gpus: Sequence[str] = (), headroom: float = DEFAULT_HEADROOM,
                  title: str | None = None) -> Figure:
    """The memory of every pipeline stage, stacked by category, with two lines for each GPU type in ``gpus``:
    its memory, and what ``headroom`` leaves of it; ``title`` heads the busiest stage's total."""
    require_instance("estimate", estimate, MemoryEstimate, "pass the result of estimate_memory")
    PlanConstraints(headroom=headroom)  # the one home of headroom's bounds: a ConfigError outside [0, 1)
    if isinstance(gpus, str) or not isinstance(gpus, Sequence):
        raise ConfigError(f"gpus must be a list of GPU type names, got {type(gpus).__name__}", field="gpus")
    limits = [GPULimit.of(g, headroom) for g in gpus]
    heading = "" if title is None else figure_text("title", title)
    fig = new_figure("plot_memory", figsize=(max(6.0, 3.0 + 0.35 * len(estimate.stages)), 4.8))
    ax = fig.add_subplot()
    draw_memory(ax, estimate, limits)
    busiest = (f"{estimate.device_bytes / GIB:.1f} GiB per GPU on the busiest stage ({estimate.busiest_stage}, "
               f"peak in {estimate.peak_phase})")
    ax.set_title(f"{heading or 'Memory per GPU by pipeline stage'}\n{busiest}", fontsize=10, loc="left")
    return fig


def plot_memory(estimate: MemoryEstimate, path: str | Path, *, gpus: Sequence[str] = (),
                headroom: float = DEFAULT_HEADROOM, title: str | None = None) -> Path:
    """Save :func:`memory_figure` as PNG, SVG or PDF (by the suffix); returns the path."""
    out = check_plot_path(path)
    save(memory_figure(estimate, gpus=gpus, headroom=headroom, title=title), out)
    return out
