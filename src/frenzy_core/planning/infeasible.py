"""When nothing fits: say what blocked every GPU type and find the smallest changes that would help.

Each suggestion comes from re-running the candidate search with one input relaxed (more free GPUs, a pin
lifted, a limit raised, a shorter sequence) and checking that a candidate can then be placed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from frenzy_core.config.training import Recompute
from frenzy_core.errors import InfeasiblePlanError
from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.diagnosis import extra_free_gpus, type_rejections
from frenzy_core.planning.mixed import mixable_types
from frenzy_core.planning.offload import FallbackSearched, offload_words
from frenzy_core.planning.request import PlacementMode
from frenzy_core.planning.search import Search

__all__ = ["SEQ_LEN_STEP", "infeasible_error", "mixing_reason"]

SEQ_LEN_STEP = 256
"""Granularity of the suggested sequence-length limit (tokens)."""

GIB = 2**30


def _best_row(search: Search) -> tuple[CandidateTable, int] | None:
    table = search.table()
    rows, ok = table.options
    if not ok.any():
        return None
    return table, int(rows[int(np.argmax(ok))])


def _free_gpu_suggestions(search: Search) -> dict[str, str]:
    """More free GPUs: every GPU of the cluster free, then the cheapest way to place each option that fits and
    can then be placed (within its nodes' host memory where it offloads)."""
    all_free = search.pool.with_nodes(tuple(n._replace(free_indices=tuple(range(n.gpus_per_node)))
                                            for n in search.pool.nodes))
    table = replace(search, pool=all_free).table()
    rows, ok = table.options
    placeable = rows[ok]
    best: dict[str, tuple[int, int, int]] = {}  # type -> (extra GPUs, tp, world)
    # per distinct shape and host cap (an offloading candidate's nodes take only the ranks their host memory holds)
    for (g, tp, world, k) in {(int(table.gpu[r]), int(table.tp[r]), int(table.world[r]), int(table.pool[r]))
                              for r in placeable}:
        name = table.gpu_types[g]
        most = None if k == 0 else {n.name: n.free for n in table.pools[k].nodes}
        extra = extra_free_gpus(search.pool, name, tp, world, most)
        if extra is None or extra == 0:
            continue
        if name not in best or (extra, world, tp) < (best[name][0], best[name][2], best[name][1]):
            best[name] = (extra, tp, world)
    out: dict[str, str] = {}
    for name, (extra, tp, world) in sorted(best.items(), key=lambda kv: (kv[1][0], kv[0]))[:2]:
        if world == tp and tp > 1:
            out[f"free {name}"] = f"needs {extra} more free {name} in one node (a tp={tp} group of {world} GPUs)"
        else:
            out[f"free {name}"] = (f"needs {extra} more free {name} GPUs ({world} GPUs in whole tp={tp} groups "
                                   "per node)")
    return out


MAX_CLUSTER_GROWTH = 64
"""Largest multiple of a GPU type's node count tried when even an all-free cluster is too small."""


def _larger_cluster_suggestions(search: Search) -> dict[str, str]:
    """When freeing every GPU does not help: the fewest GPUs of each type that would (the type's nodes doubled
    until a layout fits, up to MAX_CLUSTER_GROWTH times), smallest first."""
    out: list[tuple[int, str, str]] = []
    for gpu_type in search.pool.gpu_types:
        nodes = [n for n in search.pool.nodes if n.gpu_type == gpu_type]
        have = sum(n.gpus_per_node for n in nodes)
        factor = 2
        while factor <= MAX_CLUSTER_GROWTH:
            grown = search.pool.with_nodes(tuple(
                n._replace(name=f"{n.name}+{k}", free_indices=tuple(range(n.gpus_per_node)))
                for k in range(factor) for n in nodes))
            table = replace(search, pool=grown).table()
            rows, ok = table.options
            if ok.any():
                need = int(min(int(table.world[r]) for r, fits in zip(rows, ok) if fits))
                out.append((need, gpu_type, f"a cluster with at least {need} {gpu_type} GPUs (this one has {have})"))
                break
            factor *= 2
    return {f"grow {name}": text for _, name, text in sorted(out)[:2]}


def _pin_suggestions(search: Search) -> dict[str, str]:
    """Lift one pin at a time; suggest the value the best placeable candidate then uses."""
    c = search.constraints
    out: dict[str, str] = {}
    pins = {"recompute": c.recompute, "micro_batch_sizes": c.micro_batch_sizes, "zero_stages": c.zero_stages,
            "distributed_optimizer": c.distributed_optimizer, "sequence_parallel": c.sequence_parallel,
            "tp": c.tp, "pp": c.pp, "headroom": c.headroom or None}
    for field, value in pins.items():
        if value is None:
            continue
        relaxed = {field: 0.0} if field == "headroom" else {field: None}
        found = _best_row(replace(search, constraints=c.replace(**relaxed)))
        if found is None:
            continue
        table, row = found
        i = int(table.layout[row])
        lay = table.layouts
        chosen = {
            "recompute": f"recompute={Recompute.from_code(int(lay.recompute[i])).value}",
            "micro_batch_sizes": f"micro_batch_size={int(lay.micro_batch_size[i])}",
            "zero_stages": f"zero_stage={int(lay.zero_stage[i])}",
            "distributed_optimizer": f"distributed_optimizer={bool(lay.distributed_optimizer[i])}",
            "sequence_parallel": f"sequence_parallel={bool(lay.sequence_parallel[i])}",
            "tp": f"tp={int(lay.tp[i])}", "pp": f"pp={int(lay.pp[i])}", "headroom": "headroom=0",
        }[field]
        out[field] = chosen
    return out


def _limit_suggestions(search: Search) -> dict[str, str]:
    """Raise or drop one limit at a time; suggest the value the best placeable candidate needs."""
    c = search.constraints
    out: dict[str, str] = {}
    if c.placement is not PlacementMode.ANY and (search.scope is None or search.scope.placement is PlacementMode.ANY):
        if _best_row(replace(search, constraints=c.replace(placement=PlacementMode.ANY))) is not None:
            out["placement"] = "placement=any"
    if c.gpu_types is not None:
        found = _best_row(replace(search, constraints=c.replace(gpu_types=None)))
        if found is not None:
            table, row = found
            out["gpu_types"] = f"allow gpu type {table.gpu_types[int(table.gpu[row])]}"
    if c.max_gpus is not None:
        found = _best_row(replace(search, constraints=c.replace(max_gpus=None)))
        if found is not None:
            table, row = found
            rows, ok = table.options
            out["max_gpus"] = f"max_gpus >= {int(table.world[rows[ok]].min())}"
    wanted = c.num_gpus
    if wanted is not None:
        found = _best_row(replace(search, constraints=c.replace(num_gpus=None)))
        if found is not None:
            table, row = found
            rows, ok = table.options
            worlds = sorted({int(w) for w in table.world[rows[ok]]}, key=lambda w: (abs(w - wanted), w))
            out["num_gpus"] = f"num_gpus={worlds[0]}"
    if c.max_price_per_hour_usd is not None:
        found = _best_row(replace(search, constraints=c.replace(max_price_per_hour_usd=None)))
        if found is not None:
            table, row = found
            rows, ok = table.options
            prices = table.price_per_hour_usd[rows[ok]]
            if np.isfinite(prices).any():
                out["max_price"] = f"max_price_per_hour_usd >= {float(np.nanmin(prices)):.2f}"
    if c.deadline_s is not None and c.token_budget is not None:
        found = _best_row(replace(search, constraints=c.replace(deadline_s=None)))
        if found is not None:
            table, row = found
            rows, ok = table.options
            fastest = float((c.token_budget / table.tokens_per_s[rows[ok]]).min())
            out["deadline_s"] = f"deadline_s >= {fastest:.0f}"
    return out


def _host_suggestions(search: Search) -> dict[str, str]:
    """Where host memory blocked a type (offload): training without offload, or the host memory per node that
    would hold every rank the best candidate then puts on a node (its ranks times its host bytes per rank)."""
    table = search.table()
    if not any(r.host_blocked for r in table.reports):
        return {}
    out: dict[str, str] = {}
    t = search.training
    if replace(search, training=t.replace(offload_optimizer="none", offload_params="none",
                                          activation_offload_layers=0)).feasible():
        out["offload"] = "no offload (offload_optimizer='none', offload_params='none', activation_offload_layers=0)"
    unknown = search.pool.with_nodes(tuple(n._replace(host_memory_bytes=None) for n in search.pool.nodes))
    found = _best_row(replace(search, pool=unknown))
    if found is not None:
        table, row = found
        name = table.gpu_types[int(table.gpu[row])]
        ranks = min(int(table.world[row]), search.pool.max_free_in_node(name))
        need = int(table.host_bytes[int(table.layout[row])]) * ranks
        out["host"] = (f"{name} nodes with host_memory_bytes >= {need:,} ({need / GIB:,.0f} GiB: {ranks} ranks "
                       f"of {int(table.host_bytes[int(table.layout[row])]) / GIB:,.1f} GiB)")
    return out


def _seq_len_suggestion(search: Search) -> dict[str, str]:
    """The longest sequence (a multiple of SEQ_LEN_STEP below the request's) that can be placed."""
    seq = search.training.seq_len
    lo, hi = 0, (seq - 1) // SEQ_LEN_STEP  # in steps; hi * step < seq
    if hi == 0:
        return {}

    def ok(steps: int) -> bool:
        training = search.training.replace(seq_len=steps * SEQ_LEN_STEP)
        return replace(search, training=training).feasible()

    if not ok(1):
        return {}
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return {"seq_len": f"sequence length <= {lo * SEQ_LEN_STEP}"}


def mixing_reason(search: Search, table: CandidateTable, stages_skipped: str | None) -> str | None:
    """Why no mix of GPU types meets the request either (None where fewer than two types could mix): the least
    memory any searched layout needs in all against what the free GPUs of the mixable types hold;
    ``stages_skipped``: why pipelines over types (form a) were not searched (None: they were)."""
    types = mixable_types(search)
    if len(types) < 2:
        return None
    dev = table.device_bytes
    valid = dev >= 0
    have = sum(search.pool.free_gpus(t) * search.usable_bytes(t) for t in types)
    if not valid.any():
        return "no mix of GPU types meets the request either: no layout of the model was searched"
    world = table.layouts.world_size[valid]
    total = dev[valid].astype(np.float64) * world
    k = int(np.argmin(total))
    need = f"{total[k] / GIB:,.0f} GiB in all ({dev[valid][k] / GIB:,.1f} GiB per GPU on {world[k]})"
    if total[k] > have:
        return (f"mixing GPU types does not help: the least memory a searched layout needs is {need}, and the "
                f"free GPUs of {', '.join(types)} together hold {have / GIB:,.0f} GiB usable")
    return (f"no mix of GPU types meets the request either (data-parallel replica groups of one layout, every GPU "
            f"of a replica needing the same memory; the free GPUs of {', '.join(types)} hold {have / GIB:,.0f} GiB "
            f"usable, the least a searched layout needs is {need})"
            + ("" if stages_skipped is None else "; pipeline stages on different types with uneven layer counts "
               f"were not searched ({stages_skipped})"))


def _with_recipes(finder: Callable[[Search], dict[str, str]], recipes: list[tuple[Search, str]],
                  deadline: float | None) -> tuple[list[str], bool]:
    """A finder's suggestions, one per change it names (a limit, a pin, a GPU type's free GPUs, ...): the request's
    own recipe's where it has one, else the first offloading recipe's with its words (the planner tries them in
    this order, so with that change it would offload so); and whether the deadline cut them short."""
    out: dict[str, str] = {}
    for search, label in recipes:
        if deadline is not None and time.perf_counter() > deadline:
            return list(out.values()), True
        for key, text in finder(search).items():
            out.setdefault(key, f"{text}, {label}" if label else text)
    return list(out.values()), False


def infeasible_error(search: Search, table: CandidateTable, deadline: float | None = None,
                     mixed: str | None = None, offloaded: FallbackSearched | None = None) -> InfeasiblePlanError:
    """An :class:`InfeasiblePlanError` naming what blocked each GPU type and the smallest changes that help;
    the search for changes stops at ``deadline`` (a ``time.perf_counter()`` value) and says so. ``mixed``:
    the mixed-type search's word (a suggestion when it was off and found a plan, else why it found none).
    ``offloaded``: what the offload fallback searched and found nothing with; the suggestions are then found for
    those offloading recipes too (each saying its recipe), as the planner would plan the changed request."""
    rows, ok = table.options
    reasons = [f"{r.gpu_type}: {r.message}" for r in type_rejections(table, search.pool, rows, ok, None, search.constraints)]
    if mixed is not None and not mixed.startswith("mix GPU types"):
        reasons.append(mixed)
    fallback = offloaded or FallbackSearched()
    why = fallback.reason()
    if why is not None:
        reasons.append(why)
    recipes = [(search, ""), *((s, f"with {offload_words(s)} offloaded") for s in fallback.searched)]
    finders: list[Callable[[Search], dict[str, str]]] = [_free_gpu_suggestions, _host_suggestions, _pin_suggestions,
                                                    _limit_suggestions, _seq_len_suggestion]
    suggestions: list[str] = [mixed] if mixed is not None and mixed.startswith("mix GPU types") else []
    stopped = False
    for finder in finders:
        found, stopped = _with_recipes(finder, recipes, deadline)
        suggestions += found
        if stopped:
            break
    if not suggestions and not stopped:
        suggestions = _with_recipes(_larger_cluster_suggestions, recipes, None)[0]
    model = search.model.name or "the model"
    message = f"no plan fits {model} on this cluster: " + "; ".join(reasons)
    if suggestions:
        message += ". Would make it feasible: " + ", or ".join(suggestions)
    elif stopped:
        message += ". The time limit ended the search for a change that would help"
    else:
        message += (". No single change tried (more free GPUs, more GPUs up to "
                    f"{MAX_CLUSTER_GROWTH}x, lifting a pin or limit, a shorter sequence) helps"
                    + (", with or without offload" if fallback.searched else ""))
    return InfeasiblePlanError(message, reasons=reasons, suggestions=suggestions)
