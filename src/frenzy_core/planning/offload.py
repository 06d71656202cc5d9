"""The offload fallback: where no layout fits the GPUs without offload and the request said nothing about
offload, the planner searches offloading recipes, the optimizer first and then the parameters too, on the
nodes whose host memory it knows, and the plan says so (docs/planner.md, "Offload fallback").
"""

from __future__ import annotations

from dataclasses import replace

from frenzy_core.config.training import Framework, OffloadDevice, TrainingConfig
from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.launchers import OFFLOAD_ZERO_STAGES, offload_kind
from frenzy_core.planning.plan import Plan, RejectReason
from frenzy_core.planning.search import Search

__all__ = ["OFFLOAD_FIELDS", "offload_note", "offload_searches", "unknown_hosts"]

OFFLOAD_FIELDS = ("offload_optimizer", "offload_params", "activation_offload_layers")
"""Training fields a request that sets any of keeps as it set them (no fallback)."""

GIB = 2**30

def _recipes(training: TrainingConfig) -> list[TrainingConfig]:
    """The offloading recipes tried, in order: the optimizer on the host, then the parameters too (torch)."""
    cpu = OffloadDevice.CPU
    recipes = [training.replace(offload_optimizer=cpu)]
    if training.framework is Framework.TORCH:
        recipes.append(training.replace(offload_optimizer=cpu, offload_params=cpu))
    return recipes


def _known_hosts(search: Search) -> Search:
    """The pool with the GPUs of nodes whose host memory is unknown taken out: the fallback puts states the
    request did not offload only on hosts it can check (the cluster file's host_memory_bytes, or the GPU type's
    typical node)."""
    pool = search.pool
    if all(n.host_memory_bytes is not None for n in pool.nodes):
        return search
    return replace(search, pool=pool.with_nodes(tuple(
        n if n.host_memory_bytes is not None else n._replace(free_indices=()) for n in pool.nodes)))


def offload_searches(search: Search) -> list[Search]:
    """The searches of the fallback, in the order to try them; none where the request set an offload field or
    already offloads, or where its launcher or pinned ZeRO stages cannot run the recipe."""
    t = search.training
    if t.offloads or set(OFFLOAD_FIELDS) & t.model_fields_set:
        return []
    base = _known_hosts(search)
    cons = search.constraints
    out = []
    for recipe in _recipes(t):
        kind = offload_kind(recipe)
        if search.scope is not None and search.scope.offload is not None and kind not in search.scope.offload:
            continue
        if recipe.framework is Framework.MEGATRON:  # HybridDeviceOptimizer: with the distributed optimizer
            if cons.distributed_optimizer is False:
                continue
            pinned = cons.replace(distributed_optimizer=True)
            recipe = recipe.replace(distributed_optimizer=True)  # as the launcher's type check reads it
        else:
            stages = [z for z in cons.zero_stages or (0, 1, 2, 3) if z in OFFLOAD_ZERO_STAGES[kind]]
            if not stages:
                continue
            pinned = cons.replace(zero_stages=stages)
        out.append(replace(base, training=recipe, constraints=pinned))
    return out


def unknown_hosts(plan: Plan, search: Search) -> Plan:
    """``plan`` with the GPU types whose every node's host memory is unknown said to be left out of the fallback
    for that reason (their free GPUs were taken out, which the losing-type diagnosis would call too few)."""
    known = {n.gpu_type for n in search.pool.nodes if n.host_memory_bytes is not None}
    rejected = [r if r.gpu_type in known or r.reason is RejectReason.NOT_ALLOWED else r.replace(
        reason=RejectReason.HOST_MEMORY, message="not used to offload: the host memory of its nodes is unknown "
        "(give host_memory_bytes for them in the cluster file)") for r in plan.rejected]
    return plan.replace(rejected=rejected)


def offload_note(search: Search, table: CandidateTable, offloaded: Search, gpu_type: str, host_bytes: int) -> str:
    """What the fallback changed and why, in words: what it offloads, the least memory per GPU without offload
    against what the type has usable, and what each rank keeps on the host."""
    t = offloaded.training
    what = ("the optimizer (fp32 master weights, optimizer states and the step) to host memory "
            "(offload_optimizer='cpu')" if t.offload_params is OffloadDevice.NONE else
            "the optimizer and the parameters with their gradients to host memory (offload_optimizer='cpu', "
            "offload_params='cpu')")
    report = next(r for r in table.reports if r.gpu_type == gpu_type)
    need = ("no layout within the request fits it" if report.min_device_bytes is None else
            f"without offload the least layout needs {report.min_device_bytes / GIB:,.1f} GiB per GPU")
    return (f"offloads {what}: {need}, over the {report.usable_bytes / GIB:,.1f} GiB usable of {gpu_type}; "
            f"the host keeps {host_bytes / GIB:,.1f} GiB per rank, checked against each node's host memory "
            "(nodes of unknown host memory are not used for it); the time includes the host step and the PCIe "
            "copies (the 'offload' line)")
