"""The form (a) search's bounds (issue 12): every block bound is below every bound key of its configurations, and
the search, which never expands a block whose bound cannot win, finds the key of evaluating every configuration
of the space (an exhaustive reference written here, without bounds) on random small instances."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_core import Cluster, ModelConfig, TrainingConfig
from frenzy_core.hardware.gpus import load_gpu_specs
from frenzy_core.planning.mixed import mixable_types, one_collective_library
from frenzy_core.planning.mixed_solve import PRICE_STEPS_PER_USD_HOUR
from frenzy_core.planning.search import Search, make_search
from frenzy_core.planning.stages import (
    MAX_STAGES,
    _Config,
    _evaluate,
    _Frontier,
    _recipes,
    _Tables,
    _tps,
    best_split,
    stage_search,
)

# a 4-layer model on GPUs cut to 3 GiB, so that memory caps bind and small clusters need pipelines
TINY = ModelConfig.preset("llama-2-7b").replace(name="tiny-4l", hidden_size=1024, num_layers=4,
                                                 num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=2752)
TYPES = ("a10g", "l4", "l40s")
SPECS = load_gpu_specs(overrides={t: {"memory_bytes": 3 * 2**30} for t in TYPES})
RECIPES = {"micro_batch_sizes": [1, 2], "zero_stages": [1], "recompute": ["none"]}
"""Two recipes: enough for the bounds to order configurations across recipes."""


def _search(data: st.DataObject, small: bool = False) -> Search:
    """A random two-type instance (``small``: nodes of at most 2 GPUs, one recipe, batch 4: CI time)."""
    nodes = [{"gpu": t, "gpus_per_node": data.draw(st.sampled_from([1, 2] if small else [1, 2, 4])),
              "free_gpus": None, "count": data.draw(st.integers(1, 2))} for t in data.draw(st.permutations(TYPES))[:2]]
    for n in nodes:
        n["free_gpus"] = data.draw(st.integers(1, n["gpus_per_node"]))
    objective = data.draw(st.sampled_from(["throughput", "gpus", "cost"]))
    limits = {"max_gpus": data.draw(st.integers(2, 8))} if data.draw(st.booleans()) else {}
    training = TrainingConfig(seq_len=256, global_batch_size=4 if small else data.draw(st.sampled_from([4, 8])))
    recipes = {**RECIPES, "micro_batch_sizes": [1]} if small else RECIPES
    return make_search(TINY, Cluster.from_dict({"nodes": nodes}, specs=SPECS), training, objective,
                       {**recipes, **limits})


def _every_configuration(search: Search) -> list[_Config]:
    """The space as the search defines it, without bounds: every (recipe, D, ordered type pair, tps, stage
    counts) with whole TP groups on free GPUs, at most MAX_STAGES and L stages, within the GPU and price
    limits."""
    recipes, c = _recipes(search), search.constraints
    gbs, n_layers = search.training.global_batch_size, search.model.num_layers
    assert gbs is not None
    out = []
    for r, (ta, tb) in itertools.product(range(len(recipes)), itertools.permutations(mixable_types(search), 2)):
        if not one_collective_library(search, (ta, tb)):
            continue
        mbs = int(recipes.micro_batch_size[r])
        n = gbs // mbs if gbs % mbs == 0 else 0
        for dp, tpa, tpb in itertools.product(range(1, n + 1), _tps(search, ta), _tps(search, tb)):
            if n % dp:
                continue
            for sa, sb in itertools.product(range(1, MAX_STAGES), repeat=2):
                gpus = dp * (sa * tpa + sb * tpb)
                if (sa * dp > search.pool.classes(ta).free_blocks(tpa) or sa + sb > min(MAX_STAGES, n_layers)
                        or sb * dp > search.pool.classes(tb).free_blocks(tpb) or (c.max_gpus and gpus > c.max_gpus)):
                    continue
                per = [search.specs[t].price_per_gpu_hour_usd for t in (ta, tb)]
                price = None if None in per else round((per[0] * dp * sa * tpa + per[1] * dp * sb * tpb)
                                                       * PRICE_STEPS_PER_USD_HOUR)
                out.append(_Config(r, dp, (ta, tb), (tpa, tpb), (sa, sb), (), price))
    return out


def _check_best_key(search: Search) -> None:
    recipes, choice, notes = stage_search(search, time.perf_counter() + 600)
    assert not notes
    tables = _Tables(search, recipes)
    found = [x for x in (_evaluate(tables, cfg, None, best_split) for cfg in _every_configuration(search)) if x]
    if not found:
        assert choice is None
        return
    assert choice is not None and choice.key == min(x.key for x in found)


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_search_finds_the_best_key_of_every_configuration(data: st.DataObject) -> None:
    """CI's subset: small instances."""
    _check_best_key(_search(data, small=True))


@pytest.mark.slow
@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_search_finds_the_best_key_of_every_configuration_on_more_instances(data: st.DataObject) -> None:
    _check_best_key(_search(data))


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_block_bounds_are_below_their_configurations_bounds(data: st.DataObject) -> None:
    """Both block bounds (the first, for every block; the tighter, for those it queues) are below the bound key of
    every configuration of the block, so taking configurations below every unexpanded block keeps their order."""
    search = _search(data, small=True)
    recipes = _recipes(search)
    if not len(recipes):
        return
    frontier = _Frontier(search, recipes, _Tables(search, recipes), None)
    first = {int(b): key for b, key in zip(frontier.order, frontier.keys)}
    while frontier.next < frontier.size:
        frontier._refine(None)
    tight = {b: key for key, b in frontier.refined}
    assert set(tight) == set(first)
    while frontier.refined:
        frontier._expand(None)
    blocks = {(int(frontier.r[b]), int(frontier.dp[b]), frontier.pairs[int(frontier.q[b])],
               tuple(int(x) for x in frontier.tp[b])): b for b in first}
    for entry in frontier.heap:
        cfg = entry[-1]
        b = blocks[(cfg.recipe, cfg.dp, cfg.types, cfg.tps)]
        assert first[b] <= cfg.bound_key and tight[b] <= cfg.bound_key
