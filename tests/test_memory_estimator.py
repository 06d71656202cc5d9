"""estimate_memory: published figures (ZeRO paper, HF memory anatomy), schedules, rendering and errors."""

from __future__ import annotations

import json

import pytest

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, TrainingConfig, estimate_memory
from frenzy_core.config.params import count_parameters
from frenzy_core.memory import MEMORY_CATEGORIES, OVERHEAD_CATEGORIES, MemoryEstimate

GB = 1e9


def _gpt(num_layers: int = 8, hidden: int = 1024, heads: int = 16, **kw: object) -> ModelConfig:
    return ModelConfig(num_layers=num_layers, hidden_size=hidden, num_attention_heads=heads, vocab_size=32000,
                       max_position_embeddings=4096, **kw)


# ZeRO paper (Rajbhandari et al. 2020), Table 1: 7.5B parameters, dp 64, mixed-precision Adam (K = 12):
# model states per GPU of 120 / 31.4 / 16.6 / 1.88 GB for baseline / P_os / P_os+g / P_os+g+p.
ZERO_TABLE_GB = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.88}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_paper_table1_model_states(stage: int) -> None:
    model = _gpt(num_layers=4)
    n = count_parameters(model).total
    training = TrainingConfig(precision="fp16-mixed", optimizer="adam", zero_stage=stage, seq_len=512)
    est = estimate_memory(model, training, ParallelConfig(dp=64))
    bytes_per_param = est.stages[0].model_state_bytes / n
    # The table's figures rounded to three significant digits: within 0.5 %.
    assert bytes_per_param * 7.5e9 / GB == pytest.approx(ZERO_TABLE_GB[stage], rel=5e-3)


def test_hf_memory_anatomy_bert_large_v100() -> None:
    """HF docs "model memory anatomy": bert-large-uncased, fp32 AdamW, batch 4, seq 512 on a V100: 14,949 MB in
    nvidia-smi, of which 1,343 MB CUDA context. nvidia-smi shows reserved memory, so within 10 %."""
    model = ModelConfig.preset("bert-large")
    training = TrainingConfig(seq_len=512, micro_batch_size=4, precision="fp32", optimizer="adamw",
                              attention="eager")
    est = estimate_memory(model, training)
    v100_context = 1343e6
    predicted = est.peak_bytes + est.overhead["fragmentation"] + v100_context
    assert predicted == pytest.approx(14949e6, rel=0.10)


def test_megatron_states_are_18_bytes_per_param_and_6_plus_12_over_dp_with_distributed_optimizer() -> None:
    """Megatron theoretical_memory_usage.py: 18 bytes/param; 6 + 12/dp with the distributed optimizer."""
    model = _gpt(num_layers=4)
    n = count_parameters(model).total
    base = TrainingConfig(framework="megatron", precision="bf16-mixed", seq_len=512)
    plain = estimate_memory(model, base, ParallelConfig(dp=8))
    dist = estimate_memory(model, base.replace(distributed_optimizer=True), ParallelConfig(dp=8))
    assert plain.stages[0].model_state_bytes / n == pytest.approx(18.0, rel=1e-9)
    assert dist.stages[0].model_state_bytes / n == pytest.approx(6 + 12 / 8, rel=1e-9)


def test_1f1b_stage_i_holds_pp_minus_i_microbatches() -> None:
    model = _gpt(num_layers=8)
    training = TrainingConfig(framework="megatron", seq_len=512, global_batch_size=16)
    est = estimate_memory(model, training, ParallelConfig(pp=4))
    assert [s.inflight_microbatches for s in est.stages] == [4, 3, 2, 1]
    assert [s.num_layers for s in est.stages] == [2, 2, 2, 2]


def test_interleaved_first_stage_follows_megatron_formula() -> None:
    """Megatron theoretical_memory_usage: first stage holds pp micro-batches x (1 + (pp - 1) / (pp x vpp))."""
    model = _gpt(num_layers=16)
    training = TrainingConfig(framework="megatron", seq_len=512, global_batch_size=16)
    est = estimate_memory(model, training, ParallelConfig(pp=4, vpp=2))
    assert est.stages[0].inflight_microbatches == pytest.approx(4 * (1 + 3 / 8))


def test_gpipe_holds_all_microbatches() -> None:
    model = _gpt(num_layers=8)
    training = TrainingConfig(framework="megatron", seq_len=512, global_batch_size=6)
    est = estimate_memory(model, training, ParallelConfig(pp=2, schedule="gpipe"))
    assert [s.inflight_microbatches for s in est.stages] == [6, 6]


def test_peak_is_a_phase_total_not_a_sum_of_category_maxima() -> None:
    model = _gpt(num_layers=4)
    training = TrainingConfig(seq_len=2048, micro_batch_size=4, precision="bf16")
    est = estimate_memory(model, training)
    stage = est.stages[0]
    assert est.peak_phase in ("forward", "backward", "optimizer")
    # torch frees .grad between steps: with one micro-batch the activation peak sees no gradients.
    assert stage.breakdown["gradients"] == 0 and stage.breakdown["activations"] > 0
    assert stage.peak_bytes < stage.model_state_bytes + stage.activation_bytes + stage.breakdown["logits_loss"] + \
        stage.breakdown["workspaces"] + 1


def test_breakdown_and_overhead_sum_and_busiest_stage() -> None:
    model = _gpt(num_layers=8)
    est = estimate_memory(model, TrainingConfig(framework="megatron", seq_len=1024, global_batch_size=8),
                          ParallelConfig(pp=2))
    for st in est.stages:
        assert set(st.breakdown) == set(MEMORY_CATEGORIES)
        assert set(st.overhead) == set(OVERHEAD_CATEGORIES)
        assert sum(st.breakdown.values()) == st.peak_bytes
        assert st.peak_bytes + sum(st.overhead.values()) == st.device_bytes
    assert est.device_bytes == max(s.device_bytes for s in est.stages)
    assert est.stages[est.busiest_stage].device_bytes == est.device_bytes


def test_table_and_json() -> None:
    est = estimate_memory(_gpt(num_layers=4), TrainingConfig(seq_len=512), ParallelConfig(pp=2))
    text = est.table()
    assert "stage 0" in text and "stage 1" in text and "activations" in text and "GiB" in text
    assert str(est) == text
    again = MemoryEstimate.model_validate_json(est.model_dump_json())
    assert again == est
    assert json.loads(est.model_dump_json())["peak_bytes"] == est.peak_bytes


def test_fits() -> None:
    est = estimate_memory(_gpt(num_layers=2), TrainingConfig(seq_len=512))
    assert est.fits(est.device_bytes) and not est.fits(est.device_bytes - 1)
    with pytest.raises(ConfigError):
        est.fits(0)


def test_invalid_layout_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="tp"):
        estimate_memory(_gpt(heads=16), TrainingConfig(), ParallelConfig(tp=3))


def test_zero3_adds_gathered_parameter_buffers() -> None:
    model = _gpt(num_layers=4)
    training = TrainingConfig(seq_len=512, zero_stage=3, precision="bf16")
    est = estimate_memory(model, training, ParallelConfig(dp=8))
    assert est.stages[0].breakdown["comm_buffers"] > 0 or est.peak_phase == "optimizer"


def test_megatron_logits_are_split_over_tp() -> None:
    model = _gpt(num_layers=2)
    training = TrainingConfig(framework="megatron", seq_len=2048, micro_batch_size=2)
    one = estimate_memory(model, training, ParallelConfig(tp=1)).stages[-1]
    four = estimate_memory(model, training, ParallelConfig(tp=4)).stages[-1]
    assert one.breakdown["logits_loss"] > 0
    assert four.breakdown["logits_loss"] * 4 == pytest.approx(one.breakdown["logits_loss"], rel=1e-6)
