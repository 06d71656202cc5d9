"""Data-parallel ranks that differ by one micro-batch: a single-type plan as two replica groups of its type.

M = B / b micro-batches over dp ranks: the first r = M mod dp replicas run ceil(M / dp), the others floor(M / dp),
in form (b)'s representation (:class:`StagePlan` groups with their own ``micro_batches``), so the launchers that
start replica groups (torchrun, slurm, kubernetes) pass each rank its count and ``explain()`` lists the groups.
"""

from __future__ import annotations

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.memory import MemoryEstimate
from frenzy_core.planning.estimators import LayoutEstimator
from frenzy_core.planning.plan import StagePlan
from frenzy_core.timing import TimeEstimate

__all__ = ["split_counts", "uneven_groups", "uneven_note"]


def split_counts(samples: int, micro_batch_size: int, dp: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((r, k + 1), (dp - r, k))``: replicas and micro-batches per replica of the two groups of ``samples``
    sequences in micro-batches of ``micro_batch_size`` over ``dp`` ranks (k = floor(M / dp), r = M mod dp)."""
    m = samples // micro_batch_size
    k, r = divmod(m, dp)
    return (r, k + 1), (dp - r, k)


def _cut(placement: dict[str, list[int]], first: int) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """The placement's first ``first`` GPUs (nodes in order, GPUs in order: the ranks' order) and the rest."""
    head: dict[str, list[int]] = {}
    tail: dict[str, list[int]] = {}
    left = first
    for node, gpus in placement.items():
        take = min(left, len(gpus))
        if take:
            head[node] = gpus[:take]
        if take < len(gpus):
            tail[node] = gpus[take:]
        left -= take
    return head, tail


def uneven_groups(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, samples: int,
                  estimator: LayoutEstimator, spec: GPUSpec, links: Links, placement: dict[str, list[int]],
                  usable_bytes: int, gpu_type: str, estimates: tuple[MemoryEstimate, TimeEstimate]
                  ) -> tuple[tuple[StagePlan, ...], TimeEstimate]:
    """The two groups of a plan whose ``samples`` do not split evenly over ``parallel.dp`` ranks, each estimated
    with its own count (memory at dp with that count on every rank, time on the plan's links), and the job's
    time: the slower group's step (the ranks meet at the gradient sync), the batch ``samples``. ``training`` is
    the slowest rank's view (ceil(M / dp) micro-batches on every rank) and ``estimates`` its memory and time,
    which the plan has made already: the group running ceil(M / dp) is that recipe, so it reuses them."""
    mbs = training.micro_batch_size
    per_replica = parallel.world_size // parallel.dp
    (r_hi, m_hi), (r_lo, m_lo) = split_counts(samples, mbs, parallel.dp)
    parts = _cut(placement, r_hi * per_replica)
    groups, times = [], []
    for (r, m), where in zip(((r_hi, m_hi), (r_lo, m_lo)), parts):
        recipe = training.replace(global_batch_size=m * mbs * parallel.dp)
        memory, tm = estimates if recipe.global_batch_size == training.global_batch_size else (
            estimator.memory(model, recipe, parallel), estimator.time(model, recipe, parallel, spec, links))
        groups.append(StagePlan(gpu_type=gpu_type, num_gpus=r * per_replica, tp=parallel.tp, pp=parallel.pp,
                                cp=parallel.cp, dp=r, num_layers=model.num_layers, micro_batches=m,
                                samples=r * m * mbs, placement=where, device_bytes=memory.device_bytes,
                                usable_bytes=usable_bytes, iteration_s=tm.iteration_s, links=links))
        times.append(tm)
    slowest = max(times, key=lambda t: t.iteration_s)
    share = samples / slowest.global_batch_size  # the slowest rank's view trains ceil(M / dp) on every rank
    step = slowest.iteration_s
    job = slowest.replace(tokens_per_s=samples * training.seq_len / step, samples_per_s=samples / step,
                          global_batch_size=samples, mfu=slowest.mfu * share,
                          model_tflops_per_gpu=slowest.model_tflops_per_gpu * share)
    return tuple(groups), job


def uneven_note(groups: tuple[StagePlan, ...], micro_batch_size: int) -> str:
    """The split in words, for ``Plan.notes``."""
    hi, lo = groups
    samples = hi.samples + lo.samples
    return (f"the global batch of {samples:,} does not split evenly over dp={hi.dp + lo.dp}: {hi.dp} rank(s) run "
            f"{hi.micro_batches} micro-batches of {micro_batch_size} and {lo.dp} run {lo.micro_batches}; the step is "
            f"the slower ranks' (torch runtime, each rank's loss scaled by its share of the batch)")
