"""The per-stage memory table of ``frenzy memory`` and ``frenzy plan``: categories down, stages across."""

from __future__ import annotations

from rich.table import Table

from frenzy_core.cli._common import gib, new_table
from frenzy_core.memory.result import MEMORY_CATEGORIES, OVERHEAD_CATEGORIES, MemoryEstimate, StageMemory

__all__ = ["stage_groups", "stage_memory_table"]


def _same(a: StageMemory, b: StageMemory) -> bool:
    return (a.num_layers, a.breakdown, a.overhead, a.peak_phase, a.inflight_microbatches) == (
        b.num_layers,
        b.breakdown,
        b.overhead,
        b.peak_phase,
        b.inflight_microbatches,
    )


def stage_groups(estimate: MemoryEstimate) -> list[tuple[str, StageMemory]]:
    """Runs of consecutive identical stages as (label, first stage): ``stage 0``, ``stages 1-14``.

    Deep pipelines repeat the same middle stage many times; a column per distinct run keeps the table narrow.
    """
    groups: list[list[StageMemory]] = []
    for stage in estimate.stages:
        if groups and _same(groups[-1][0], stage):
            groups[-1].append(stage)
        else:
            groups.append([stage])
    out = []
    for run in groups:
        first, last = run[0].stage, run[-1].stage
        label = f"stage {first}" if first == last else f"stages {first}-{last}"
        if any(s.stage == estimate.busiest_stage for s in run):
            label += " *"
        out.append((label, run[0]))
    return out


def stage_memory_table(estimate: MemoryEstimate, title: str | None) -> Table:
    """GiB per GPU for every category (rows) and pipeline stage (columns); ``*`` marks the busiest stage."""
    groups = stage_groups(estimate)
    table = new_table(title, ["GiB per GPU", *[label for label, _ in groups]])
    stages = [s for _, s in groups]
    for cat in MEMORY_CATEGORIES:
        if any(s.breakdown.get(cat, 0) for s in stages):
            table.add_row(cat.replace("_", " "), *[gib(s.breakdown.get(cat, 0)) for s in stages])
    table.add_row("= live tensors at peak", *[gib(s.peak_bytes) for s in stages], style="bold")
    for cat in OVERHEAD_CATEGORIES:
        if any(s.overhead.get(cat, 0) for s in stages):
            table.add_row(cat.replace("_", " "), *[gib(s.overhead.get(cat, 0)) for s in stages])
    table.add_row("= on the device", *[gib(s.device_bytes) for s in stages], style="bold")
    table.add_row("peak in", *[s.peak_phase for s in stages], style="dim")
    table.add_row("layers", *[str(s.num_layers) for s in stages], style="dim")
    table.add_row("micro-batches in flight", *[f"{s.inflight_microbatches:g}" for s in stages], style="dim")
    return table
