"""Candidate layouts as columns of numpy arrays: the one place that converts between rows and configs."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Recompute, TrainingConfig

__all__ = ["RECOMPUTE_ORDER", "LayoutBatch"]

RECOMPUTE_ORDER: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
"""Recompute modes by code (0, 1, 2): the ``recompute`` column holds indices into this tuple."""


@dataclass(frozen=True)
class LayoutBatch:
    """One row per layout: parallel degrees and the searched training fields. All columns are int64."""

    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    micro_batch_size: np.ndarray
    recompute: np.ndarray
    """Index into :data:`RECOMPUTE_ORDER`."""
    zero_stage: np.ndarray
    distributed_optimizer: np.ndarray
    """0 or 1."""
    sequence_parallel: np.ndarray
    """0 or 1."""

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @property
    def world_size(self) -> np.ndarray:
        """GPUs each layout uses (dp x tp x pp x cp)."""
        return self.dp * self.tp * self.pp * self.cp

    def take(self, index: np.ndarray) -> LayoutBatch:
        """The rows at ``index`` (a boolean mask or integer positions)."""
        return LayoutBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def global_batch_size(self, training: TrainingConfig) -> np.ndarray:
        """Samples per step: fixed by the request, else one micro-batch per data-parallel rank."""
        if training.global_batch_size is not None:
            return np.full(len(self), training.global_batch_size, dtype=np.int64)
        return self.micro_batch_size * self.dp

    def parallel(self, i: int) -> ParallelConfig:
        """Row ``i`` as a :class:`ParallelConfig`."""
        vpp = int(self.vpp[i])
        schedule = PipelineSchedule.INTERLEAVED if vpp > 1 else PipelineSchedule.ONE_F_ONE_B
        return ParallelConfig(dp=int(self.dp[i]), tp=int(self.tp[i]), pp=int(self.pp[i]), vpp=vpp,
                              cp=int(self.cp[i]), ep=int(self.ep[i]), schedule=schedule)

    def training(self, i: int, base: TrainingConfig) -> TrainingConfig:
        """``base`` with row ``i``'s searched fields and its global batch (one micro-batch per DP rank when
        ``base`` leaves it open)."""
        return base.replace(  # type: ignore[no-any-return]
            global_batch_size=base.global_batch_size or int(self.micro_batch_size[i] * self.dp[i]),
            micro_batch_size=int(self.micro_batch_size[i]),
            recompute=RECOMPUTE_ORDER[int(self.recompute[i])],
            zero_stage=int(self.zero_stage[i]),
            distributed_optimizer=bool(self.distributed_optimizer[i]),
            sequence_parallel=bool(self.sequence_parallel[i]),
        )
