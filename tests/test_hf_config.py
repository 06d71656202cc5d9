"""Reading and writing Hugging Face config.json files (frenzy_core.config.hf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_core.config import ModelConfig
from frenzy_core.config.hf import SUPPORTED_HF_FAMILIES, model_from_hf_config, to_hf_config
from frenzy_core.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"

# Each fixture is the published config.json of the model the preset describes.
FIXTURE_PRESET = {
    "bert": "bert-base",                 # google-bert/bert-base-uncased
    "gemma": "gemma-2b",                 # google/gemma-2b
    "gpt2": "gpt2",                      # openai-community/gpt2
    "gpt_neox": "pythia-1.4b",           # EleutherAI/pythia-1.4b
    "llama": "llama-2-7b",               # meta-llama/Llama-2-7b-hf
    "mistral": "mistral-7b",             # mistralai/Mistral-7B-v0.1
    "mixtral": "mixtral-8x7b",           # mistralai/Mixtral-8x7B-v0.1
    "opt": "opt-1.3b",                   # facebook/opt-1.3b
    "phi3": "phi-3-mini-4k",             # microsoft/Phi-3-mini-4k-instruct
    "qwen2": "qwen2.5-0.5b",             # Qwen/Qwen2.5-0.5B
    "qwen2_moe": "qwen1.5-moe-a2.7b",    # Qwen/Qwen1.5-MoE-A2.7B
    "qwen3": "qwen3-8b",                 # Qwen/Qwen3-8B
    "qwen3_moe": "qwen3-30b-a3b",        # Qwen/Qwen3-30B-A3B
}

# Presets no Hugging Face family can build (see test_presets.NOT_EXPRESSIBLE_IN_HF).
NOT_EXPRESSIBLE = {"gpt3-13b"}


def _fixture(family: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{family}.json").read_text())
    return data


def _same_architecture(a: ModelConfig, b: ModelConfig) -> bool:
    return bool(a.model_dump(exclude={"name"}) == b.model_dump(exclude={"name"}))


def test_every_published_fixture_has_a_preset() -> None:
    # Families without a preset are covered by the Transformers 5 fixtures (tests/test_hf_families.py).
    assert set(FIXTURE_PRESET) <= set(SUPPORTED_HF_FAMILIES)
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == sorted(FIXTURE_PRESET)


@pytest.mark.parametrize("family", sorted(FIXTURE_PRESET))
def test_published_config_reads_as_the_preset(family: str) -> None:
    model = ModelConfig.from_hf_config(FIXTURES / f"{family}.json")
    assert _same_architecture(model, ModelConfig.preset(FIXTURE_PRESET[family]))


def test_accepts_a_dict_a_file_path_string_and_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Llama-2-7b-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_fixture("llama")))
    from_dict = model_from_hf_config(_fixture("llama"))
    assert model_from_hf_config(str(folder / "config.json")) == from_dict
    assert model_from_hf_config(folder) == from_dict
    assert from_dict.name == "meta-llama/Llama-2-7b-hf"  # from _name_or_path
    config = _fixture("gpt2")
    (folder / "config.json").write_text(json.dumps(config))
    assert model_from_hf_config(folder).name == "Llama-2-7b-hf"  # no _name_or_path: the folder's name
    assert model_from_hf_config(config).name is None


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no Hugging Face config"):
        model_from_hf_config(tmp_path)


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON") as info:
        model_from_hf_config(path)
    assert str(path) in str(info.value)


def test_unknown_family_lists_the_supported_ones() -> None:
    config = {**_fixture("llama"), "model_type": "mamba"}
    with pytest.raises(ConfigError) as info:
        model_from_hf_config(config)
    assert info.value.field == "model_type"
    assert "'mamba'" in str(info.value)
    for family in ("llama", "gpt2", "mixtral", "bert", "qwen2_moe"):
        assert family in str(info.value)


@pytest.mark.parametrize(("family", "key"), [("llama", "hidden_size"), ("gpt2", "n_layer"),
                                             ("qwen2_moe", "moe_intermediate_size"), ("bert", "vocab_size"),
                                             ("opt", "ffn_dim"), ("llama", "model_type")])
def test_missing_required_key_names_key_and_file(tmp_path: Path, family: str, key: str) -> None:
    config = _fixture(family)
    del config[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        model_from_hf_config(path)
    assert info.value.field == key
    assert repr(key) in str(info.value) and str(path) in str(info.value)


# ---- heads, from ``architectures`` ---------------------------------------------------------------------


def test_bert_model_has_pooler_and_no_mlm_head() -> None:
    bare = model_from_hf_config({**_fixture("bert"), "architectures": ["BertModel"]})
    assert bare.pooler and not bare.lm_head
    # BertModel(bert-base-uncased) has 109,482,240 parameters (the figure of the original checkpoint).
    assert bare.num_params() == 109_482_240


def test_decoder_backbone_has_no_lm_head() -> None:
    bare = model_from_hf_config({**_fixture("llama"), "architectures": ["LlamaModel"]})
    assert not bare.lm_head
    # Llama-2-7b without its untied 32000 x 4096 output matrix.
    assert bare.num_params() == 6_738_415_616 - 32000 * 4096


def test_missing_architectures_means_the_usual_head() -> None:
    config = _fixture("gpt_neox")
    del config["architectures"]
    assert model_from_hf_config(config).lm_head


@pytest.mark.parametrize(("family", "arch"), [("bert", "BertForPreTraining"),
                                              ("llama", "LlamaForSequenceClassification"),
                                              ("gpt2", "GPT2DoubleHeadsModel")])
def test_other_heads_are_rejected(family: str, arch: str) -> None:
    with pytest.raises(ConfigError) as info:
        model_from_hf_config({**_fixture(family), "architectures": [arch]})
    assert info.value.field == "architectures"
    assert arch in str(info.value)


# ---- family-specific readings ------------------------------------------------------------------------------


def test_opt_position_rows_include_the_offset_of_two() -> None:
    assert model_from_hf_config(_fixture("opt")).max_position_embeddings == 2048 + 2


def test_opt_with_embedding_projection_is_rejected() -> None:
    # facebook/opt-350m: hidden_size 1024, word_embed_proj_dim 512 (project_in / project_out).
    config = {**_fixture("opt"), "hidden_size": 1024, "word_embed_proj_dim": 512}
    with pytest.raises(ConfigError, match="word_embed_proj_dim"):
        model_from_hf_config(config)


def test_opt_post_norm_has_no_final_norm() -> None:
    model = model_from_hf_config({**_fixture("opt"), "do_layer_norm_before": False})
    assert not model.final_norm


def test_gemma_defaults_to_head_dim_256() -> None:
    config = _fixture("gemma")
    del config["head_dim"]
    assert model_from_hf_config(config).head_dim == 256


def test_llama_biases_follow_attention_bias_and_mlp_bias() -> None:
    both = model_from_hf_config({**_fixture("llama"), "attention_bias": True, "mlp_bias": True})
    assert both.qkv_bias and both.linear_bias
    with pytest.raises(ConfigError, match="mlp_bias"):
        model_from_hf_config({**_fixture("llama"), "attention_bias": True})


def test_qwen_moe_sparse_step_and_dense_prefix() -> None:
    layers = 8
    # transformers' rule: layer i is sparse iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    for step, dense in [(2, []), (3, []), (1, [0, 1])]:
        model = model_from_hf_config({**_fixture("qwen2_moe"), "num_hidden_layers": layers,
                                      "decoder_sparse_step": step, "mlp_only_layers": dense})
        expected = [i not in dense and (i + 1) % step == 0 for i in range(layers)]
        assert [model.is_moe_layer(i) for i in range(layers)] == expected
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        model_from_hf_config({**_fixture("qwen2_moe"), "mlp_only_layers": [3]})


def test_qwen2_moe_shared_expert_and_gate() -> None:
    moe = model_from_hf_config(_fixture("qwen2_moe")).moe
    assert moe is not None
    assert (moe.num_experts, moe.top_k, moe.expert_ffn_hidden_size) == (60, 4, 1408)
    assert moe.shared_expert_ffn_hidden_size == 5632 and moe.shared_expert_gate


def test_qwen3_has_per_head_qk_norm() -> None:
    model = model_from_hf_config(_fixture("qwen3"))
    without = model.replace(qk_norm=False)
    assert model.num_params() - without.num_params() == model.num_layers * 2 * model.head_dim


def test_unsupported_activation_is_rejected() -> None:
    with pytest.raises(ConfigError, match="hidden_act"):
        model_from_hf_config({**_fixture("llama"), "hidden_act": "tanh"})


# ---- writing: to_hf_config -------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "family", "arch"), [
    ("gpt2", "gpt2", "GPT2LMHeadModel"), ("bert-base", "bert", "BertForMaskedLM"),
    ("opt-1.3b", "opt", "OPTForCausalLM"), ("pythia-1.4b", "gpt_neox", "GPTNeoXForCausalLM"),
    ("llama-2-7b", "llama", "LlamaForCausalLM"), ("mistral-7b", "mistral", "MistralForCausalLM"),
    ("qwen2.5-7b", "qwen2", "Qwen2ForCausalLM"), ("gemma-2b", "gemma", "GemmaForCausalLM"),
    ("mixtral-8x7b", "mixtral", "MixtralForCausalLM"), ("qwen1.5-moe-a2.7b", "qwen2_moe", "Qwen2MoeForCausalLM"),
    ("qwen3-8b", "qwen3", "Qwen3ForCausalLM"), ("qwen3-30b-a3b", "qwen3_moe", "Qwen3MoeForCausalLM"),
])
def test_closest_family_is_chosen(preset: str, family: str, arch: str) -> None:
    config = ModelConfig.preset(preset).to_hf_config()
    assert config["model_type"] == family
    assert config["architectures"] == [arch]


def test_backbone_exports_the_bare_class() -> None:
    assert ModelConfig.preset("llama-2-7b").replace(lm_head=False).to_hf_config()["architectures"] == ["LlamaModel"]


@pytest.mark.parametrize("name", [n for n in ModelConfig.presets() if n not in NOT_EXPRESSIBLE])
def test_preset_round_trips_through_hf_config(name: str) -> None:
    model = ModelConfig.preset(name)
    config = to_hf_config(model)
    assert config["model_type"] in SUPPORTED_HF_FAMILIES
    back = model_from_hf_config(json.loads(json.dumps(config)))  # survives JSON as config.json would
    assert _same_architecture(back, model)
    assert back.name == name


@pytest.mark.parametrize("name", sorted(NOT_EXPRESSIBLE))
def test_inexpressible_preset_raises(name: str) -> None:
    with pytest.raises(ConfigError, match="no Hugging Face family"):
        to_hf_config(ModelConfig.preset(name))


@pytest.mark.parametrize(("changes", "field"), [
    ({"qkv_bias": False}, "qkv_bias"),           # GPT-2 always has attention biases
    ({"embedding_norm": True}, "embedding_norm"),
    ({"type_vocab_size": 2}, "type_vocab_size"),
])
def test_inexpressible_change_names_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        to_hf_config(ModelConfig.preset("gpt2").replace(**changes))
    assert info.value.field == field
    assert field in str(info.value)


def test_swiglu_hidden_dropout_goes_to_phi3() -> None:
    # Llama-family configs have no residual dropout; Phi-3 (fused q/k/v and gate/up, no biases) has resid_pdrop.
    model = ModelConfig.preset("llama-2-7b").replace(hidden_dropout=0.1, fused_qkv=True, fused_gate_up=True)
    config = to_hf_config(model)
    assert config["model_type"] == "phi3"
    assert _same_architecture(model_from_hf_config(config), model)


# ---- laws ------------------------------------------------------------------------------------------


@st.composite
def _models(draw: st.DrawFn) -> ModelConfig:
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4, 8) if heads % d == 0]))
    head_dim = draw(st.sampled_from([8, 16, 32]))
    mlp = draw(st.sampled_from(["gelu", "relu", "swiglu", "geglu"]))
    gated = mlp in ("swiglu", "geglu")
    moe = None
    if gated and draw(st.booleans()):
        experts = draw(st.integers(2, 8))
        shared = draw(st.sampled_from([0, 32]))
        moe = {"num_experts": experts, "top_k": draw(st.integers(1, experts)), "expert_ffn_hidden_size": 16,
               "num_shared_experts": 1 if shared else 0, "shared_expert_ffn_hidden_size": shared,
               "shared_expert_gate": bool(shared), "layer_interval": draw(st.sampled_from([1, 2]))}
    model: ModelConfig = ModelConfig.model_validate({
        "num_layers": draw(st.integers(1, 4)),
        "hidden_size": heads * head_dim if not gated else draw(st.sampled_from([heads * head_dim, 48])),
        "num_attention_heads": heads,
        "num_kv_heads": kv if gated else heads,
        "head_dim": head_dim,
        "ffn_hidden_size": draw(st.integers(1, 64)),
        "mlp": mlp,
        "norm": "rmsnorm" if gated else "layernorm",
        "vocab_size": draw(st.integers(8, 300)),
        "max_position_embeddings": draw(st.integers(3, 64)),
        "position_embedding": "rotary" if gated else draw(st.sampled_from(["learned", "rotary"])),
        "tied_embeddings": draw(st.booleans()),
        "qkv_bias": draw(st.booleans()) if gated else True,
        "linear_bias": not gated,
        "parallel_block": not gated and draw(st.booleans()),
        "qk_norm": gated and draw(st.booleans()),
        "lm_head": draw(st.booleans()),
        "moe": moe,
    })
    return model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_models())
def test_to_hf_then_back_is_identity_or_an_explained_error(model: ModelConfig) -> None:
    try:
        config = to_hf_config(model)
    except ConfigError as exc:
        assert exc.field is not None and exc.field in str(exc)
        return
    back = model_from_hf_config(config)
    if model.moe is not None:
        # Only which layers are MoE is carried (one MoE layer of two reads as first_dense_layers=1, any interval);
        # and no dense MLP size when every layer is MoE.
        assert [back.is_moe_layer(i) for i in range(model.num_layers)] == [
            model.is_moe_layer(i) for i in range(model.num_layers)]
        assert back.moe is not None
        same_moe = back.moe.replace(first_dense_layers=model.moe.first_dense_layers,
                                    layer_interval=model.moe.layer_interval)
        dense_size = model.ffn_hidden_size if model.num_moe_layers == model.num_layers else back.ffn_hidden_size
        back = back.replace(moe=same_moe, ffn_hidden_size=dense_size)
    assert _same_architecture(back, model)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_models())
def test_exported_config_builds_a_transformers_model_of_our_size(model: ModelConfig) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    try:
        config = to_hf_config(model)
    except ConfigError:
        return
    kwargs = dict(config)
    hf_config = transformers.AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
    with torch.device("meta"):
        hf_model = getattr(transformers, config["architectures"][0])(hf_config)
    assert sum(p.numel() for p in hf_model.parameters()) == model.num_params()


def test_rope_and_norm_fields_round_trip_through_transformers_spellings() -> None:
    """rope_theta / rope_scaling / norm eps: read from Transformers 5's rope_parameters and 4.x's keys alike."""
    v5 = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 128, "vocab_size": 100, "rms_norm_eps": 1e-6,
          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    v4 = {**{k: v for k, v in v5.items() if k != "rope_parameters"}, "rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}}
    a, b = ModelConfig.from_hf_config(v5), ModelConfig.from_hf_config(v4)
    assert a == b
    assert (a.rope_theta, a.norm_eps, a.rope_scaling and a.rope_scaling.kind) == (500000.0, 1e-6, "llama3")
    assert ModelConfig.from_hf_config(a.to_hf_config()) == a
    assert ModelConfig.preset("llama-3.1-8b").rope_theta == 500000.0
