"""Small configs of every supported Hugging Face family, as ``transformers.<Family>Config(**kwargs)`` builds them.

``tests/fixtures/hf/<case>.json`` holds ``Config(**kwargs).to_dict()`` for each case and ``param_counts.json`` the
parameter count of the class its ``architectures`` names, built with ``from_config`` on the meta device; both are
written by ``python tests/fixtures/hf/generate.py`` (transformers installed) so that CI without transformers still
tests the readers against configs as Transformers 5 writes them. A case is ``<model_type>`` or
``<model_type>.<variant>``. Sizes are small; each case switches on the features its family has.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "hf"

_SMALL: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                          "intermediate_size": 96, "vocab_size": 512, "max_position_embeddings": 256}
_GQA = {**_SMALL, "num_key_value_heads": 2}
_MOE = {"moe_intermediate_size": 48, "num_experts_per_tok": 2}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # case: (class with the head, Config kwargs)
    "bert": ("BertForMaskedLM", {k: v for k, v in _SMALL.items()}),
    "gpt2": ("GPT2LMHeadModel", {"n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 512, "n_positions": 128}),
    "opt": ("OPTForCausalLM", {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "ffn_dim": 96,
                               "vocab_size": 512, "max_position_embeddings": 128, "word_embed_proj_dim": 64}),
    "gpt_neox": ("GPTNeoXForCausalLM", {**_SMALL, "rotary_pct": 0.25}),
    "gpt_neox.sequential": ("GPTNeoXForCausalLM", {**_SMALL, "use_parallel_residual": False,
                                                   "tie_word_embeddings": True}),
    "falcon": ("FalconForCausalLM", {**_SMALL, "new_decoder_architecture": True, "num_kv_heads": 2,
                                     "ffn_hidden_size": 96}),
    "falcon.mqa-shared-norm": ("FalconForCausalLM", {**_SMALL, "multi_query": True, "parallel_attn": True}),
    "falcon.alibi-sequential": ("FalconForCausalLM", {**_SMALL, "alibi": True, "parallel_attn": False,
                                                      "multi_query": False, "bias": True}),
    "gemma": ("GemmaForCausalLM", {**_GQA, "head_dim": 32}),
    "gemma2": ("Gemma2ForCausalLM", {**_GQA, "head_dim": 32, "sliding_window": 64}),
    "gemma3_text": ("Gemma3ForCausalLM", {**_GQA, "num_hidden_layers": 7, "head_dim": 32, "sliding_window": 64}),
    "gemma3": ("Gemma3ForConditionalGeneration", {
        "text_config": {**_GQA, "model_type": "gemma3_text", "num_hidden_layers": 7, "head_dim": 32,
                        "sliding_window": 64},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8,
                          "vision_use_head": False},
        "mm_tokens_per_image": 4}),
    "llama": ("LlamaForCausalLM", {**_GQA}),
    "mistral": ("MistralForCausalLM", {**_GQA, "head_dim": 16, "sliding_window": 64}),
    "qwen2": ("Qwen2ForCausalLM", {**_GQA, "use_sliding_window": True, "sliding_window": 64,
                                   "max_window_layers": 2}),
    "qwen3": ("Qwen3ForCausalLM", {**_GQA, "head_dim": 32}),
    "phi3": ("Phi3ForCausalLM", {**_SMALL, "sliding_window": 63, "pad_token_id": None,
                                 "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                     "partial_rotary_factor": 0.5}}),
    "olmo2": ("Olmo2ForCausalLM", {**_GQA}),
    "mixtral": ("MixtralForCausalLM", {**_GQA, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": ("Qwen2MoeForCausalLM", {**_GQA, **_MOE, "num_experts": 4, "shared_expert_intermediate_size": 80,
                                          "decoder_sparse_step": 2}),
    "qwen3_moe": ("Qwen3MoeForCausalLM", {**_GQA, **_MOE, "num_experts": 4, "head_dim": 32,
                                          "mlp_only_layers": [0]}),
    "stablelm": ("StableLmForCausalLM", {**_GQA, "qk_layernorm": True, "use_qkv_bias": True}),
    "stablelm.parallel": ("StableLmForCausalLM", {**_SMALL, "num_key_value_heads": 4,
                                                  "use_parallel_residual": True}),
    "phi": ("PhiForCausalLM", {**_SMALL, "partial_rotary_factor": 0.4, "resid_pdrop": 0.1}),
    "phi.qk-layernorm": ("PhiForCausalLM", {**_GQA, "qk_layernorm": True}),
    "starcoder2": ("Starcoder2ForCausalLM", {**_GQA, "sliding_window": 64}),
    "deepseek_v2": ("DeepseekV2ForCausalLM", {**_SMALL, **_MOE, "n_routed_experts": 4, "n_shared_experts": 2,
                                              "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 32,
                                              "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}),
    "deepseek_v3": ("DeepseekV3ForCausalLM", {**_SMALL, **_MOE, "num_key_value_heads": 4, "n_routed_experts": 4,
                                              "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 24,
                                              "kv_lora_rank": 32,
                                              "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
                                              "n_group": 2, "topk_group": 1}),
}


def model_type(case: str) -> str:
    """The family a case belongs to."""
    return case.split(".")[0]


def config_dict(case: str) -> dict[str, Any]:
    """``transformers.<Family>Config(**kwargs).to_dict()`` with ``architectures`` set (needs transformers)."""
    import transformers

    head, kwargs = CASES[case]
    config = transformers.CONFIG_MAPPING[model_type(case)](architectures=[head], **kwargs)
    data: dict[str, Any] = json.loads(config.to_json_string(use_diff=False))
    return data


def real_param_count(config: dict[str, Any]) -> int:
    """Unique parameters of the class ``architectures`` names, built from the config on the meta device."""
    import torch
    import transformers

    hf_config = transformers.CONFIG_MAPPING[config["model_type"]].from_dict(config)
    with torch.device("meta"):
        model = getattr(transformers, config["architectures"][0])._from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def fixture(case: str) -> dict[str, Any]:
    """The committed ``to_dict()`` of ``case``."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{case}.json").read_text(encoding="utf-8"))
    return data


def recorded_param_counts() -> dict[str, int]:
    """The real classes' parameter counts the generator recorded."""
    counts: dict[str, int] = json.loads((FIXTURES / "param_counts.json").read_text(encoding="utf-8"))
    return counts
