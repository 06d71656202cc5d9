"""The :class:`Plan` of a form (a) choice (pipeline stages on different GPU types), re-estimated stage by stage."""

from __future__ import annotations

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.memory import MemoryEstimate
from frenzy_core.planning.candidates import CandidateTable, sp_with_tp
from frenzy_core.planning.diagnosis import type_rejections
from frenzy_core.planning.mixed_plan import objective_value
from frenzy_core.planning.placement import Solution
from frenzy_core.planning.plan import Alternative, Plan, StagePlan
from frenzy_core.planning.runners_up import alternative_of, runners_up
from frenzy_core.planning.search import Search
from frenzy_core.planning.stages import StageChoice, stage_links, stage_params, stage_placements
from frenzy_core.timing.stages import PipelineStage, estimate_pipeline_time

__all__ = ["build_stage_plan"]


def build_stage_plan(search: Search, recipes: LayoutArrays, choice: StageChoice, table: CandidateTable,
                     best_single: Solution | None, top_k: int, notes: list[str], solve_time_s: float) -> Plan:
    """Each stage re-estimated on its own type (memory: the memory model's stage of its own layout; time: the
    pipeline of unequal stages, timing/stages.py), placed in whole TP groups, and the plan around them."""
    gbs = search.training.global_batch_size  # the request's (a default batch may have moved on the recipe's row)
    assert gbs is not None
    training = recipes.training(choice.recipe, search.training).replace(global_batch_size=gbs)
    if sp_with_tp(search.model, search.training, search.constraints):  # the recipes left it out: each stage's tp
        training = training.replace(sequence_parallel=True)              # sets it (kept where tp > 1)
    parallel = recipes.parallel(choice.recipe).replace(dp=choice.dp, tp=choice.tps[0], pp=len(choice.layers),
                                                       stage_layers=choice.layers)
    p2p = min(search.links[g].inter_node_bytes_per_s for g in choice.types)
    placements = stage_placements(search, choice.types, choice.tps, choice.dp)
    pipe_stages = [PipelineStage(search.specs[g], tp, stage_links(search, g, pl), p2p)
                   for g, tp, pl in zip(choice.types, choice.tps, placements)]
    pipeline = estimate_pipeline_time(search.model, training, parallel, pipe_stages,
                                      params=[stage_params(search, g) for g in choice.types])
    stages, spare = [], []
    first = 0
    for i, (g, tp, layers) in enumerate(zip(choice.types, choice.tps, choice.layers)):
        recipe = training.replace(sequence_parallel=training.sequence_parallel and tp > 1)
        memory: MemoryEstimate = search.estimator.memory(search.model, recipe, parallel.replace(tp=tp))
        usable = search.usable_bytes(g)
        device = memory.stages[i].device_bytes
        assert device <= usable, f"stage {i} does not fit its own type {g}"
        stages.append(StagePlan(
            gpu_type=g, num_gpus=choice.dp * tp, tp=tp, pp=1, dp=choice.dp, first_layer=first, num_layers=layers,
            micro_batches=choice.microbatches, samples=gbs, placement=placements[i], device_bytes=device,
            usable_bytes=usable, iteration_s=pipeline.pipeline_s + pipeline.tail_s[i], links=pipe_stages[i].links,
            pipeline_stage=i, microbatch_s=pipeline.microbatch_s[i]))
        spare.append((device / usable, memory, i))
        first += layers
    _, busiest, k = max(spare, key=lambda x: x[0])
    busiest = busiest.model_copy(update={"busiest_stage": k, "device_bytes": busiest.stages[k].device_bytes,
                                         "peak_bytes": busiest.stages[k].peak_bytes,
                                         "breakdown": dict(busiest.stages[k].breakdown),
                                         "overhead": dict(busiest.stages[k].overhead),
                                         "peak_phase": busiest.stages[k].peak_phase})
    num_gpus = sum(s.num_gpus for s in stages)
    per_gpu = [search.specs[s.gpu_type].price_per_gpu_hour_usd for s in stages]
    pph = None if any(p is None for p in per_gpu) else sum((p or 0.0) * s.num_gpus for p, s in zip(per_gpu, stages))
    placement: dict[str, list[int]] = {}
    for s in stages:
        for node, ks in s.placement.items():
            placement.setdefault(node, []).extend(ks)
    stranded = sum(n.free - len(placement[n.name]) for n in search.pool.nodes if n.name in placement)
    rows, feasible = table.options
    alternatives: list[Alternative] = []
    notes = [*notes, f"pipeline stages on {' + '.join(dict.fromkeys(choice.types))}: {choice.why}"]
    if best_single is not None:
        alternatives = [alternative_of(table, best_single.candidate),
                        *runners_up(table, rows, feasible, best_single.candidate, max(top_k - 1, 0))][:top_k]
        best = float(table.tokens_per_s[best_single.candidate])
        notes.append(f"pipeline stages on several types train {pipeline.time.tokens_per_s / best - 1:+.1%} tokens/s "
                     f"against the best single-type plan ({int(table.world[best_single.candidate])} x "
                     f"{table.gpu_types[int(table.gpu[best_single.candidate])]})")
    rejected = [rej for rej in type_rejections(table, search.pool, rows, feasible,
                                               None if best_single is None else best_single.candidate,
                                               search.constraints) if rej.gpu_type not in choice.types]
    tight = stages[k]
    return Plan(
        model=search.model, gpu_type=tight.gpu_type, gpu_spec=search.specs[tight.gpu_type], num_gpus=num_gpus,
        placement=placement, parallel=parallel.replace(tp=tight.tp), training=training, memory=busiest,
        time=pipeline.time, links=tight.links, default_batch=search.default_batch,
        placement_mode=search.mixed_placement, launcher=None if search.scope is None else search.scope.name,
        notes=notes, usable_bytes=tight.usable_bytes,
        price_per_hour_usd=pph, objective=search.objective, token_budget=search.constraints.token_budget,
        objective_value=objective_value(search, pipeline.time.tokens_per_s, num_gpus, pph),
        stranded_gpus=stranded, optimal=choice.optimal, solver="branch-and-bound", solve_time_s=solve_time_s,
        alternatives=alternatives, rejected=rejected, stages=tuple(stages),
        gpu_types=tuple(dict.fromkeys(choice.types)))

