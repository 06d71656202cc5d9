"""Phase semantics of the stage kernel: which tensors coexist at which moment."""

from __future__ import annotations

from frenzy_core.config import ModelConfig, ParallelConfig, TrainingConfig
from frenzy_core.memory import estimate_memory
from frenzy_core.memory.activations import edge_activations, layer_activations

MODEL = ModelConfig(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=32000, mlp="swiglu",
                    norm="rmsnorm", position_embedding="rotary", tied_embeddings=False)


def test_torch_frees_gradients_between_steps_but_accumulation_keeps_them() -> None:
    one = estimate_memory(MODEL, TrainingConfig(seq_len=2048, micro_batch_size=4, precision="bf16"))
    acc = estimate_memory(MODEL, TrainingConfig(seq_len=2048, micro_batch_size=4, precision="bf16",
                                                global_batch_size=16))
    assert one.peak_phase == "backward" and one.breakdown["gradients"] < one.stages[0].model_state_bytes / 4
    assert acc.breakdown["gradients"] == 2 * acc.stages[0].num_params


def test_megatron_grad_buffer_is_always_live() -> None:
    est = estimate_memory(MODEL, TrainingConfig(framework="megatron", seq_len=2048, micro_batch_size=4))
    assert est.breakdown["gradients"] == 4 * est.stages[0].num_params  # fp32 main grads


def test_optimizer_phase_has_the_step_temporaries() -> None:
    small = TrainingConfig(seq_len=16, micro_batch_size=1, precision="fp32", optimizer_impl="foreach")
    est = estimate_memory(MODEL, small)
    assert est.peak_phase == "optimizer"
    assert est.breakdown["activations"] == 0 and est.breakdown["optimizer_temporaries"] == 4 * est.stages[0].num_params


def test_ddp_buckets_and_zero3_gather_buffers() -> None:
    training = TrainingConfig(seq_len=512, precision="bf16")
    ddp = estimate_memory(MODEL, training, ParallelConfig(dp=4)).stages[0]
    assert ddp.breakdown["comm_buffers"] == 2 * ddp.num_params  # bucket copy of all bf16 gradients
    z3 = estimate_memory(MODEL, training.replace(zero_stage=3), ParallelConfig(dp=4)).stages[0]
    assert 0 < z3.breakdown["comm_buffers"] < ddp.breakdown["comm_buffers"]


def test_full_recompute_keeps_layer_inputs_plus_one_layer_working_set() -> None:
    base = TrainingConfig(framework="megatron", seq_len=4096, micro_batch_size=2, global_batch_size=8)
    full = estimate_memory(MODEL, base.replace(recompute="full"), ParallelConfig(pp=2)).stages[0]
    kw = {"tp": 1, "sp": False, "cp": 1, "seq_len": 4096, "micro_batch_size": 2}
    la = layer_activations(MODEL, base, **kw)
    emb = edge_activations(MODEL, base, **kw).embedding
    # stage 0: 2 layers x 2 micro-batches in flight keep their inputs; one layer is rebuilt in backward
    expected = 2 * (2 * la.layer_input + emb) + (la.dense - la.layer_input)
    assert full.activation_bytes == round(float(expected))
