"""A plan in words: what was chosen, where its memory and time go, the runners-up, and why other GPUs lost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.finetune import describe_trainable

if TYPE_CHECKING:
    from frenzy_core.planning.plan import Plan

__all__ = ["batch_line", "explain_plan", "format_duration", "format_value", "group_lines", "host_line"]

GIB = 2**30

_MINUTE_S, _HOUR_S, _DAY_S = 60.0, 3600.0, 86400.0


def format_duration(seconds: float) -> str:
    """Seconds for reading, in the largest unit of which there are at least two: ``119 s``, ``12.5 min``,
    ``47.9 h``, ``98.3 days``."""
    if seconds < 2 * _MINUTE_S:
        return f"{seconds:,.0f} s"
    if seconds < 2 * _HOUR_S:
        return f"{seconds / _MINUTE_S:,.1f} min"
    if seconds < 2 * _DAY_S:
        return f"{seconds / _HOUR_S:,.1f} h"
    return f"{seconds / _DAY_S:,.1f} days"


def format_value(value: float, unit: str) -> str:
    """An objective value with its unit, rounded for reading (durations in the unit that reads best; JSON keeps
    the raw value)."""
    if unit == "USD":
        return f"${value:,.2f}"
    if unit == "USD/token":
        return f"${value * 1e6:,.4g} per 1M tokens"
    if unit == "GPUs":
        return f"{value:,.0f} GPUs"
    if unit == "s":
        return format_duration(value)
    return f"{value:,.0f} {unit}"


def batch_line(plan: Plan) -> str:
    """The global batch, with "(default)" and its source when the request gave none."""
    t = plan.training
    gbs = t.global_batch_size or t.micro_batch_size * plan.parallel.dp
    line = f"Global batch: {gbs:,} samples x {t.seq_len:,} tokens = {gbs * t.seq_len:,} tokens per step"
    default = plan.default_batch
    if default is None:
        return line + "."
    moved = "" if default.global_batch_size == gbs else (
        f", moved from {default.global_batch_size:,} to a multiple of micro-batch {t.micro_batch_size} x "
        f"dp {plan.parallel.dp}")
    return f"{line} (default: {default.source}{moved})."


def group_lines(plan: Plan) -> list[str]:
    """Each GPU group of a mixed plan: its share of the batch, its time and memory on its own type, and why the
    split is what it is (groups finish together; the slowest sets the step)."""
    if plan.stages[0].pipeline_stage is not None:
        return _pipeline_lines(plan)
    mbs = plan.training.micro_batch_size
    slowest = max(plan.stages, key=lambda s: s.iteration_s)
    why = ("so that the groups finish together" if plan.mixed
           else "whose count does not split evenly over the ranks")
    lines = [f"Groups (the global batch split in whole micro-batches of {mbs} {why}; the slowest, "
             f"{slowest.micro_batches} micro-batches on {slowest.gpu_type}, sets the step):"]
    for s in plan.stages:
        lines.append(
            f"  {s.gpu_type}: {s.num_gpus} GPUs, dp={s.dp} tp={s.tp} pp={s.pp}, layers {s.first_layer}-"
            f"{s.first_layer + s.num_layers - 1}, {s.micro_batches} micro-batches per replica = {s.samples:,} "
            f"samples ({s.samples / (plan.training.global_batch_size or s.samples):.0%}), {s.iteration_s:.3f} s "
            f"per step, {s.device_bytes / GIB:.1f} of {s.usable_bytes / GIB:.1f} GiB")
    return lines


def host_line(plan: Plan) -> str | None:
    """Host memory of an offloading plan: per rank, and on its fullest node against that node's host memory
    (or that the nodes' host memory is unknown, so it was not checked); None when nothing is offloaded."""
    per_rank = plan.memory.host_bytes
    if per_rank <= 0:
        return None
    line = f"Host memory: {per_rank / GIB:,.1f} GiB per rank (offload)"
    unknown = sorted(name for name in plan.placement if plan.host_memory_bytes.get(name) is None)
    known = [name for name in plan.placement if name not in unknown]
    if known:
        name = max(known, key=lambda n: len(plan.placement[n]) * per_rank / (plan.host_memory_bytes[n] or 1))
        ranks, have = len(plan.placement[name]), plan.host_memory_bytes[name] or 0
        line += (f"; {ranks} ranks on {name} keep {ranks * per_rank / GIB:,.1f} GiB of its {have / GIB:,.0f} GiB "
                 f"({ranks * per_rank / have:.0%})")
    if unknown:
        line += (f"; the host memory of {', '.join(unknown[:3])}{' ...' if len(unknown) > 3 else ''} is unknown, "
                 "so not checked (give host_memory_bytes in the cluster file)")
    return line + "."


def _pipeline_lines(plan: Plan) -> list[str]:
    """Each pipeline stage of a form (a) plan: its type, GPUs, layers, micro-batch time and memory on its type."""
    slowest = max(plan.stages, key=lambda s: s.microbatch_s or 0.0)
    lines = [f"Pipeline stages (1F1B, {plan.time.num_microbatches} micro-batches: the step is the sum of the "
             f"stages' micro-batch times plus {plan.time.num_microbatches - 1} x the slowest, stage "
             f"{slowest.pipeline_stage} on {slowest.gpu_type}):"]
    for s in plan.stages:
        lines.append(
            f"  stage {s.pipeline_stage}: {s.gpu_type}, {s.num_gpus} GPUs, dp={s.dp} tp={s.tp}, layers "
            f"{s.first_layer}-{s.first_layer + s.num_layers - 1} ({s.num_layers}), "
            f"{(s.microbatch_s or 0.0) * 1e3:.1f} ms per micro-batch, {s.device_bytes / GIB:.1f} of "
            f"{s.usable_bytes / GIB:.1f} GiB")
    return lines


def explain_plan(plan: Plan) -> str:
    """Several lines of plain text; stable wording so it can be shown in a terminal or a log."""
    unit = plan.objective_unit
    layout = LayoutArrays.from_configs(plan.training, plan.parallel).describe(0)
    head = (f"{plan.num_gpus} GPUs of {len(plan.gpu_types)} types ({', '.join(plan.gpu_types)})" if plan.mixed
            else f"{plan.num_gpus} x {plan.gpu_type}")
    lines = [
        f"Plan: {head} on {len(plan.placement)} node(s); {layout}.",
        batch_line(plan),
        (f"Objective {plan.objective.value}: {format_value(plan.objective_value, unit)} "
        f"({'proven optimal' if plan.optimal else 'best found, not proven optimal'} by {plan.solver} "
        f"in {plan.solve_time_s * 1000:.0f} ms); {plan.stranded_gpus} free GPU(s) left on the nodes it touches."),
    ]
    t = plan.training
    trains = describe_trainable(t.lora, t.freeze_embeddings, t.trainable_layers)
    lines += [f"Trains: {trains}."] if trains else []
    lines += [f"Note: {note}." for note in plan.notes]
    if plan.grouped:
        lines += group_lines(plan)
    if plan.price_per_hour_usd is not None:
        lines.append(f"Price: ${plan.price_per_hour_usd:,.2f} per hour for all {plan.num_gpus} GPUs.")
    mem = plan.memory
    lines.append(f"Memory of the busiest GPU (stage {mem.busiest_stage}, peak in {mem.peak_phase}): "
                 f"{mem.device_bytes / GIB:.1f} GiB of {plan.usable_bytes / GIB:.1f} GiB usable.")
    for name, nbytes in sorted({**mem.breakdown, **mem.overhead}.items(), key=lambda kv: -kv[1]):
        if nbytes > 0:
            lines.append(f"  {name:<22} {nbytes / GIB:8.2f} GiB")
    host = host_line(plan)
    lines += [host] if host else []
    tm = plan.time
    lines.append(f"Time per step: {tm.iteration_s:.3f} s, {tm.tokens_per_s:,.0f} tokens/s, MFU {tm.mfu:.1%} "
                 f"({tm.num_microbatches} micro-batches per step, {tm.overlapped_s:.3f} s overlapped).")
    for name, seconds in sorted(tm.breakdown.items(), key=lambda kv: -kv[1]):
        if seconds > 0:
            lines.append(f"  {name:<22} {seconds:8.3f} s")
    if plan.alternatives:
        lines.append("Runners-up:")
        for alt in plan.alternatives:
            lines.append(f"  {alt.num_gpus} x {alt.gpu_type} {alt.parallel.describe()} "
                         f"mbs={alt.micro_batch_size} recompute={alt.recompute.value}: "
                         f"{format_value(alt.objective_value, unit)}, {alt.device_bytes / GIB:.1f} GiB per GPU")
    if plan.rejected:
        lines.append("Other GPU types:")
        for rej in plan.rejected:
            lines.append(f"  {rej.gpu_type}: {rej.message}")
    return "\n".join(lines)
