"""The largest input frenzy_core accepts, field by field, and why: every bound is far beyond any real model, recipe
or cluster, and low enough that every count derived from the inputs stays exact.

How the bounds are derived (docs/architecture.md, "Bounds on inputs"):

1. Integer arithmetic on layout arrays is int64. The largest product the layout rules and the kernels form of
   array columns is micro_batch_size x dp (global batch splitting) or dp x cp (ZeRO replicas): at most
   ``2^20 x 2^20 = 2^40``; ``dp x tp x pp x cp`` (the world size) is formed only in float64 by the bound
   rule, and int64 only on rows that passed it (``<= 2^20``). Every such product stays below 2^62.
2. Model sizes enter numpy as int64 and float64 scalars: each is below 2^31, the parameter count below 2^46.
3. The memory and time kernels compute in float64: a product of ten bounded factors is below 2^400, far from
   float64's 2^1024 limit, so every intermediate is finite.
4. Byte counts leave the memory kernel as int64: there :data:`MAX_BYTES` (2^60) is checked on each layout's float
   totals before conversion, so the sum of the categories and the overheads stays below 2^62. A layout that would
   need more (eager attention at millions of tokens, say) is refused with a ConfigError: no GPU is within a
   factor of a million of it.
5. Times are seconds in float64: :data:`TIME_S` bounds every time that goes in (submissions, deadlines,
   durations), and the rates that divide them have lower bounds (bandwidths, peaks).

Each bound is a :class:`Limit`: the value and the reason, which the ConfigError of a value beyond it quotes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import AfterValidator

from frenzy_core.errors import short_repr

__all__ = [
    "BYTES_PER_S",
    "CAPACITY_FACTOR",
    "DEGREE",
    "EXPERTS",
    "FFN",
    "FIGURE_TEXT_CHARS",
    "GLOBAL_BATCH",
    "GPUS",
    "GPUS_PER_NODE",
    "GPU_MEMORY_BYTES",
    "HEADS",
    "HEAD_DIM",
    "HIDDEN",
    "HOST_MEMORY_BYTES",
    "ITERATIONS",
    "LAYERS",
    "MAX_BYTES",
    "MICRO_BATCH",
    "MICRO_BATCH_TOKENS",
    "MIN_BYTES_PER_S",
    "MIN_TFLOPS",
    "NODES",
    "PARAMS",
    "POSITIONS",
    "PRICE_USD",
    "PROBE_LAYER_PASSES",
    "SEQ_LEN",
    "STEP_TOKENS",
    "TFLOPS",
    "TIME_S",
    "TOKENS",
    "VOCAB",
    "Limit",
    "at_most",
    "beyond_message",
    "bytes_in_range",
    "to_int_bytes",
]


class Limit(NamedTuple):
    """The largest accepted value and why it is enough."""

    high: float
    why: str


def beyond_message(value: object, limit: Limit, what: str = "") -> str:
    """``"<what>=<value> exceeds <high>, the most frenzy_core takes (<why>)"``."""
    shown = f"{what}={short_repr(value)}" if what else short_repr(value)
    return f"{shown} exceeds {_show(limit.high)}, the most frenzy_core takes ({limit.why})"


def _show(x: float) -> str:
    if float(x).is_integer() and x >= 2**10 and int(x) & (int(x) - 1) == 0:
        return f"2^{int(x).bit_length() - 1} = {int(x):,}"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"


def at_most(limit: Limit) -> Any:
    """A pydantic validator (``Annotated[int, at_most(LAYERS)]``) refusing values above ``limit`` with its reason."""

    def check(value: Any) -> Any:
        if value is not None and value > limit.high:
            raise ValueError(beyond_message(value, limit))
        return value

    return AfterValidator(check)


# ---- models (largest published values, with their sources) --------------------------------------------------------
LAYERS = Limit(2**14, "16x the deepest transformer trained, DeepNet's 1,000 layers (Wang et al. 2022)")
HIDDEN = Limit(2**18, "14x the widest model, PaLM 540B's 18,432 (Chowdhery et al. 2022, table 1)")
HEADS = Limit(2**14, "128x Llama 3.1 405B's 128 query heads (its config.json)")
HEAD_DIM = Limit(2**14, "64x Gemma's 256 (its config.json)")
FFN = Limit(2**20, "14x PaLM 540B's 73,728 (Chowdhery et al. 2022, table 1)")
VOCAB = Limit(2**22, "16x Gemma 3's 262,208 tokens (its config.json)")
POSITIONS = Limit(2**31, "200x Llama 4 Scout's 10,485,760 positions (its config.json); torch indexes positions "
                         "in int32 and below")
EXPERTS = Limit(2**14, "42x Kimi K2's 384 routed experts (its config.json)")
CAPACITY_FACTOR = Limit(2**14, "a multiple of each expert's fair share of tokens; at num_experts (up to 2^14) every "
                                "expert may take every token")
PARAMS = Limit(2**46, "45x the largest model trained, Switch-C's 1.57 trillion parameters (Fedus et al. 2021); "
                      "keeps every byte count of the model's states below 2^52")

# ---- recipes and layouts -------------------------------------------------------------------------------------------
SEQ_LEN = Limit(2**25, "3x Llama 4 Scout's 10M-token context (its config.json)")
MICRO_BATCH = Limit(2**20, "samples per GPU per forward pass")
GLOBAL_BATCH = Limit(2**30, "samples per optimizer step; Llama 3 405B used 16M tokens, 4,096 samples of 4,096 "
                            "(Dubey et al. 2024, section 3.4)")
MICRO_BATCH_TOKENS = Limit(2**30, "64x the 16M tokens of a whole Llama 3 405B step")
STEP_TOKENS = Limit(2**40, "65,000x the 16M tokens of a Llama 3 405B step")
DEGREE = Limit(2**20, "the most GPUs of one job")
GPUS = Limit(2**20, "GPUs of one job or cluster: 5x the largest cluster reported, xAI's 200,000 GPUs (2025)")
NODES = Limit(2**17, "nodes of one cluster: GPUS in nodes of 8; the planner's work grows with the nodes")
GPUS_PER_NODE = Limit(2**12, "57x the 72 GPUs of the largest NVLink domain shipping, GB200 NVL72")
TOKENS = Limit(2**50, "tokens of one training job: 31x Qwen3's 36 trillion (Qwen3 report, 2025)")
ITERATIONS = Limit(2**40, "optimizer steps of one training job")

# ---- hardware, money and time --------------------------------------------------------------------------------------
GPU_MEMORY_BYTES = Limit(2**44, "16 TiB: 85x a B200's 192 GB")
HOST_MEMORY_BYTES = Limit(2**50, "1 PiB: 256x the 4 TiB a DGX B200 takes at most (its user guide)")
BYTES_PER_S = Limit(1e16, "1,000x an H200's 4.8 TB/s of HBM bandwidth")
MIN_BYTES_PER_S = 1e6
"""Slowest link or memory accepted (1 MB/s, slower than any a GPU has): times divided by it stay finite."""
MIN_TFLOPS = 1e-3
"""Lowest peak accepted (1 GFLOPS, below any GPU frenzy_core models)."""
TFLOPS = Limit(1e6, "200x a B200's 4,500 dense FP8 TFLOPS")
PRICE_USD = Limit(1e4, "dollars per GPU-hour: 1,000x an H100's on-demand price of about $10")
TIME_S = Limit(2**40, "seconds (34,800 years): float64 still resolves a quarter of a millisecond there")

# ---- work ----------------------------------------------------------------------------------------------------------
# A probe's layer pass (forward, backward and optimizer step of one layer) measured at 0.27 CPU s: Llama-2-7B with
# 1 and 33 layers, 2 steps, on the project's 2-core machine (2026-12-01); fake tensors make it independent of width.
# Drawing a figure's title took 1.2 CPU s at 1,000 characters, 10 s at 20,000 and 56 s at 100,000 (plot_memory,
# PNG, matplotlib 3.11 on the project's 2-core machine, 2026-12-01): the text, not the bars, sets its cost.
FIGURE_TEXT_CHARS = Limit(1_000, "characters of one text a figure draws (a title, a model or GPU name): seven lines "
                                 "of a 14-inch-wide figure at 11 pt, drawn in about a CPU second")
PROBE_LAYER_PASSES = Limit(2**9, "(layers + 1) x micro-batches x steps of one memory probe, the + 1 for the "
                                 "embedding, head, loss and optimizer: each layer pass takes about 0.27 CPU s "
                                 "whatever the layer's width (fake tensors) and the rest of a pass about 0.1 s, so "
                                 "at most about 2.3 CPU minutes; Llama 3.1 405B's 126 layers for 2 steps of 2 "
                                 "micro-batches fit")
# Measured on the shared 2-core development machine, 2026-12-02 (a 64-wide Llama, fp32, probe_memory): 1 layer x
# 1 step 0.34 CPU s, 1 x 8 steps 2.86 s, 8 layers x 1 step 2.03 s, 32 x 1 8.63 s; the 2^10 layer passes allowed
# before (one layer for 1,000 steps: about 5 CPU minutes) counted neither the per-pass rest nor a minute's budget.

MAX_BYTES = 2**60
"""Largest byte count the memory estimator reports (1 EiB, 2^60): its totals then stay below 2^62 with overheads
added, and no GPU comes within a factor of a million of it."""

FloatArray = npt.NDArray[np.float64]


def bytes_in_range(*totals: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """True where every one of ``totals`` (float64 byte counts, broadcast together) is finite and at most
    :data:`MAX_BYTES` in magnitude."""
    out: npt.NDArray[np.bool_] = np.ones(np.broadcast(*totals).shape, dtype=bool)
    for t in totals:
        with np.errstate(invalid="ignore"):
            out &= np.abs(np.asarray(t, dtype=np.float64)) <= MAX_BYTES
    return out


def to_int_bytes(values: npt.ArrayLike, ok: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``values`` rounded to int64 bytes where ``ok`` (from :func:`bytes_in_range`), 0 elsewhere: no float beyond
    int64 is ever cast (numpy would wrap it, with a warning)."""
    return np.asarray(np.rint(np.where(ok, values, 0.0)), dtype=np.float64).astype(np.int64)
