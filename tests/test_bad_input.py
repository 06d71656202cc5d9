"""Inputs a user gets wrong reach them as the library's ConfigError, never as a traceback from inside."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import frenzy_core as f
from frenzy_core.memory import estimate_memory

LLAMA_JSON = Path(__file__).parent / "fixtures" / "hf_configs" / "llama.json"


def _llama(**changes: object) -> dict[str, object]:
    return {**json.loads(LLAMA_JSON.read_text()), **changes}


@pytest.mark.parametrize(("call", "match"), [
    (lambda: f.TrainingConfig(seq_len=True), "seq_len must be an integer"),
    (lambda: f.ParallelConfig(dp=False), "dp must be an integer"),
    (lambda: f.get_gpu_spec(None), "GPU type name must be a string"),
    (lambda: f.ModelConfig.preset(None), "model preset name must be a string"),
    (lambda: f.Cluster.preset(3), "cluster preset name must be a string"),
    (lambda: estimate_memory("llama-2-7b", f.TrainingConfig()), "model must be a ModelConfig"),
    (lambda: estimate_memory(f.ModelConfig.preset("gpt2"), None), "training must be a TrainingConfig"),
    (lambda: estimate_memory(f.ModelConfig.preset("gpt2"), f.TrainingConfig(seq_len=512)).fits("80GB"),
     "gpu_memory_bytes must be a positive number"),
    (lambda: f.calibrate([{"model": "llama-2-7b"}]), "Measurement"),
    (lambda: f.ModelConfig.from_hf_config(_llama(num_hidden_layers=2.7)), "num_hidden_layers=2.7 is not a whole"),
    (lambda: f.ModelConfig.from_hf_config(_llama(hidden_size="abc")), "hidden_size='abc' is not a whole"),
    (lambda: f.ModelConfig.from_hf_config(_llama(num_attention_heads=0)), "num_attention_heads"),
    (lambda: f.ModelConfig.from_hf_config(_llama(architectures=5)), "architectures=5 is not a list"),
    (lambda: f.ModelConfig.from_hf_config(42), "must be a dict or a path"),
])
def test_mistakes_raise_config_error(call: Callable[[], object], match: str) -> None:
    with pytest.raises(f.ConfigError, match=match):
        call()


def test_architectures_as_a_single_string_is_read() -> None:
    assert f.ModelConfig.from_hf_config(_llama(architectures="LlamaForCausalLM")).lm_head


def test_undecodable_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(f.ConfigError, match="line 1: byte 0xff is not UTF-8"):
        f.ModelConfig.from_hf_config(path)


def test_time_model_refuses_a_layout_larger_than_the_cluster() -> None:
    cluster = f.Cluster.preset("frenzy-paper")  # 32 A100-80GB
    model, training = f.ModelConfig.preset("llama-2-7b"), f.TrainingConfig(global_batch_size=256)
    with pytest.raises(f.ConfigError, match="needs 128 GPUs .* has 32 a100-80gb"):
        f.estimate_iteration_time(model, training, f.ParallelConfig(dp=128), "a100-80gb", cluster=cluster)
    assert f.estimate_iteration_time(model, training, f.ParallelConfig(dp=32), "a100-80gb",
                                     cluster=cluster).iteration_s > 0
