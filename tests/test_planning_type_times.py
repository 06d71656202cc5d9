"""The planner's step times: one time-model call over the GPU types that share a recipe gives each type what a
call of its own gives, and a type that cannot run the recipe is named without failing the others."""

from __future__ import annotations

import numpy as np

from frenzy_core import ModelConfig, TrainingConfig, get_gpu_spec
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.hardware.gpu import Links
from frenzy_core.planning.estimators import AnalyticEstimator, iteration_times

MODEL = ModelConfig.preset("gpt2")
TRAINING = TrainingConfig(seq_len=1024, global_batch_size=64)
LAYOUTS = LayoutArrays.from_columns({"dp": [1, 2, 4, 8, 2], "tp": [1, 1, 2, 1, 4]}, TRAINING)
TYPES = ("h100-sxm", "a100-80gb", "l4", "v100-32gb")
SPECS = {name: get_gpu_spec(name) for name in TYPES}


def _rows(name: str, idx: list[int], node: int) -> tuple[np.ndarray, Links]:
    spec = SPECS[name]
    n = len(idx)
    return np.array(idx), Links(np.full(n, node), np.full(n, spec.intra_node_bytes_per_s),  # type: ignore[arg-type]
                                np.full(n, spec.inter_node_bytes_per_s))


class _OneTypeAtATime:
    """The analytic estimator without its several-types call (as a custom estimator may be)."""

    def __init__(self) -> None:
        self._inner = AnalyticEstimator()

    def iteration_s(self, *args: object) -> np.ndarray:
        return self._inner.iteration_s(*args)  # type: ignore[arg-type]


def test_one_call_over_types_equals_a_call_per_type() -> None:
    rows = {"h100-sxm": _rows("h100-sxm", [0, 1, 3], 8), "a100-80gb": _rows("a100-80gb", [1, 2, 4], 4),
            "l4": _rows("l4", [], 8), "v100-32gb": _rows("v100-32gb", [0, 4], 8)}
    recipes = {name: TRAINING for name in TYPES}
    together = iteration_times(MODEL, recipes, SPECS, LAYOUTS, rows, AnalyticEstimator())
    alone = iteration_times(MODEL, recipes, SPECS, LAYOUTS, rows, _OneTypeAtATime())  # type: ignore[arg-type]
    assert set(together) == set(alone) == set(TYPES)
    for name in TYPES:
        assert np.array_equal(together[name][0], alone[name][0]) and together[name][1] == alone[name][1]
    assert together["l4"][0].size == 0
    assert np.all(np.isinf(together["v100-32gb"][0])) and "no bf16 peak" in str(together["v100-32gb"][1])
    assert together["h100-sxm"][1] is None and np.all(np.isfinite(together["h100-sxm"][0]))
    # the V100 in its own recipe (the planner's fp16 fallback) is timed, in a call of its own
    fp16 = {**recipes, "v100-32gb": TRAINING.replace(precision="fp16-mixed")}
    fallback = iteration_times(MODEL, fp16, SPECS, LAYOUTS, rows, AnalyticEstimator())
    assert fallback["v100-32gb"][1] is None and np.all(np.isfinite(fallback["v100-32gb"][0]))
    for name in ("h100-sxm", "a100-80gb"):  # timed together, as each alone
        assert np.array_equal(fallback[name][0], alone[name][0])


class _SlowerAnalytic(AnalyticEstimator):
    """A subclass that changes ``iteration_s`` alone: its own times, not the inherited several-types call's."""

    def iteration_s(self, *args: object, **kwargs: object) -> np.ndarray:
        return 100.0 * super().iteration_s(*args, **kwargs)  # type: ignore[arg-type]


def test_a_subclass_overriding_iteration_s_keeps_its_own_times() -> None:
    rows = {"h100-sxm": _rows("h100-sxm", [0, 1, 3], 8), "a100-80gb": _rows("a100-80gb", [1, 2, 4], 4)}
    recipes = {name: TRAINING for name in rows}
    plain = iteration_times(MODEL, recipes, SPECS, LAYOUTS, rows, AnalyticEstimator())
    slower = iteration_times(MODEL, recipes, SPECS, LAYOUTS, rows, _SlowerAnalytic())
    for name in rows:
        assert np.allclose(slower[name][0], 100.0 * plain[name][0], rtol=1e-12)
