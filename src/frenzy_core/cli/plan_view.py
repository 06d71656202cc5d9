"""A :class:`Plan` as rich tables: summary, memory per stage, time per step, runners-up, losing GPU types."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table

from frenzy_core.cli._common import gib, new_table
from frenzy_core.cli.memory_view import stage_memory_table
from frenzy_core.planning.explain import format_value, host_line
from frenzy_core.planning.launchers import offload_kind
from frenzy_core.planning.plan import Alternative, Plan
from frenzy_core.timing.result import TIME_CATEGORIES

__all__ = ["plan_renderables"]


def _sharding(zero_stage: int, distributed_optimizer: bool, sequence_parallel: bool) -> str:
    text = "distributed optimizer" if distributed_optimizer else f"ZeRO {zero_stage}"
    return text + (", sequence parallel" if sequence_parallel else "")


def _placement(plan: Plan) -> str:
    by_size: dict[int, list[str]] = {}
    for node, gpus in plan.placement.items():
        by_size.setdefault(len(gpus), []).append(node)
    parts = []
    for size, nodes in by_size.items():
        shown = ", ".join(nodes[:4]) + (f", ... ({len(nodes)} nodes)" if len(nodes) > 4 else "")
        parts.append(f"{size} GPUs on each of {shown}" if len(nodes) > 1 else f"{size} GPUs on {shown}")
    return "; ".join(parts)


def _summary(plan: Plan) -> Table:
    t, tm, mem = plan.training, plan.time, plan.memory
    table = new_table("Plan", ["", ""], left=("",), show_header=False)
    table.columns[0].style = "bold"
    status = "proven optimal" if plan.optimal else "best found, not proven optimal"
    rows = [
        ("GPUs", (" + ".join(f"{g.num_gpus} x {g.gpu_type}" for g in plan.stages) if plan.mixed
                  else f"{plan.num_gpus} x {plan.gpu_type}") + f" on {len(plan.placement)} node(s)"),
        (
            "placement",
            _placement(plan)
            + (f"; {plan.stranded_gpus} GPU(s) left free on those nodes" if plan.stranded_gpus else ""),
        ),
        ("layout", plan.parallel.describe()),
        (
            "batch",
            (
                (f"global batch {tm.global_batch_size} = micro-batch {t.micro_batch_size} x ("
                 + " + ".join(f"{g.micro_batches} x dp {g.dp} on {g.gpu_type}" for g in plan.stages)
                 + f"); seq {t.seq_len}" if plan.grouped else
                 f"global batch {tm.global_batch_size} = micro-batch {t.micro_batch_size} x "
                 f"{tm.num_microbatches} accumulation step(s) x dp {plan.parallel.dp}; seq {t.seq_len}")
                + ("" if plan.default_batch is None else f" (default: {plan.default_batch.source})")
            ),
        ),
        (
            "recipe",
            (
                f"{t.precision.value}, {t.optimizer.value}, recompute {t.recompute.value}, "
                f"{_sharding(t.zero_stage, t.distributed_optimizer, t.sequence_parallel)}, "
                f"{t.framework.value}" + ("" if not t.offloads else f", offload {offload_kind(t)}")
            ),
        ),
        (
            f"objective ({plan.objective.value})",
            (
                f"{format_value(plan.objective_value, plan.objective_unit)} ({status} by {plan.solver} in "
                f"{plan.solve_time_s * 1000:.0f} ms)"
            ),
        ),
        ("throughput", f"{tm.tokens_per_s:,.0f} tokens/s, {tm.iteration_s:.3f} s per step, MFU {tm.mfu:.1%}"),
        (
            "memory",
            (
                f"{gib(mem.device_bytes)} GiB of {gib(plan.usable_bytes)} GiB usable on the busiest GPU "
                f"(stage {mem.busiest_stage}, peak in {mem.peak_phase})"
            ),
        ),
    ]
    host = host_line(plan)
    rows += [("host memory", host.removeprefix("Host memory: "))] if host else []
    rows += [("note", note) for note in plan.notes]
    if plan.price_per_hour_usd is not None:
        rows.append(("price", f"${plan.price_per_hour_usd:,.2f} per hour for all {plan.num_gpus} GPUs"))
    for key, value in rows:
        table.add_row(key, value)
    return table


def _time_table(plan: Plan) -> Table:
    tm = plan.time
    total = sum(tm.breakdown.values())
    table = new_table("Time per step, busiest GPU", ["component", "seconds", "share"])
    for cat in TIME_CATEGORIES:
        seconds = tm.breakdown.get(cat, 0.0)
        if seconds > 0:
            table.add_row(cat.replace("_", " "), f"{seconds:.3f}", f"{seconds / total:.0%}")
    if tm.overlapped_s > 0:
        table.add_row("overlapped with compute", f"-{tm.overlapped_s:.3f}", "", style="dim")
    table.add_row("= step", f"{tm.iteration_s:.3f}", "", style="bold")
    return table


def _alternatives_table(plan: Plan) -> Table:
    unit = plan.objective_unit
    extra = [] if unit == "tokens/s" else [plan.objective.value]
    table = new_table(
        "Runners-up", ["GPUs", "layout", "recipe", "GiB/GPU", "tokens/s", *extra], left=("layout", "recipe")
    )
    for col in table.columns[:2]:
        col.no_wrap = True
    alts: list[Alternative] = plan.alternatives
    for a in alts:
        recipe = f"mbs {a.micro_batch_size}, " + (
            "" if a.recompute.value == "none" else f"{a.recompute.value} recompute, "
        )
        recipe += _sharding(a.zero_stage, a.distributed_optimizer, a.sequence_parallel)
        value = [] if not extra else [format_value(a.objective_value, unit)]
        table.add_row(
            f"{a.num_gpus} x {a.gpu_type}",
            a.parallel.describe(),
            recipe,
            gib(a.device_bytes),
            f"{a.tokens_per_s:,.0f}",
            *value,
        )
    return table


def _rejections_table(plan: Plan) -> Table:
    table = new_table(
        "Why the other GPU types lost", ["GPU type", "reason", "details"], left=("reason", "details")
    )
    table.columns[0].no_wrap = True
    for r in plan.rejected:
        table.add_row(r.gpu_type, r.reason.value.replace("_", " "), r.message)
    return table


def plan_renderables(plan: Plan) -> Group:
    """Everything ``frenzy plan`` shows for one plan, in reading order."""
    parts: list[RenderableType] = [_summary(plan), ""]
    parts += [stage_memory_table(plan.memory, "Memory per GPU by pipeline stage"), ""]
    parts += [_time_table(plan), ""]
    if plan.alternatives:
        parts += [_alternatives_table(plan), ""]
    if plan.rejected:
        parts.append(_rejections_table(plan))
    return Group(*parts)
