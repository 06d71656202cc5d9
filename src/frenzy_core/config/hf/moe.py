"""Mixture-of-experts Llama-like families: Mixtral, Qwen2-MoE, Qwen3-MoE."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frenzy_core.config.architecture import MoEConfig
from frenzy_core.config.hf.family import HFFamily
from frenzy_core.config.hf.layout import ModuleLayout
from frenzy_core.config.hf.llama import no_attention_bias
from frenzy_core.config.hf.source import Fields, HFSource, gated_mlp, rotary_decoder, sliding_window
from frenzy_core.config.hf.writing import Unwritable, rotary_keys, sliding_keys

if TYPE_CHECKING:
    from frenzy_core.config.model import ModelConfig

__all__ = ["FAMILIES", "expert_count", "moe_of"]

_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
"""Every spelling of the routed-expert count: Qwen-MoE before Transformers 5 and Qwen2-MoE (num_experts),
Mixtral and Qwen3-MoE in Transformers 5 (num_local_experts), DeepSeek (n_routed_experts)."""


def expert_count(src: HFSource) -> int:
    """The number of routed experts, under whichever key the config spells it."""
    for key in _EXPERT_COUNT_KEYS:
        if src.data.get(key) is not None:
            return src.req_int(key)
    raise src.fail(f"none of {list(_EXPERT_COUNT_KEYS)} gives the number of experts", field=_EXPERT_COUNT_KEYS[0],
                   value=None, hint="add the routed-expert count as in the model's published config.json")


def moe_of(model: ModelConfig, family: str) -> MoEConfig:
    """The model's MoE layers, or Unwritable for a dense model."""
    if model.moe is None:
        raise Unwritable(f"{family} is a mixture-of-experts family; the model is dense", field="moe", value=None)
    return model.moe


def _read_mixtral(src: HFSource, lm_head: bool) -> Fields:
    # MixtralSparseMoeBlock: a bias-free router (hidden x experts) and SwiGLU experts of intermediate_size;
    # MixtralAttention uses config.sliding_window on every layer.
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=False, linear_bias=False,
                            tied_default=False)
    fields["moe"] = MoEConfig(num_experts=expert_count(src), top_k=src.get_int("num_experts_per_tok", 2),
                              expert_ffn_hidden_size=fields["ffn_hidden_size"])
    return {**fields, **sliding_window(src, fields["num_layers"], enabled=True, per_layer=False)}


def _write_mixtral(model: ModelConfig) -> dict[str, Any]:
    moe = moe_of(model, "mixtral")
    d = rotary_keys(model)
    d.update(intermediate_size=moe.expert_ffn_hidden_size, num_local_experts=moe.num_experts,
             num_experts_per_tok=moe.top_k, sliding_window=model.sliding_window)
    return d


def _sparse_layers(src: HFSource, num_layers: int) -> tuple[int, int] | None:
    """Qwen-MoE's sparse layers as (first_dense_layers, layer_interval); None when every layer is dense.

    A layer is sparse when it is not in ``mlp_only_layers`` and ``(layer + 1) % decoder_sparse_step == 0``
    (Qwen2MoeDecoderLayer); :class:`MoEConfig` expresses the patterns "every k-th layer after the first n".
    """
    step = src.get_int("decoder_sparse_step", 1)
    dense = {int(i) for i in src.get_list("mlp_only_layers")}
    if step < 1:
        raise src.fail(f"decoder_sparse_step={step} is not positive", field="decoder_sparse_step", value=step,
                       hint="use 1 for every layer, k for every k-th layer")
    sparse = [i for i in range(num_layers) if i not in dense and (i + 1) % step == 0]
    if not sparse:
        return None
    first = sparse[0]
    interval = sparse[1] - first if len(sparse) > 1 else num_layers
    if sparse != list(range(first, num_layers, interval)):
        raise src.fail(f"sparse layers {sparse} (mlp_only_layers={sorted(dense)}, decoder_sparse_step={step}) "
                       "are not evenly spaced", field="mlp_only_layers", value=sorted(dense),
                       hint="only 'every k-th layer after the first n' is modelled")
    return first, interval


def _read_qwen_moe(src: HFSource, *, qkv_bias: bool, shared: bool, head_dim: int | None) -> Fields:
    fields = rotary_decoder(src, mlp=gated_mlp(src, "hidden_act", "silu"), qkv_bias=qkv_bias, linear_bias=False,
                            tied_default=False, head_dim=head_dim)
    layers = _sparse_layers(src, fields["num_layers"])
    if layers is None:
        return fields  # every layer is a dense MLP of intermediate_size
    shared_size = src.get_int("shared_expert_intermediate_size", 0) if shared else 0
    fields["moe"] = MoEConfig(
        num_experts=expert_count(src),
        top_k=src.req_int("num_experts_per_tok"),
        expert_ffn_hidden_size=src.req_int("moe_intermediate_size"),
        num_shared_experts=1 if shared_size else 0,
        shared_expert_ffn_hidden_size=shared_size,
        shared_expert_gate=shared,  # Qwen2MoeSparseMoeBlock builds the gate even for a zero-size shared expert
        first_dense_layers=layers[0],
        layer_interval=layers[1],
    )
    return fields


def _write_qwen_moe(model: ModelConfig, family: str) -> dict[str, Any]:
    moe = moe_of(model, family)
    d = rotary_keys(model)
    # Qwen-MoE layer rule: sparse iff (layer + 1) % decoder_sparse_step == 0 and layer not in mlp_only_layers.
    if moe.first_dense_layers == moe.layer_interval - 1:
        step, mlp_only = moe.layer_interval, []
    else:
        step, mlp_only = 1, [i for i in range(model.num_layers) if not model.is_moe_layer(i)]
    d.update(num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
             moe_intermediate_size=moe.expert_ffn_hidden_size, decoder_sparse_step=step, mlp_only_layers=mlp_only)
    return d


def _read_qwen2_moe(src: HFSource, lm_head: bool) -> Fields:
    # Qwen2MoeSparseMoeBlock: router, experts, one shared expert and its sigmoid gate (hidden -> 1, no bias).
    fields = _read_qwen_moe(src, qkv_bias=src.get_bool("qkv_bias", True), shared=True, head_dim=None)
    # Qwen2MoeConfig.__post_init__: without layer_types, layer i is local iff i is even, below max_window_layers.
    first = src.get_int("max_window_layers", 28)
    local = [(i + 1) % 2 == 1 and i < first for i in range(fields["num_layers"])]
    return {**fields, **sliding_window(src, fields["num_layers"], enabled=src.get_bool("use_sliding_window", False),
                                       default_local=local)}


def _write_qwen2_moe(model: ModelConfig) -> dict[str, Any]:
    moe = moe_of(model, "qwen2_moe")
    return {**_write_qwen_moe(model, "qwen2_moe"), "qkv_bias": model.qkv_bias,
            "shared_expert_intermediate_size": moe.shared_expert_ffn_hidden_size,
            **sliding_keys(model, per_layer=True, switch="use_sliding_window")}


def _read_qwen3_moe(src: HFSource, lm_head: bool) -> Fields:
    # Qwen3MoeSparseMoeBlock: router and experts, no shared expert; attention as in Qwen3 (q/k norms); the window,
    # with use_sliding_window, applies to every layer (Qwen3MoeAttention reads config.sliding_window).
    no_attention_bias(src, "qwen3_moe")
    fields = _read_qwen_moe(src, qkv_bias=False, shared=False, head_dim=128)
    fields["qk_norm"] = True
    window = sliding_window(src, fields["num_layers"], enabled=src.get_bool("use_sliding_window", False),
                            per_layer=False)
    return {**fields, **window}


def _write_qwen3_moe(model: ModelConfig) -> dict[str, Any]:
    return {**_write_qwen_moe(model, "qwen3_moe"), "attention_bias": False,
            **sliding_keys(model, per_layer=False, switch="use_sliding_window")}


FAMILIES = (
    HFFamily("mixtral", "MixtralForCausalLM", "MixtralModel", ModuleLayout.LLAMA, _read_mixtral, _write_mixtral),
    HFFamily("qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2MoeModel", ModuleLayout.LLAMA, _read_qwen2_moe,
             _write_qwen2_moe),
    HFFamily("qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeModel", ModuleLayout.LLAMA, _read_qwen3_moe,
             _write_qwen3_moe),
)
"""The Llama-lineage mixture-of-experts families, in the order ``to_hf_config`` prefers them."""
