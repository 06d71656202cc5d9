"""Speed of the iteration-time model: configurations per second of the vectorised estimator, and of the scalar one.

Usage: python benchmarks/time_model_throughput.py [--n 1000000] [--write docs/benchmarks.md]

Evaluates 10^6 random layouts of a Llama-70B-shaped model on H100 (dp, tp, pp, vpp, micro-batch, recompute,
ZeRO stage drawn at random), best of three, checks a sample against the scalar estimator (they must agree
exactly), and with --write replaces the "Time model throughput" section of the file. The target is
>= 1,000,000 configurations per second.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from frenzy_core import (
    MLPKind,
    ModelConfig,
    NormKind,
    ParallelConfig,
    PipelineSchedule,
    PositionEmbedding,
    Recompute,
    TrainingConfig,
    get_gpu_spec,
)
from frenzy_core.timing import estimate_iteration_time, estimate_iteration_time_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_model_accuracy import write_section  # noqa: E402  (one home for the section writer)

HEADING = "## Time model throughput"
MODEL = ModelConfig(num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8, vocab_size=128256,
                    mlp=MLPKind.SWIGLU, ffn_hidden_size=28672, norm=NormKind.RMSNORM,
                    position_embedding=PositionEmbedding.ROTARY, tied_embeddings=False)
TRAINING = TrainingConfig(seq_len=4096, global_batch_size=1024)


def measure(n: int) -> tuple[float, float, int]:
    """(batch configs/s, scalar estimates/s, sampled candidates that matched the scalar path)."""
    gpu = get_gpu_spec("h100-sxm")
    rng = np.random.default_rng(0)
    pp = rng.choice([1, 2, 4, 8], n)
    dp, tp = rng.choice([1, 2, 4, 8, 16, 32], n), rng.choice([1, 2, 4, 8], n)
    vpp = np.where(pp > 1, rng.choice([1, 2], n), 1)
    mb, recompute, zero = rng.choice([1, 2, 4], n), rng.integers(0, 3, n), rng.integers(0, 4, n)
    columns = {"dp": dp, "tp": tp, "pp": pp, "vpp": vpp, "micro_batch_size": mb, "recompute": recompute,
               "zero_stage": zero}
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        batch = estimate_iteration_time_batch(MODEL, TRAINING, gpu, columns)
        best = min(best, time.perf_counter() - t0)
    codes = {r.code: r for r in Recompute}
    matched = 0
    for i in rng.choice(n, 50, replace=False):
        training = TRAINING.replace(micro_batch_size=int(mb[i]), recompute=codes[int(recompute[i])],
                                    zero_stage=int(zero[i]))
        parallel = ParallelConfig(dp=int(dp[i]), tp=int(tp[i]), pp=int(pp[i]), vpp=int(vpp[i]),
                                  schedule=PipelineSchedule.INTERLEAVED if vpp[i] > 1 else PipelineSchedule.ONE_F_ONE_B)
        try:
            scalar = estimate_iteration_time(MODEL, training, parallel, gpu)
        except Exception:  # noqa: BLE001 - a random layout the scalar path's validation rejects
            continue
        assert batch.at(int(i)) == scalar, f"candidate {i}: batch and scalar paths disagree"
        matched += 1
    t0 = time.perf_counter()
    for _ in range(100):
        estimate_iteration_time(MODEL, TRAINING.replace(recompute=Recompute.SELECTIVE), ParallelConfig(dp=8, tp=8, pp=2),
                                gpu)
    return n / best, 100 / (time.perf_counter() - t0), matched


def report(n: int) -> str:
    configs_per_s, scalar_per_s, matched = measure(n)
    return "\n".join([
        HEADING, "",
        (f"Command: `python benchmarks/time_model_throughput.py --write docs/benchmarks.md`; machine: "
         f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
         f"numpy {np.__version__}); date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
         f"1-minute load average {os.getloadavg()[0]:.1f}."), "",
        (f"`estimate_iteration_time_batch` evaluates **{configs_per_s:,.0f} configurations/s** ({n:,} random "
         f"Llama-70B layouts on H100, best of 3; target >= 1,000,000); {matched} sampled candidates equal the "
         f"scalar `estimate_iteration_time` exactly; the scalar function runs {scalar_per_s:,.0f} estimates/s. "
         "The stage candidates are cut once per distinct (pp, vpp, layer split), the per-layer physics runs once per "
         "distinct (micro-batch, tp, cp, ep, sequence-parallel, pp, recompute, chunks, link, stage layers) shape and "
         "the data-parallel collectives once per distinct (dp, cp, tp, pp, ep, link, stage layers, stage ends) "
         "group, then gathered."), "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--write", type=Path, default=None, help="markdown file whose section to replace")
    args = parser.parse_args()
    section = report(args.n)
    print(section)
    if args.write is not None:
        write_section(args.write, section, HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
