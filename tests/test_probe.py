"""The fake-tensor memory probe: laws of what it counts, and the Hugging Face set-up it builds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from frenzy_core.config import ModelConfig, TrainingConfig
from frenzy_core.errors import ConfigError

torch = pytest.importorskip("torch")

from frenzy_core.memory.probe import (  # noqa: E402
    CUDA_BLOCK_BYTES,
    Phase,
    ProbeResult,
    built_on_meta,
    measure_training_step,
    probe_memory,
)

_FEATURES = 256
_BATCH = 4
# One fp32 (256 x 256) weight: a multiple of the 512-byte block, so rounding adds nothing.
_WEIGHT_BYTES = _FEATURES * _FEATURES * 4


def _linear() -> torch.nn.Module:
    return torch.nn.Linear(_FEATURES, _FEATURES, bias=False)


def _batch() -> tuple[torch.Tensor]:
    return (torch.randn(_BATCH, _FEATURES),)


def _square_sum(output: torch.Tensor) -> torch.Tensor:
    return output.pow(2).sum()


def _measure(optimizer: str = "sgd", **kwargs: Any) -> ProbeResult:
    factories = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "adam-foreach": lambda p: torch.optim.Adam(p, foreach=True),
        "adam-fused": lambda p: torch.optim.Adam(p, fused=True),
        "adam-for-loop": lambda p: torch.optim.Adam(p, foreach=False),
    }
    return measure_training_step(
        _linear, _batch, optimizer_factory=factories[optimizer], loss_fn=_square_sum, **kwargs
    )


class _TiedHead(torch.nn.Module):  # type: ignore[misc]
    """A frozen tied embedding/head pair with a trainable adapter, cast with ``.to()`` as PEFT does."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(_FEATURES, _FEATURES, bias=False)
        self.head = torch.nn.Linear(_FEATURES, _FEATURES, bias=False)
        self.head.weight = self.embed.weight
        self.embed.requires_grad_(False)
        self.adapter = torch.nn.Linear(_FEATURES, 1, bias=False)
        self.register_buffer("scale", torch.ones(_FEATURES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x) * self.scale) + self.adapter(x)


def _cast_tied_head() -> torch.nn.Module:
    module = _TiedHead()
    module.adapter.to(torch.float64)  # an in-place .to() while building: fake parameters refuse it (swap_tensors)
    return module


def test_a_factory_that_casts_its_weights_runs_built_on_meta() -> None:
    result = measure_training_step(built_on_meta(_cast_tied_head), _batch, loss_fn=_square_sum, steps=1,
                                   optimizer_factory=lambda p: torch.optim.SGD(
                                       [q for q in p if q.requires_grad], lr=0.1))
    # the tied weight once (fp32), the buffer, the fp64 adapter: each a multiple of the 512-byte block but the last
    adapter = -(-_FEATURES * 8 // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    assert result.phases[-1].end_bytes == _WEIGHT_BYTES + _FEATURES * 4 + adapter


def test_adam_states_after_two_steps_are_two_moments_and_a_step_counter() -> None:
    result = _measure("adam-for-loop")
    last = result.phases[-1]
    assert (last.step, last.phase) == (1, "optimizer")
    # Left alive after zero_grad(set_to_none): the weight, exp_avg and exp_avg_sq of its size, and the
    # scalar fp32 ``step`` tensor, which takes one 512-byte block.
    assert last.end_bytes == 3 * _WEIGHT_BYTES + CUDA_BLOCK_BYTES


def test_sgd_keeps_no_state() -> None:
    result = _measure("sgd")
    assert result.phases[-1].end_bytes == _WEIGHT_BYTES
    assert "optimizer_states" not in result.breakdown


def test_every_phase_of_every_step_is_recorded_in_order() -> None:
    result = _measure("sgd", steps=2, microbatches=3)
    seen = [(p.step, p.microbatch, p.phase) for p in result.phases]
    expected = []
    for step in range(2):
        for mb in range(3):
            expected += [(step, mb, "forward"), (step, mb, "backward")]
        expected.append((step, 0, "optimizer"))
    assert seen == expected
    assert result.peak_bytes == max(p.peak_bytes for p in result.phases)
    assert result.phase_peak_bytes("backward") == max(
        p.peak_bytes for p in result.phases if p.phase == "backward"
    )


def test_gradient_accumulation_keeps_the_first_microbatch_grads_alive() -> None:
    result = _measure("sgd", steps=1, microbatches=2)
    forward = [p for p in result.phases if p.phase == "forward"]
    # The second forward runs with the weight's gradient alive; everything else is the same.
    assert forward[1].peak_bytes - forward[0].peak_bytes == _WEIGHT_BYTES


def test_foreach_adam_needs_a_sqrt_copy_of_the_states_and_fused_does_not() -> None:
    foreach = _measure("adam-foreach")
    fused = _measure("adam-fused")
    foreach_temp = foreach.phases[-1].peak_bytes - foreach.phases[-1].end_bytes
    fused_temp = fused.phases[-1].peak_bytes - fused.phases[-1].end_bytes
    # torch/optim/adam.py _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), plus the
    # gradients still alive during the step; the fused kernel updates in place.
    assert foreach_temp >= 2 * _WEIGHT_BYTES
    assert fused_temp < foreach_temp


def test_storages_are_rounded_to_cuda_blocks() -> None:
    def one_scalar() -> torch.nn.Module:
        module = torch.nn.Module()
        module.w = torch.nn.Parameter(torch.zeros(1))
        module.forward = lambda x: module.w * x  # type: ignore[method-assign]
        return module

    def batch() -> tuple[torch.Tensor]:
        return (torch.ones(1),)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.sum()

    sgd = lambda p: torch.optim.SGD(p, lr=0.1)
    rounded = measure_training_step(one_scalar, batch, optimizer_factory=sgd, loss_fn=loss, steps=1)
    exact = measure_training_step(
        one_scalar, batch, optimizer_factory=sgd, loss_fn=loss, steps=1, block_bytes=1
    )
    assert rounded.breakdown["parameters"] == CUDA_BLOCK_BYTES
    assert exact.breakdown["parameters"] == 4


def test_rounding_patch_is_undone_after_the_probe() -> None:
    from torch.distributed._tools import mem_tracker

    before = mem_tracker._WeakRefInfo._calculate_mem_consumed
    _measure("sgd", steps=1)
    assert mem_tracker._WeakRefInfo._calculate_mem_consumed is before


def test_functions_swapped_for_the_probe_are_restored() -> None:
    import torch.nn.functional as F

    before = (F.dropout, F.scaled_dot_product_attention, F.softmax, F.log_softmax, F.layer_norm, torch.pow)
    _measure("sgd", steps=1)
    assert (
        F.dropout,
        F.scaled_dot_product_attention,
        F.softmax,
        F.log_softmax,
        F.layer_norm,
        torch.pow,
    ) == before


def test_dropout_keeps_a_one_byte_mask_as_on_cuda() -> None:
    def dropout_model() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(_FEATURES, _FEATURES, bias=False), torch.nn.Dropout(0.1))

    def no_dropout_model() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(_FEATURES, _FEATURES, bias=False))

    sgd = lambda p: torch.optim.SGD(p, lr=0.1)
    with_dropout = measure_training_step(
        dropout_model, _batch, optimizer_factory=sgd, loss_fn=_square_sum, steps=1
    )
    without = measure_training_step(
        no_dropout_model, _batch, optimizer_factory=sgd, loss_fn=_square_sum, steps=1
    )
    # The square saves dropout's output instead of the linear output (same size; the latter is then freed),
    # so dropout adds only its bool mask, 1 byte per element; the CPU kernel would keep 4 bytes per element.
    added = with_dropout.phases[0].end_bytes - without.phases[0].end_bytes
    assert added == _BATCH * _FEATURES


class _Attention(torch.nn.Module):
    """One projection feeding causal SDPA over 4 heads of 128 tokens."""

    def __init__(self, dropout_p: float) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 64, bias=False)
        self.dropout_p = dropout_p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.proj(x).view(2, 128, 4, 16).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(
            q, q, q, dropout_p=self.dropout_p, is_causal=True
        )


def test_attention_dropout_saves_no_score_matrix_as_on_cuda() -> None:
    def batch() -> tuple[torch.Tensor]:
        return (torch.randn(2, 128, 64),)

    def run(p: float) -> int:
        result = measure_training_step(
            lambda: _Attention(p),
            batch,
            loss_fn=_square_sum,
            steps=1,
            optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        )
        return result.phases[0].end_bytes

    # CPU SDPA with dropout falls back to the math kernel and saves 2 x 4 x 128 x 128 probabilities; CUDA's
    # flash and memory-efficient kernels drop out in-kernel and save what they save without dropout.
    assert run(0.1) == run(0.0)


def test_amp_runs_softmax_and_pow_in_fp32_as_cuda_autocast_does() -> None:
    seen: list[torch.dtype] = []

    class SoftmaxAndCube(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(_FEATURES, _FEATURES, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.proj(x)  # bf16 under autocast
            probs, cube = torch.nn.functional.softmax(h, dim=-1), torch.pow(h, 3.0)
            seen.extend([h.dtype, probs.dtype, cube.dtype])
            return probs + cube

    measure_training_step(
        SoftmaxAndCube,
        _batch,
        loss_fn=_square_sum,
        steps=1,
        autocast_dtype=torch.bfloat16,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
    )
    # CUDA autocast: linear in bf16; softmax (no dtype given) and pow on its fp32 list.
    assert seen == [torch.bfloat16, torch.float32, torch.float32]


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="steps"):
        _measure("sgd", steps=0)
    with pytest.raises(ConfigError, match="block_bytes"):
        _measure("sgd", block_bytes=0)
    with pytest.raises(ConfigError, match="phase"):
        _measure("sgd", steps=1).phase_peak_bytes("warmup")


def test_phase_names_match_the_estimator_vocabulary() -> None:
    # MemoryEstimate.peak_phase uses the same three words.
    assert [p.value for p in Phase] == ["forward", "backward", "optimizer"]


# ---- Hugging Face models -------------------------------------------------------------------------------

pytest.importorskip("transformers")

_TINY = ModelConfig(
    name="llama-probe-test",
    num_layers=2,
    hidden_size=128,
    num_attention_heads=4,
    num_kv_heads=2,
    ffn_hidden_size=352,
    mlp="swiglu",
    norm="rmsnorm",
    position_embedding="rotary",
    vocab_size=512,
    tied_embeddings=False,
)
_TRAIN = TrainingConfig(seq_len=128, micro_batch_size=2, precision="fp32", attention="sdpa")


def test_parameters_match_the_model_config_count() -> None:
    result = probe_memory(_TINY, _TRAIN)
    n = _TINY.num_params()
    # 4 bytes per fp32 parameter; each of the few dozen tensors (and the rotary buffer) rounds up < 512 bytes.
    assert 4 * n <= result.breakdown["parameters"] < 4 * n + 64 * CUDA_BLOCK_BYTES


def test_pure_bf16_halves_parameters_and_optimizer_states() -> None:
    fp32 = probe_memory(_TINY, _TRAIN.replace(optimizer_impl="fused"))
    bf16 = probe_memory(_TINY, _TRAIN.replace(precision="bf16", optimizer_impl="fused"))
    n = _TINY.num_params()
    assert 2 * n <= bf16.breakdown["parameters"] < 2 * n + 64 * CUDA_BLOCK_BYTES
    assert bf16.breakdown["optimizer_states"] < 0.55 * fp32.breakdown["optimizer_states"]


def test_full_recompute_and_sdpa_lower_the_forward_peak() -> None:
    # bf16: _TINY has grouped KV heads, which on CUDA reach a fused kernel (flash) in half precision only; fp32
    # GQA runs SDPA's math kernel there, which saves the s x s probabilities as eager attention does.
    long = _TRAIN.replace(seq_len=512, attention="eager", precision="bf16")
    eager = probe_memory(_TINY, long)
    sdpa = probe_memory(_TINY, long.replace(attention="sdpa"))
    recompute = probe_memory(_TINY, long.replace(recompute="full"))
    assert sdpa.phase_peak_bytes("forward") < eager.phase_peak_bytes("forward")
    assert recompute.phase_peak_bytes("forward") < eager.phase_peak_bytes("forward")


def test_sdpa_activations_grow_linearly_with_sequence_length() -> None:
    def forward_activation_bytes(seq_len: int) -> int:
        result = probe_memory(_TINY, _TRAIN.replace(seq_len=seq_len, precision="bf16"))
        return result.phases[0].tracker_breakdown["Activation"]

    # Unpadded batches run SDPA with is_causal and no (b, 1, s, s) mask, as on a GPU, so nothing is
    # quadratic in the sequence length: doubling it at most doubles the forward's activations. (bf16: with
    # grouped KV heads CUDA's fused kernels take half precision only; fp32 runs the math kernel.)
    assert forward_activation_bytes(256) <= 2 * forward_activation_bytes(128)


def test_flash_and_selective_are_probed_as_sdpa_and_say_so() -> None:
    sdpa = probe_memory(_TINY, _TRAIN)
    flash_selective = probe_memory(_TINY, _TRAIN.replace(attention="flash", recompute="selective"))
    assert flash_selective.peak_bytes == sdpa.peak_bytes
    assert any("flash" in n for n in flash_selective.notes)
    assert any("selective" in n for n in flash_selective.notes)


def test_logits_and_loss_are_reported_apart_from_activations() -> None:
    result = probe_memory(_TINY, _TRAIN)
    logits_bytes = _TRAIN.micro_batch_size * _TRAIN.seq_len * _TINY.vocab_size * 4
    backward = [p for p in result.phases if p.phase == "backward"]
    # At the start of backward the fp32 logits and cross-entropy's saved log-softmax are both alive.
    assert all(p.logits_loss_bytes >= 2 * logits_bytes for p in backward)
    assert all(p.logits_loss_bytes == 0 for p in result.phases if p.phase == "optimizer")


def test_a_bare_backbone_has_no_logits_and_says_how_it_was_trained() -> None:
    result = probe_memory(_TINY.replace(lm_head=False), _TRAIN)
    assert all(p.logits_loss_bytes == 0 for p in result.phases)
    assert any("last hidden state" in n for n in result.notes)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"precision": "bf16-mixed"}, "precision"),
        ({"optimizer": "adam-8bit"}, "optimizer"),
        ({"recompute": "selective", "attention": "eager"}, "recompute"),
        ({"recompute": "full", "recompute_num_layers": 2}, "recompute_num_layers"),
        ({"framework": "megatron"}, "framework"),
    ],
)
def test_settings_without_a_torch_equivalent_are_refused(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        probe_memory(_TINY, _TRAIN.replace(**changes))
    assert info.value.field == field


def test_package_imports_without_torch_and_the_probe_says_what_to_install() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import frenzy_core, frenzy_core.memory
        from frenzy_core.errors import OptionalDependencyError
        from frenzy_core.memory.probe import measure_training_step
        try:
            measure_training_step(lambda: None, lambda: ())
        except OptionalDependencyError as exc:
            print("OK", exc)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK") and "frenzy_core[torch]" in out.stdout


def test_probing_a_model_config_without_transformers_says_what_to_install() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["transformers"] = None  # import transformers now raises ImportError
        from frenzy_core.config import ModelConfig, TrainingConfig
        from frenzy_core.errors import OptionalDependencyError
        from frenzy_core.memory.probe import probe_memory
        try:
            probe_memory(ModelConfig.preset("gpt2"), TrainingConfig())
        except OptionalDependencyError as exc:
            print("OK", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK") and "'transformers'" in out.stdout and "frenzy_core[hf]" in out.stdout


# ---- Hugging Face configs as input ---------------------------------------------------------------------------


def _tiny_hf_config(**changes: Any) -> dict[str, Any]:
    from frenzy_core.config.hf import to_hf_config

    return {**to_hf_config(_TINY), **changes}


def test_a_config_dict_or_file_builds_the_same_model_as_its_model_config(tmp_path: Any) -> None:
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_tiny_hf_config(use_cache=False)), encoding="utf-8")
    from_model = probe_memory(_TINY, _TRAIN)
    assert probe_memory(_tiny_hf_config(use_cache=False), _TRAIN).peak_bytes == from_model.peak_bytes
    assert probe_memory(path, _TRAIN).peak_bytes == from_model.peak_bytes
    assert probe_memory(tmp_path, _TRAIN).peak_bytes == from_model.peak_bytes


def test_the_class_architectures_names_is_built_not_a_rebuild() -> None:
    transformers = pytest.importorskip("transformers")
    phi3 = transformers.Phi3Config(hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                   num_attention_heads=4, vocab_size=512, pad_token_id=None,
                                   architectures=["Phi3ForCausalLM"]).to_dict()
    result = probe_memory(phi3, _TRAIN)
    # Phi-3's fused projections, which a round trip through ModelConfig would turn into Llama's separate ones.
    assert any(name.endswith("self_attn.qkv_proj") for name in result.module_activation_bytes)
    assert any(name.endswith("mlp.gate_up_proj") for name in result.module_activation_bytes)


def test_the_plain_loop_keeps_the_kv_cache_the_config_asks_for() -> None:
    train = _TRAIN.replace(optimizer="sgd")
    with_cache = probe_memory(_tiny_hf_config(use_cache=True), train, loop="plain")
    without = probe_memory(_tiny_hf_config(use_cache=False), train, loop="plain")
    last = [p for p in with_cache.phases if p.phase == "optimizer"][-1].end_bytes
    last_without = [p for p in without.phases if p.phase == "optimizer"][-1].end_bytes
    # DynamicCache keeps a concatenated copy of K and V per layer: 2 x layers x b x kv_heads x s x head_dim x 4 B.
    kv_bytes = 2 * _TINY.num_layers * _TRAIN.micro_batch_size * _TINY.kv_size * _TRAIN.seq_len * 4
    assert last - last_without == kv_bytes


def test_measure_training_step_takes_a_config_too() -> None:
    def batch() -> dict[str, Any]:
        ids = torch.randint(0, _TINY.vocab_size, (2, 64))
        return {"input_ids": ids, "labels": ids}

    result = measure_training_step(_tiny_hf_config(use_cache=False), batch, steps=1)
    # The head and loss were found through the config's class (its base_model_prefix is the backbone).
    assert any(p.logits_loss_bytes > 0 for p in result.phases if p.phase == "backward")


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"model_type": "lama"}, "model_type", ["'lama'", "llama", "families the estimator reads", "qwen2"]),
        ({"model_type": "my_remote_model", "auto_map": {"AutoModel": "x.Y"}}, "model_type", ["remote code"]),
        ({"architectures": ["LlamaForCausalLMX"]}, "architectures", ["LlamaForCausalLM"]),
        ({"architectures": ["LlamaForSequenceClassification"]}, "architectures", ["task head"]),
        ({"architectures": "LlamaForCausalLM"}, "architectures", ["list of class names"]),
    ],
)
def test_bad_configs_name_the_field_and_what_would_work(changes: dict[str, Any], field: str,
                                                        words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        probe_memory(_tiny_hf_config(**changes), _TRAIN)
    assert info.value.field == field
    for word in words:
        assert word in str(info.value)


def test_a_missing_config_file_is_a_config_error(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="no Hugging Face config"):
        probe_memory(tmp_path / "absent.json", _TRAIN)
