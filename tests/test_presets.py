"""Built-in model presets: they load, match their published parameter counts, and match transformers' models."""

from __future__ import annotations

from typing import Any

import pytest

from frenzy_core.config import ModelConfig
from frenzy_core.config.presets import model_preset_info
from frenzy_core.errors import ConfigError, UnknownNameError

REQUIRED = [
    "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "bert-base", "bert-large", "gpt3-1.3b", "gpt3-6.7b", "gpt3-13b",
    "gpt3-175b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
    "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-72b",
    "gemma-2b", "gemma-7b", "opt-1.3b", "opt-6.7b", "pythia-1.4b", "pythia-6.9b",
]

# Brown et al. 2020, Table 2.1 gives GPT-3 sizes to two or three significant figures. For XL and 6.7B the stated
# architecture (d_ff = 4 d_model, tied 50257-token vocabulary, 2048 learned positions) gives 1.316B and 6.658B:
# the paper's figures are nominal names, not counts, and miss by more than 0.5%.
NOMINAL_PAPER_FIGURES = {"gpt3-1.3b", "gpt3-6.7b"}

# No Hugging Face family has LayerNorm + GeLU with an attention width (40 x 128) unlike the hidden size (5140).
NOT_EXPRESSIBLE_IN_HF = {"gpt3-13b"}


def _published_check_params() -> list[Any]:
    out = []
    for name in ModelConfig.presets():
        marks = []
        if name in NOMINAL_PAPER_FIGURES:
            marks.append(pytest.mark.xfail(strict=True, reason="paper figure is a nominal size, see "
                                                              "test_nominal_paper_figures_round_to_the_count"))
        out.append(pytest.param(name, marks=marks))
    return out


def test_required_presets_exist() -> None:
    names = ModelConfig.presets()
    assert len(names) >= 25
    assert set(REQUIRED) <= set(names), set(REQUIRED) - set(names)
    assert names == sorted(names)


@pytest.mark.parametrize("name", ModelConfig.presets())
def test_preset_loads_with_its_name_and_source(name: str) -> None:
    model = ModelConfig.preset(name)
    assert model.name == name
    info = model_preset_info(name)
    assert info.model == model
    assert info.source.strip()


@pytest.mark.parametrize("name", _published_check_params())
def test_param_count_within_half_percent_of_published(name: str) -> None:
    info = model_preset_info(name)
    computed = info.model.num_params()
    assert abs(computed - info.published_params) <= 0.005 * info.published_params, (
        f"{name}: computed {computed:,} vs published {info.published_params:,} "
        f"({(computed - info.published_params) / info.published_params:+.3%})"
    )


@pytest.mark.parametrize("name", sorted(NOMINAL_PAPER_FIGURES))
def test_nominal_paper_figures_round_to_the_count(name: str) -> None:
    # The paper writes 1.3B and 6.7B: the count must round to the figure at its two significant digits.
    info = model_preset_info(name)
    assert float(f"{info.model.num_params():.2g}") == info.published_params


@pytest.mark.parametrize(("query", "expected"), [("llama-2-7", "llama-2-7b"), ("mixtral-8x7", "mixtral-8x7b"),
                                                  ("qwen2.5-7", "qwen2.5-7b"), ("gtp2", "gpt2")])
def test_unknown_name_suggests_the_closest(query: str, expected: str) -> None:
    with pytest.raises(UnknownNameError) as info:
        ModelConfig.preset(query)
    assert expected in info.value.suggestions
    assert expected in str(info.value)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, KeyError)


def test_lookup_ignores_case_and_spaces() -> None:
    assert ModelConfig.preset(" Llama-3.1-8B ") == ModelConfig.preset("llama-3.1-8b")


@pytest.mark.parametrize("name", ModelConfig.presets())
def test_preset_round_trips_through_json_and_yaml(name: str) -> None:
    model = ModelConfig.preset(name)
    assert ModelConfig.model_validate_json(model.model_dump_json()) == model
    assert ModelConfig.from_yaml(model.to_yaml()) == model


# ---- cross-check against transformers' own modules (independent of our counting) -------------------


def _hf_param_count(config: dict[str, Any]) -> int:
    """Unique parameters of the transformers model ``config`` describes, built on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    kwargs = dict(config)
    family = kwargs.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(family, **kwargs)
    with torch.device("meta"):
        model = getattr(transformers, kwargs["architectures"][0])(hf_config)
    return sum(p.numel() for p in model.parameters())


def _hf_presets() -> list[str]:
    return [n for n in ModelConfig.presets() if n not in NOT_EXPRESSIBLE_IN_HF]


@pytest.mark.parametrize("name", _hf_presets())
def test_preset_count_equals_transformers_model(name: str) -> None:
    model = ModelConfig.preset(name)
    hf_count = _hf_param_count(model.to_hf_config())
    assert model.num_params() == hf_count
    if not name.startswith("gpt3-"):
        # Every other published figure is the exact count of a Hugging Face model (GPT-3's come from the paper).
        assert hf_count == model_preset_info(name).published_params


def _shrunk(model: ModelConfig) -> ModelConfig:
    """The same architecture at toy size: 2 layers, narrow, small vocabulary (head shape kept GQA/MQA-like)."""
    heads = 4
    kv = 1 if model.num_kv_heads == 1 else (2 if model.num_kv_heads < model.num_attention_heads else heads)
    changes: dict[str, Any] = {
        "num_layers": 2, "hidden_size": 128, "num_attention_heads": heads, "num_kv_heads": kv,
        "head_dim": 48 if model.head_dim * model.num_attention_heads != model.hidden_size else 32,
        "ffn_hidden_size": 192, "vocab_size": 500, "max_position_embeddings": 130,
    }
    if model.moe is not None:
        moe = model.moe.model_dump()
        moe.update(num_experts=4, top_k=2, expert_ffn_hidden_size=64)
        if moe["shared_expert_ffn_hidden_size"]:
            moe["shared_expert_ffn_hidden_size"] = 96
        changes["moe"] = moe
    return model.replace(**changes)


@pytest.mark.parametrize("name", ["gpt2", "bert-base", "opt-1.3b", "pythia-1.4b", "llama-2-70b", "mistral-7b",
                                  "qwen2.5-0.5b", "qwen2.5-7b", "gemma-2b", "gemma-7b", "mixtral-8x7b",
                                  "qwen1.5-moe-a2.7b", "qwen3-8b", "qwen3-30b-a3b", "phi-3-mini-4k"])
def test_shrunk_preset_count_equals_transformers_model(name: str) -> None:
    model = _shrunk(ModelConfig.preset(name))
    assert model.num_params() == _hf_param_count(model.to_hf_config())
