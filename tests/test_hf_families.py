"""Every Hugging Face family on configs as Transformers 5 writes them (frenzy_core.config.hf).

The fixtures are ``transformers.<Family>Config(...).to_dict()`` and the parameter counts of the real classes
(``tests/fixtures/hf/generate.py``); with transformers installed both are rebuilt here and compared too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_core.config import ModelConfig, NormPlacement, QKNormScope
from frenzy_core.config.hf import FAMILIES, SUPPORTED_HF_FAMILIES, ModuleLayout, family, module_layout, to_hf_config
from frenzy_core.config.hf.registry import canonical_fields
from frenzy_core.errors import ConfigError
from hf_families import CASES, FIXTURES, config_dict, fixture, model_type, real_param_count, recorded_param_counts

READ_ONLY = {"gemma3": "its vision tower is a parameter count, not a config",
             "deepseek_v2": "DeepSeek-V3's class builds the same parameters and is written instead"}


def _read(case: str, **changes: Any) -> ModelConfig:
    return ModelConfig.from_hf_config({**fixture(case), **changes})


def _same(a: ModelConfig, b: ModelConfig) -> bool:
    return bool(a.model_dump(exclude={"name"}) == b.model_dump(exclude={"name"}))


def test_every_family_has_a_case_and_every_case_a_fixture() -> None:
    assert sorted({model_type(c) for c in CASES}) == sorted(SUPPORTED_HF_FAMILIES)
    assert sorted(p.stem for p in FIXTURES.glob("*.json") if p.stem != "param_counts") == sorted(CASES)
    assert sorted(recorded_param_counts()) == sorted(CASES)
    assert len({f.model_type for f in FAMILIES}) == len(FAMILIES)  # one record per model_type


@pytest.mark.parametrize("case", sorted(CASES))
def test_fixture_reads_with_the_real_class_parameter_count(case: str) -> None:
    model = ModelConfig.from_hf_config(FIXTURES / f"{case}.json")
    assert model.num_params() == recorded_param_counts()[case]
    assert model.lm_head


@pytest.mark.parametrize("case", sorted(CASES))
def test_fixture_is_what_transformers_writes_and_counts(case: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    live = config_dict(case)
    live.pop("transformers_version", None)
    assert live == fixture(case), "stale fixture: rerun python tests/fixtures/hf/generate.py"
    assert ModelConfig.from_hf_config(live).num_params() == real_param_count(live)


@pytest.mark.parametrize("case", sorted(c for c in CASES if model_type(c) not in ("gemma3",)))
def test_round_trip_builds_the_same_model(case: str) -> None:
    model = _read(case)
    config = to_hf_config(model)
    back = ModelConfig.from_hf_config(json.loads(json.dumps(config)))
    assert _same(back, model)
    expected_type = "deepseek_v3" if model_type(case) == "deepseek_v2" else model_type(case)
    assert config["model_type"] == expected_type  # the family's own class, not a look-alike
    assert config["architectures"] == [family(expected_type).head_class]


@pytest.mark.parametrize("case", sorted(c for c in CASES if model_type(c) not in ("gemma3",)))
def test_written_config_builds_a_class_of_our_size(case: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model = _read(case)
    assert real_param_count(to_hf_config(model)) == model.num_params()


@pytest.mark.parametrize("name", sorted(READ_ONLY))
def test_read_only_families_say_why(name: str) -> None:
    assert family(name).write is None, READ_ONLY[name]


def test_multimodal_gemma3_names_its_vision_tower_when_written() -> None:
    with pytest.raises(ConfigError, match="vision_tower_params") as info:
        to_hf_config(_read("gemma3"))
    assert info.value.field == "vision_tower_params"


# ---- what each family's modules are ------------------------------------------------------------------------


def test_gemma2_sandwich_norms_soft_capping_and_alternating_windows() -> None:
    model = _read("gemma2")
    assert model.norm_placement is NormPlacement.SANDWICH
    assert (model.attn_logit_softcapping, model.final_logit_softcapping) == (50.0, 30.0)
    assert model.sliding_window == 64 and model.sliding_window_layers == (0, 2)
    assert not family("gemma2").sdpa  # soft-capping keeps Gemma 2 on the eager path
    # an explicit null turns capping off; an absent key is Gemma2Config's default
    assert _read("gemma2", attn_logit_softcapping=None).attn_logit_softcapping is None
    config = fixture("gemma2")
    del config["final_logit_softcapping"]
    assert ModelConfig.from_hf_config(config).final_logit_softcapping == 30.0


def test_gemma3_five_local_layers_in_six_and_qk_norms() -> None:
    model = _read("gemma3_text")
    assert model.sliding_window_layers == (0, 1, 2, 3, 4, 6)
    assert model.qk_norm and model.qk_norm_scope is QKNormScope.HEAD
    config = fixture("gemma3_text")
    del config["layer_types"]  # configs before Transformers 5 give the pattern instead
    assert ModelConfig.from_hf_config({**config, "sliding_window_pattern": 2}).sliding_window_layers == (0, 2, 4, 6)
    assert module_layout(model) is ModuleLayout.GEMMA


def test_gemma3_multimodal_counts_its_vision_tower() -> None:
    model, text = _read("gemma3"), _read("gemma3_text")
    assert model.vision_tower_params > 0
    assert model.num_params() == text.num_params() + model.vision_tower_params
    assert model.num_active_params() == text.num_active_params()  # text tokens skip the vision tower


def test_fused_projections_and_partial_rotary() -> None:
    phi3, neox, phi, stablelm = _read("phi3"), _read("gpt_neox"), _read("phi"), _read("stablelm")
    assert phi3.fused_qkv and phi3.fused_gate_up and phi3.partial_rotary_factor == 0.5
    assert phi3.sliding_window == 63 and phi3.sliding_window_layers is None  # every layer
    assert neox.fused_qkv and not neox.fused_gate_up and neox.partial_rotary_factor == 0.25
    assert neox.rotary_dim == 4  # int(16 x 0.25)
    assert (phi.partial_rotary_factor, phi.rotary_dim) == (0.4, 6)  # int(16 x 0.4), as PhiAttention
    assert stablelm.partial_rotary_factor == 0.25 and not stablelm.fused_qkv
    assert _read("falcon").fused_qkv and _read("gpt2").fused_qkv


def test_partial_rotary_in_every_spelling() -> None:
    # Transformers 5 nests it in rope_parameters; older config.json files have rotary_pct / partial_rotary_factor.
    neox = {k: v for k, v in fixture("gpt_neox").items() if k != "rope_parameters"}
    assert ModelConfig.from_hf_config({**neox, "rotary_pct": 0.5}).partial_rotary_factor == 0.5
    assert ModelConfig.from_hf_config(neox).partial_rotary_factor == 0.25  # GPTNeoXConfig's default
    phi = {k: v for k, v in fixture("phi").items() if k != "rope_parameters"}
    assert ModelConfig.from_hf_config({**phi, "partial_rotary_factor": 0.4}).partial_rotary_factor == 0.4
    assert ModelConfig.from_hf_config(phi).partial_rotary_factor == 0.5  # PhiConfig's default


def test_phi2_shares_one_norm_and_has_a_head_bias() -> None:
    model = _read("phi")
    assert model.parallel_block and model.norm_placement is NormPlacement.SHARED
    assert model.lm_head_bias
    bare = _read("phi", architectures=["PhiModel"])
    assert not bare.lm_head_bias and model.num_params() - bare.num_params() == model.vocab_size * (
        model.hidden_size + 1)


def test_falcon_block_variants() -> None:
    new, mqa, alibi = _read("falcon"), _read("falcon.mqa-shared-norm"), _read("falcon.alibi-sequential")
    assert (new.num_kv_heads, new.parallel_block, new.norm_placement) == (2, True, NormPlacement.PRE)
    assert (mqa.num_kv_heads, mqa.parallel_block, mqa.norm_placement) == (1, True, NormPlacement.SHARED)
    assert (alibi.num_kv_heads, alibi.parallel_block, alibi.position_embedding.value) == (4, False, "none")
    assert alibi.qkv_bias and alibi.linear_bias
    assert module_layout(new) is ModuleLayout.FALCON
    with pytest.raises(ConfigError, match="parallel_attn"):
        _read("falcon", parallel_attn=False)  # the new decoder does not build sequentially


def test_olmo2_post_norms_and_whole_projection_qk_norms() -> None:
    model = _read("olmo2")
    assert model.norm_placement is NormPlacement.POST
    assert model.qk_norm and model.qk_norm_scope is QKNormScope.ALL_HEADS
    assert module_layout(model) is ModuleLayout.OLMO2


def test_stablelm_per_head_norms_and_parallel_residual() -> None:
    model = _read("stablelm")
    assert model.qk_norm and model.qk_norm_scope is QKNormScope.EACH_HEAD and model.qkv_bias
    assert not model.linear_bias  # o_proj and the MLP have no biases
    parallel = _read("stablelm.parallel")
    assert parallel.parallel_block and parallel.norm_placement is NormPlacement.SHARED


def test_starcoder2_and_mistral_slide_on_every_layer() -> None:
    for case in ("starcoder2", "mistral"):
        model = _read(case)
        assert model.sliding_window == 64 and model.sliding_window_layers is None
        assert all(model.is_sliding_window_layer(i) for i in range(model.num_layers))
    assert _read("mistral", sliding_window=None).sliding_window is None


def test_qwen_windows_need_use_sliding_window() -> None:
    assert _read("qwen2").sliding_window_layers == (2, 3)  # from max_window_layers = 2 on
    assert _read("qwen2", use_sliding_window=False).sliding_window is None
    assert _read("qwen3").sliding_window is None


def test_deepseek_latent_attention_and_experts() -> None:
    v2, v3 = _read("deepseek_v2"), _read("deepseek_v3")
    assert v2.mla is not None and v2.mla.q_lora_rank is None
    assert v3.mla is not None and v3.mla.q_lora_rank == 24
    assert v3.head_dim == 16 + 8 and v3.v_size == 4 * 16
    assert v3.moe is not None and v3.moe.first_dense_layers == 1
    assert (v3.moe.num_experts, v3.moe.num_shared_experts, v3.moe.shared_expert_ffn_hidden_size) == (4, 1, 48)
    assert [v2.is_moe_layer(i) for i in range(4)] == [False, True, True, True]


@pytest.mark.parametrize(("case", "key"), [("qwen3_moe", "num_local_experts"), ("mixtral", "num_local_experts"),
                                           ("deepseek_v3", "n_routed_experts")])
def test_every_spelling_of_the_expert_count(case: str, key: str) -> None:
    config = fixture(case)
    count = config.pop(key)
    spellings = [{key: count}, {"num_experts": count}, {"num_local_experts": count}, {"n_routed_experts": count}]
    for spelling in spellings:
        model = ModelConfig.from_hf_config({**{k: v for k, v in config.items()
                                               if k not in ("num_experts", "num_local_experts", "n_routed_experts")},
                                            **spelling})
        assert model.moe is not None and model.moe.num_experts == count


@pytest.mark.parametrize("case", sorted(CASES))
def test_use_cache_is_read_with_the_transformers_default(case: str) -> None:
    model = _read(case)
    assert model.returns_kv_cache is (model_type(case) != "bert")  # every decoder config defaults it on
    if model_type(case) in ("bert", "gemma3"):
        return
    assert not _read(case, use_cache=False).returns_kv_cache
    config = fixture(case)
    del config["use_cache"]
    assert ModelConfig.from_hf_config(config).returns_kv_cache


# ---- bad input ------------------------------------------------------------------------------------------------


def test_unknown_family_names_the_supported_ones_and_the_closest() -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig.from_hf_config({**fixture("gemma3_text"), "model_type": "gemma4_text"})
    assert info.value.field == "model_type"
    text = str(info.value)
    assert "closest: gemma3_text" in text and "deepseek_v3" in text and "starcoder2" in text


@pytest.mark.parametrize(("case", "key", "value", "what"), [
    ("gemma2", "tie_word_embeddings", "yes", "is not true or false"),
    ("phi", "resid_pdrop", "0.1", "is not a number"),
    ("deepseek_v3", "kv_lora_rank", 3.5, "is not a whole number"),
    ("qwen3_moe", "mlp_only_layers", 3, "is not a list"),
    ("gemma2", "hidden_activation", 1, "is not a string"),
])
def test_wrong_type_names_the_field_and_the_file(tmp_path: Path, case: str, key: str, value: object,
                                                 what: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**fixture(case), key: value}))
    with pytest.raises(ConfigError, match=what) as info:
        ModelConfig.from_hf_config(path)
    assert info.value.field == key
    assert str(path) in str(info.value) and key in str(info.value)


@pytest.mark.parametrize(("case", "key"), [("deepseek_v2", "kv_lora_rank"), ("gemma2", "intermediate_size"),
                                           ("falcon", "vocab_size"), ("starcoder2", "num_hidden_layers")])
def test_missing_required_field_names_it_and_the_file(tmp_path: Path, case: str, key: str) -> None:
    config = fixture(case)
    del config[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        ModelConfig.from_hf_config(path)
    assert info.value.field == key
    assert repr(key) in str(info.value) and str(path) in str(info.value)


def test_missing_expert_count_names_every_spelling() -> None:
    config = {k: v for k, v in fixture("qwen3_moe").items() if k != "num_local_experts"}
    with pytest.raises(ConfigError, match="num_experts.*num_local_experts.*n_routed_experts"):
        ModelConfig.from_hf_config(config)


# ---- laws ------------------------------------------------------------------------------------------------------


@st.composite
def _structured_models(draw: st.DrawFn) -> ModelConfig:
    """Small decoders over the structure fields: fused projections, norm placement, qk norms, windows, capping."""
    heads = draw(st.sampled_from([2, 4]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
    gated = draw(st.booleans())
    parallel = draw(st.booleans())
    layers = draw(st.integers(1, 4))
    window = draw(st.sampled_from([None, 16]))
    qk_norm = draw(st.booleans())
    model: ModelConfig = ModelConfig.model_validate({
        "num_layers": layers, "hidden_size": heads * 16, "num_attention_heads": heads, "num_kv_heads": kv,
        "ffn_hidden_size": 24, "mlp": "swiglu" if gated else "gelu",
        "norm": draw(st.sampled_from(["rmsnorm", "layernorm"])), "vocab_size": 64, "position_embedding": "rotary",
        "tied_embeddings": draw(st.booleans()), "qkv_bias": draw(st.booleans()), "linear_bias": draw(st.booleans()),
        "fused_qkv": draw(st.booleans()), "fused_gate_up": gated and draw(st.booleans()),
        "parallel_block": parallel,
        "norm_placement": draw(st.sampled_from(["pre", "shared"] if parallel else ["pre", "sandwich", "post"])),
        "qk_norm": qk_norm, "qk_norm_scope": draw(st.sampled_from(["head", "all-heads", "each-head"])) if qk_norm
        else "head",
        "partial_rotary_factor": draw(st.sampled_from([1.0, 0.5, 0.25])),
        "sliding_window": window,
        "sliding_window_layers": None if window is None or layers == 1 else draw(st.sampled_from([None, (0,)])),
        "attn_logit_softcapping": draw(st.sampled_from([None, 50.0])),
        "lm_head": draw(st.booleans()), "returns_kv_cache": draw(st.booleans()),
    })
    return model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_structured_models())
def test_structured_model_round_trips_or_names_a_field(model: ModelConfig) -> None:
    try:
        config = to_hf_config(model)
    except ConfigError as exc:
        assert exc.field is not None and exc.field in str(exc)
        return
    assert _same(ModelConfig.from_hf_config(config), model)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_structured_models())
def test_structured_model_exports_a_class_of_its_size(model: ModelConfig) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    try:
        config = to_hf_config(model)
    except ConfigError:
        return
    assert real_param_count(config) == model.num_params()


@st.composite
def _family_variants(draw: st.DrawFn) -> ModelConfig:
    """A supported family's model with other sizes, tying, head and cache flag: still a member of the family."""
    case = draw(st.sampled_from(sorted(c for c in CASES if model_type(c) != "gemma3")))
    model = _read(case)
    changes: dict[str, Any] = {"vocab_size": draw(st.integers(32, 700)), "tied_embeddings": draw(st.booleans())}
    if model.moe is None:  # (Mixtral's experts take the dense size; others' dense size may be unused)
        changes["ffn_hidden_size"] = draw(st.integers(8, 128))
    if model.sliding_window_layers is None:  # a per-layer window pattern fixes the layer count
        changes["num_layers"] = draw(st.integers(2, 6))
    if model.arch.value == "decoder":
        lm_head = draw(st.booleans())
        changes.update(lm_head=lm_head, lm_head_bias=model.lm_head_bias and lm_head,
                       returns_kv_cache=draw(st.booleans()))
    return model.replace(**changes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_family_variants())
def test_family_variant_round_trips_exactly(model: ModelConfig) -> None:
    # Equal up to how MoE layers are spelled (a single MoE layer reads back with any interval).
    assert canonical_fields(ModelConfig.from_hf_config(to_hf_config(model))) == canonical_fields(model)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_family_variants())
def test_family_variant_builds_a_class_of_its_size(model: ModelConfig) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    assert real_param_count(to_hf_config(model)) == model.num_params()


@pytest.mark.parametrize("case", sorted(c for c in CASES if model_type(c) not in ("gemma3",)))
def test_written_config_means_the_same_to_transformers(case: str) -> None:
    # What parameter counts cannot see (windows per layer, partial rotary, soft-capping, use_cache) survives
    # Transformers' own config class: its normalised dict reads back as the same model.
    transformers = pytest.importorskip("transformers")
    model = _read(case)
    written = to_hf_config(model)
    hf_config = transformers.CONFIG_MAPPING[written["model_type"]].from_dict(written)
    back = ModelConfig.from_hf_config(json.loads(hf_config.to_json_string(use_diff=False)))
    assert canonical_fields(back) == canonical_fields(model)


def test_every_decoder_family_defaults_use_cache_on() -> None:
    transformers = pytest.importorskip("transformers")
    for record in FAMILIES:
        config = transformers.CONFIG_MAPPING[record.model_type]()
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        assert text.use_cache is True, record.model_type
