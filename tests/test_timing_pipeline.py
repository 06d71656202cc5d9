"""The pipeline timeline of one step: Megatron's pass orders, run as soon as their inputs are ready, agree with
the bubble of the time model and the in-flight micro-batches of the memory model."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ModelConfig, ParallelConfig, PipelineSchedule, TrainingConfig, estimate_iteration_time
from frenzy_core.errors import ConfigError
from frenzy_core.memory import estimate_memory
from frenzy_core.timing.pipeline import pipeline_order, pipeline_timeline, step_timeline


@st.composite
def schedules(draw: st.DrawFn) -> tuple[PipelineSchedule, int, int, int]:
    """(schedule, pp, vpp, micro-batches) that Megatron-LM runs: interleaved needs vpp > 1, pp > 1 and
    micro-batches in groups of pp."""
    schedule = draw(st.sampled_from(list(PipelineSchedule)))
    pp = draw(st.integers(2 if schedule is PipelineSchedule.INTERLEAVED else 1, 8))
    if schedule is PipelineSchedule.INTERLEAVED:
        return schedule, pp, draw(st.integers(2, 4)), pp * draw(st.integers(1, 4))
    return schedule, pp, 1, draw(st.integers(1, 24))


@settings(max_examples=150, deadline=None)
@given(schedules(), st.floats(0.01, 10.0), st.floats(0.01, 10.0))
def test_every_pass_runs_once_after_its_input_and_the_bubble_is_pp_minus_1_over_v(
    case: tuple[PipelineSchedule, int, int, int], forward_s: float, backward_s: float
) -> None:
    schedule, pp, vpp, m = case
    chunks = vpp if schedule is PipelineSchedule.INTERLEAVED else 1
    slots = pipeline_timeline(pp, m, forward_s, backward_s, vpp=vpp, schedule=schedule)
    for rank in range(pp):
        mine = sorted((s for s in slots if s.stage == rank), key=lambda s: s.start_s)
        passes = sorted((s.backward, s.microbatch, s.chunk) for s in mine)
        assert passes == sorted((b, mb, c) for b in (False, True) for mb in range(m) for c in range(chunks))
        assert all(a.end_s <= b.start_s + 1e-9 for a, b in zip(mine, mine[1:]))  # one pass at a time
    end = {(s.backward, s.microbatch, s.chunk * pp + s.stage): s.end_s for s in slots}
    last = pp * chunks - 1
    for s in slots:
        v = s.chunk * pp + s.stage
        if s.backward:
            ready = end[(True, s.microbatch, v + 1)] if v < last else end[(False, s.microbatch, v)]
            assert s.start_s >= ready - 1e-9
        elif v > 0:
            assert s.start_s >= end[(False, s.microbatch, v - 1)] - 1e-9
    # Narayanan et al. (SC21): every rank idles (pp - 1) / v micro-batch times per step, the time model's bubble.
    span = max(s.end_s for s in slots)
    bubble = (pp - 1) / chunks * (forward_s + backward_s)
    for rank in range(pp):
        busy = sum(s.end_s - s.start_s for s in slots if s.stage == rank)
        assert math.isclose(busy, m * (forward_s + backward_s), rel_tol=1e-9)
        assert math.isclose(span - busy, bubble, rel_tol=1e-9, abs_tol=1e-9)


def _peak_in_flight(order: list[tuple[bool, int, int]]) -> int:
    """Most chunk-micro-batches whose forward has run and backward has not, over a rank's pass order."""
    live = peak = 0
    for backward, _, _ in order:
        live += -1 if backward else 1
        peak = max(peak, live)
    return peak


@settings(max_examples=40, deadline=None)
@given(schedules())
def test_the_orders_hold_the_memory_models_in_flight_micro_batches(
    case: tuple[PipelineSchedule, int, int, int]
) -> None:
    schedule, pp, vpp, m = case
    if pp == 1:
        return  # no pipeline: the memory model keeps one micro-batch (accumulation frees each before the next)
    model = ModelConfig.preset("gpt2").model_copy(update={"num_layers": 24})  # 24 layers cover pp x vpp <= 24
    if pp * vpp > model.num_layers or model.num_layers % (pp * vpp):
        return
    estimate = estimate_memory(model, TrainingConfig(seq_len=128, global_batch_size=m),
                               ParallelConfig(pp=pp, vpp=vpp, schedule=schedule))
    chunks = vpp if schedule is PipelineSchedule.INTERLEAVED else 1
    for rank, order in enumerate(pipeline_order(pp, m, vpp, schedule)):
        assert _peak_in_flight(order) / chunks == estimate.stages[rank].inflight_microbatches


def test_interleaved_needs_whole_groups_of_pp() -> None:
    with pytest.raises(ConfigError, match="groups of pp=4"):
        pipeline_order(4, 6, 2, PipelineSchedule.INTERLEAVED)


@pytest.mark.parametrize(("parallel", "global_batch", "recompute", "zero"), [
    (ParallelConfig(dp=2, tp=2, pp=4), 64, "none", 1),
    (ParallelConfig(tp=2, pp=4, vpp=2), 32, "full", 0),
    (ParallelConfig(pp=8, schedule="gpipe"), 16, "full", 0),
    (ParallelConfig(dp=8), 64, "none", 3),
    (ParallelConfig(dp=4, tp=2), 64, "selective", 0),
])
def test_a_step_timeline_adds_up_to_the_estimate(parallel: ParallelConfig, global_batch: int, recompute: str,
                                                 zero: int) -> None:
    training = TrainingConfig(seq_len=4096, global_batch_size=global_batch, recompute=recompute, zero_stage=zero)
    time = estimate_iteration_time(ModelConfig.preset("llama-3.1-8b"), training, parallel, "h100-sxm")
    timeline = step_timeline(time, parallel)
    assert math.isclose(timeline.schedule_s + timeline.tail_s, time.iteration_s, rel_tol=1e-9)
    assert timeline.tail_s >= time.breakdown["optimizer"] * (1 - 1e-9)  # the optimizer step is never hidden
    for stage in range(parallel.pp):
        idle = timeline.schedule_s - timeline.busy_s(stage)
        assert math.isclose(idle, time.breakdown["pipeline_bubble"], rel_tol=1e-9, abs_tol=1e-12)
    # backward = 2 x forward FLOPs, plus the recomputed forward under full recompute
    ratio = timeline.backward_s / timeline.forward_s
    assert ratio > 2.5 if recompute == "full" else 2.0 - 1e-9 <= ratio < 2.2
