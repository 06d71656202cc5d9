"""Which parameters of a layer train, which are stored in 4 bits, and which layers no gradient reaches.

LoRA (``TrainingConfig.lora``) freezes the whole base and adds adapters A (rank x in) and B (out x rank) to the
target projections; ``trainable_layers`` restricts training (or adapters) to the last k layers; a frozen
embedding with frozen layers after it means no gradient flows into those layers, so autograd records nothing
for them. Counts are per layer and unsharded, split by how tensor parallelism treats them (docs/memory-model.md,
section 9).
"""

from __future__ import annotations

from dataclasses import dataclass

from frenzy_core.config.finetune import AdapterDtype, LoRAConfig, LoRATarget
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.params import latent_projection_shapes
from frenzy_core.config.training import Framework, RecomputeModule, TrainingConfig
from frenzy_core.errors import ConfigError

__all__ = [
    "AdapterCounts",
    "adapter_counts",
    "adapter_params_per_layer",
    "check_recipe",
    "check_trainable",
    "first_trainable_layer",
    "fp32_adapters",
    "matmul_weights",
    "nograd_layers",
    "projection_shapes",
    "trains",
]


def projection_shapes(model: ModelConfig, ffn: int) -> dict[LoRATarget, tuple[int, int]]:
    """(in, out) of each adaptable projection of a layer whose MLP has intermediate size ``ffn`` (0: no MLP).
    A fused q/k/v (or gate/up) projection is listed under ``q`` (``gate``) with the fused width."""
    h, q, kv, v = model.hidden_size, model.q_size, model.kv_size, model.v_size
    shapes = {LoRATarget.Q: (h, q), LoRATarget.K: (h, kv), LoRATarget.V: (h, v), LoRATarget.O: (v if model.mla
                                                                                                else q, h)}
    if model.fused_qkv:
        shapes = {LoRATarget.Q: (h, q + kv + v), LoRATarget.O: shapes[LoRATarget.O]}
    if ffn:
        if model.mlp.gated and model.fused_gate_up:
            shapes[LoRATarget.GATE] = (h, 2 * ffn)
        elif model.mlp.gated:
            shapes[LoRATarget.GATE] = (h, ffn)
            shapes[LoRATarget.UP] = (h, ffn)
        else:
            shapes[LoRATarget.UP] = (h, ffn)
        shapes[LoRATarget.DOWN] = (ffn, h)
    return shapes


def _fused_rank(lora: LoRAConfig, model: ModelConfig, target: LoRATarget) -> int:
    """Rank of the adapter on ``target``'s projection: a fused projection gets one when any part is named."""
    if target is LoRATarget.Q and model.fused_qkv:
        return max(lora.rank_of(t) for t in (LoRATarget.Q, LoRATarget.K, LoRATarget.V))
    if target is LoRATarget.GATE and model.mlp.gated and model.fused_gate_up:
        return max(lora.rank_of(t) for t in (LoRATarget.GATE, LoRATarget.UP))
    if target is LoRATarget.UP and not model.mlp.gated:
        return max(lora.rank_of(t) for t in (LoRATarget.GATE, LoRATarget.UP))  # the only up-projection
    return lora.rank_of(target)


@dataclass(frozen=True)
class AdapterCounts:
    """LoRA parameters of one layer: ``split`` divided over tp ranks, ``replicated`` on each; per projection the
    (in, out, rank) of its adapter."""

    split: int
    replicated: int
    projections: tuple[tuple[LoRATarget, int, int, int], ...]


def adapter_counts(model: ModelConfig, lora: LoRAConfig, ffn: int) -> AdapterCounts:
    """Adapters of a layer with MLP width ``ffn`` (the dense MLP, or an MoE layer's shared experts; 0: none).
    Column-parallel projections keep A whole and split B's rows; row-parallel ones split A's columns and keep B
    whole (as Megatron's parallel adapters)."""
    split = replicated = 0
    projections = []
    for target, (n_in, n_out) in projection_shapes(model, ffn).items():
        r = _fused_rank(lora, model, target)
        if r == 0:
            continue
        projections.append((target, n_in, n_out, r))
        if target.row_parallel:
            split, replicated = split + r * n_in, replicated + n_out * r
        else:
            split, replicated = split + n_out * r, replicated + r * n_in
    return AdapterCounts(split=split, replicated=replicated, projections=tuple(projections))


def matmul_weights(model: ModelConfig, ffn: int) -> int:
    """Matmul weights of a layer's attention and MLP of width ``ffn`` (what bitsandbytes' Linear4bit stores in
    4 bits; biases and norms stay in the model dtype)."""
    mla = model.mla
    if mla is None:
        return sum(n_in * n_out for n_in, n_out in projection_shapes(model, ffn).values())
    mlp = sum(n_in * n_out for t, (n_in, n_out) in projection_shapes(model, ffn).items() if t.mlp)
    return sum(n_in * n_out for n_in, n_out in latent_projection_shapes(model, mla)) + mlp


def trains(model: ModelConfig, training: TrainingConfig) -> tuple[bool, bool]:
    """Whether the embeddings and the output head train."""
    embeddings = training.lora is None and not training.freeze_embeddings
    head = training.lora is None and (embeddings or not model.tied_embeddings)
    return embeddings, head and model.lm_head


def adapter_params_per_layer(model: ModelConfig, lora: LoRAConfig, tp: float) -> float:
    """LoRA parameters of the average layer on one tensor-parallel rank (dense MLPs and shared experts adapted,
    routed experts frozen): what a LoRA step reduces over data parallelism and updates."""
    shared = model.moe.shared_expert_ffn_hidden_size if model.moe is not None else 0
    n_moe = model.num_moe_layers if model.moe is not None else 0
    dense, moe = adapter_counts(model, lora, model.ffn_hidden_size), adapter_counts(model, lora, shared)
    per_rank = ((model.num_layers - n_moe) * (dense.split / tp + dense.replicated)
                + n_moe * (moe.split / tp + moe.replicated))
    return per_rank / model.num_layers


def fp32_adapters(training: TrainingConfig) -> bool:
    """Whether LoRA adapters are fp32 on a half-precision base (PEFT's default on a bf16/fp16 model without
    autocast): their weights, gradients and optimizer states are fp32 and each casts its input to fp32."""
    lora = training.lora
    return (lora is not None and lora.adapter_dtype is AdapterDtype.FP32 and training.precision.is_pure_half
            and training.framework is Framework.TORCH)


def first_trainable_layer(model: ModelConfig, training: TrainingConfig) -> int:
    """The first layer that trains (or gets adapters): layers before it are frozen."""
    k = training.trainable_layers
    return 0 if k is None else max(model.num_layers - k, 0)


def nograd_layers(model: ModelConfig, training: TrainingConfig) -> int:
    """Layers no gradient flows through: all before the first trainable one when the embeddings are frozen too
    (LoRA freezes them), since nothing before them needs a gradient."""
    frozen_embeddings = training.freeze_embeddings or training.lora is not None
    return first_trainable_layer(model, training) if frozen_embeddings else 0


def check_recipe(model: ModelConfig, training: TrainingConfig) -> None:
    """ConfigError for a recipe this model cannot run, checked by every estimator entry point: the frozen set
    (:func:`check_trainable`) and Megatron-Core recompute modules that need a part the model lacks (its
    ``transformer_config.py`` raises on ``mla_up_proj`` without multi-latent attention; ``moe_act`` rebuilds the
    experts' activation, which a dense model has not)."""
    check_trainable(model, training)
    modules = training.recompute_modules
    if RecomputeModule.MLA_UP_PROJ in modules and model.mla is None:
        raise ConfigError("recompute_modules names mla_up_proj, but the model has no multi-latent attention",
                          field="training.recompute_modules", value=[m.value for m in modules],
                          hint="drop mla_up_proj (it applies to MLA models such as DeepSeek-V3)")
    if RecomputeModule.MOE_ACT in modules and model.moe is None:
        raise ConfigError("recompute_modules names moe_act, but the model has no experts",
                          field="training.recompute_modules", value=[m.value for m in modules],
                          hint="drop moe_act (it applies to mixture-of-experts models), or recompute 'mlp'")


def check_trainable(model: ModelConfig, training: TrainingConfig) -> None:
    """ConfigError for a frozen set the model cannot have: an adapter rank above its projection's smaller side,
    more trainable layers than the model has, or nothing left to train."""
    lora, k = training.lora, training.trainable_layers
    if k is not None and k > model.num_layers:
        raise ConfigError(f"trainable_layers={k} is more than the model's {model.num_layers} layers",
                          field="training.trainable_layers", value=k,
                          hint=f"use at most {model.num_layers}, or None for every layer")
    if lora is not None:
        for target, n_in, n_out, rank in adapter_counts(model, lora, model.ffn_hidden_size).projections:
            if rank > min(n_in, n_out):
                field = "training.lora.module_ranks" if target in lora.module_ranks else "training.lora.rank"
                raise ConfigError(f"LoRA rank {rank} on {target.value} is larger than the projection's width "
                                  f"({n_in} x {n_out}): a low-rank update needs rank <= {min(n_in, n_out)}",
                                  field=field, value=rank, hint=f"use a rank of at most {min(n_in, n_out)}")
    head_trains = model.lm_head and not model.tied_embeddings
    embeddings_train = lora is None and not training.freeze_embeddings
    if k == 0 and (lora is not None or not (embeddings_train or head_trains)):
        raise ConfigError("trainable_layers=0 leaves nothing to train" + (
            " (LoRA adapters go on the trainable layers)" if lora is not None else
            " (the embeddings are frozen and there is no separate head)"), field="training.trainable_layers",
            value=k, hint="train at least one layer, or unfreeze the embeddings")
