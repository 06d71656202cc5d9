"""Pictures of plans and memory estimates (matplotlib, the ``plot`` extra): memory per pipeline stage against
the GPU, one step's pipeline schedule, the runners-up. Imports matplotlib only when a figure is drawn."""

from frenzy_core.plotting.figure import PLOT_SUFFIXES, check_plot_path
from frenzy_core.plotting.memory import memory_figure, plot_memory
from frenzy_core.plotting.plan import plan_figure, plot_plan

__all__ = ["PLOT_SUFFIXES", "check_plot_path", "memory_figure", "plan_figure", "plot_memory", "plot_plan"]
