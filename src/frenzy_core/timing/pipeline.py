"""One optimizer step as a timeline per pipeline stage: the forward and backward slots of 1F1B, Megatron's
interleaved 1F1B and GPipe in their real order, so the bubbles show where they fall.

The order on each rank follows Megatron-LM's ``megatron/core/pipeline_parallel/schedules.py``
(``forward_backward_pipelining_without_interleaving`` and ``..._with_interleaving``, micro-batch groups of
``pp``); a slot starts when its rank is free and its input has arrived (the previous virtual stage's forward, the
next one's backward), point-to-point time being inside the slot lengths. The same orders give the in-flight
micro-batch counts of the memory model (``memory/kernel.py``) and the bubble of the time model
(``(pp - 1) / v`` micro-batch times, Narayanan et al. SC21); ``tests/test_timing_pipeline.py`` checks both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.errors import ConfigError
from frenzy_core.timing.flops import BACKWARD_TO_FORWARD
from frenzy_core.timing.result import TimeEstimate

__all__ = ["PER_MICROBATCH_CATEGORIES", "PipelineSlot", "StepTimeline", "pipeline_order", "pipeline_timeline",
           "step_timeline"]

PER_MICROBATCH_CATEGORIES: tuple[str, ...] = (
    "compute", "recompute", "elementwise", "kernel_launch", "tensor_parallel", "context_parallel",
    "expert_parallel", "pipeline_p2p",
)
"""Time categories that the estimator counts once per micro-batch (the others: bubble, data parallel and
optimizer, once per step)."""

Op = tuple[bool, int, int]
"""(backward, micro-batch, model chunk on the rank)."""


@dataclass(frozen=True)
class PipelineSlot:
    """One forward or backward pass of one micro-batch through one model chunk of one pipeline rank."""

    stage: int
    microbatch: int
    chunk: int
    backward: bool
    start_s: float
    end_s: float


@dataclass(frozen=True)
class StepTimeline:
    """A step of a plan: its pipeline slots, then the exposed gradient synchronisation and optimizer step."""

    slots: tuple[PipelineSlot, ...]
    pp: int
    forward_s: float
    """One micro-batch's forward over all of a rank's layers (all its chunks)."""
    backward_s: float
    """Its backward, recomputation included."""
    schedule_s: float
    """When the last backward ends."""
    tail_s: float
    """Exposed data-parallel communication and the optimizer step after it; ``schedule_s + tail_s`` is the
    estimate's ``iteration_s``."""

    def busy_s(self, stage: int) -> float:
        """Seconds the rank spends in its slots."""
        return sum(s.end_s - s.start_s for s in self.slots if s.stage == stage)


def _interleaved_op(k: int, pp: int, vpp: int, backward: bool) -> Op:
    """The k-th forward (or backward) of a rank under Megatron's interleaved schedule: micro-batches in groups of
    pp, each group through chunk 0, 1, ... (backwards through the last chunk first)."""
    in_group = k % (pp * vpp)
    chunk = in_group // pp
    microbatch = (k // (pp * vpp)) * pp + in_group % pp
    return backward, microbatch, vpp - 1 - chunk if backward else chunk


def pipeline_order(pp: int, m: int, vpp: int = 1,
                   schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B) -> list[list[Op]]:
    """Per pipeline rank, its passes in the order it runs them: (backward, micro-batch, chunk).

    1F1B: ``pp - rank - 1`` warm-up forwards, then one forward and one backward in turn, then the remaining
    backwards. Interleaved: ``2 (pp - rank - 1) + (vpp - 1) pp`` warm-up chunk passes (all ``m vpp`` if that many
    or more), then the same alternation. GPipe: every forward, then every backward.
    """
    if schedule is PipelineSchedule.INTERLEAVED and m % pp:
        raise ConfigError(f"the interleaved schedule runs micro-batches in groups of pp={pp}; {m} micro-batches "
                          "do not split into them", field="parallel.schedule", value=m,
                          hint=f"use a multiple of {pp} micro-batches")
    chunks = vpp if schedule is PipelineSchedule.INTERLEAVED else 1
    total = total_passes(m, chunks)
    orders = []
    for rank in range(pp):
        if schedule is PipelineSchedule.GPIPE:
            orders.append([(False, i, 0) for i in range(m)] + [(True, i, 0) for i in range(m)])
            continue
        if schedule is PipelineSchedule.INTERLEAVED:
            warmup = min(2 * (pp - rank - 1) + (vpp - 1) * pp, total)
        else:
            warmup = min(pp - rank - 1, total)
        forwards = [_interleaved_op(k, pp, chunks, False) for k in range(total)]
        backwards = [_interleaved_op(k, pp, chunks, True) for k in range(total)]
        order = forwards[:warmup]
        for i in range(total - warmup):
            order += [forwards[warmup + i], backwards[i]]
        orders.append(order + backwards[total - warmup:])
    return orders


def pipeline_timeline(pp: int, m: int, forward_s: float | Sequence[float], backward_s: float | Sequence[float], *,
                      vpp: int = 1, schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B) -> list[PipelineSlot]:
    """Every slot of one step, each rank running :func:`pipeline_order` as soon as its inputs are ready.

    ``forward_s`` and ``backward_s`` are one micro-batch over a rank's layers (one value for every rank, or one
    per rank: stages that differ); a chunk pass takes ``1 / vpp`` of them (interleaved). Model chunk ``c`` of
    rank ``r`` is virtual stage ``c pp + r``.
    """
    chunks = vpp if schedule is PipelineSchedule.INTERLEAVED else 1
    last = pp * chunks - 1
    fwd = [forward_s] * pp if isinstance(forward_s, (int, float)) else list(forward_s)
    bwd = [backward_s] * pp if isinstance(backward_s, (int, float)) else list(backward_s)
    length = [{False: f / chunks, True: b / chunks} for f, b in zip(fwd, bwd, strict=True)]
    done: dict[tuple[bool, int, int], float] = {}  # (backward, micro-batch, virtual stage) -> end
    orders = pipeline_order(pp, m, vpp, schedule)
    nxt, free = [0] * pp, [0.0] * pp
    slots: list[PipelineSlot] = []
    while len(slots) < pp * 2 * total_passes(m, chunks):
        progressed = False
        for rank in range(pp):
            while nxt[rank] < len(orders[rank]):
                backward, mb, chunk = orders[rank][nxt[rank]]
                stage = chunk * pp + rank
                need = _input(backward, mb, stage, last)
                if need is not None and need not in done:
                    break
                start = max(free[rank], done[need] if need is not None else 0.0)
                free[rank] = done[(backward, mb, stage)] = start + length[rank][backward]
                slots.append(PipelineSlot(rank, mb, chunk, backward, start, free[rank]))
                nxt[rank] += 1
                progressed = True
        if not progressed:  # pragma: no cover - the schedules above never wait on themselves
            raise AssertionError("pipeline order deadlocks")
    return slots


def total_passes(m: int, chunks: int) -> int:
    """Forward passes one rank runs per step (as many backwards): every micro-batch through every chunk."""
    return m * chunks


def _input(backward: bool, mb: int, stage: int, last: int) -> tuple[bool, int, int] | None:
    """The pass whose output a pass of virtual stage ``stage`` waits for: the previous stage's forward, the
    next stage's backward (the last stage's backward: its own forward); None for the first forward."""
    if backward:
        return (True, mb, stage + 1) if stage < last else (False, mb, stage)
    return (False, mb, stage - 1) if stage > 0 else None


def step_timeline(time: TimeEstimate, parallel: ParallelConfig) -> StepTimeline:
    """The timeline of one step of an estimate (a plan's ``time`` and ``parallel``).

    A micro-batch's length on the busiest stage, exposed communication included, is what the estimate's bubble
    is made of (``bubble (v / (pp - 1))``); without a pipeline, overlapped seconds are taken from the
    data-parallel traffic first. It is split forward : backward by FLOPs (backward ``BACKWARD_TO_FORWARD`` times
    the forward, recomputation in the backward). Every stage gets the busiest stage's lengths, as the estimate
    assumes.
    """
    m, pp = time.num_microbatches, parallel.pp
    work = sum(time.breakdown[c] for c in PER_MICROBATCH_CATEGORIES)
    chunks = parallel.vpp if parallel.schedule is PipelineSchedule.INTERLEAVED else 1
    if pp > 1:
        stage_s = time.breakdown["pipeline_bubble"] * chunks / (pp - 1)
    else:
        hidden_in_microbatches = max(0.0, time.overlapped_s - time.breakdown["data_parallel"])
        stage_s = (work - hidden_in_microbatches) / m
    forward_share = (work - time.breakdown["recompute"]) / (1.0 + BACKWARD_TO_FORWARD) / work if work > 0 else 0.0
    forward_s, backward_s = stage_s * forward_share, stage_s * (1.0 - forward_share)
    slots = pipeline_timeline(pp, m, forward_s, backward_s, vpp=parallel.vpp, schedule=parallel.schedule)
    end = max(s.end_s for s in slots)
    return StepTimeline(tuple(slots), pp, forward_s, backward_s, end, max(0.0, time.iteration_s - end))
