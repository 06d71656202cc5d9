"""One optimizer step as a timeline per pipeline stage: forward and backward slots, the idle bubble between
them, then the exposed gradient synchronisation and optimizer step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.timing.pipeline import StepTimeline

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["draw_schedule"]

_FORWARD = ("#4e79a7", "#a0cbe8", "#2b4a6f", "#c6dcef")
_BACKWARD = ("#f28e2b", "#ffbe7d", "#b5651d", "#ffd9b0")
"""Forward and backward colours, one shade per model chunk of a rank (interleaved schedules)."""
_IDLE, _TAIL = "#f6d6d6", "#9c9c9c"

_MAX_LABELLED_PASSES = 48
"""Number the micro-batches in their slots only while a rank runs at most this many passes (else unreadable)."""


def draw_schedule(ax: Axes, timeline: StepTimeline, parallel: ParallelConfig) -> None:
    """One row per pipeline stage (stage 0 on top): its slots in time, idle time shaded as the bubble."""
    from matplotlib.patches import Patch

    end = timeline.schedule_s + timeline.tail_s
    chunks = max(s.chunk for s in timeline.slots) + 1
    per_rank = len(timeline.slots) // timeline.pp
    for stage in range(timeline.pp):
        ax.broken_barh([(0.0, timeline.schedule_s)], (stage - 0.4, 0.8), facecolors=_IDLE)
        mine = [s for s in timeline.slots if s.stage == stage]
        colours = [(_BACKWARD if s.backward else _FORWARD)[s.chunk % len(_FORWARD)] for s in mine]
        ax.broken_barh([(s.start_s, s.end_s - s.start_s) for s in mine], (stage - 0.4, 0.8), facecolors=colours,
                       edgecolor="white", linewidth=0.3)
        if timeline.tail_s > 0:
            ax.broken_barh([(timeline.schedule_s, timeline.tail_s)], (stage - 0.4, 0.8), facecolors=_TAIL)
        if per_rank <= _MAX_LABELLED_PASSES:
            for s in mine:
                ax.text((s.start_s + s.end_s) / 2, stage, str(s.microbatch), ha="center", va="center", fontsize=6,
                        color="white" if s.chunk % 2 == 0 else "black")
    ax.set_ylim(timeline.pp - 0.5, -0.5)
    ax.set_yticks(range(timeline.pp), [f"stage {i}" for i in range(timeline.pp)])
    if timeline.pp > 16:
        for i, label in enumerate(ax.get_yticklabels()):
            label.set_visible(i % -(-timeline.pp // 16) == 0)
    ax.set_xlim(0, end * 1.005)
    ax.set_xlabel("seconds into the step")
    handles = []
    for c in range(chunks):
        suffix = f", chunk {c}" if chunks > 1 else ""
        handles += [Patch(color=_FORWARD[c % len(_FORWARD)], label=f"forward{suffix}"),
                    Patch(color=_BACKWARD[c % len(_BACKWARD)], label=f"backward{suffix}")]
    handles.append(Patch(color=_IDLE, label="idle (pipeline bubble)"))
    if timeline.tail_s > 0:
        handles.append(Patch(color=_TAIL, label="exposed data-parallel comm. + optimizer"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    bubble = timeline.schedule_s - timeline.busy_s(0)
    m = per_rank // (2 * chunks)
    name = {PipelineSchedule.ONE_F_ONE_B: "1F1B", PipelineSchedule.INTERLEAVED: f"interleaved 1F1B (vpp={chunks})",
            PipelineSchedule.GPIPE: "GPipe"}[parallel.schedule] if parallel.pp > 1 else "no pipeline"
    ax.set_title(f"One step, {name}: {m} micro-batch(es) per rank, forward {_seconds(timeline.forward_s)} + "
                 f"backward {_seconds(timeline.backward_s)} each; bubble {_seconds(bubble)} ({bubble / end:.0%} of "
                 "the step)", fontsize=9, loc="left")


def _seconds(value: float) -> str:
    return f"{value * 1e3:.1f} ms" if value < 1.0 else f"{value:.2f} s"
