"""The training loop as an input: ``TrainingConfig.keep_outputs`` (issue 9).

A loop that keeps the model output (``out = model(**batch); out.loss.backward(); opt.step()``) holds the logits
and, for a model that returns one, the KV cache from the end of a forward until the next forward returns.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, TrainingConfig, estimate_memory
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.memory.activations import layer_activations, logit_bytes
from frenzy_core.memory.batch import estimate_memory_batch

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LLAMA = ModelConfig(num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=2, ffn_hidden_size=1408,
                    mlp="swiglu", norm="rmsnorm", position_embedding="rotary", vocab_size=32000,
                    tied_embeddings=False, returns_kv_cache=True)
BASE = TrainingConfig(seq_len=1024, micro_batch_size=2, precision="bf16", attention="sdpa")


def test_default_is_the_framework_loop() -> None:
    assert TrainingConfig().keep_outputs is False


def test_megatron_refuses_kept_outputs() -> None:
    with pytest.raises(ConfigError, match="keep_outputs"):
        TrainingConfig(framework="megatron", keep_outputs=True)


def test_kept_logits_and_cache_are_live_at_the_optimizer_step() -> None:
    """The optimizer moment holds the whole output: the logits in the matmul dtype (b x s x V x 2 bytes) and every
    layer's K and V copies (b x s x kv x 2 bytes each)."""
    tiny = TrainingConfig(seq_len=16, micro_batch_size=1, precision="bf16", attention="sdpa")
    free = estimate_memory(LLAMA, tiny)
    kept = estimate_memory(LLAMA, tiny.replace(keep_outputs=True))
    assert free.peak_phase == kept.peak_phase == "optimizer"
    logits = 16 * LLAMA.vocab_size * 2
    cache = LLAMA.num_layers * 2 * 16 * LLAMA.kv_size * 2
    assert kept.breakdown["logits_loss"] - free.breakdown["logits_loss"] == logits
    assert kept.breakdown["activations"] - free.breakdown["activations"] == cache


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_no_cache_without_use_cache_or_with_checkpointing(recompute: str) -> None:
    """Gradient checkpointing turns use_cache off (Transformers), so under full recompute the kept output holds
    only the logits; without it, the cache is live at the optimizer step too."""
    tiny = TrainingConfig(seq_len=16, micro_batch_size=1, precision="bf16", attention="sdpa", recompute=recompute,
                          keep_outputs=True)
    with_cache = estimate_memory(LLAMA, tiny).peak_bytes
    without = estimate_memory(LLAMA.replace(returns_kv_cache=False), tiny).peak_bytes
    assert with_cache - without == (0 if recompute == "full" else LLAMA.num_layers * 2 * 16 * LLAMA.kv_size * 2)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[ModelConfig, TrainingConfig]:
    model = LLAMA.replace(
        vocab_size=draw(st.sampled_from([4096, 32000, 151936])), returns_kv_cache=draw(st.booleans()),
        num_kv_heads=draw(st.sampled_from([1, 2, 8])), tied_embeddings=draw(st.booleans()))
    training = BASE.replace(
        seq_len=draw(st.sampled_from([128, 1024, 4096])), micro_batch_size=draw(st.sampled_from([1, 2, 4])),
        precision=draw(st.sampled_from(["fp32", "bf16", "amp-bf16"])),
        attention=draw(st.sampled_from(["eager", "sdpa"])), recompute=draw(st.sampled_from(["none", "full"])),
        optimizer_impl=draw(st.sampled_from(["foreach", "fused"])),
        global_batch_size=draw(st.sampled_from([None, 8])))
    return model, training


@SETTINGS
@given(_cases())
def test_keeping_the_output_costs_at_most_the_output(case: tuple[ModelConfig, TrainingConfig]) -> None:
    """0 <= peak(kept) - peak(framework) <= logits + KV cache of one micro-batch: the output is the only extra."""
    model, training = case
    free = estimate_memory(model, training).peak_bytes
    kept = estimate_memory(model, training.replace(keep_outputs=True)).peak_bytes
    kw = {"tp": 1, "cp": 1, "seq_len": training.seq_len, "micro_batch_size": training.micro_batch_size}
    logits = float(logit_bytes(model, training, **kw).returned)
    layer = layer_activations(model, training, sp=False, **kw)
    cache = 0.0 if training.recompute.value == "full" else model.num_layers * float(layer.kv_cache)
    assert 0 <= kept - free <= logits + cache + 8  # each category rounds to whole bytes


@SETTINGS
@given(_cases())
def test_batch_rows_equal_the_scalar_estimate_with_kept_outputs(case: tuple[ModelConfig, TrainingConfig]) -> None:
    model, training = case
    training = training.replace(keep_outputs=True)
    scalar = estimate_memory(model, training)
    batch = estimate_memory_batch(model, LayoutArrays.from_configs(training, ParallelConfig()), training)
    assert int(batch.peak_bytes[0]) == scalar.peak_bytes
    assert {k: int(v[0]) for k, v in batch.breakdown.items()} == scalar.breakdown


def test_plan_job_honours_kept_outputs() -> None:
    from frenzy_core.hardware import Cluster
    from frenzy_core.planning import plan_job

    training = TrainingConfig(seq_len=2048, precision="bf16", attention="sdpa", keep_outputs=True,
                              global_batch_size=16)
    plan = plan_job(LLAMA, Cluster.preset("frenzy-paper"), training, constraints={"num_gpus": 4}, time_limit_s=5)
    assert plan.training.keep_outputs is True
    recipe, layout = plan.training, plan.parallel
    kept = estimate_memory(LLAMA, recipe, layout)
    free = estimate_memory(LLAMA, recipe.replace(keep_outputs=False), layout)
    assert plan.memory.device_bytes == kept.device_bytes > free.device_bytes


@pytest.mark.parametrize("command", ["memory", "plan"])
def test_cli_keep_outputs_option(command: str) -> None:
    import json

    from frenzy_core.cli.app import app

    runner = CliRunner()
    args = [command, "llama-3.1-8b", "--precision", "bf16", "--seq-len", "1024", "--json"]
    if command == "plan":
        args += ["--num-gpus", "8", "--global-batch", "16"]
    kept = json.loads(runner.invoke(app, [*args, "--keep-outputs"]).stdout)
    free = json.loads(runner.invoke(app, args).stdout)
    recipe = (lambda out: out["training"]) if command == "memory" else (lambda out: out["request"]["training"])
    assert recipe(kept)["keep_outputs"] is True and recipe(free)["keep_outputs"] is False
    if command == "memory":
        assert kept["estimate"]["peak_bytes"] > free["estimate"]["peak_bytes"]
    else:
        assert kept["plan"]["training"]["keep_outputs"] is True


def test_bare_backbone_keeps_its_last_hidden_state() -> None:
    bare = LLAMA.replace(lm_head=False, returns_kv_cache=False)
    tiny = TrainingConfig(seq_len=16, micro_batch_size=1, precision="bf16", attention="sdpa")
    diff = (estimate_memory(bare, tiny.replace(keep_outputs=True)).breakdown["logits_loss"]
            - estimate_memory(bare, tiny).breakdown["logits_loss"])
    assert diff == 16 * bare.hidden_size * 2
    assert np.isfinite(diff)
