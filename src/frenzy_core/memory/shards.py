"""Which layers and parameters each pipeline stage and tensor/expert-parallel rank holds (array-friendly)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ArchKind, ModelConfig, PositionEmbedding
from frenzy_core.config.params import layer_parameters, mlp_parameters, norm_parameters, qk_norm_parameters
from frenzy_core.config.trainable import adapter_counts, first_trainable_layer, matmul_weights, nograd_layers
from frenzy_core.config.training import TrainingConfig

__all__ = ["LayerConstants", "StageParams", "StageShape", "layer_constants", "stage_params", "stage_shape"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LayerConstants:
    """Unsharded parameter counts of one layer's parts, split by how tensor parallelism treats them."""

    attn_split: int
    """Q/K/V/output weights and column-parallel (QKV) biases: divided by tp."""
    attn_replicated: int
    """Row-parallel output bias and the two norms: on every tp rank."""
    mlp_split: int
    """Dense MLP weights and column-parallel biases: divided by tp."""
    mlp_replicated: int
    """Row-parallel MLP bias."""
    moe_shared_split: int
    """Shared experts of an MoE layer: divided by tp."""
    moe_shared_replicated: int
    moe_router: int
    """Router (and shared-expert gate): replicated over tp."""
    moe_experts: int
    """All routed experts of one MoE layer: divided by ep and, as Megatron's default etp = tp, by tp."""
    largest_layer_tensor: int
    """Largest single weight of a layer (unsharded): sizes for-loop optimizer temporaries."""


def _mlp_split(model: ModelConfig, ffn: int) -> tuple[int, int]:
    total = mlp_parameters(model, ffn)
    replicated = model.hidden_size if model.linear_bias else 0
    return total - replicated, replicated


@functools.lru_cache(maxsize=64)
def layer_constants(model: ModelConfig) -> LayerConstants:
    """Per-layer constants of ``model``, from :func:`frenzy_core.config.params.layer_parameters`."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    dense = layer_parameters(model, 0)  # attention and norms are alike in every layer
    qk_norms = qk_norm_parameters(model)
    row_bias = h if model.linear_bias else 0
    attn_split = dense.attention - row_bias - qk_norms
    attn_repl = row_bias + qk_norms + dense.norms
    if model.mla is not None:
        # latent attention's down projections and latent norms are whole on every tp rank (Megatron-Core
        # multi_latent_attention.py: TELinear with parallel_mode 'duplicated'; only the up projections split)
        ranks = (model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank
        whole = h * (ranks + model.mla.qk_rope_head_dim) + ranks
        attn_split, attn_repl = attn_split - whole, attn_repl + whole
    mlp_s, mlp_r = _mlp_split(model, model.ffn_hidden_size)
    sh_s = sh_r = router = experts = 0
    largest = max(h * (q + 2 * kv), model.ffn_hidden_size * h * (2 if model.mlp.gated else 1))
    moe = model.moe
    if moe is not None:
        moe_layer = layer_parameters(model, next(i for i in range(model.num_layers) if model.is_moe_layer(i)))
        if moe.shared_expert_ffn_hidden_size:
            sh_s, sh_r = _mlp_split(model, moe.shared_expert_ffn_hidden_size)
        router = moe_layer.router
        experts = moe_layer.experts
        largest = max(largest, h * moe.num_experts)
    return LayerConstants(attn_split=attn_split, attn_replicated=attn_repl, mlp_split=mlp_s, mlp_replicated=mlp_r,
                          moe_shared_split=sh_s, moe_shared_replicated=sh_r, moe_router=router,
                          moe_experts=experts, largest_layer_tensor=largest)


@dataclass(frozen=True)
class StageShape:
    """Layers of one pipeline stage (all its virtual chunks), as arrays over configurations."""

    num_layers: IntArray
    num_moe_layers: IntArray
    is_first: npt.NDArray[np.bool_]
    is_last: npt.NDArray[np.bool_]
    num_trainable_layers: IntArray
    """Of ``num_layers``, those that train (or get adapters)."""
    num_trainable_moe_layers: IntArray
    num_nograd_layers: IntArray
    """Of ``num_layers``, those no gradient flows through (frozen, after a frozen embedding)."""
    num_nograd_moe_layers: IntArray
    chunk_sizes: tuple[IntArray, ...]
    """Layers of each of the stage's virtual chunks (stage + j pp for j below the largest vpp; 0 beyond a row's)."""


def _count_moe(model: ModelConfig, lo: IntArray, hi: IntArray) -> IntArray:
    """MoE layers among 0-based layers [lo, hi)."""
    moe = model.moe
    if moe is None:
        return np.zeros_like(lo)
    k, fd = moe.layer_interval, moe.first_dense_layers
    a = np.maximum(lo, fd)
    n = (hi - 1 - fd) // k - (a - 1 - fd) // k
    return np.where(hi > a, n, 0)


def stage_shape(model: ModelConfig, layouts: LayoutArrays, stage: IntArray,
                training: TrainingConfig | None = None) -> StageShape:
    """Layers of ``stage``: stage i holds pipeline chunks i, i + pp, ... of the layout's split
    (:meth:`LayoutArrays.chunk_span`); ``training`` says which of them train."""
    pp, vpp = layouts.pp, layouts.vpp
    shape = np.broadcast(stage, pp, vpp, layouts.stage_split).shape
    lo_train = first_trainable_layer(model, training) if training is not None else 0
    nograd = nograd_layers(model, training) if training is not None else 0
    counts = {k: np.zeros(shape, dtype=np.int64) for k in ("all", "moe", "train", "train_moe", "nograd",
                                                            "nograd_moe")}
    # (with every layer trained the trained counts are the counts; with none gradient-free those are 0)
    keys = ["all"] + (["train"] if lo_train > 0 else []) + (["nograd"] if nograd > 0 else [])
    sizes = []
    for j in range(int(np.max(vpp, initial=1))):
        start, size = layouts.chunk_span(model.num_layers, stage + j * pp)
        active = j < vpp
        sizes.append(np.where(active, size, 0))
        end = start + size
        for key, lo, hi in (("all", start, end), ("train", np.maximum(start, lo_train), end),
                            ("nograd", start, np.minimum(end, nograd))):
            if key not in keys:
                continue
            counts[key] += np.where(active, np.maximum(hi - lo, 0), 0)
            if model.moe is not None:
                moe_key = "moe" if key == "all" else f"{key}_moe"
                counts[moe_key] += np.where(active & (hi > lo), _count_moe(model, lo, hi), 0)
    if lo_train == 0:
        counts["train"], counts["train_moe"] = counts["all"], counts["moe"]
    return StageShape(num_layers=counts["all"], num_moe_layers=counts["moe"], is_first=np.asarray(stage == 0),
                      is_last=np.asarray(stage == pp - 1), num_trainable_layers=counts["train"],
                      num_trainable_moe_layers=counts["train_moe"], num_nograd_layers=counts["nograd"],
                      num_nograd_moe_layers=counts["nograd_moe"], chunk_sizes=tuple(sizes))


@dataclass(frozen=True)
class StageParams:
    """Unsharded parameter counts of one stage by how they are split; ``per_rank`` divides them."""

    split: FloatArray
    """Divided by tp on each rank (weights of attention, MLP, vocabulary-parallel embeddings and head)."""
    replicated: FloatArray
    """Whole on every tp rank (norms, row-parallel biases, routers, position tables)."""
    experts: FloatArray
    """Routed experts: divided by ep x etp on each rank."""
    tied_copy: FloatArray
    """Of ``split``: the word-embedding copy the last stage holds for a tied head when pp > 1 (not unique)."""
    largest_tensor: FloatArray
    """Largest single tensor a rank holds (after sharding)."""
    trainable_split: FloatArray
    """Of ``split``, ``replicated`` and ``experts``: the parameters that train (all of them unless frozen)."""
    trainable_replicated: FloatArray
    trainable_experts: FloatArray
    trainable_embedding: FloatArray
    """Of ``trainable_split``: the word embedding's rows (first stage; 0 where it is frozen or elsewhere)."""
    matmul_split: FloatArray
    """Of ``split`` and ``experts``: the layers' matmul weights (what QLoRA stores in 4 bits and Transformer
    Engine keeps fp8 copies of; biases, norms, routers, embeddings and head excluded)."""
    matmul_experts: FloatArray

    def per_rank(self, tp: npt.ArrayLike, ep: npt.ArrayLike) -> FloatArray:
        """Parameters one rank of this stage holds (experts split over tp, as with etp = tp)."""
        tp_a = np.asarray(tp, dtype=np.float64)
        return np.asarray(self.split / tp_a + self.replicated + self.experts / (tp_a * np.asarray(ep)))


def _edges(model: ModelConfig, shape: StageShape) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray,
                                                         FloatArray]:
    """(embedding split, embedding replicated, head split, head replicated, tied copy) of the stage."""
    h, v = model.hidden_size, model.vocab_size
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    # First stage: word embeddings (vocabulary-parallel), position/token-type tables and embedding norm.
    emb_repl = (model.max_position_embeddings * h if model.position_embedding is PositionEmbedding.LEARNED else 0)
    emb_repl += model.type_vocab_size * h + (norm_parameters(model) if model.embedding_norm else 0)
    emb_repl += model.vision_tower_params  # a vision tower (Gemma 3) sits before the text stack, unsharded
    # Last stage: final norm, output head (untied, or a tied copy when the embedding lives on another stage).
    head_repl = norm_parameters(model) if model.final_norm else 0
    head_repl += h * h + h if model.pooler else 0
    head_split = 0
    if model.lm_head and model.arch is ArchKind.ENCODER:
        head_repl += h * h + h + norm_parameters(model)
        head_split += v
    if model.lm_head and not model.tied_embeddings:
        head_split += v * h + (v if model.arch is ArchKind.ENCODER else 0)  # see params.head_parameters
    if model.lm_head_bias:
        head_split += v  # one bias per vocabulary row, split with the head's rows
    tied = last * (1.0 - first) * (v * h if model.tied_embeddings and model.lm_head else 0)
    return first * (v * h), first * emb_repl, last * head_split, last * head_repl, tied


def stage_params(model: ModelConfig, shape: StageShape, tp: npt.ArrayLike,
                 training: TrainingConfig | None = None) -> StageParams:
    """Parameter counts of the stage ``shape`` describes; ``tp`` only sizes ``largest_tensor``; ``training``
    says which train (LoRA adds its adapters)."""
    c = layer_constants(model)
    moe = model.moe
    n = shape.num_layers.astype(np.float64)
    nm = shape.num_moe_layers.astype(np.float64)
    nd = n - nm
    nt = shape.num_trainable_layers.astype(np.float64)
    ntm = shape.num_trainable_moe_layers.astype(np.float64)
    ntd = nt - ntm
    split = n * c.attn_split + nd * c.mlp_split + nm * c.moe_shared_split
    repl = n * c.attn_replicated + nd * c.mlp_replicated + nm * (c.moe_shared_replicated + c.moe_router)
    experts = nm * c.moe_experts
    emb_s, emb_r, head_s, head_r, tied = _edges(model, shape)
    split = split + emb_s + head_s + tied
    repl = repl + emb_r + head_r
    lora = training.lora if training is not None else None
    zero = 0.0 * n
    shared = moe.shared_expert_ffn_hidden_size if moe is not None else 0
    q_split = nd * matmul_weights(model, model.ffn_hidden_size) + nm * matmul_weights(model, shared)
    expert_weights = (3 if model.mlp.gated else 2) * model.hidden_size * (moe.expert_ffn_hidden_size if moe else 0)
    q_experts = nm * (moe.num_experts if moe is not None else 0) * expert_weights
    if lora is not None:
        ad_dense, ad_moe = adapter_counts(model, lora, model.ffn_hidden_size), adapter_counts(model, lora, shared)
        t_split = ntd * ad_dense.split + ntm * ad_moe.split
        t_repl = ntd * ad_dense.replicated + ntm * ad_moe.replicated
        t_experts, t_emb = zero, zero
        split, repl = split + t_split, repl + t_repl
    elif training is None or (not training.freeze_embeddings and first_trainable_layer(model, training) == 0):
        # everything trains: the counts themselves (integers below 2^53, so summed in any order they are equal)
        t_split, t_repl, t_experts = split, repl, experts
        t_emb = emb_s
    else:
        frozen_emb = training.freeze_embeddings
        t_split = ntd * c.mlp_split + ntm * c.moe_shared_split + nt * c.attn_split + head_s
        t_repl = ntd * c.mlp_replicated + ntm * (c.moe_shared_replicated + c.moe_router) + nt * c.attn_replicated \
            + head_r
        t_experts, t_emb = ntm * c.moe_experts, zero
        if not frozen_emb:
            t_split, t_repl, t_emb = t_split + emb_s + tied, t_repl + emb_r, emb_s
    tp_a = np.asarray(tp, dtype=np.float64)
    v, h = model.vocab_size, model.hidden_size
    largest = np.maximum(np.where(n > 0, c.largest_layer_tensor / tp_a, 0.0),
                         np.where((shape.is_first | shape.is_last), v * h / tp_a, 0.0))
    return StageParams(split=np.asarray(split), replicated=np.asarray(repl), experts=np.asarray(experts),
                       tied_copy=np.asarray(tied), largest_tensor=np.asarray(largest),
                       trainable_split=np.asarray(t_split), trainable_replicated=np.asarray(t_repl),
                       trainable_experts=np.asarray(t_experts), trainable_embedding=np.asarray(t_emb),
                       matmul_split=np.asarray(q_split),
                       matmul_experts=np.asarray(q_experts))
