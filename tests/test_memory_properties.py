"""Laws the memory estimator must obey on every configuration (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, TrainingConfig, estimate_memory
from frenzy_core.config import LayoutArrays
from frenzy_core.config.params import count_parameters
from frenzy_core.memory.shards import stage_params, stage_shape

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def models(draw: st.DrawFn) -> ModelConfig:
    heads = draw(st.sampled_from([4, 8, 16]))
    head_dim = draw(st.sampled_from([16, 32, 64]))
    moe = None
    if draw(st.booleans()):
        experts = draw(st.sampled_from([4, 8]))
        moe = {"num_experts": experts, "top_k": draw(st.integers(1, 2)), "expert_ffn_hidden_size": 128,
               "layer_interval": draw(st.sampled_from([1, 2])), "first_dense_layers": draw(st.sampled_from([0, 1])),
               "shared_expert_ffn_hidden_size": draw(st.sampled_from([0, 128])),
               "num_shared_experts": 0}
        moe["num_shared_experts"] = 1 if moe["shared_expert_ffn_hidden_size"] else 0
    arch = draw(st.sampled_from(["decoder", "decoder", "encoder"]))
    mlp = draw(st.sampled_from(["gelu", "swiglu", "relu"]))
    rotary = draw(st.booleans())
    return ModelConfig(
        num_layers=draw(st.integers(2, 12)), hidden_size=heads * head_dim, num_attention_heads=heads,
        num_kv_heads=draw(st.sampled_from([heads, heads // 2, heads // 4])), vocab_size=draw(st.sampled_from([1000, 4096])),
        mlp=mlp, norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        position_embedding="rotary" if rotary else "learned", max_position_embeddings=8192,
        tied_embeddings=draw(st.booleans()), hidden_dropout=draw(st.sampled_from([0.0, 0.1])),
        attention_dropout=draw(st.sampled_from([0.0, 0.1])), moe=moe, arch=arch,
        **draw(_structure(arch == "decoder", mlp != "gelu" and mlp != "relu", rotary)))


@st.composite
def _structure(draw: st.DrawFn, decoder: bool, gated: bool, rotary: bool) -> dict[str, object]:
    """The module-layout fields (issue 9) the eager-PyTorch terms follow, in the combinations ModelConfig accepts."""
    fields: dict[str, object] = {
        "fused_qkv": draw(st.booleans()), "qk_norm": draw(st.booleans()),
        "norm_placement": draw(st.sampled_from(["pre", "pre", "sandwich", "post"])),
        "fused_gate_up": gated and draw(st.booleans()),
    }
    if rotary:
        fields["partial_rotary_factor"] = draw(st.sampled_from([1.0, 0.5, 0.25]))
    if decoder:
        fields["returns_kv_cache"] = draw(st.booleans())
        window = draw(st.sampled_from([None, None, 64, 512]))
        if window is not None:
            fields["sliding_window"] = window
            fields["sliding_window_layers"] = draw(st.sampled_from([None, (0,)]))
        if draw(st.booleans()):
            fields["attn_logit_softcapping"] = 50.0
            fields["final_logit_softcapping"] = 30.0
    return fields


@st.composite
def trainings(draw: st.DrawFn) -> TrainingConfig:
    framework = draw(st.sampled_from(["torch", "megatron"]))
    return TrainingConfig(
        seq_len=draw(st.sampled_from([64, 256, 1024])), micro_batch_size=draw(st.integers(1, 4)),
        precision=draw(st.sampled_from(["fp32", "bf16", "amp-bf16", "bf16-mixed", "fp8-mixed"])),
        optimizer=draw(st.sampled_from(["adamw", "sgd", "sgd-momentum", "adam-8bit"])),
        optimizer_impl=draw(st.sampled_from(["for-loop", "foreach", "fused"])),
        zero_stage=draw(st.integers(0, 3)), recompute=draw(st.sampled_from(["none", "selective", "full"])),
        attention=draw(st.sampled_from(["eager", "sdpa", "flash"])),
        framework=framework, sequence_parallel=draw(st.booleans()),
        keep_outputs=framework == "torch" and draw(st.booleans()))


def _ok(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> bool:
    try:
        estimate_memory(model, training, parallel)
    except ConfigError:
        return False
    return True


@SETTINGS
@given(models(), trainings(), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.integers(1, 4))
def test_valid_configs_give_finite_nonnegative_numbers(model: ModelConfig, training: TrainingConfig, tp: int,
                                                       pp: int, m: int) -> None:
    parallel = ParallelConfig(dp=2, tp=tp, pp=pp)
    training = training.replace(global_batch_size=training.micro_batch_size * 2 * m)
    assume(_ok(model, training, parallel))
    est = estimate_memory(model, training, parallel)
    for stage in est.stages:
        assert all(v >= 0 for v in stage.breakdown.values())
        assert all(v >= 0 for v in stage.overhead.values())
        assert sum(stage.breakdown.values()) == stage.peak_bytes
        assert stage.peak_bytes + sum(stage.overhead.values()) == stage.device_bytes
        assert math.isfinite(stage.inflight_microbatches)
    assert est.device_bytes == max(s.device_bytes for s in est.stages)


@SETTINGS
@given(models(), trainings(), st.sampled_from(["micro_batch_size", "seq_len", "num_layers"]))
def test_more_batch_sequence_or_layers_never_needs_less(model: ModelConfig, training: TrainingConfig,
                                                        what: str) -> None:
    parallel = ParallelConfig(pp=2) if model.num_layers >= 4 else ParallelConfig()
    assume(_ok(model, training, parallel))
    if what == "num_layers":
        bigger_model, bigger_training = model.replace(num_layers=model.num_layers * 2), training
    else:
        bigger_model, bigger_training = model, training.replace(**{what: getattr(training, what) * 2})
    assume(_ok(bigger_model, bigger_training, parallel))
    small = estimate_memory(model, training, parallel)
    big = estimate_memory(bigger_model, bigger_training, parallel)
    assert big.peak_bytes >= small.peak_bytes


@SETTINGS
@given(models(), trainings(), st.sampled_from(["tp", "pp"]), st.integers(1, 3))
def test_more_tp_or_pp_never_needs_more_per_gpu(model: ModelConfig, training: TrainingConfig, what: str,
                                                m: int) -> None:
    training = training.replace(global_batch_size=training.micro_batch_size * m)
    base = ParallelConfig()
    more = ParallelConfig(**{what: 2})
    # An uneven split is a different problem: stage 0 of 3 layers on pp = 2 holds 2 layers x 2 micro-batches.
    assume(what == "tp" or model.num_layers % 2 == 0)
    assume(_ok(model, training, base) and _ok(model, training, more))
    assert estimate_memory(model, training, more).peak_bytes <= estimate_memory(model, training, base).peak_bytes


@SETTINGS
@given(models(), trainings())
def test_zero_stages_shrink_model_states(model: ModelConfig, training: TrainingConfig) -> None:
    parallel = ParallelConfig(dp=8)
    states = []
    for stage in (0, 1, 2, 3):
        t = training.replace(zero_stage=stage)
        assume(_ok(model, t, parallel))
        states.append(estimate_memory(model, t, parallel).stages[0].model_state_bytes)
    assert states[3] <= states[2] <= states[1] <= states[0]


@SETTINGS
@given(models(), trainings(), st.sampled_from([1, 2]))
def test_recompute_never_increases_activations(model: ModelConfig, training: TrainingConfig, pp: int) -> None:
    parallel = ParallelConfig(pp=pp)
    training = training.replace(global_batch_size=training.micro_batch_size * 2)
    # HF eager decoders: each checkpointed micro-batch keeps its (b, 1, s, s) causal mask until backward, which
    # on tiny stages can outweigh what full recomputation saves; the law holds everywhere else.
    assume(not (training.framework.value == "torch" and training.attention.value == "eager" and model.causal))
    acts = []
    for mode in ("full", "selective", "none"):
        t = training.replace(recompute=mode)
        assume(_ok(model, t, parallel))
        acts.append([s.activation_bytes for s in estimate_memory(model, t, parallel).stages])
    for full, selective, none in zip(*acts):
        assert full <= selective <= none


@SETTINGS
@given(models(), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3, 4]), st.sampled_from([1, 2]),
       st.sampled_from([1, 2, 4]))
def test_shard_parameter_counts_sum_to_the_model(model: ModelConfig, tp: int, pp: int, vpp: int, ep: int) -> None:
    assume(model.num_layers >= pp * vpp and (vpp == 1 or pp > 1))
    assume(ep == 1 or (model.moe is not None and model.moe.num_experts % ep == 0))
    stages = np.arange(pp)
    shape = stage_shape(model, LayoutArrays.from_columns({"pp": pp, "vpp": vpp}, TrainingConfig()), stages)
    prm = stage_params(model, shape, tp)
    assert int(shape.num_layers.sum()) == model.num_layers
    assert int(shape.num_moe_layers.sum()) == model.num_moe_layers
    per_rank = prm.per_rank(tp, ep)
    # A stage's unique parameters: the tp-split part on tp ranks, the replicated part once, experts on tp x ep.
    unique = (per_rank - prm.replicated - prm.experts / (tp * ep)) * tp + prm.replicated \
        + prm.experts / (tp * ep) * (tp * ep) - prm.tied_copy
    assert float(unique.sum()) == pytest_approx(count_parameters(model).total)


def pytest_approx(x: float) -> object:
    import pytest

    return pytest.approx(x, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.integers(-2, 9), st.integers(-1, 5), st.integers(-1, 5), st.integers(-1, 3), st.integers(-1, 40),
       st.integers(-1, 5000), st.integers(0, 70), st.integers(-1, 3))
def test_invalid_configs_raise_config_error_only(layers: int, tp: int, pp: int, vpp: int, heads: int,
                                                 seq: int, gbs: int, ep: int) -> None:
    try:
        model = ModelConfig(num_layers=layers, hidden_size=64 * max(heads, 1), num_attention_heads=heads,
                            vocab_size=1000, max_position_embeddings=1024)
        training = TrainingConfig(seq_len=seq, global_batch_size=gbs or None)
        parallel = ParallelConfig(tp=tp, pp=pp, vpp=vpp, ep=ep)
        est = estimate_memory(model, training, parallel)
    except ConfigError:
        return
    assert est.peak_bytes > 0
