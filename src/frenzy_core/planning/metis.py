"""A Metis-style layer split for pipelines over GPU types, the baseline form (a) plans are compared with.

Metis (Um et al., "Metis: Fast Automatic Distributed Training on Heterogeneous GPUs", USENIX ATC'24) maps stages
to device groups and balances layers over them with its load balancer; we write it from our reading of the
paper (its code is under a non-commercial licence and was not read): each stage gets layers in proportion to its
compute speed, and a stage that would not fit its memory hands its excess to the nearest stage with room. Here
a stage's speed is the inverse of its time per layer (from the same stage tables the exact split uses), counts
are rounded by largest remainder with one layer at least per stage, and the split is scored with the same cost,
``sum_i t_i + (m - 1) max_i t_i``. :func:`metis_stage_search` runs the form (a) search with this rule instead of
the exact dynamic program, so the two differ only in the split.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.planning.search import Search
from frenzy_core.planning.stages import StageChoice, stage_search
from frenzy_core.timing.stages import pipeline_step_s

__all__ = ["metis_split", "metis_stage_search"]

FloatArray = npt.NDArray[np.float64]


def metis_split(t: FloatArray, m: int) -> tuple[tuple[int, ...], float, bool] | None:
    """Layers in proportion to each stage's speed, moved off stages beyond their memory cap to the nearest stage
    with room; None where the stages cannot hold the layers. Never claimed optimal."""
    stages, n_layers = t.shape[0], t.shape[1] - 1
    caps = np.array([int(np.max(np.flatnonzero(np.isfinite(row)), initial=0)) for row in t])
    if caps.min() < 1 or caps.sum() < n_layers:
        return None
    per_layer = np.array([(row[n] - row[0]) / n if (n := int(c)) > 0 else np.inf for row, c in zip(t, caps)])
    # a stage whose layers cost no time (a degenerate table) gets a finite speed: 1e-12 s is far below any real
    # layer's time (microseconds at least), so it never changes a real split
    speed = 1.0 / np.maximum(per_layer, 1e-12)
    share = speed / speed.sum() * (n_layers - stages)
    counts = 1 + np.floor(share).astype(np.int64)
    for i in np.argsort(-(share - np.floor(share)), kind="stable")[: n_layers - int(counts.sum())]:
        counts[i] += 1
    for i in range(stages):  # excess to the nearest stage with room, later stages first on a tie
        while counts[i] > caps[i]:
            room = [j for j in sorted(range(stages), key=lambda j: (abs(j - i), -j)) if counts[j] < caps[j]]
            counts[i] -= 1
            counts[room[0]] += 1
    split = tuple(int(c) for c in counts)
    times = np.array([t[i, c] for i, c in enumerate(split)])
    return split, float(pipeline_step_s(times, m)), False


def metis_stage_search(search: Search, deadline: float, incumbent: tuple[int, ...] | None = None
                       ) -> tuple[LayoutArrays, StageChoice | None, list[str]]:
    """The form (a) search (:func:`frenzy_core.planning.stages.stage_search`) with :func:`metis_split`."""
    return stage_search(search, deadline, incumbent, split_rule=metis_split)
