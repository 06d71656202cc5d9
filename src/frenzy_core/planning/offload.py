"""The offload fallback: where no layout fits the GPUs without offload and the request said nothing about
offload, the planner searches offloading recipes, the optimizer first and then the parameters too, on the
nodes whose host memory it knows, and the plan says so (docs/planner.md, "Offload fallback").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frenzy_core.config.training import Framework, OffloadDevice, TrainingConfig
from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.diagnosis import NOT_ALLOWED_MESSAGE
from frenzy_core.planning.launchers import FULL_OFFLOAD, OFFLOAD_ZERO_STAGES, OPTIMIZER_OFFLOAD, offload_kind
from frenzy_core.planning.plan import Plan, Rejection, RejectReason
from frenzy_core.planning.search import Search

__all__ = ["OFFLOAD_FIELDS", "FallbackSearched", "may_offload", "needs_fallback", "no_known_hosts", "offload_note",
           "offload_searches", "offload_words", "unknown_hosts"]

OFFLOAD_FIELDS = ("offload_optimizer", "offload_params", "activation_offload_layers")
"""Training fields a request that sets any of keeps as it set them (no fallback)."""

GIB = 2**30

_WORDS = {OPTIMIZER_OFFLOAD: "the optimizer", FULL_OFFLOAD: "the optimizer and the parameters"}
"""What each fallback recipe offloads, in words."""


def offload_words(search: Search) -> str:
    """What one fallback search offloads, in words."""
    return _WORDS[offload_kind(search.training)]


def _in_order(searches: tuple[Search, ...]) -> str:
    """What a run of fallback searches offloads, in order: "the optimizer, then the parameters"."""
    parts: list[str] = []
    for s in searches:
        parts.append("the parameters" if parts and offload_kind(s.training) == FULL_OFFLOAD else offload_words(s))
    return ", then ".join(parts) + ("," if len(parts) > 1 else "")


@dataclass(frozen=True)
class FallbackSearched:
    """What the fallback searched and found no plan with: the offloading searches it ran, in order, and those the
    time limit left out; the refusal says exactly these (a framework or launcher may allow the optimizer only)."""

    searched: tuple[Search, ...] = ()
    cut: tuple[Search, ...] = ()
    no_hosts: bool = False
    """Nothing was searched: no node's host memory is known."""

    def reason(self) -> str | None:
        """The refusal's words for it (None: the fallback did not apply)."""
        out = ["offloading was not searched: no node's host memory is known (give host_memory_bytes in the "
               "cluster file)"] if self.no_hosts else []
        if self.searched:
            out.append(f"offloading {_in_order(self.searched)} to the host memory of the nodes that give it does "
                       "not fit either")
        if self.cut:
            out.append(f"the time limit ended the search before offloading {_in_order(self.cut)} was tried")
        return "; ".join(out) or None


def _recipes(training: TrainingConfig) -> list[TrainingConfig]:
    """The offloading recipes tried, in order: the optimizer on the host, then the parameters too (torch)."""
    cpu = OffloadDevice.CPU
    recipes = [training.replace(offload_optimizer=cpu)]
    if training.framework is Framework.TORCH:
        recipes.append(training.replace(offload_optimizer=cpu, offload_params=cpu))
    return recipes


def _known_hosts(search: Search) -> Search | None:
    """The search on the nodes whose host memory is known (None: no node's is): the fallback puts states the
    request did not offload only on hosts it can check (the cluster file's host_memory_bytes, or the GPU type's
    typical node). The others are left out of its pool, so nothing searched on it (the suggestions too) frees or
    adds GPUs there."""
    pool = search.pool
    known = tuple(n for n in pool.nodes if n.host_memory_bytes is not None)
    if not known:
        return None
    return search if len(known) == len(pool.nodes) else replace(search, pool=pool.with_nodes(known))


def may_offload(training: TrainingConfig) -> bool:
    """Whether the fallback may offload for this recipe: it offloads nothing and sets no offload field."""
    return not training.offloads and not set(OFFLOAD_FIELDS) & training.model_fields_set


def no_known_hosts(search: Search) -> bool:
    """Whether no node's host memory is known (the fallback has nowhere to offload to)."""
    return _known_hosts(search) is None


def offload_searches(search: Search) -> list[Search]:
    """The searches of the fallback, in the order to try them; none where the request set an offload field or
    already offloads, or where its launcher or pinned ZeRO stages cannot run the recipe."""
    t = search.training
    base = _known_hosts(search)
    if not may_offload(t) or base is None:
        return []
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
        out.append(replace(base, training=recipe, constraints=pinned, fallback=True))
    return out


def needs_fallback(table: CandidateTable) -> bool:
    """Whether the fallback applies to a table without a plan: no type that is allowed and that the launcher and
    the recipe can run has a layout fitting its free GPUs' memory (a limit or the placement, not memory, blocked
    the others; a type that cannot be used at all does not stop the fallback for those that can)."""
    return not any(r.allowed and r.n_fit_free > 0 and not r.refused for r in table.reports)


UNKNOWN_HOSTS = ("not used to offload: the host memory of its nodes is unknown (give host_memory_bytes for them in "
                 "the cluster file)")
"""Why a type took no part in the fallback."""


def unknown_hosts(plan: Plan, search: Search) -> Plan:
    """``plan`` with the GPU types whose every node's host memory is unknown (left out of the fallback's pool)
    said to be left out for that reason."""
    seen = {plan.gpu_type, *(r.gpu_type for r in plan.rejected)}
    allowed = search.constraints.gpu_types
    left_out = [Rejection(gpu_type=t, reason=RejectReason.HOST_MEMORY, message=UNKNOWN_HOSTS)
                if allowed is None or t in allowed else
                Rejection(gpu_type=t, reason=RejectReason.NOT_ALLOWED, message=NOT_ALLOWED_MESSAGE)
                for t in search.pool.gpu_types if t not in seen]
    return plan.replace(rejected=[*plan.rejected, *left_out])


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
