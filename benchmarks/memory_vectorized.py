"""Throughput of ``estimate_memory_batch`` on one core: prints configurations per second of wall-clock time and
per CPU second of the process (``time.process_time``: on a shared machine it counts the core time the process got,
not the time it waited for one), each the best of 9 calls, the CPU figure also as the median, and the load
average. The best call's CPU time is split into user and system time with its minor page faults: glibc returns
freed block temporaries to the OS and faults them back in (system time), by an amount that varies between calls
and processes running the same code (docs/benchmarks.md).

Run: python benchmarks/memory_vectorized.py [n_configs]
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time

import numpy as np

from frenzy_core.config import ModelConfig, TrainingConfig
from frenzy_core.memory.batch import estimate_memory_batch


def random_layouts(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` random layouts of a 32-layer model on up to 512 GPUs (some invalid, as a planner would try)."""
    rng = np.random.default_rng(seed)
    pow2 = lambda hi: 2 ** rng.integers(0, hi + 1, n)
    return {
        "dp": pow2(6), "tp": pow2(3), "pp": pow2(3), "vpp": rng.choice([1, 1, 2], n),
        "micro_batch_size": pow2(3), "seq_len": rng.choice([2048, 4096, 8192], n), "num_microbatches": pow2(5) * 4,
        "recompute": rng.integers(0, 3, n), "zero_stage": rng.integers(0, 4, n), "sequence_parallel": rng.integers(0, 2, n),
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    model = ModelConfig.preset("llama-2-7b")
    configs = random_layouts(n)
    for framework in ("megatron", "torch"):
        training = TrainingConfig(framework=framework, precision="bf16-mixed" if framework == "megatron" else "bf16")
        estimate_memory_batch(model, {k: v[:1000] for k, v in configs.items()}, training)  # warm-up
        wall, cpu, split, cpus = float("inf"), float("inf"), (0.0, 0.0, 0), []
        for _ in range(9):
            t0, c0, r0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
            out = estimate_memory_batch(model, configs, training)
            c1, r1 = time.process_time() - c0, resource.getrusage(resource.RUSAGE_SELF)
            wall = min(wall, time.perf_counter() - t0)
            cpus.append(c1)
            if c1 < cpu:
                cpu, split = c1, (r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt)
        print(f"{framework:8s} {n:,} configs in {wall:.3f} s: {n / wall:,.0f} configs/s; {cpu:.3f} CPU s: "
              f"{n / cpu:,.0f} configs per CPU second (user {split[0]:.3f} s, system {split[1]:.3f} s, "
              f"{split[2]:,} page faults); median {n / statistics.median(cpus):,.0f} configs per CPU second; "
              f"{int(out.valid.sum()):,} valid")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
