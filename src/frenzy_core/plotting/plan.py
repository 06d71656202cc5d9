"""A plan in one figure: memory per stage against the GPU, the runners-up, and one step's pipeline schedule."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.errors import require_instance
from frenzy_core.hardware import get_gpu_spec
from frenzy_core.planning.plan import Plan
from frenzy_core.plotting.figure import GIB, category_colour, check_plot_path, figure_text, new_figure, save
from frenzy_core.plotting.memory import GPULimit, draw_memory
from frenzy_core.plotting.schedule import draw_schedule
from frenzy_core.timing.pipeline import step_timeline

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["draw_runners_up", "plan_figure", "plot_plan"]


_MAX_NAMED_RUNNERS_UP = 8
"""Runners-up numbered on the chart and named in its legend; the rest are drawn unnamed."""


def draw_runners_up(ax: Axes, plan: Plan) -> None:
    """GiB per GPU against tokens/s for the plan (a star) and each runner-up (numbered, coloured by GPU type,
    named in the legend), with the chosen GPU type's usable memory as a dashed line."""
    types = list(dict.fromkeys([plan.gpu_type, *(a.gpu_type for a in plan.alternatives)]))
    shown = {t: figure_text("plan.gpu_type", t) for t in types}
    for rank, alt in enumerate(plan.alternatives, start=1):
        xy = (alt.device_bytes / GIB, alt.tokens_per_s)
        named = rank <= _MAX_NAMED_RUNNERS_UP
        label = (f"{rank}: {alt.num_gpus} x {shown[alt.gpu_type]}, {alt.parallel.describe()}, mbs {alt.micro_batch_size}"
                 if named else None)
        ax.scatter(*xy, s=40, color=category_colour(types.index(alt.gpu_type)), zorder=3, label=label)
        if named:
            ax.annotate(str(rank), xy, textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.scatter(plan.memory.device_bytes / GIB, plan.time.tokens_per_s, s=220, marker="*", color="#e15759",
               edgecolor="black", linewidth=0.6, zorder=4,
               label=f"chosen: {plan.num_gpus} x {shown[plan.gpu_type]}, {plan.parallel.describe()}")
    ax.axvline(plan.usable_bytes / GIB, color="black", linestyle="--", linewidth=1,
               label=f"{shown[plan.gpu_type]} usable: {plan.usable_bytes / GIB:.1f} GiB")
    ax.margins(x=0.15)
    ax.set_ylim(0, max([plan.time.tokens_per_s, *(a.tokens_per_s for a in plan.alternatives)]) * 1.12)
    ax.set_xlabel("GiB per GPU (busiest stage)")
    ax.set_ylabel("tokens/s (whole job)")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set_title("Chosen plan and runners-up" if plan.alternatives else "Chosen plan (no runners-up)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, alpha=0.3)


def _title(plan: Plan) -> str:
    layout = LayoutArrays.from_configs(plan.training, plan.parallel).describe(0)
    t, tm = plan.training, plan.time
    name = figure_text("plan.model.name", plan.model.name) if plan.model.name else "model"
    return (f"{name} on {plan.num_gpus} x {figure_text('plan.gpu_type', plan.gpu_type)} ({len(plan.placement)} node(s)): "
            f"{layout}\n{t.precision.value}, seq {t.seq_len}, global batch {tm.global_batch_size}: "
            f"{tm.tokens_per_s:,.0f} tokens/s, {tm.iteration_s:.3f} s per step, MFU {tm.mfu:.0%}; "
            f"{plan.memory.device_bytes / GIB:.1f} of {plan.usable_bytes / GIB:.1f} GiB usable")


def plan_figure(plan: Plan) -> Figure:
    """The figure of ``plan``: memory per pipeline stage stacked by category against the GPU's memory and the
    headroom line; the runners-up as GiB/GPU against tokens/s; one step's pipeline schedule per stage."""
    require_instance("plan", plan, Plan, "pass the result of plan_job")
    rows = min(plan.parallel.pp, 32)
    fig = new_figure("plot_plan", figsize=(14.0, 8.0 + 0.12 * rows))
    grid = fig.add_gridspec(2, 2, height_ratios=(1.0, 0.45 + 0.04 * rows), hspace=0.4, wspace=0.75)
    memory_ax, runners_ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    spec = get_gpu_spec(plan.gpu_type)
    draw_memory(memory_ax, plan.memory, [GPULimit(spec.id, spec.memory_bytes, plan.usable_bytes)])
    memory_ax.set_title("Memory per GPU by pipeline stage", fontsize=10)
    draw_runners_up(runners_ax, plan)
    draw_schedule(fig.add_subplot(grid[1, :]), step_timeline(plan.time, plan.parallel), plan.parallel)
    fig.suptitle(_title(plan), fontsize=11, x=0.02, ha="left")
    return fig


def plot_plan(plan: Plan, path: str | Path) -> Path:
    """Save :func:`plan_figure` of ``plan`` as PNG, SVG or PDF (by the suffix); returns the path."""
    out = check_plot_path(path)
    save(plan_figure(plan), out)
    return out
