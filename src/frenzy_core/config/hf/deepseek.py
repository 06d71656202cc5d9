"""DeepSeek-V2 and DeepSeek-V3: multi-head latent attention and mixture-of-experts with shared experts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import MLAConfig, MoEConfig
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.moe import expert_count, moe_of
from frenzy_core.config.hf.source import Fields, HFSource, gated_mlp, rotary_decoder
from frenzy_core.config.hf.writing import Unwritable, rotary_keys

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES"]


def _read_deepseek(src: HFSource, lm_head: bool) -> Fields:
    # DeepseekV2/V3Attention (see MLAConfig); the MLP of layer i is DeepseekV2Moe from first_k_dense_replace on
    # (transformers 5 reads no moe_layer_freq): a float32 router (experts x hidden), routed experts of
    # moe_intermediate_size and one shared MLP of n_shared_experts x moe_intermediate_size; V3's
    # e_score_correction_bias is a buffer, not a parameter. attention_bias/mlp_bias add biases this library does
    # not place, so only false is read.
    for key in ("attention_bias", "mlp_bias"):
        if src.get_bool(key, False):
            raise src.fail(f"{key}=True is not supported for {src.data.get('model_type')}", field=key, value=True,
                           hint="published DeepSeek configs leave it false")
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                            tied_default=False)
    heads = fields["num_attention_heads"]
    if fields["num_kv_heads"] != heads:
        raise src.fail(f"num_key_value_heads={fields['num_kv_heads']} differs from num_attention_heads={heads}",
                       field="num_key_value_heads", value=fields["num_kv_heads"],
                       hint="latent attention expands keys and values to every head; leave it unset")
    mla = MLAConfig(q_lora_rank=src.opt_int("q_lora_rank"), kv_lora_rank=src.req_int("kv_lora_rank"),
                    qk_nope_head_dim=src.req_int("qk_nope_head_dim"), qk_rope_head_dim=src.req_int("qk_rope_head_dim"),
                    v_head_dim=src.req_int("v_head_dim"))
    fields.update(mla=mla, head_dim=mla.qk_head_dim)
    first_dense = src.get_int("first_k_dense_replace", 0)
    if first_dense < fields["num_layers"]:
        expert = src.req_int("moe_intermediate_size")
        shared = src.get_int("n_shared_experts", 0)
        fields["moe"] = MoEConfig(num_experts=expert_count(src), top_k=src.req_int("num_experts_per_tok"),
                                  expert_ffn_hidden_size=expert, num_shared_experts=shared,
                                  shared_expert_ffn_hidden_size=shared * expert, first_dense_layers=first_dense)
    return fields


def _write_deepseek(model: ModelConfig) -> dict[str, Any]:
    moe, mla = moe_of(model, "deepseek_v3"), model.mla
    if mla is None:
        raise Unwritable("DeepSeek uses multi-head latent attention; the model has none", field="mla", value=None)
    d = rotary_keys(model)
    del d["head_dim"]  # DeepseekV3Config sets head_dim to qk_rope_head_dim itself
    shared = moe.num_shared_experts
    d.update(mla.model_dump(), n_routed_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
             moe_intermediate_size=moe.expert_ffn_hidden_size, n_shared_experts=shared,
             first_k_dense_replace=moe.first_dense_layers, n_group=1, topk_group=1)
    return d


FAMILIES = (
    HFFamily("deepseek_v3", "DeepseekV3ForCausalLM", "DeepseekV3Model", ModuleLayout.LLAMA, _read_deepseek,
             _write_deepseek),
    HFFamily("deepseek_v2", "DeepseekV2ForCausalLM", "DeepseekV2Model", ModuleLayout.LLAMA, _read_deepseek, None),
)
"""DeepSeek-V3 is written; V2 builds the same parameters for the same config and is read only."""
