"""What the planner needs from the memory and time models, and the default: frenzy_core's analytic ones."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec, Links
from frenzy_core.memory import BatchEstimate, MemoryEstimate, estimate_memory, estimate_memory_batch
from frenzy_core.timing import (
    TimeEstimate,
    TimeModelParams,
    default_time_model_params,
    estimate_iteration_time,
    estimate_iteration_time_batch,
)
from frenzy_core.timing.calibration_file import read_calibration_file

__all__ = ["AnalyticEstimator", "LayoutEstimator", "TypeTimes", "iteration_times"]


class LayoutEstimator(Protocol):
    """Memory and time of many layouts at once (vectorised), and full records for the chosen one."""

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        """Bytes the busiest rank of each layout needs on its GPU (int64); negative: an invalid layout."""

    def host_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        """Host memory one rank of each layout keeps (offload; int64, 0 for none), which the ranks on a node
        share: the planner checks it against the nodes' ``host_memory_bytes``."""

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays, gpu: GPUSpec,
                    links: Links | None) -> np.ndarray:
        """Seconds per optimizer step of each layout on ``gpu`` (float64). The planner passes ``links`` whose
        fields are arrays with one entry per layout (each candidate's placement gives it its own node size)."""

    def memory(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> MemoryEstimate:
        """The full :class:`MemoryEstimate` of one layout.

        An estimator may also offer ``iteration_s_types(model, training, layouts, gpus, gpu_index, links)``:
        :meth:`iteration_s` of layouts on several GPU types at once (``gpu_index``: each layout's, an index into
        ``gpus``); the planner then times the types that share a recipe in one call
        (:func:`iteration_times`)."""

    def time(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, gpu: GPUSpec,
             links: Links | None) -> TimeEstimate:
        """The full :class:`TimeEstimate` of one layout on ``gpu``."""


class AnalyticEstimator:
    """``frenzy_core.memory`` and ``frenzy_core.timing``: the library's own analytic models.

    ``time_model``: a calibrated-parameter file (``frenzy calibrate``); GPU types it names use its parameters.
    """

    def __init__(self, time_model: str | Path | None = None) -> None:
        self._fitted = read_calibration_file(time_model) if time_model is not None else {}
        self._last: tuple[ModelConfig, TrainingConfig, LayoutArrays, BatchEstimate] | None = None

    def _batch(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> BatchEstimate:
        """The batch memory estimate, kept for the next call on the same layouts (the planner asks for device and
        host bytes of one table in turn)."""
        last = self._last
        if last is None or last[2] is not layouts or last[0] != model or last[1] != training:
            last = self._last = (model, training, layouts, estimate_memory_batch(model, layouts, training))
        return last[3]

    def params(self, gpu: GPUSpec) -> TimeModelParams | None:
        """The time model's parameters for ``gpu``: the calibrated ones where the file names it, else None
        (the type's defaults)."""
        fitted = self._fitted.get(gpu.id)
        return default_time_model_params(gpu).replace(**fitted) if fitted else None

    def device_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        return np.asarray(self._batch(model, training, layouts).device_bytes, dtype=np.int64)

    def host_bytes(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays) -> np.ndarray:
        if not training.offloads:  # nothing on the host: no second pass over the layouts
            return np.zeros(len(layouts), dtype=np.int64)
        return np.asarray(self._batch(model, training, layouts).host_bytes, dtype=np.int64)

    def iteration_s(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays, gpu: GPUSpec,
                    links: Links | None) -> np.ndarray:
        result = estimate_iteration_time_batch(model, training, gpu, layouts, cluster=links, params=self.params(gpu))
        return np.asarray(result.iteration_s, dtype=np.float64)

    def iteration_s_types(self, model: ModelConfig, training: TrainingConfig, layouts: LayoutArrays,
                          gpus: Sequence[GPUSpec], gpu_index: np.ndarray, links: Links | None) -> np.ndarray:
        """:meth:`iteration_s` of layouts on several GPU types in one time-model call (``gpu_index``: each
        layout's type, an index into ``gpus``; each type with its own calibrated parameters)."""
        result = estimate_iteration_time_batch(model, training, list(gpus), layouts, gpu_index=gpu_index,
                                               cluster=links, params=[self.params(g) for g in gpus])
        return np.asarray(result.iteration_s, dtype=np.float64)

    def memory(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> MemoryEstimate:
        return estimate_memory(model, training, parallel)

    def time(self, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, gpu: GPUSpec,
             links: Links | None) -> TimeEstimate:
        return estimate_iteration_time(model, training, parallel, gpu, cluster=links, params=self.params(gpu))


TypeTimes = tuple[np.ndarray, str | None]
"""Seconds per step of a GPU type's layouts, and why the recipe cannot run on the type (None where it can)."""


def _several_types(estimator: LayoutEstimator) -> Callable[..., Any] | None:
    """The estimator's ``iteration_s_types`` where it times what its ``iteration_s`` would: a subclass that
    overrides ``iteration_s`` alone keeps its own times (the inherited several-type call would bypass them)."""
    many = getattr(estimator, "iteration_s_types", None)
    if many is None:
        return None
    owner = next((c for c in type(estimator).__mro__ if "iteration_s_types" in c.__dict__), None)
    if owner is None:  # set on the instance: its own
        return many
    return many if getattr(type(estimator), "iteration_s", None) is getattr(owner, "iteration_s", None) else None


def iteration_times(model: ModelConfig, recipes: Mapping[str, TrainingConfig], specs: Mapping[str, GPUSpec],
                    layouts: LayoutArrays, rows: Mapping[str, tuple[np.ndarray, Links]], estimator: LayoutEstimator
                    ) -> dict[str, TypeTimes]:
    """Each GPU type's step times of its ``rows`` (indices into ``layouts``, and the links each is timed with),
    under its recipe: one call for the types that share a recipe where the estimator times several types at once
    (``iteration_s_types``), else, or where that call refuses, one call per type (a type whose call refuses gets
    infinite times and the reason)."""
    times: dict[str, TypeTimes] = {name: (np.zeros(0), None) for name, (idx, _) in rows.items() if not idx.size}
    many = _several_types(estimator)
    groups: dict[object, list[str]] = {}
    for name, (idx, _) in rows.items():
        if idx.size:
            groups.setdefault(recipes[name].precision, []).append(name)
    for names in groups.values():
        recipe = recipes[names[0]]
        if many is not None and len(names) > 1:
            idx = np.concatenate([rows[n][0] for n in names])
            code = np.repeat(np.arange(len(names), dtype=np.int64), [rows[n][0].size for n in names])
            links = Links(*(np.concatenate([np.asarray(rows[n][1][f]) for n in names])  # type: ignore[arg-type]
                            for f in range(3)))
            try:
                together = np.asarray(many(model, recipe, layouts.take(idx), [specs[n] for n in names], code, links))
            except ConfigError:  # a type refuses the recipe: each type alone, below, says which
                pass
            else:
                cuts = np.cumsum([rows[n][0].size for n in names])[:-1]
                times.update({n: (t, None) for n, t in zip(names, np.split(together, cuts), strict=True)})
                continue
        for name in names:
            idx, links = rows[name]
            try:
                times[name] = estimator.iteration_s(model, recipe, layouts.take(idx), specs[name], links), None
            except ConfigError as exc:  # e.g. the recipe's dtype has no peak on this GPU
                times[name] = np.full(idx.size, np.inf), f"cannot run this recipe: {exc}"
    return times
