"""``plan_job``: choose GPU type, GPU count, nodes, layout and recipe for one training job on a cluster."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError, require_number, short_repr
from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.diagnosis import type_rejections
from frenzy_core.planning.estimators import AnalyticEstimator, LayoutEstimator
from frenzy_core.planning.infeasible import infeasible_error, mixing_reason
from frenzy_core.planning.launchers import LaunchScope
from frenzy_core.planning.mixed import mixed_search
from frenzy_core.planning.mixed_plan import build_mixed_plan, single_type_score
from frenzy_core.planning.mixed_solve import MixedChoice, score
from frenzy_core.planning.nodes import Locality
from frenzy_core.planning.offload import (
    FallbackSearched,
    may_offload,
    needs_fallback,
    no_known_hosts,
    offload_note,
    offload_searches,
    unknown_hosts,
)
from frenzy_core.planning.placement import Solution, solve_cp_sat, solve_exhaustive
from frenzy_core.planning.plan import Plan, StagePlan
from frenzy_core.planning.request import DEFAULT_MIXED_STAGES, Objective, PlanConstraints
from frenzy_core.planning.runners_up import runners_up
from frenzy_core.planning.search import ClusterLike, Search, make_search
from frenzy_core.planning.shapes import shape_links
from frenzy_core.planning.stages import stage_search, stage_search_skipped
from frenzy_core.planning.stages_plan import build_stage_plan
from frenzy_core.planning.uneven import uneven_groups, uneven_note

__all__ = ["SOLVERS", "build_plan", "plan_job", "solve"]

SOLVERS = ("cp-sat", "exhaustive")

MAX_TIME_LIMIT_S = 86400.0
"""Longest solver time limit accepted (a day; the default is 10 s)."""
MAX_TOP_K = 1000
"""Most runners-up a plan lists."""
"""Solver names ``plan_job`` accepts."""


def solve(search: Search, table: CandidateTable, solver: str, time_limit_s: float) -> Solution | None:
    """Run the named solver on a candidate table."""
    if solver == "cp-sat":
        return solve_cp_sat(table, search.pool, time_limit_s=time_limit_s)
    return solve_exhaustive(table, search.pool)


def _notes(search: Search, gpu_type: str, level: int) -> list[str]:
    """What the plan changed from the request or what its placement costs, in words."""
    notes = []
    fallback = search.precisions.get(gpu_type)
    if fallback is not None:
        notes.append(f"precision {fallback.value}: {gpu_type} has no bf16 peak and the request left the precision "
                     f"at its default {search.training.precision.value}")
    racks, zones = search.pool.crosses(gpu_type, Locality(level))
    pool = search.pool
    for crossed, where, given in ((racks, "rack", pool.inter_rack_bytes_per_s),
                                  (zones, "zone", pool.inter_zone_bytes_per_s or pool.inter_rack_bytes_per_s)):
        if crossed:
            link = (f"timed at the inter-{where} link, {given / 1e9:g} GB/s per GPU" if given is not None
                    else f"no inter-{where} link given, so timed at the nodes' NICs")
            notes.append(f"no single {where} holds the job: its groups cross {where}s ({link})")
    return notes


def build_plan(search: Search, table: CandidateTable, solution: Solution, top_k: int) -> Plan:
    """The :class:`Plan` of a solution: full estimates on its placement's links, runners-up and losing types."""
    row = solution.candidate
    i = int(table.layout[row])
    gpu_type = table.gpu_types[int(table.gpu[row])]
    spec = search.specs[gpu_type]
    parallel = table.layouts.parallel(i)
    training = table.layouts.training(i, search.recipe(gpu_type))
    placement = table.pool_of(row, search.pool).assign(gpu_type, parallel.tp, list(solution.nodes_used),
                                                       list(solution.groups), Locality(solution.level))
    links = shape_links(search.pool, gpu_type, search.links[gpu_type], int(table.level[row]),
                        int(table.per_node[row]))
    if solution.level == Locality.DOMAIN:  # the domain it sits in (the candidate was timed with the largest)
        links = links._replace(gpus_per_node=search.pool.domain_gpus(list(placement)))
    memory = search.estimator.memory(search.model, training, parallel)
    time_estimate = search.estimator.time(search.model, training, parallel, spec, links)
    usable = int(table.reports[int(table.gpu[row])].usable_bytes)
    notes = _notes(search, gpu_type, solution.level)
    samples = int(table.samples[i])
    groups: tuple[StagePlan, ...] = ()
    if samples != training.global_batch_size:  # ranks that differ by one micro-batch: two groups of the type
        groups, time_estimate = uneven_groups(search.model, training, parallel, samples, search.estimator, spec,
                                              links, placement, usable, gpu_type, (memory, time_estimate))
        training = training.replace(global_batch_size=samples)
        notes.append(uneven_note(groups, training.micro_batch_size))
    rows, feasible = table.options
    pph = float(table.price_per_hour_usd[row])
    return Plan(
        model=search.model, gpu_type=gpu_type, gpu_spec=spec, num_gpus=int(table.world[row]),
        placement=placement,
        parallel=parallel, training=training, memory=memory, time=time_estimate, links=links,
        default_batch=search.default_batch, placement_mode=table.placement,
        launcher=None if search.scope is None else search.scope.name, notes=notes, usable_bytes=usable,
        host_memory_bytes={n.name: n.host_memory_bytes for n in search.pool.nodes if n.name in placement},
        price_per_hour_usd=None if np.isnan(pph) else pph, objective=search.objective,
        token_budget=search.constraints.token_budget,
        objective_value=float(table.value[row]), stranded_gpus=solution.stranded_gpus, optimal=solution.optimal,
        solver=solution.solver, solve_time_s=solution.solve_time_s,
        alternatives=runners_up(table, rows, feasible, row, top_k),
        rejected=type_rejections(table, search.pool, rows, feasible, row, search.constraints), stages=groups,
    )


def _stage_plan(search: Search, table: CandidateTable, solution: Solution | None, replicas: MixedChoice | None,
                incumbent: tuple[int, ...] | None, until: float, top_k: int, notes: list[str], start: float
                ) -> Plan | None:
    """The form (a) plan where one beats the best single-type plan and the best replica mix (else None)."""
    if replicas is not None:
        mixed_key = score(search.objective, replicas.step_us, replicas.num_gpus, replicas.price_units)
        incumbent = mixed_key if incumbent is None else min(incumbent, mixed_key)
    recipes, staged, stage_notes = stage_search(search, until, incumbent)
    notes.extend(stage_notes)
    if staged is None:
        return None
    return build_stage_plan(search, recipes, staged, table, solution, top_k, notes, time.perf_counter() - start)


def _offload_plan(search: Search, table: CandidateTable, solver: str, until: float, top_k: int
                  ) -> Plan | FallbackSearched:
    """The offload fallback (:mod:`frenzy_core.planning.offload`): the first offloading recipe that has a plan,
    with a note saying what it offloads and why, else what was searched. The first recipe is always searched (as
    the request's own table is always built), the others only before ``until`` (a ``time.perf_counter()``
    value), so the call overruns its limit by one table at most."""
    if not needs_fallback(table):
        return FallbackSearched()
    searches = offload_searches(search)
    if not searches:
        return FallbackSearched(no_hosts=may_offload(search.training) and no_known_hosts(search))
    for k, offloaded in enumerate(searches):
        if k > 0 and time.perf_counter() > until:
            return FallbackSearched(tuple(searches[:k]), tuple(searches[k:]))
        fallback = offloaded.table()
        solution = solve(offloaded, fallback, solver, max(until - time.perf_counter(), MIN_SOLVER_S))
        if solution is not None:
            plan = build_plan(offloaded, fallback, solution, top_k)
            note = offload_note(search, table, offloaded, plan.gpu_type, plan.memory.host_bytes)
            return unknown_hosts(plan, search).replace(notes=[*plan.notes, note])
    return FallbackSearched(tuple(searches))


def _check_options(solver: object, time_limit_s: object, top_k: object) -> None:
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ConfigError(f"unknown solver {short_repr(solver)}", field="solver", value=solver,
                          hint="use one of " + ", ".join(repr(s) for s in SOLVERS))
    require_number("time_limit_s", time_limit_s, low=0, low_open=True, high=MAX_TIME_LIMIT_S)
    require_number("top_k", top_k, low=0, high=MAX_TOP_K, integer=True)


MIN_SOLVER_S = 0.01
"""Least time CP-SAT is given when estimation used up the limit (it then returns its greedy hint)."""


def plan_job(model: ModelConfig, cluster: ClusterLike, training: TrainingConfig | None = None, *,
             objective: Objective | str = "throughput",
             constraints: PlanConstraints | Mapping[str, Any] | None = None, time_limit_s: float = 10,
             top_k: int = 5, solver: str = "cp-sat", estimator: LayoutEstimator | None = None,
             launcher: str | LaunchScope | None = None, time_model: str | Path | None = None,
             mixed_types: bool = True, mixed_stages: bool = DEFAULT_MIXED_STAGES, uneven_dp: bool = True,
             offload_fallback: bool = True) -> Plan:
    """The best plan for training ``model`` on the free GPUs of ``cluster``.

    Fixed: what ``training`` sets (sequence length, global batch, precision, optimizer, framework, ...); without
    a global batch, :func:`frenzy_core.config.default_global_batch` (moved by at most 5 % to split evenly).
    Searched: GPU type, GPU count, nodes, dp/tp/pp (vpp, cp, ep where the model and recipe call for them) and
    the fields in :data:`SEARCHED_TRAINING_FIELDS`, unless ``constraints`` pins them or ``training`` sets them
    explicitly (``TrainingConfig(recompute="full")`` keeps full recompute; fields left at their defaults are
    searched). ``launcher`` (a name of :data:`frenzy_core.planning.launchers.LAUNCH_SCOPES`) keeps the plan
    within what that launcher can start. ``time_limit_s`` bounds the whole call. Raises ConfigError on bad
    input and InfeasiblePlanError (with what blocked every option and the smallest change that would help)
    when nothing fits. ``estimator`` replaces the analytic memory and time models; ``time_model`` (a file from
    ``frenzy calibrate``) gives the analytic time model calibrated parameters. ``mixed_types`` also searches
    data-parallel replica groups of different GPU types (:mod:`frenzy_core.planning.mixed`), taken only when
    their objective beats the best single-type plan's (no launcher or one whose scope launches them, placement
    ``any``). ``mixed_stages`` (with ``mixed_types``) also searches pipelines whose stages run on different GPU
    types with uneven layer counts (:mod:`frenzy_core.planning.stages`), taken only where it beats both (default
    :data:`~frenzy_core.planning.request.DEFAULT_MIXED_STAGES`); with ``launcher``, only for a launcher that
    starts such pipelines (``LaunchScope.stages``). ``uneven_dp`` also plans data-parallel ranks that differ by one
    micro-batch where the batch does not split evenly (framework ``torch``, no launcher or one that passes each
    rank its count: :mod:`frenzy_core.planning.uneven`). ``offload_fallback``: where nothing fits without offload
    and ``training`` sets no offload field, also search recipes that offload the optimizer, then the parameters
    (:mod:`frenzy_core.planning.offload`; the scheduler's runs say no).
    """
    _check_options(solver, time_limit_s, top_k)
    if mixed_stages and not mixed_types:
        raise ConfigError("mixed_stages=True searches pipelines over GPU types, which mixed_types=False rules out",
                          field="mixed_stages", value=mixed_stages,
                          hint="set mixed_types=True (the default; --mixed-types), or leave mixed_stages off")
    if time_model is not None:
        if estimator is not None:
            raise ConfigError("give estimator or time_model, not both", field="time_model",
                              hint="pass AnalyticEstimator(time_model=...) as the estimator")
        estimator = AnalyticEstimator(time_model=time_model)
    deadline = time.perf_counter() + time_limit_s
    search = make_search(model, cluster, training, objective, constraints, estimator, launcher, uneven=uneven_dp)
    table = search.table()
    solution = solve(search, table, solver, max(deadline - time.perf_counter(), MIN_SOLVER_S))
    if mixed_types or solution is None:
        start = time.perf_counter()
        incumbent = None if solution is None else single_type_score(search, table, solution)
        # with no single-type plan, half of what is left, so the suggestions get the other half
        until = deadline if solution is not None else start + (deadline - start) / 2
        # with pipeline stages too, the replica mix gets half of that and the stages the rest
        layouts, choice, notes = mixed_search(
            search, start + (until - start) / 2 if mixed_types and mixed_stages else until, solver, incumbent)
        if mixed_types and mixed_stages:
            staged = _stage_plan(search, table, solution, choice, incumbent, until, top_k, notes, start)
            if staged is not None:
                return staged
        if choice is not None and mixed_types:
            return build_mixed_plan(search, layouts, choice, table, solution, top_k, notes, solver,
                                    time.perf_counter() - start)
    if solution is None:
        # a mix that fits without offload (mixed_types off) is the suggestion, not an offloading plan; the
        # fallback gets half of what is left, the suggestions the other half
        now = time.perf_counter()
        found = (_offload_plan(search, table, solver, now + (deadline - now) / 2, top_k)
                 if offload_fallback and choice is None else FallbackSearched())
        if isinstance(found, Plan):
            return found
        word: str | None
        if choice is not None:
            types = " + ".join(choice.tables.types)
            word = f"mix GPU types (mixed_types=True): {choice.num_gpus} GPUs of {types}"
        elif search.mixable and not notes:
            word = mixing_reason(search, table, stage_search_skipped(search) if mixed_types and mixed_stages
                                 else "mixed_stages=True searches them")
        elif any("time limit" in note for note in notes):  # cut short: nothing is known of a mix (and callers
            word = "; ".join(n for n in notes if "time limit" in n)  # such as the scheduler must not read "none")
        else:
            word = None  # not searched (a launcher, even or whole nodes, a recipe that offloads)
        raise infeasible_error(search, table, deadline, word, offloaded=found)
    return build_plan(search, table, solution, top_k)
