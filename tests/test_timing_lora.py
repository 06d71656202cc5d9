"""The time model of a frozen base (LoRA / QLoRA): laws it must obey (issue 10, item 2; docs/time-model.md)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ModelConfig, ParallelConfig, TrainingConfig, get_gpu_spec
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.finetune import LoRAConfig
from frenzy_core.timing import default_time_model_params, estimate_iteration_time, estimate_iteration_time_batch
from frenzy_core.timing.gpu_rows import gpu_table
from frenzy_core.timing.layer import layer_terms

GPU = get_gpu_spec("h100-sxm")
SMALL = ModelConfig(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=2816,
                    vocab_size=32000, mlp="swiglu", norm="rmsnorm", position_embedding="rotary", tied_embeddings=False)
LORA = LoRAConfig(rank=16)
ALL = LoRAConfig(rank=16, target_modules=("q", "k", "v", "o", "gate", "up", "down"))


def _gemm_ratio(model: ModelConfig, lora: LoRAConfig | None, tokens: float) -> float:
    """Backward over forward GEMM seconds of the average layer on one GPU."""
    training = TrainingConfig(seq_len=4096, lora=lora)
    figures = gpu_table(training, [GPU], [default_time_model_params(GPU)], model.causal).at(np.zeros(1, np.int64))
    one = np.array([1.0])
    lt = layer_terms(model, training, figures, GPU.links, np.array([tokens]), one, one, one, np.array([False]))
    return float(lt.gemm_bwd[0] / lt.gemm_fwd[0])


def test_frozen_backward_is_about_one_forward() -> None:
    """A frozen linear's backward computes only the input gradient: about 1x its forward, against 2x when it
    trains (rank-16 adapters on q and v add a few percent)."""
    for name in ("llama-2-7b", "mixtral-8x7b"):
        model = ModelConfig.preset(name)
        assert 1.9 <= _gemm_ratio(model, None, 4096.0) <= 2.2
        assert 0.95 <= _gemm_ratio(model, LORA, 4096.0) <= 1.1


def _step(training: TrainingConfig, parallel: ParallelConfig, model: ModelConfig = SMALL) -> dict[str, float]:
    est = estimate_iteration_time(model, training, parallel, GPU)
    return {"step": est.iteration_s, **est.breakdown}


GRID = {"dp": [1, 2, 4, 1, 2, 1, 2], "tp": [1, 1, 1, 2, 2, 4, 1], "pp": [1, 1, 1, 1, 2, 1, 2],
        "micro_batch_size": [1, 2, 1, 2, 1, 1, 2]}
"""Layouts every law is checked on at once (batch)."""


def _grid(model: ModelConfig, training: TrainingConfig) -> dict[str, np.ndarray]:
    cols = {k: np.asarray(v) for k, v in GRID.items()}
    cols["global_batch_size"] = cols["dp"] * cols["micro_batch_size"] * 4
    est = estimate_iteration_time_batch(model, training, GPU, cols)
    return {"step": est.iteration_s, **est.breakdown}


@settings(max_examples=6, deadline=None, derandomize=True)
@given(st.sampled_from([512, 1024, 2048]), st.sampled_from([2, 4]), st.sampled_from([0, 1, 3]),
       st.sampled_from(["none", "full"]), st.sampled_from([512, 2048]))
def test_freezing_more_never_slows_a_step(hidden: int, layers: int, zero: int, recompute: str, seq: int) -> None:
    """Freezing weights without adding adapters never slows a step (frozen embeddings: no head weight gradient
    when tied); fewer adapters never slow one; a frozen base reduces and updates only its adapters; QLoRA adds
    the dequantisation to LoRA and nothing to its GEMMs. (LoRA against full training: next test.)"""
    model = SMALL.model_copy(update={"hidden_size": hidden, "num_layers": layers, "ffn_hidden_size": 3 * hidden,
                                     "tied_embeddings": True})
    base = TrainingConfig(seq_len=seq, zero_stage=zero, recompute=recompute)
    full, frozen_emb = _grid(model, base), _grid(model, base.replace(freeze_embeddings=True))
    lora_all, lora_qv = _grid(model, base.replace(lora=ALL)), _grid(model, base.replace(lora=LORA))
    qlora = _grid(model, base.replace(lora=LORA.model_copy(update={"base_quantization": "nf4"})))
    assert np.all(full["step"] >= frozen_emb["step"])
    assert np.all(lora_all["step"] >= lora_qv["step"])
    assert np.all(lora_qv["optimizer"] < full["optimizer"]) and np.all(lora_qv["data_parallel"] <= full["data_parallel"])
    assert np.all(qlora["step"] > lora_qv["step"]) and np.all(qlora["elementwise"] > lora_qv["elementwise"])
    assert np.array_equal(qlora["compute"], lora_qv["compute"])


def test_lora_step_is_shorter_than_full_fine_tuning_where_gemms_dominate() -> None:
    """Where the GEMMs dominate (7B-70B models, 2,048+ tokens per micro-batch) a LoRA step is shorter than a full
    one: a third of the layer GEMMs (the weight gradients), the gradient reduction and the optimizer step go.
    On a small model at few tokens the adapters' kernel launches can outweigh that (no law there)."""
    for name in ("llama-2-7b", "mistral-7b", "llama-3.1-70b"):
        model = ModelConfig.preset(name)
        t = TrainingConfig(seq_len=2048)
        full, lora = _grid(model, t), _grid(model, t.replace(lora=LORA))
        assert np.all(lora["step"] < full["step"]), name
        assert np.all(lora["compute"] < 0.8 * full["compute"]), name


def test_dequantisation_runs_per_forward_and_per_backward() -> None:
    """QLoRA dequantizes each weight in every forward and backward: full recomputation (one more forward) makes
    the added memory traffic 3/2 of that without."""
    qlora = LORA.model_copy(update={"base_quantization": "nf4"})
    extra = []
    for recompute in ("none", "full"):
        t = TrainingConfig(seq_len=1024, global_batch_size=8, recompute=recompute)
        extra.append(_step(t.replace(lora=qlora), ParallelConfig(dp=8))["elementwise"]
                     - _step(t.replace(lora=LORA), ParallelConfig(dp=8))["elementwise"])
    assert np.isclose(extra[1] / extra[0], 1.5, rtol=1e-9)


def test_optimizer_and_reduction_cover_only_the_adapters() -> None:
    """The optimizer step is memory-bound over the trained parameters: LoRA's is the adapters' share of it."""
    t = TrainingConfig(seq_len=1024, global_batch_size=8)
    full, lora = _step(t, ParallelConfig(dp=8)), _step(t.replace(lora=LORA), ParallelConfig(dp=8))
    h, kv, layers = SMALL.hidden_size, SMALL.kv_size, SMALL.num_layers
    adapters = layers * 16 * ((h + SMALL.q_size) + (h + kv))  # A: r x in, B: out x r on q and v
    assert np.isclose(lora["optimizer"] / full["optimizer"], adapters / SMALL.num_params(), rtol=1e-9)
    assert lora["data_parallel"] < full["data_parallel"]  # a small model's reduction is latency-bound
    # a 7B model's is bandwidth-bound: the adapters are 0.06 % of its bytes, so what is left is latency
    t7 = t.replace(seq_len=2048)
    big = ModelConfig.preset("llama-2-7b")
    full7, lora7 = _step(t7, ParallelConfig(dp=8), big), _step(t7.replace(lora=LORA), ParallelConfig(dp=8), big)
    assert lora7["data_parallel"] < 0.05 * full7["data_parallel"]


def test_batch_equals_scalar_with_lora() -> None:
    t = TrainingConfig(seq_len=1024, global_batch_size=16, lora=LORA.model_copy(update={"base_quantization": "nf4"}))
    layouts = [ParallelConfig(dp=8), ParallelConfig(dp=4, tp=2), ParallelConfig(dp=2, pp=2, tp=2),
               ParallelConfig(dp=2, tp=4)]
    rows = [LayoutArrays.from_configs(t, p) for p in layouts]
    cols = {k: np.concatenate([getattr(r, k) for r in rows]) for k in ("dp", "tp", "pp")}
    batch = estimate_iteration_time_batch(SMALL, t, GPU, cols)
    for i, p in enumerate(layouts):
        assert batch.iteration_s[i] == estimate_iteration_time(SMALL, t, p, GPU).iteration_s
