"""The golden corpus: fixed requests to the library's public entry points and a JSON form of their answers.

``generate.py`` writes every case's answer to ``corpus.json``; ``tests/test_golden.py`` recomputes them and
compares. A refactor must leave the corpus unchanged; a deliberate model change regenerates it (see
docs/architecture.md, "The golden corpus") in a commit that says which entries changed and why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from frenzy_core import (
    Cluster,
    ConfigError,
    InfeasiblePlanError,
    ModelConfig,
    MoEConfig,
    ParallelConfig,
    TrainingConfig,
    estimate_iteration_time,
    estimate_iteration_time_batch,
    estimate_memory,
    estimate_memory_batch,
    plan_job,
    validate_layout,
)
from frenzy_core.scheduling.simulator import simulate
from frenzy_core.scheduling.synthetic import LogNormalWork, synthetic_jobs
from frenzy_core.scheduling.throughput import PlannedThroughput

Case = tuple[str, Callable[[], Any]]

SOLVE_TIME = re.compile(r"in \d+ ms")


def _json(value: Any) -> Any:
    """Plain JSON data: numpy arrays as lists, numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json(value.tolist())
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _error(exc: Exception) -> dict[str, Any]:
    out: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ConfigError):
        out["field"] = exc.field
    if isinstance(exc, InfeasiblePlanError):
        out["reasons"] = exc.reasons
        out["suggestions"] = exc.suggestions
    return out


def _guard(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        try:
            return _json(fn())
        except (ConfigError, InfeasiblePlanError) as exc:
            return _error(exc)
    return run


# ---------------------------------------------------------------------------------------------------- models

DENSE = ModelConfig(num_layers=12, hidden_size=512, num_attention_heads=8, num_kv_heads=4, vocab_size=32000,
                    mlp="swiglu", norm="rmsnorm", position_embedding="rotary", tied_embeddings=False, name="dense")
MOE = ModelConfig(num_layers=9, hidden_size=512, num_attention_heads=8, vocab_size=32000, mlp="swiglu",
                  norm="rmsnorm", position_embedding="rotary", name="moe",
                  moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_hidden_size=256, first_dense_layers=1,
                                layer_interval=2))
BERT = ModelConfig(arch="encoder", num_layers=6, hidden_size=256, num_attention_heads=4, vocab_size=8000,
                   type_vocab_size=2, embedding_norm=True, final_norm=False, hidden_dropout=0.1,
                   attention_dropout=0.1, max_position_embeddings=512, qkv_bias=True, linear_bias=True, name="bert")
PRESETS = ("gpt2", "llama-2-7b", "mixtral-8x7b", "bert-base", "qwen3-30b-a3b", "gemma-2b", "llama-3.1-8b",
           "gpt3-1.3b", "qwen2.5-0.5b", "opt-1.3b")


def _model(name: str) -> ModelConfig:
    return {"dense": DENSE, "moe": MOE, "bert": BERT}.get(name) or ModelConfig.preset(name)


# ---------------------------------------------------------------------------------------------------- memory

MEMORY_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("gpt2", {"seq_len": 1024}, {}),
    ("gpt2", {"seq_len": 1024, "micro_batch_size": 4, "precision": "amp-bf16", "attention": "eager"}, {"dp": 2}),
    ("gpt2", {"seq_len": 1024, "zero_stage": 3, "precision": "fp32", "optimizer": "sgd-momentum"}, {"dp": 4}),
    ("gpt2", {"seq_len": 512, "recompute": "full", "optimizer_impl": "for-loop"}, {"pp": 2}),
    ("llama-2-7b", {"seq_len": 4096, "framework": "megatron", "distributed_optimizer": True,
                    "sequence_parallel": True, "global_batch_size": 64}, {"dp": 4, "tp": 4, "pp": 2}),
    ("llama-2-7b", {"seq_len": 4096, "framework": "megatron", "recompute": "selective",
                    "global_batch_size": 32}, {"dp": 2, "tp": 2, "pp": 4, "vpp": 2}),
    ("llama-2-7b", {"seq_len": 2048, "framework": "megatron", "recompute": "full", "recompute_method": "block",
                    "recompute_num_layers": 4, "global_batch_size": 16}, {"dp": 2, "tp": 2, "pp": 2}),
    ("llama-2-7b", {"seq_len": 2048, "zero_stage": 2, "precision": "bf16"}, {"dp": 8}),
    ("llama-2-7b", {"seq_len": 2048, "precision": "fp8-mixed", "framework": "megatron", "global_batch_size": 16},
     {"dp": 2, "tp": 2, "pp": 2, "schedule": "gpipe"}),
    ("mixtral-8x7b", {"seq_len": 4096, "framework": "megatron", "distributed_optimizer": True,
                      "global_batch_size": 64}, {"dp": 8, "tp": 2, "pp": 4, "ep": 8}),
    ("mixtral-8x7b", {"seq_len": 32768, "framework": "megatron", "global_batch_size": 8, "recompute": "full"},
     {"dp": 2, "tp": 4, "pp": 4, "cp": 2, "ep": 4}),
    ("bert-base", {"seq_len": 512, "micro_batch_size": 32, "precision": "amp-fp16", "attention": "eager"}, {}),
    ("bert-base", {"seq_len": 512, "micro_batch_size": 8, "precision": "fp32"}, {"dp": 2}),
    ("qwen3-30b-a3b", {"seq_len": 4096, "framework": "megatron", "global_batch_size": 32},
     {"dp": 4, "tp": 2, "pp": 4, "ep": 4}),
    ("gemma-2b", {"seq_len": 2048, "precision": "amp-bf16", "attention": "eager", "recompute": "full"}, {}),
    ("gemma-2b", {"seq_len": 2048, "precision": "bf16", "attention": "sdpa", "zero_stage": 3}, {"dp": 4}),
    ("llama-3.1-8b", {"seq_len": 8192, "framework": "megatron", "sequence_parallel": True,
                      "global_batch_size": 128}, {"dp": 8, "tp": 8, "pp": 1}),
    ("llama-3.1-8b", {"seq_len": 8192, "precision": "amp-bf16", "optimizer": "adam-8bit"}, {"dp": 2}),
    ("gpt3-1.3b", {"seq_len": 2048, "precision": "fp16-mixed", "framework": "megatron", "global_batch_size": 32},
     {"dp": 4, "tp": 1, "pp": 2}),
    ("qwen2.5-0.5b", {"seq_len": 2048, "micro_batch_size": 2, "optimizer_impl": "fused"}, {}),
    ("opt-1.3b", {"seq_len": 2048, "precision": "amp-fp16", "attention": "eager", "global_batch_size": 8},
     {"dp": 2}),
    ("dense", {"seq_len": 512, "attention": "eager", "recompute": "full", "recompute_num_layers": 2},
     {"pp": 3, "dp": 2}),
    ("moe", {"seq_len": 512, "framework": "megatron", "global_batch_size": 16},
     {"pp": 3, "dp": 2, "ep": 2}),
    ("moe", {"seq_len": 512, "precision": "amp-bf16"}, {"pp": 2, "dp": 2, "ep": 2}),
    ("bert", {"seq_len": 256, "attention": "eager"}, {"tp": 2}),
    # refused by validate_layout: the message is part of the answer
    ("gpt2", {"seq_len": 1024}, {"tp": 5}),
    ("gpt2", {"seq_len": 4096}, {}),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 12}, {"dp": 8}),
    ("llama-2-7b", {"seq_len": 2048}, {"ep": 2, "dp": 2}),
    ("mixtral-8x7b", {"seq_len": 2048}, {"ep": 3, "dp": 3}),
]


def _sampled(n: int, seed: int, models: tuple[str, ...]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``n`` (model, training, parallel) requests drawn from a fixed grid with a fixed seed (some invalid)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        model = str(rng.choice(models))
        megatron = bool(rng.integers(0, 2))
        pp = int(rng.choice([1, 2, 4]))
        vpp = int(rng.choice([1, 2])) if megatron and pp > 1 else 1
        dp, mbs, m = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2])), int(rng.choice([1, 4, 8]))
        moe = _model(model).moe is not None
        training = {
            "seq_len": int(rng.choice([512, 1024, 2048])), "micro_batch_size": mbs, "global_batch_size": mbs * dp * m,
            "framework": "megatron" if megatron else "torch",
            "precision": str(rng.choice(["bf16-mixed", "fp8-mixed"] if megatron else ["bf16", "amp-bf16", "fp32"])),
            "attention": str(rng.choice(["flash", "sdpa", "eager"])),
            "recompute": str(rng.choice(["none", "selective", "full"])),
            "zero_stage": 0 if megatron else int(rng.integers(0, 4)),
            "distributed_optimizer": bool(megatron and rng.integers(0, 2)),
            "sequence_parallel": bool(megatron and rng.integers(0, 2)),
        }
        parallel = {"dp": dp, "tp": int(rng.choice([1, 2, 4])), "pp": pp, "vpp": vpp,
                    "ep": int(rng.choice([1, 2])) if moe and dp % 2 == 0 else 1}
        out.append((model, training, parallel))
    return out


SAMPLED_MODELS = ("gpt2", "llama-2-7b", "mixtral-8x7b", "qwen2.5-0.5b", "opt-1.3b", "dense", "moe", "bert")
MEMORY_CASES += _sampled(40, 7, SAMPLED_MODELS)


def _memory_case(model: str, training: dict[str, Any], parallel: dict[str, Any]) -> Callable[[], Any]:
    def run() -> Any:
        est = estimate_memory(_model(model), TrainingConfig(**training), ParallelConfig(**parallel))
        return {"device_bytes": est.device_bytes, "peak_bytes": est.peak_bytes, "busiest_stage": est.busiest_stage,
                "peak_phase": est.peak_phase, "breakdown": est.breakdown, "overhead": est.overhead,
                "stages": [[s.num_layers, s.num_params, s.inflight_microbatches, s.peak_bytes, s.peak_phase,
                            s.model_state_bytes, s.activation_bytes, s.device_bytes] for s in est.stages]}
    return run


def random_configs(n: int, seed: int) -> dict[str, np.ndarray]:
    """Random batch-estimator layouts (every axis the vectorised path takes), reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    return {
        "dp": rng.choice([1, 2, 4, 8], n), "tp": rng.choice([1, 2, 3, 4], n), "pp": rng.choice([1, 2, 3, 4], n),
        "vpp": rng.choice([1, 1, 2], n), "cp": rng.choice([1, 1, 2], n), "ep": rng.choice([1, 1, 2], n),
        "micro_batch_size": rng.choice([1, 2, 4], n), "seq_len": rng.choice([256, 512, 1024], n),
        "num_microbatches": rng.choice([1, 2, 4, 8], n), "zero_stage": rng.integers(0, 4, n),
        "recompute": rng.integers(0, 3, n), "recompute_num_layers": rng.choice([0, 0, 1, 2], n),
        "sequence_parallel": rng.integers(0, 2, n), "schedule": rng.choice([0, 0, 1, 2], n),
    }


MEMORY_BATCH_CASES: list[tuple[str, dict[str, Any], int]] = [
    ("dense", {"framework": "torch", "precision": "bf16", "attention": "eager", "seq_len": 512}, 1),
    ("dense", {"framework": "megatron", "precision": "bf16-mixed", "seq_len": 512}, 2),
    ("moe", {"framework": "megatron", "precision": "fp8-mixed", "seq_len": 512}, 3),
    ("moe", {"framework": "torch", "precision": "amp-bf16", "attention": "eager", "seq_len": 512}, 4),
    ("bert", {"framework": "torch", "precision": "amp-fp16", "attention": "eager", "seq_len": 512}, 5),
    ("gpt2", {"framework": "torch", "distributed_optimizer": False, "seq_len": 1024}, 6),
]


def _memory_batch_case(model: str, training: dict[str, Any], seed: int) -> Callable[[], Any]:
    def run() -> Any:
        out = estimate_memory_batch(_model(model), random_configs(60, seed), TrainingConfig(**training))
        return {"valid": out.valid, "device_bytes": out.device_bytes, "peak_bytes": out.peak_bytes,
                "busiest_stage": out.busiest_stage, "breakdown": out.breakdown}
    return run


def _memory_batch_names() -> Any:
    """Names instead of codes, defaults from training, and a fixed global batch."""
    training = TrainingConfig(seq_len=1024, micro_batch_size=2, recompute="full", global_batch_size=32)
    out = estimate_memory_batch(DENSE, {"tp": [1, 2, 4, 8], "dp": [1, 2, 4, 3], "recompute": ["none", "full",
                                                                                           "selective", "full"],
                                        "schedule": ["1f1b", "gpipe", "1f1b", "1f1b"], "pp": 2}, training)
    return {"valid": out.valid, "device_bytes": out.device_bytes}


# ---------------------------------------------------------------------------------------------------- time

TWO_SHAPE_A100 = {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1},
                            {"gpu": "a100-80gb", "gpus_per_node": 4, "count": 2}]}
"""The cluster of issue 16's links divergence: one 8-GPU A100 node plus two 4-GPU nodes."""
SLOW_NIC = {"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "inter_node_bytes_per_s": 5e9},
                      {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "inter_node_bytes_per_s": 5e10,
                       "intra_node_bytes_per_s": 3e11}]}

TIME_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, dict[str, Any] | None]] = [
    ("gpt2", {"seq_len": 1024, "global_batch_size": 64}, {"dp": 8}, "a100-80gb", None),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 64, "attention": "eager", "precision": "amp-bf16"},
     {"dp": 4, "tp": 2}, "a100-40gb", None),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 64, "precision": "fp16-mixed"}, {"dp": 2, "pp": 2},
     "v100-32gb", None),
    ("llama-2-7b", {"seq_len": 4096, "global_batch_size": 256, "framework": "megatron",
                    "distributed_optimizer": True, "sequence_parallel": True},
     {"dp": 8, "tp": 4, "pp": 2}, "h100-sxm", None),
    ("llama-2-7b", {"seq_len": 4096, "global_batch_size": 128, "framework": "megatron", "recompute": "selective"},
     {"dp": 4, "tp": 2, "pp": 4, "vpp": 2}, "a100-80gb", None),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64, "framework": "megatron", "recompute": "full",
                    "recompute_method": "block", "recompute_num_layers": 4}, {"dp": 2, "tp": 8, "pp": 2},
     "h100-sxm", None),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64, "zero_stage": 3}, {"dp": 16}, "a100-80gb", None),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64, "zero_stage": 2}, {"dp": 8}, "mi300x", None),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64, "precision": "fp8-mixed", "framework": "megatron"},
     {"dp": 4, "tp": 2, "pp": 2, "schedule": "gpipe"}, "h100-sxm", None),
    ("mixtral-8x7b", {"seq_len": 4096, "global_batch_size": 64, "framework": "megatron",
                      "distributed_optimizer": True}, {"dp": 8, "tp": 2, "pp": 4, "ep": 8}, "h100-sxm", None),
    ("mixtral-8x7b", {"seq_len": 32768, "global_batch_size": 16, "framework": "megatron", "recompute": "full"},
     {"dp": 2, "tp": 4, "pp": 4, "cp": 2, "ep": 4}, "h200", None),
    ("qwen3-30b-a3b", {"seq_len": 4096, "global_batch_size": 64, "framework": "megatron",
                       "sequence_parallel": True}, {"dp": 4, "tp": 2, "pp": 4, "ep": 4}, "b200", None),
    ("bert-base", {"seq_len": 512, "global_batch_size": 256, "micro_batch_size": 32, "precision": "amp-fp16",
                   "attention": "eager"}, {"dp": 8}, "v100-16gb", None),
    ("gemma-2b", {"seq_len": 2048, "global_batch_size": 32, "precision": "bf16", "attention": "sdpa"},
     {"dp": 4, "tp": 2}, "l40s", None),
    ("llama-3.1-8b", {"seq_len": 8192, "global_batch_size": 128, "framework": "megatron",
                      "sequence_parallel": True}, {"dp": 8, "tp": 8}, "h100-sxm", None),
    ("gpt3-1.3b", {"seq_len": 2048, "global_batch_size": 32, "precision": "fp16-mixed"}, {"dp": 8, "pp": 2},
     "t4", None),
    ("qwen2.5-0.5b", {"seq_len": 2048, "global_batch_size": 8}, {"dp": 2}, "rtx-4090", None),
    # with a cluster: node size and link speeds come from its nodes of the GPU type
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 32}, {"dp": 2, "tp": 8}, "a100-80gb", TWO_SHAPE_A100),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 32}, {"dp": 4, "tp": 4}, "a100-80gb", TWO_SHAPE_A100),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 32}, {"dp": 2, "tp": 4, "pp": 2}, "a100-80gb",
     TWO_SHAPE_A100),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64, "framework": "megatron"}, {"dp": 4, "tp": 8},
     "h100-sxm", SLOW_NIC),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64}, {"dp": 32}, "h100-sxm", SLOW_NIC),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 64}, {"dp": 16}, "a100-80gb", "frenzy-paper"),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 64}, {"dp": 8, "tp": 4}, "a10g", "aws-mixed"),
    # refused
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64}, {"dp": 64}, "a100-80gb", TWO_SHAPE_A100),
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 32}, {"dp": 2}, "h100-sxm", TWO_SHAPE_A100),
    ("gpt2", {"seq_len": 1024, "precision": "bf16-mixed"}, {"dp": 2}, "v100-32gb", None),
]


TIME_GPUS = ("a100-80gb", "h100-sxm", "mi300x", "l40s", "a100-40gb")
TIME_CASES += [(m, {**t, "precision": "bf16-mixed" if t["framework"] == "megatron" else "amp-bf16"}, p,
                TIME_GPUS[i % len(TIME_GPUS)], None)
               for i, (m, t, p) in enumerate(_sampled(30, 8, SAMPLED_MODELS))]


def _cluster(spec: dict[str, Any] | str | None) -> Cluster | None:
    if spec is None:
        return None
    return Cluster.preset(spec) if isinstance(spec, str) else Cluster.from_dict(spec)


def _time_case(model: str, training: dict[str, Any], parallel: dict[str, Any], gpu: str,
               cluster: dict[str, Any] | str | None) -> Callable[[], Any]:
    def run() -> Any:
        est = estimate_iteration_time(_model(model), TrainingConfig(**training), ParallelConfig(**parallel), gpu,
                                      cluster=_cluster(cluster))
        return est.model_dump(mode="json")
    return run


def _time_batch_case(model: str, training: dict[str, Any], gpu: str, seed: int) -> Callable[[], Any]:
    def run() -> Any:
        rng = np.random.default_rng(seed)
        n = 40
        pp = rng.choice([1, 2, 4], n)
        vpp = np.where(pp > 1, rng.choice([1, 2], n), 1)
        dp, cp = rng.choice([1, 2, 4, 8], n), rng.choice([1, 2], n)
        m = _model(model)
        ep = np.where((m.moe is not None) & ((dp * cp) % 2 == 0), 2, 1)
        columns = {"dp": dp, "tp": rng.choice([1, 2, 4], n), "pp": pp, "vpp": vpp, "cp": cp, "ep": ep,
                   "micro_batch_size": rng.choice([1, 2], n), "recompute": rng.integers(0, 3, n),
                   "sequence_parallel": rng.integers(0, 2, n).astype(bool), "zero_stage": rng.choice([0, 1, 2, 3], n)}
        out = estimate_iteration_time_batch(m, TrainingConfig(**training), gpu, columns)
        return {"iteration_s": out.iteration_s, "breakdown": out.breakdown, "overlapped_s": out.overlapped_s,
                "mfu": out.mfu, "num_microbatches": out.num_microbatches, "world_size": out.world_size}
    return run


TIME_BATCH_CASES = [
    ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 64, "framework": "megatron"}, "h100-sxm", 11),
    ("moe", {"seq_len": 1024, "global_batch_size": 64, "attention": "eager"}, "a100-80gb", 12),
    ("gpt2", {"seq_len": 1024, "precision": "amp-fp16"}, "v100-32gb", 13),
]


# ---------------------------------------------------------------------------------------------------- plans

SMALL_MIXED = {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2, "free_gpus": 6},
                         {"gpu": "v100-32gb", "gpus_per_node": 4, "count": 4},
                         {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 1, "free_gpus": 3}]}
TINY = {"nodes": [{"gpu": "t4", "gpus_per_node": 2, "count": 2}]}
RACKS = {"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "rack": r, "zone": "z"} for r in ("r1", "r2")],
         "inter_rack_bytes_per_s": 5e9}
"""Two racks of two H100 nodes behind an oversubscribed spine (issue 13: groups stay in a rack or pay for it)."""
NVL_TRAYS = {"nodes": [{"gpu": "b200", "gpus_per_node": 4, "count": 4, "nvlink_domain": "nvl-0"},
                       {"gpu": "b200", "gpus_per_node": 4, "count": 2}]}
"""Four 4-GPU trays in one multi-node NVLink domain, two outside it."""

PLAN_CASES: list[tuple[str, dict[str, Any] | str, dict[str, Any] | None, dict[str, Any]]] = [
    ("gpt2", "frenzy-paper", {"seq_len": 1024, "global_batch_size": 64}, {}),
    ("gpt2", "frenzy-paper", {"seq_len": 1024, "global_batch_size": 64}, {"objective": "gpus"}),
    ("gpt2", "aws-mixed", {"seq_len": 1024, "global_batch_size": 64},
     {"objective": "cost", "constraints": {"token_budget": 10**9}}),
    ("gpt2", "aws-mixed", {"seq_len": 1024, "global_batch_size": 64},
     {"objective": "time_to_train", "constraints": {"token_budget": 10**9}}),
    ("llama-2-7b", "frenzy-paper", {"seq_len": 2048, "global_batch_size": 64, "precision": "fp16-mixed"}, {}),
    ("llama-2-7b", "aws-mixed", {"seq_len": 2048, "global_batch_size": 64, "framework": "megatron"}, {}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 2048, "global_batch_size": 32}, {}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 2048, "global_batch_size": 32}, {"solver": "exhaustive"}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 2048, "global_batch_size": 32},
     {"constraints": {"gpu_types": ["v100-32gb"], "max_gpus": 8}}),
    ("llama-2-7b", TWO_SHAPE_A100, {"seq_len": 2048, "global_batch_size": 32}, {}),
    ("llama-2-7b", TWO_SHAPE_A100, {"seq_len": 2048, "global_batch_size": 32},
     {"constraints": {"num_gpus": 16, "tp": 8}}),
    ("mixtral-8x7b", "aws-mixed", {"seq_len": 4096, "global_batch_size": 64, "framework": "megatron"}, {}),
    ("qwen3-30b-a3b", "frenzy-paper", {"seq_len": 2048, "global_batch_size": 32, "framework": "megatron",
                                       "precision": "fp16-mixed"}, {}),
    ("bert-base", "frenzy-paper", {"seq_len": 512, "global_batch_size": 256, "precision": "amp-fp16"}, {}),
    ("gemma-2b", SMALL_MIXED, {"seq_len": 2048, "global_batch_size": 16, "recompute": "full"}, {}),
    ("gpt3-1.3b", "frenzy-paper", {"seq_len": 2048, "global_batch_size": 16, "precision": "fp16-mixed"},
     {"constraints": {"micro_batch_sizes": [1, 2], "zero_stages": [0, 1]}}),
    ("gpt2", SMALL_MIXED, None, {"constraints": {"max_price_per_hour_usd": 100.0}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024}, {"constraints": {"headroom": 0.2, "pp": 2}}),
    ("llama-3.1-8b", "aws-mixed", {"seq_len": 8192, "global_batch_size": 64, "framework": "megatron"},
     {"constraints": {"token_budget": 10**10, "deadline_s": 10**7}}),
    # infeasible or refused: the message says why and what would help
    ("llama-2-70b", TINY, {"seq_len": 4096, "global_batch_size": 8}, {}),
    ("llama-2-7b", TINY, {"seq_len": 4096, "global_batch_size": 8}, {}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 4096, "global_batch_size": 32},
     {"constraints": {"gpu_types": ["v100-32gb"], "recompute": ["none"], "micro_batch_sizes": [8]}}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 2048, "global_batch_size": 32},
     {"constraints": {"num_gpus": 24}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024, "global_batch_size": 64},
     {"constraints": {"token_budget": 10**12, "deadline_s": 10.0}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024, "global_batch_size": 64},
     {"constraints": {"max_price_per_hour_usd": 0.01}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024}, {"objective": "cost"}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024}, {"constraints": {"tp": 5}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024, "global_batch_size": 6}, {"constraints": {"micro_batch_sizes": [4]}}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 2048}, {"constraints": {"pp": 3}}),
    # issue 13: any GPU count with the default batch, dp before pp, placement modes, launchers, locality
    ("llama-3.1-8b", "frenzy-paper", None, {"constraints": {"num_gpus": 6}}),
    ("qwen2.5-0.5b", "frenzy-paper", None, {"constraints": {"num_gpus": 3}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024, "global_batch_size": 48}, {"constraints": {"placement": "even"}}),
    ("gpt2", SMALL_MIXED, {"seq_len": 1024, "global_batch_size": 48}, {"constraints": {"placement": "whole_nodes"}}),
    ("llama-2-7b", SMALL_MIXED, {"seq_len": 2048, "global_batch_size": 32}, {"launcher": "slurm"}),
    ("llama-2-7b", "frenzy-paper", {"seq_len": 2048}, {"launcher": "accelerate"}),
    ("llama-2-7b", RACKS, {"seq_len": 2048, "global_batch_size": 64}, {"constraints": {"num_gpus": 16, "tp": 1}}),
    ("llama-2-7b", RACKS, {"seq_len": 2048, "global_batch_size": 64}, {"constraints": {"num_gpus": 32, "tp": 1}}),
    ("llama-2-7b", NVL_TRAYS, {"seq_len": 2048, "global_batch_size": 64}, {"constraints": {"num_gpus": 16}}),
    ("gpt2", "aws-mixed", {"seq_len": 1024, "global_batch_size": 64}, {"objective": "cost"}),
]


def _plan_case(model: str, cluster: dict[str, Any] | str, training: dict[str, Any] | None,
               kwargs: dict[str, Any]) -> Callable[[], Any]:
    def run() -> Any:
        # the corpus records answers, not races with the clock: a time limit no case reaches on a loaded machine
        # (under the default 10 s, an infeasible case's mixed search was cut short and its message changed)
        plan = plan_job(_model(model), _cluster(cluster), None if training is None else TrainingConfig(**training),
                        **{"time_limit_s": 300, **kwargs})
        data = plan.model_dump(mode="json", exclude={"solve_time_s", "model"})
        data["explain"] = SOLVE_TIME.sub("in <t> ms", plan.explain())
        return data
    return run


# ---------------------------------------------------------------------------------------------------- simulation

SIM_CLUSTER = {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2},
                         {"gpu": "v100-32gb", "gpus_per_node": 4, "count": 2}]}


def _simulation_case(policy: str, seed: int) -> Callable[[], Any]:
    def run() -> Any:
        jobs = synthetic_jobs(8, arrival_rate_per_s=1 / 600, model_mix={"gpt2": 2.0, "gpt2-medium": 1.0},
                              work_distribution=LogNormalWork(median_tokens=5e8, sigma=1.0), seed=seed)
        result = simulate(jobs, _cluster(SIM_CLUSTER), policy, seed=seed, progress=False,  # type: ignore[arg-type]
                          throughput=PlannedThroughput())
        return result.model_dump(mode="json", exclude={"round_latency_s"})
    return run


# ---------------------------------------------------------------------------------------------------- layouts

LAYOUT_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama-2-7b", {}, {"tp": 3}),
    ("llama-2-7b", {}, {"tp": 64}),
    ("llama-3.1-8b", {}, {"tp": 16}),
    ("gpt2", {}, {"pp": 13}),
    ("gpt2", {}, {"pp": 4, "vpp": 4}),
    ("gpt2", {}, {"ep": 2, "dp": 2}),
    ("mixtral-8x7b", {}, {"ep": 3, "dp": 3}),
    ("mixtral-8x7b", {}, {"ep": 16, "dp": 16}),
    ("llama-2-7b", {"seq_len": 1000}, {"cp": 4}),
    ("llama-2-7b", {"seq_len": 4096}, {"cp": 4}),
    ("gpt2", {"seq_len": 2048}, {}),
    ("bert-base", {"seq_len": 1024}, {}),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 12}, {"dp": 8}),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 8, "micro_batch_size": 2}, {"dp": 2, "pp": 4, "vpp": 3}),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 16}, {"dp": 2, "pp": 4, "vpp": 3}),
    ("gpt2", {"seq_len": 1024, "global_batch_size": 16}, {"dp": 2, "pp": 3, "vpp": 2}),
    ("llama-2-7b", {"seq_len": 4096, "global_batch_size": 64, "micro_batch_size": 2}, {"dp": 4, "tp": 4, "pp": 2}),
    ("mixtral-8x7b", {"seq_len": 4096}, {"dp": 8, "ep": 8, "tp": 2}),
    ("qwen2.5-0.5b", {}, {"tp": 4}),
    ("qwen2.5-0.5b", {}, {"tp": 7}),
]


def _layout_case(model: str, training: dict[str, Any], parallel: dict[str, Any]) -> Callable[[], Any]:
    def run() -> Any:
        validate_layout(_model(model), TrainingConfig(**training), ParallelConfig(**parallel))
        return "ok"
    return run


def cases() -> Iterator[Case]:
    """Every (name, request) of the corpus, in a fixed order; names are unique."""
    for i, (m, t, p) in enumerate(MEMORY_CASES):
        yield f"memory/{i:02d}/{m}", _guard(_memory_case(m, t, p))
    for i, (m, t, seed) in enumerate(MEMORY_BATCH_CASES):
        yield f"memory_batch/{i:02d}/{m}", _guard(_memory_batch_case(m, t, seed))
    yield "memory_batch/names", _guard(_memory_batch_names)
    for i, (m, t, p, g, c) in enumerate(TIME_CASES):
        yield f"time/{i:02d}/{m}/{g}", _guard(_time_case(m, t, p, g, c))
    for i, (m, t, g, seed) in enumerate(TIME_BATCH_CASES):
        yield f"time_batch/{i:02d}/{m}/{g}", _guard(_time_batch_case(m, t, g, seed))
    for i, (m, c, t, kw) in enumerate(PLAN_CASES):
        yield f"plan/{i:02d}/{m}", _guard(_plan_case(m, c, t, kw))
    for i, (policy, seed) in enumerate([("frenzy-has", 1), ("frenzy-core", 2), ("gavel-like", 3),
                                        ("sia-like", 4)]):
        yield f"simulate/{i:02d}/{policy}", _guard(_simulation_case(policy, seed))
    for i, (m, t, p) in enumerate(LAYOUT_CASES):
        yield f"layout/{i:02d}/{m}", _guard(_layout_case(m, t, p))
