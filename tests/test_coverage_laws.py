"""Laws of issue 10's coverage (hypothesis): freezing more never needs more memory, more LoRA targets never less,
PEFT's fp32 adapters never less than adapters in the model's dtype, offloading never raises device
bytes, an HSDP shard group sits between ZeRO-3 over all replicas and no sharding, more routing imbalance never
needs less."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ModelConfig, MoEConfig, ParallelConfig, TrainingConfig, estimate_memory
from frenzy_core.config.finetune import AdapterDtype, LoRAConfig, LoRATarget

DENSE = ModelConfig(num_layers=6, hidden_size=256, num_attention_heads=8, num_kv_heads=2, ffn_hidden_size=704,
                    mlp="swiglu", vocab_size=4096, tied_embeddings=False, position_embedding="rotary",
                    norm="rmsnorm")
MOE = DENSE.replace(moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_hidden_size=256).model_dump())

_training = st.builds(
    TrainingConfig, seq_len=st.sampled_from([128, 512]), micro_batch_size=st.sampled_from([1, 2]),
    precision=st.sampled_from(["bf16", "bf16-mixed", "amp-bf16", "fp32"]),
    attention=st.sampled_from(["sdpa", "eager"]), recompute=st.sampled_from(["none", "full"]),
    zero_stage=st.sampled_from([0, 1, 2, 3]),
    sequence_parallel=st.just(True))  # torch tp > 1 is modelled with torchtitan's sequence parallelism only
_parallel = st.builds(ParallelConfig, dp=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2]))


def _states(training: TrainingConfig, parallel: ParallelConfig, model: ModelConfig = DENSE) -> int:
    b = estimate_memory(model, training, parallel).breakdown
    return sum(b[k] for k in ("parameters", "gradients", "master_weights", "optimizer_states"))


@settings(max_examples=40, deadline=None)
@given(training=_training, parallel=_parallel, k=st.integers(0, DENSE.num_layers - 1))
def test_freezing_more_never_needs_more(training: TrainingConfig, parallel: ParallelConfig, k: int) -> None:
    full = estimate_memory(DENSE, training, parallel).device_bytes
    last_k1 = estimate_memory(DENSE, training.replace(trainable_layers=k + 1), parallel).device_bytes
    last_k = estimate_memory(DENSE, training.replace(trainable_layers=k), parallel).device_bytes
    frozen_emb = estimate_memory(DENSE, training.replace(trainable_layers=k, freeze_embeddings=True),
                                 parallel).device_bytes
    assert frozen_emb <= last_k <= last_k1 <= full


@settings(max_examples=40, deadline=None)
@given(training=_training, parallel=_parallel, rank=st.sampled_from([4, 16]))
def test_fewer_adapters_never_need_more(training: TrainingConfig, parallel: ParallelConfig, rank: int) -> None:
    # adapters in the model's dtype: LoRA only removes what full training keeps (PEFT's fp32 adapters on a half
    # base can save more than full training at long sequences: each casts its own fp32 input copy)
    all_targets = LoRAConfig(rank=rank, target_modules=tuple(LoRATarget), adapter_dtype="model")
    qv = LoRAConfig(rank=rank, adapter_dtype="model")
    est = {name: estimate_memory(DENSE, training.replace(lora=lora), parallel).device_bytes
           for name, lora in (("all", all_targets), ("qv", qv))}
    assert est["qv"] <= est["all"] <= estimate_memory(DENSE, training, parallel).device_bytes


_targets = st.sets(st.sampled_from(list(LoRATarget)), min_size=1)


def _lora(targets: set[LoRATarget], **kwargs: object) -> LoRAConfig:
    return LoRAConfig(target_modules=tuple(t for t in LoRATarget if t in targets), **kwargs)


@settings(max_examples=15, deadline=None)
@given(training=_training, parallel=_parallel, targets=_targets, extra=st.sampled_from(list(LoRATarget)),
       dtype=st.sampled_from(list(AdapterDtype)), dropout=st.sampled_from([0.0, 0.1]))
def test_more_target_modules_never_need_less(training: TrainingConfig, parallel: ParallelConfig,
                                             targets: set[LoRATarget], extra: LoRATarget, dtype: AdapterDtype,
                                             dropout: float) -> None:
    fewer, more = (training.replace(lora=_lora(t, adapter_dtype=dtype, dropout=dropout))
                   for t in (targets, targets | {extra}))
    assert estimate_memory(DENSE, fewer, parallel).device_bytes <= estimate_memory(DENSE, more, parallel).device_bytes


@settings(max_examples=15, deadline=None)
@given(training=_training, parallel=_parallel, targets=_targets, dropout=st.sampled_from([0.0, 0.1]),
       quantization=st.sampled_from(["none", "nf4"]))
def test_fp32_adapters_never_need_less_than_model_dtype(training: TrainingConfig, parallel: ParallelConfig,
                                                        targets: set[LoRATarget], dropout: float,
                                                        quantization: str) -> None:
    model_dtype, fp32 = (estimate_memory(DENSE, training.replace(lora=_lora(
        targets, adapter_dtype=d, dropout=dropout, base_quantization=quantization)), parallel)
        for d in ("model", "fp32"))
    assert fp32.device_bytes >= model_dtype.device_bytes
    if not training.precision.is_pure_half:  # amp: the base is fp32 already; mixed: the module is cast to bf16
        assert fp32 == model_dtype


@settings(max_examples=40, deadline=None)
@given(training=_training, parallel=_parallel, what=st.sampled_from(["optimizer", "both", "acts"]))
def test_offloading_never_raises_device_bytes(training: TrainingConfig, parallel: ParallelConfig, what: str) -> None:
    # (the parameters alone are refused: no torch runtime offloads them without the optimizer)
    change = {"optimizer": {"offload_optimizer": "cpu"},
              "both": {"offload_optimizer": "cpu", "offload_params": "cpu"},
              "acts": {"activation_offload_layers": 3}}[what]
    base = estimate_memory(DENSE, training, parallel).device_bytes
    assert estimate_memory(DENSE, training.replace(**change), parallel).device_bytes <= base


@settings(max_examples=40, deadline=None)
@given(training=_training, group=st.sampled_from([1, 2, 4]))
def test_hsdp_model_states_between_zero3_and_zero0(training: TrainingConfig, group: int) -> None:
    parallel = ParallelConfig(dp=8)
    hsdp = _states(training.replace(zero_stage=3), parallel.replace(shard_group_size=group))
    assert _states(training.replace(zero_stage=3), parallel) <= hsdp <= _states(training.replace(zero_stage=0),
                                                                                 parallel)


@settings(max_examples=30, deadline=None)
@given(seq_len=st.sampled_from([256, 1024]), low=st.floats(1.0, 2.0), extra=st.floats(0.0, 2.0))
def test_more_imbalance_never_needs_less(seq_len: int, low: float, extra: float) -> None:
    training = TrainingConfig(seq_len=seq_len, framework="megatron", precision="bf16-mixed")
    parallel = ParallelConfig(dp=4, ep=4)
    less = estimate_memory(MOE, training.replace(moe_load_imbalance=low), parallel).device_bytes
    more = estimate_memory(MOE, training.replace(moe_load_imbalance=low + extra), parallel).device_bytes
    assert less <= more


def test_offloaded_states_are_counted_on_the_host_by_both_paths() -> None:
    from frenzy_core.memory import estimate_memory_batch

    training = TrainingConfig(seq_len=512, zero_stage=3, offload_optimizer="cpu", offload_params="cpu")
    parallel = ParallelConfig(dp=4)
    est = estimate_memory(DENSE, training, parallel)
    kept = estimate_memory(DENSE, training.replace(offload_optimizer="none", offload_params="none"), parallel)
    assert est.host_bytes > 0 and kept.host_bytes == 0
    # master weights and both Adam moments (fp32) of the rank's quarter of the parameters at least
    assert est.host_bytes >= 12 * DENSE.num_params() // 4
    batch = estimate_memory_batch(DENSE, {"dp": 4}, training)
    assert int(batch.host_bytes) == est.host_bytes and int(batch.device_bytes) == est.device_bytes


def test_bad_frozen_sets_are_refused_naming_the_field() -> None:
    import pytest

    from frenzy_core import ConfigError

    cases = [
        (TrainingConfig(lora=LoRAConfig(rank=512)), "training.lora.rank", "at most 256"),
        (TrainingConfig(lora=LoRAConfig(module_ranks={LoRATarget.V: 300})), "training.lora.module_ranks",
         "at most 64"),
        (TrainingConfig(trainable_layers=0, freeze_embeddings=True), "training.trainable_layers", "nothing to train"),
        (TrainingConfig(trainable_layers=0, lora=LoRAConfig()), "training.trainable_layers", "nothing to train"),
        (TrainingConfig(trainable_layers=7), "training.trainable_layers", "6 layers"),
    ]
    for training, field, words in cases:
        with pytest.raises(ConfigError) as err:
            estimate_memory(DENSE.replace(tied_embeddings=True), training, ParallelConfig())
        assert err.value.field == field and words in str(err.value) + str(err.value.hint), (field, str(err.value))
