"""The analytic estimator against the fake-tensor probe on small models of every supported family.

Acceptance (set by the project, not fitted): over the grid the mean absolute error of
``estimate_memory(...).peak_bytes`` against the probe's measured peak is at most 3 %, no case is off by more
than 6 %, and no estimate falls more than 3 % below the measured peak (under-estimates cause OOMs).

The probe sees tensors only: the cuBLAS/cuBLASLt workspaces that a GPU's ``max_memory_allocated`` also counts
do not exist in a CPU run, so the estimator's ``workspaces`` term is left out of the compared peak.
"""

from __future__ import annotations

import functools

import pytest

from frenzy_core.config import ModelConfig, MoEConfig, ParallelConfig, TrainingConfig

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

MEAN_ABS_ERROR_MAX = 0.03
CASE_ABS_ERROR_MAX = 0.06
UNDER_ESTIMATE_MAX = 0.03

_VOCAB = 4096
_ROPE = {"position_embedding": "rotary", "norm": "rmsnorm"}

GRID_MODELS: dict[str, ModelConfig] = {
    "gpt2": ModelConfig(
        name="gpt2-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        vocab_size=_VOCAB,
        max_position_embeddings=512,
        qkv_bias=True,
        linear_bias=True,
        fused_qkv=True,  # GPT-2's c_attn
        hidden_dropout=0.1,
        attention_dropout=0.1,
    ),
    "bert": ModelConfig(
        name="bert-tiny",
        arch="encoder",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        vocab_size=_VOCAB,
        max_position_embeddings=512,
        type_vocab_size=2,
        qkv_bias=True,
        linear_bias=True,
        embedding_norm=True,
        final_norm=False,
        hidden_dropout=0.1,
        attention_dropout=0.1,
    ),
    "llama": ModelConfig(
        name="llama-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=8,
        num_kv_heads=2,
        ffn_hidden_size=704,
        mlp="swiglu",
        vocab_size=_VOCAB,
        tied_embeddings=False,
        **_ROPE,
    ),
    "mistral": ModelConfig(
        name="mistral-tiny",
        num_layers=3,
        hidden_size=384,
        num_attention_heads=6,
        num_kv_heads=2,
        ffn_hidden_size=1024,
        mlp="swiglu",
        vocab_size=_VOCAB,
        tied_embeddings=False,
        **_ROPE,
    ),
    "qwen2": ModelConfig(
        name="qwen2-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        num_kv_heads=2,
        ffn_hidden_size=768,
        mlp="swiglu",
        vocab_size=_VOCAB,
        qkv_bias=True,
        tied_embeddings=True,
        **_ROPE,
    ),
    "gemma": ModelConfig(
        name="gemma-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        num_kv_heads=1,
        head_dim=128,
        ffn_hidden_size=1024,
        mlp="geglu",
        vocab_size=_VOCAB,
        tied_embeddings=True,
        **_ROPE,
    ),
    "gpt_neox": ModelConfig(
        name="neox-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        vocab_size=_VOCAB,
        position_embedding="rotary",
        parallel_block=True,
        qkv_bias=True,
        linear_bias=True,
        fused_qkv=True,  # GPT-NeoX's query_key_value
        tied_embeddings=False,
    ),
    "opt": ModelConfig(
        name="opt-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        vocab_size=_VOCAB,
        mlp="relu",
        max_position_embeddings=514,
        qkv_bias=True,
        linear_bias=True,
        hidden_dropout=0.1,
    ),
    "phi3": ModelConfig(
        name="phi3-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=4,
        ffn_hidden_size=688,
        mlp="swiglu",
        vocab_size=_VOCAB,
        tied_embeddings=False,
        hidden_dropout=0.1,
        fused_qkv=True,  # Phi-3's qkv_proj and gate_up_proj
        fused_gate_up=True,
        **_ROPE,
    ),
    "mixtral": ModelConfig(
        name="mixtral-tiny",
        num_layers=2,
        hidden_size=256,
        num_attention_heads=8,
        num_kv_heads=2,
        mlp="swiglu",
        vocab_size=_VOCAB,
        tied_embeddings=False,
        moe=MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=512),
        **_ROPE,
    ),
}
"""Small models (2-3 layers, hidden 256-384) covering each Hugging Face family the probe builds."""

_BASE = TrainingConfig(seq_len=256, micro_batch_size=2, optimizer="adamw", optimizer_impl="foreach")

GRID_CASES: list[tuple[str, TrainingConfig]] = [
    (arch, _BASE.replace(precision=precision, recompute=recompute, attention=attention))
    for arch in GRID_MODELS
    for precision in ("fp32", "bf16", "amp-bf16")
    for recompute in ("none", "full")
    for attention in ("eager", "sdpa")
] + [
    # optimizer implementations, gradient accumulation, fp16, plain and momentum SGD, a longer sequence
    ("llama", _BASE.replace(precision="amp-bf16", attention="sdpa", optimizer_impl="fused")),
    ("llama", _BASE.replace(precision="amp-bf16", attention="sdpa", optimizer_impl="for-loop")),
    ("llama", _BASE.replace(precision="bf16", attention="sdpa", global_batch_size=6)),
    ("gpt2", _BASE.replace(precision="fp16", attention="sdpa")),
    ("qwen2", _BASE.replace(precision="fp32", attention="eager", optimizer="sgd")),
    ("mistral", _BASE.replace(precision="bf16", attention="sdpa", optimizer="sgd-momentum")),
    ("gemma", _BASE.replace(precision="amp-bf16", attention="flash", seq_len=1024, micro_batch_size=1)),
]
"""(model, training) pairs: precision x recompute x attention for every family, plus extras."""


def case_id(case: tuple[str, TrainingConfig]) -> str:
    arch, t = case
    parts = [arch, t.precision.value, f"rc-{t.recompute.value}", t.attention.value]
    if t.optimizer.value != "adamw" or t.optimizer_impl.value != "foreach":
        parts.append(f"{t.optimizer.value}-{t.optimizer_impl.value}")
    if t.global_batch_size:
        parts.append(f"gbs{t.global_batch_size}")
    if (t.seq_len, t.micro_batch_size) != (_BASE.seq_len, _BASE.micro_batch_size):
        parts.append(f"s{t.seq_len}b{t.micro_batch_size}")
    return "/".join(parts)


@functools.cache
def measured_peak_bytes(index: int) -> int:
    """The probe's peak for ``GRID_CASES[index]`` (measured once per test session)."""
    from frenzy_core.memory.probe import probe_memory

    arch, training = GRID_CASES[index]
    return probe_memory(GRID_MODELS[arch], training).peak_bytes


@functools.cache
def relative_error(index: int) -> float:
    """(estimated tensor bytes - measured) / measured for ``GRID_CASES[index]``."""
    from frenzy_core.memory import estimate_memory

    arch, training = GRID_CASES[index]
    estimate = estimate_memory(GRID_MODELS[arch], training, ParallelConfig())
    tensors = estimate.peak_bytes - estimate.breakdown.get("workspaces", 0)
    measured = measured_peak_bytes(index)
    return (tensors - measured) / measured


KNOWN_GAPS: dict[str, str] = {}
"""Cases the probe, following CUDA's kernels and autocast lists, measures beyond the tolerances, with the missing
term as a strict xfail (they flip when it is modelled); none since issue 9 modelled fp32 SDPA's math kernel and
BERT's autocast loss."""


def _in_ci(index: int) -> bool:
    """A quarter of the factorial grid runs in CI: per family one cell per precision, whose (recompute, attention)
    pair turns with the precision and the family, so every family meets both recompute modes and both attention
    kernels, and each (precision, recompute, attention) cell runs for a quarter of the families. Extras always
    run; the whole grid is the slow run."""
    precisions, recomputes, attentions = ("fp32", "bf16", "amp-bf16"), ("none", "full"), ("eager", "sdpa")
    factorial = len(GRID_MODELS) * len(precisions) * len(recomputes) * len(attentions)
    if index >= factorial:
        return True
    arch, t = GRID_CASES[index]
    pair = recomputes.index(t.recompute.value) * 2 + attentions.index(t.attention.value)
    return pair == (precisions.index(t.precision.value) + list(GRID_MODELS).index(arch)) % 4


CI_CASES = [i for i in range(len(GRID_CASES)) if _in_ci(i)]


def _case_param(index: int) -> object:
    cid = case_id(GRID_CASES[index])
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[cid])] if cid in KNOWN_GAPS else []
    if index not in CI_CASES:
        marks.append(pytest.mark.slow)
    return pytest.param(index, id=cid, marks=marks)


@pytest.mark.parametrize("index", [_case_param(i) for i in range(len(GRID_CASES))])
def test_estimate_matches_probe_per_case(index: int) -> None:
    err = relative_error(index)
    assert abs(err) <= CASE_ABS_ERROR_MAX, f"estimate off by {err:+.2%} (limit {CASE_ABS_ERROR_MAX:.0%})"
    assert err >= -UNDER_ESTIMATE_MAX, (
        f"estimate {err:+.2%} below the measured peak (limit {UNDER_ESTIMATE_MAX:.0%})"
    )


@pytest.mark.parametrize("cases", [pytest.param(CI_CASES, id="ci"),
                                   pytest.param(range(len(GRID_CASES)), id="all", marks=pytest.mark.slow)])
def test_estimate_mean_abs_error_over_grid(cases: list[int]) -> None:
    errors = {i: relative_error(i) for i in cases}
    mean_abs = sum(abs(e) for e in errors.values()) / len(errors)
    worst = max(errors, key=lambda i: abs(errors[i]))
    assert mean_abs <= MEAN_ABS_ERROR_MAX, (
        f"mean |error| {mean_abs:.2%} over {len(errors)} cases (limit {MEAN_ABS_ERROR_MAX:.0%}); "
        f"worst {case_id(GRID_CASES[worst])}: {errors[worst]:+.2%}"
    )
