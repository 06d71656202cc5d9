"""Per-layer activations against Korthikanti et al. 2022 (shared/reference/memory_published.csv, row 4)."""

from __future__ import annotations

import pytest

from frenzy_core import ModelConfig, TrainingConfig
from frenzy_core.memory.activations import layer_activations

S, B, H, A = 2048, 2, 2048, 16

# Korthikanti's model: GPT layer with dropout, LayerNorm, GeLU MLP of 4h, multi-head attention, 16-bit activations.
MODEL = ModelConfig(num_layers=4, hidden_size=H, num_attention_heads=A, vocab_size=51200, mlp="gelu",
                    norm="layernorm", hidden_dropout=0.1, attention_dropout=0.1, max_position_embeddings=S)
TRAINING = TrainingConfig(framework="megatron", precision="bf16-mixed", attention="eager", seq_len=S)

# The paper drops the LayerNorm statistics (mean and rstd, fp32, per token and norm): 0.1 % covers them.
REL = 1e-3


def _layer(tp: int, sp: bool) -> tuple[float, float, float]:
    la = layer_activations(MODEL, TRAINING, tp=tp, sp=sp, cp=1, seq_len=S, micro_batch_size=B)
    return float(la.dense), float(la.dense - la.core_dense), float(la.layer_input)


def test_no_parallelism() -> None:
    full, _, _ = _layer(1, False)
    assert full == pytest.approx(S * B * H * (34 + 5 * A * S / H), rel=REL)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel(t: int) -> None:
    full, _, _ = _layer(t, False)
    assert full == pytest.approx(S * B * H * (10 + 24 / t + 5 * A * S / (H * t)), rel=REL)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel(t: int) -> None:
    full, selective, _ = _layer(t, True)
    assert full == pytest.approx(S * B * H / t * (34 + 5 * A * S / H), rel=REL)
    assert selective == pytest.approx(34 * S * B * H / t, rel=REL)


def test_full_recompute_keeps_the_layer_input() -> None:
    _, _, layer_input = _layer(1, False)
    assert layer_input == pytest.approx(2 * S * B * H, rel=1e-12)
