"""``FailureModel``: node failures and repairs, drawn per node from a per-GPU failure rate (seeded).

Each node fails after an exponential time of rate ``failures_per_gpu_hour`` x its GPUs (failures of independent
GPUs add up; a failed GPU takes its node out, as a job loses the node's ranks), stays down for an exponential
repair time of mean ``repair_s``, and then runs until its next failure. Each node draws from its own stream
(``numpy.random.default_rng([seed, node])``), so a node's history depends on the seed and its index only.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from frenzy_core._base import FrozenModel

__all__ = ["DEFAULT_FAILURES_PER_GPU_HOUR", "DEFAULT_REPAIR_S", "FailureModel"]

DEFAULT_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16384)
"""About 2.0e-5 per GPU-hour (a GPU's mean time between failures: about 5.8 years): Llama 3 405B pre-training
had 419 unexpected interruptions in 54 days on 16,384 H100 GPUs, one every 3.1 hours (Dubey et al. 2024, "The
Llama 3 Herd of Models", arXiv:2407.21783, section 3.3.4, Table 5). 78% were hardware (GPU, HBM, host, network)
and the rest software; we count all of them as failures of one node."""

DEFAULT_REPAIR_S = 24 * 3600.0
"""Mean time a failed node stays out: one day, our assumption (we found no published figure: the Llama 3 report
gives none, and Kokolis et al. 2024, arXiv:2410.21680, as far as we read it, reports failure rates and mean time
to failure, not repair times; the job itself restarted on healthy nodes; a GPU or HBM fault means draining,
diagnosing and swapping hardware)."""


class FailureModel(FrozenModel):
    """Per-GPU failure rate and mean repair time; ``seed`` fixes every node's history."""

    failures_per_gpu_hour: float = Field(default=DEFAULT_FAILURES_PER_GPU_HOUR, ge=0)
    repair_s: float = Field(default=DEFAULT_REPAIR_S, gt=0, description="Mean of the exponential repair time.")
    seed: int = 0

    def history(self, node: int, gpus: int) -> Iterator[tuple[float, float]]:
        """(failure time, repair time) of one node with ``gpus`` GPUs, from time 0 on, forever (nothing when
        the rate is 0)."""
        rate_per_s = self.failures_per_gpu_hour * gpus / 3600.0
        if rate_per_s <= 0:
            return
        rng = np.random.default_rng([self.seed, node])
        t = 0.0
        while True:
            down = t + float(rng.exponential(1.0 / rate_per_s))
            t = down + float(rng.exponential(self.repair_s))
            yield down, t
