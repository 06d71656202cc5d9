"""The :class:`Plan` of a mixed choice (replica groups of different GPU types), re-estimated group by group."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.hardware.gpu import Links
from frenzy_core.memory import MemoryEstimate
from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.diagnosis import type_rejections
from frenzy_core.planning.mixed_solve import PRICE_STEPS_PER_USD_HOUR, TIME_STEPS_PER_S, MixedChoice, score
from frenzy_core.planning.placement import Solution
from frenzy_core.planning.plan import Alternative, Plan, StagePlan
from frenzy_core.planning.request import Objective
from frenzy_core.planning.runners_up import alternative_of, runners_up
from frenzy_core.planning.search import Search
from frenzy_core.timing import TimeEstimate
from frenzy_core.timing.gpu_rows import peak_dtype

__all__ = ["build_mixed_plan", "group_links", "group_placement", "objective_value", "single_type_score"]


def single_type_score(search: Search, table: CandidateTable, solution: Solution) -> tuple[int, ...]:
    """The best single-type plan's key in the mixed search's units, on the request's batch (a default batch the
    single-type plan moved is compared by tokens/s, so both train equal work)."""
    row = solution.candidate
    gbs = search.training.global_batch_size
    assert gbs is not None
    step_us = math.ceil(gbs * search.training.seq_len / float(table.tokens_per_s[row]) * TIME_STEPS_PER_S)
    pph = float(table.price_per_hour_usd[row])
    price = None if np.isnan(pph) else round(pph * PRICE_STEPS_PER_USD_HOUR)
    return score(search.objective, step_us, int(table.world[row]), price)


def group_links(tp: int, group_intra_bytes_per_s: Iterable[float], job_inter_bytes_per_s: Iterable[float]) -> Links:
    """The links a replica group of a mixed plan is timed with: one tensor-parallel group per node (what every
    placement of whole groups gives at least), the slowest NVLink of the group's nodes, and the slowest
    inter-node link of all of the job's nodes (types share no fast fabric, so the groups' gradient all-reduce
    crosses the slowest NICs). The one rule for the planner, the scheduler's placements and their check."""
    return Links(tp, float(min(group_intra_bytes_per_s)), float(min(job_inter_bytes_per_s)))


def group_placement(search: Search, gpu_type: str, tp: int, groups: int, taken: set[str]) -> dict[str, list[int]]:
    """``groups`` tensor-parallel groups on the free GPUs of ``gpu_type``: roomiest nodes first (fewest nodes)."""
    nodes = sorted((n for n in search.pool.nodes if n.gpu_type == gpu_type and n.name not in taken),
                   key=lambda n: -(n.free // tp))
    out: dict[str, list[int]] = {}
    for node in nodes:
        if groups == 0:
            break
        k = min(node.free // tp, groups)
        if k:
            out[node.name] = list(node.free_indices[: k * tp])
            groups -= k
    assert groups == 0, f"{gpu_type} cannot hold the group's tensor-parallel groups"
    return out


def _job_time(slowest: TimeEstimate, gbs: int, seq_len: int, flops_per_sample: float, peak_sum: float,
              num_gpus: int) -> TimeEstimate:
    """The slowest group's step as the whole job's: its breakdown, the job's batch, GPUs and MFU."""
    step = slowest.iteration_s
    return slowest.replace(
        tokens_per_s=gbs * seq_len / step, samples_per_s=gbs / step, global_batch_size=gbs, world_size=num_gpus,
        mfu=flops_per_sample * gbs / (step * peak_sum), model_tflops_per_gpu=flops_per_sample * gbs / (step * num_gpus)
        / 1e12)


def objective_value(search: Search, tokens_per_s: float, num_gpus: int, price: float | None) -> float:
    budget = search.constraints.token_budget
    if search.objective is Objective.THROUGHPUT:
        return tokens_per_s
    if search.objective is Objective.GPUS:
        return float(num_gpus)
    if search.objective is Objective.TIME_TO_TRAIN:
        assert budget is not None
        return budget / tokens_per_s
    assert price is not None, "the cost objective mixes priced types only"
    return price / 3600.0 / tokens_per_s * float(budget or 1)


def build_mixed_plan(search: Search, layouts: LayoutArrays, choice: MixedChoice, table: CandidateTable,
                     single: Solution | None, top_k: int, notes: list[str], solver: str, solve_time_s: float) -> Plan:
    """Each group re-estimated on its own type (memory at dp = D with its micro-batches, time on the slowest
    link the types share), placed on free GPUs in whole TP groups, and the plan around them."""
    t = choice.tables
    i = t.layout
    d = sum(choice.replicas)
    parallel = layouts.parallel(i).replace(dp=d)
    training = layouts.training(i, search.training)
    mbs, gbs, seq = training.micro_batch_size, training.global_batch_size, training.seq_len
    assert gbs is not None
    inters = [search.links[g].inter_node_bytes_per_s for g in t.types]
    stages, mems, times = [], [], []
    taken: set[str] = set()
    peak_sum, flops_per_sample, price = 0.0, 0.0, 0.0
    for g, r, m in zip(t.types, choice.replicas, choice.micro_batches):
        spec = search.specs[g]
        recipe = training.replace(global_batch_size=m * mbs * d)
        memory: MemoryEstimate = search.estimator.memory(search.model, recipe, parallel)
        links = group_links(parallel.tp, [search.links[g].intra_node_bytes_per_s], inters)
        tm = search.estimator.time(search.model, recipe, parallel, spec, links)
        usable = search.usable_bytes(g)
        assert memory.device_bytes <= usable, f"the {g} group does not fit its own type"
        placement = group_placement(search, g, parallel.tp, r * parallel.pp * parallel.cp, taken)
        taken |= set(placement)
        n = r * t.gpus_per_replica
        stages.append(StagePlan(gpu_type=g, num_gpus=n, tp=parallel.tp, pp=parallel.pp, cp=parallel.cp, dp=r,
                                num_layers=search.model.num_layers, micro_batches=m, samples=r * m * mbs,
                                placement=placement, device_bytes=memory.device_bytes, usable_bytes=usable,
                                iteration_s=tm.iteration_s, links=links))
        mems.append((memory.device_bytes / usable, memory, g, usable))
        times.append((tm.iteration_s, tm, links))
        peak_sum += n * spec.peak_tflops[peak_dtype(training.precision)] * 1e12
        # model FLOPs per sample from the group's own estimate (its run as if all D replicas did m micro-batches)
        flops_per_sample = tm.model_tflops_per_gpu * 1e12 * tm.iteration_s * tm.world_size / tm.global_batch_size
        per_gpu = spec.price_per_gpu_hour_usd
        price = math.nan if per_gpu is None else price + n * per_gpu
    num_gpus = sum(s.num_gpus for s in stages)
    _, busiest, busy_type, usable = max(mems, key=lambda x: x[0])
    _, slowest, links = max(times, key=lambda x: x[0])
    job_time = _job_time(slowest, gbs, seq, flops_per_sample, peak_sum, num_gpus)
    pph = None if math.isnan(price) else price
    placement = {name: gpus for s in stages for name, gpus in s.placement.items()}
    stranded = sum(n.free - len(placement[n.name]) for n in search.pool.nodes if n.name in placement)
    rows, feasible = table.options
    alternatives: list[Alternative] = []
    if single is not None:
        alternatives = [alternative_of(table, single.candidate),
                        *runners_up(table, rows, feasible, single.candidate, max(top_k - 1, 0))][:top_k]
        best = float(table.tokens_per_s[single.candidate])
        notes = [*notes, f"mixing types trains {job_time.tokens_per_s / best - 1:+.1%} tokens/s against the best "
                 f"single-type plan ({int(table.world[single.candidate])} x "
                 f"{table.gpu_types[int(table.gpu[single.candidate])]})"]
    else:
        notes = [*notes, "no single GPU type holds the job: its replica groups span types"]
    rejected = [rej for rej in type_rejections(table, search.pool, rows, feasible,
                                               None if single is None else single.candidate, search.constraints)
                if rej.gpu_type not in t.types]
    return Plan(
        model=search.model, gpu_type=busy_type, gpu_spec=search.specs[busy_type], num_gpus=num_gpus,
        placement=placement, parallel=parallel, training=training, memory=busiest, time=job_time, links=links,
        default_batch=search.default_batch, placement_mode=search.mixed_placement,
        launcher=None if search.scope is None else search.scope.name,
        notes=notes, usable_bytes=usable, price_per_hour_usd=pph, objective=search.objective,
        token_budget=search.constraints.token_budget,
        objective_value=objective_value(search, job_time.tokens_per_s, num_gpus, pph), stranded_gpus=stranded,
        optimal=choice.optimal, solver=solver, solve_time_s=solve_time_s,
        alternatives=alternatives, rejected=rejected, stages=tuple(stages), gpu_types=t.types)
