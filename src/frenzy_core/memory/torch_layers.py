"""One Hugging Face Transformers 5 layer in eager PyTorch: what it saves for backward, per token and rank.

Norms, the attention block (:mod:`frenzy_core.memory.torch_attention`), the MLP or mixture of experts and the
dropout masks, placed as the model's ``norm_placement`` and ``parallel_block`` say; local (sliding-window) and
global layers apart; the masks the model builds once per forward; and what a returned KV cache adds. The
derivations, each with its Transformers source, are in docs/memory-model.md (section 3, torch).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.hf import ModuleLayout, hf_family_of, module_layout
from frenzy_core.config.model import MLPKind, ModelConfig, NormKind, NormPlacement
from frenzy_core.config.training import Attention, TrainingConfig
from frenzy_core.memory.torch_attention import FP32, MASK_BYTES, AttentionTerms, attention_terms, dtype_bytes

__all__ = ["COMPOSED_GELU_FAMILIES", "FP32_ROUTER_FAMILIES", "TorchLayer", "attention_consumers", "norm_bytes", "torch_layer"]

FloatArray = npt.NDArray[np.float64]

FP32_ROUTER_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3"})
"""Families whose MoE router computes in fp32 on an fp32 copy of its input (DeepseekV2MoEGate /
DeepseekV3TopkRouter: ``F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))``)."""

COMPOSED_GELU_FAMILIES = frozenset({"gpt2", "phi"})
"""Families whose MLP activation defaults to ``gelu_new`` (transformers activations.py NewGELUActivation, composed of
Python ops): GPT2Config and PhiConfig ``activation_function`` / ``hidden_act`` defaults. ModelConfig records no
activation function, so a config that switches it is estimated with the default."""


@dataclass(frozen=True)
class TorchLayer:
    """Per token (arrays over configurations), one layer's bytes on one tensor-parallel rank."""

    dense: FloatArray
    """A dense layer, averaged over local and global layers, with the KV cache the model returns."""
    moe: FloatArray
    """An MoE layer, likewise."""
    kind_excess: FloatArray
    """How much the largest kind of layer (local or global attention, no cache) exceeds the average."""
    core: FloatArray
    """The attention core of a dense layer (what selective recomputation drops)."""
    layer_input: FloatArray
    cache_delta: FloatArray
    """What a layer saves less without the KV cache (checkpointed layers run with ``use_cache=False``)."""
    kv_cache: FloatArray
    """The key/value copies a returned cache holds per layer (0 when the model returns none)."""
    kv_extra: FloatArray
    """Of those, what the layer does not also save for backward."""
    score_grad: FloatArray
    """While a layer runs its backward: eager attention's probability gradient."""
    mlp_grad: FloatArray
    """While a layer's MLP runs its backward: the gradients of its intermediate tensors beyond the saved ones."""
    freed_before_core: FloatArray
    """What a layer's backward frees before its attention softmax backward runs: the MLP side, a post-attention
    norm, the output projection's input and the values."""
    masks: FloatArray
    """The attention masks the model builds once per forward (shared by the layers, kept by checkpoints)."""


def norm_bytes(model: ModelConfig, training: TrainingConfig, consumers: int, *, product_fp32: bool | None = None
               ) -> float:
    """Bytes per token one width-h norm saves, plus its output as its ``consumers`` linears save it (0: a post-norm
    whose output goes to the residual add)."""
    h = model.hidden_size
    stream, _ = dtype_bytes(training)
    amp = training.precision.is_amp
    fp32_product = module_layout(model).norm_product_fp32 if product_fp32 is None else product_fp32
    if model.norm is NormKind.RMSNORM:
        # LlamaRMSNorm: x.to(fp32) saved by pow (x itself when fp32), rsqrt (fp32 per token), and either the half
        # copy y.to(dtype) (saved by the weight multiply) or, when already fp32 or in Gemma's / OLMo 2's norms, the
        # fp32 product x * rsqrt.
        saved = FP32 * h + FP32 + (FP32 * h if (stream == FP32 or fp32_product) else stream * h)
    else:
        saved = stream * h + 2 * FP32  # LayerNorm: input, fp32 mean and rstd
    if consumers == 0:
        return float(saved)
    # The output is saved by the next linear(s); autocast casts it once per consuming linear.
    return float(saved + (2 * h * consumers if amp else stream * h))


def attention_consumers(model: ModelConfig) -> int:
    """Linears that read the attention block's input (each casts it separately under autocast)."""
    if model.mla is not None:
        return 2  # q_proj (or q_a_proj) and kv_a_proj_with_mqa
    return 1 if model.fused_qkv else 3


def _mlp_consumers(model: ModelConfig) -> int:
    return 2 if model.mlp.gated and not model.fused_gate_up else 1


def _mlp_body(model: ModelConfig, training: TrainingConfig, width: int, nbytes: int) -> float:
    """Bytes per token an MLP of intermediate ``width`` saves between its input and output projections."""
    if model.mlp.gated:
        # gate out (act input), act out, up out (mul inputs), product (down input); Phi-3's fused gate_up output
        # is chunked into gate and up views of one tensor of the same two widths.
        return 4.0 * nbytes * width
    if model.mlp is MLPKind.GELU and _composed_gelu(model):
        # gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) saves x (by pow), tanh(.), 0.5x and
        # 1 + tanh(.), plus the product for the next linear. CUDA autocast runs pow in fp32 (its fp32 input copy is
        # saved) and so tanh and 1 + tanh follow in fp32; the fp32 product is cast back for the next linear.
        return float((3 * FP32 + 2 * nbytes if training.precision.is_amp else 5 * nbytes) * width)
    if model.mlp in (MLPKind.GELU, MLPKind.SQUARED_RELU):
        return 2.0 * nbytes * width  # the activation saves its input; its output is the next linear's
    return 1.0 * nbytes * width  # relu saves its output, which the next linear saves too


def _composed_gelu(model: ModelConfig) -> bool:
    return module_layout(model) is ModuleLayout.GPT2 or hf_family_of(model).model_type in COMPOSED_GELU_FAMILIES


def _mlp_grad(model: ModelConfig, training: TrainingConfig, width: int) -> float:
    """Backward of one MLP: the most its gradient temporaries exceed the saved tensors they free, per token.

    Gated: the product's gradient and the two it splits into (the activation's and the up projection's) exist
    together while the multiply's backward runs, once its saved product is freed: two widths. GeLU: the activation's
    output and input gradients, its output freed: one width; ReLU keeps its output through its backward: two.
    gelu_new: the product's gradient and the multiply's two input gradients (three widths); under autocast they are
    fp32 (the product's cast back is freed), so three fp32 widths less one half width.
    """
    stream, nbytes = dtype_bytes(training)
    if model.mlp.gated or model.mlp is MLPKind.RELU:
        per_width = 2.0 * nbytes
    elif model.mlp is MLPKind.GELU and _composed_gelu(model):
        per_width = 3.0 * FP32 - nbytes if training.precision.is_amp else 2.0 * nbytes
    else:
        per_width = 1.0 * nbytes
    return per_width * width


def _moe_consumers(model: ModelConfig) -> int:
    """Linears that read an MoE block's input: the router and a shared expert's gate/up (and its gate); the routed
    experts gather their tokens by index."""
    m = model.moe
    assert m is not None
    shared = (_mlp_consumers(model) + (1 if m.shared_expert_gate else 0)) if m.shared_expert_ffn_hidden_size else 0
    return 1 + shared


def _moe_grad(model: ModelConfig, training: TrainingConfig) -> float:
    """Backward of a grouped-experts block, per token: the routed outputs' gradients first (the sum's expanded
    gradient materialised, and the zeros the un-permuting index scatters it into: three hidden widths per routed
    token), then each expert's gated-MLP gradients (two expert widths); plus a shared expert's."""
    m = model.moe
    assert m is not None
    stream, bm = dtype_bytes(training)
    be = stream if training.precision.is_amp else bm  # the experts run in fp32 under autocast
    routed = m.top_k * (m.capacity_factor or 1.0)
    expert = routed * be * max(3 * model.hidden_size, 2 * m.expert_ffn_hidden_size)
    shared = _mlp_grad(model, training, m.shared_expert_ffn_hidden_size) if m.shared_expert_ffn_hidden_size else 0.0
    return float(expert + shared)


def _norms(model: ModelConfig, training: TrainingConfig, mlp_c: int) -> tuple[float, float]:
    """Bytes per token of the norms on the attention side and on the MLP side (read by ``mlp_c`` linears) of one
    layer, as placed."""
    h = model.hidden_size
    stream, _ = dtype_bytes(training)
    amp = training.precision.is_amp
    attn_c = attention_consumers(model)
    placement = model.norm_placement
    if placement is NormPlacement.SHARED:
        # Phi-2, Falcon (parallel_attn): one norm whose output attention and MLP both read.
        return norm_bytes(model, training, attn_c + mlp_c), 0.0
    if placement is NormPlacement.POST:
        # OLMo 2: attention and MLP read the residual stream as it is (their linears save it, or autocast's casts)
        # and each branch output is normalised before the residual add (its output is not saved).
        def reads(consumers: int) -> float:
            return float(2 * h * consumers if amp else stream * h)
        post = norm_bytes(model, training, 0)
        return reads(attn_c) + post, reads(mlp_c) + post
    attn, mlp = norm_bytes(model, training, attn_c), norm_bytes(model, training, mlp_c)
    if placement is NormPlacement.SANDWICH:
        # Gemma 2 / 3: post_attention_layernorm and post_feedforward_layernorm on the branch outputs.
        attn += norm_bytes(model, training, 0)
        mlp += norm_bytes(model, training, 0)
    if model.parallel_block and (model.norm is NormKind.LAYERNORM or stream == FP32):
        mlp -= stream * h  # both norms read, and save, the same layer input
    return attn, mlp


def _moe_mlp(model: ModelConfig, training: TrainingConfig, norm: FloatArray | float, tp: FloatArray) -> FloatArray:
    """An MoE block (Transformers' grouped experts): router, shared experts and the routed tokens."""
    m = model.moe
    assert m is not None
    h = model.hidden_size
    stream, bm = dtype_bytes(training)
    if hf_family_of(model).model_type in FP32_ROUTER_FAMILIES:
        # The router's fp32 copy of its input (under autocast the fp32 input itself, instead of a cast copy).
        norm += FP32 * h if not training.precision.is_amp else FP32 * h - 2 * h
    routed = m.top_k * (m.capacity_factor or 1.0)
    shared = m.shared_expert_ffn_hidden_size
    shared_bytes = _mlp_body(model, training, shared, bm) / tp if shared else 0.0
    # Transformers' grouped experts are no autocast op: under autocast they run in fp32 on the gathered fp32
    # tokens (and their weights are not cast).
    be = stream if training.precision.is_amp else bm
    # router logits and softmax (fp32); per routed token: the gathered input, the expert body, the weighted output
    body = routed * (2 * be * h + _mlp_body(model, training, m.expert_ffn_hidden_size, be) / tp)
    return np.asarray(norm + shared_bytes + 2 * FP32 * m.num_experts + body)


def _masks(model: ModelConfig, training: TrainingConfig, s: FloatArray, b: FloatArray) -> FloatArray:
    """Per token: the masks built once per forward (masking_utils.create_causal_mask and the sliding variant).

    Eager attention gets an additive (b, 1, s, s) mask in the model's dtype per kind of layer (global, local);
    SDPA gets none for global layers (``is_causal``) and a boolean one for local layers once the sequence reaches
    the window (``_ignore_causal_mask_sdpa``); Falcon always materialises its boolean mask. A boolean mask is one
    (s, s) tensor expanded over the batch (``sdpa_mask`` without padding), so it costs s x s bytes per micro-batch.
    """
    if not model.causal:
        return np.zeros_like(s)
    n_local = _local_layers(model)
    kinds_local, kinds_global = n_local > 0, n_local < model.num_layers
    if training.attention is Attention.EAGER:
        return np.asarray((kinds_local + kinds_global) * training.precision.param_bytes * s)
    falcon = module_layout(model) is ModuleLayout.FALCON
    window = float(model.sliding_window or 0)
    per_token = MASK_BYTES * s / b
    local = np.where(s >= window, per_token, 0.0) if kinds_local else 0.0 * s
    return np.asarray(local + (per_token if (kinds_global and falcon) else 0.0))


@functools.lru_cache(maxsize=64)
def _local_layers(model: ModelConfig) -> int:
    """Layers that attend within the sliding window only."""
    return sum(model.is_sliding_window_layer(i) for i in range(model.num_layers))


@functools.lru_cache(maxsize=64)
def _attention_variants(model: ModelConfig, training: TrainingConfig) -> dict[tuple[bool, bool], AttentionTerms]:
    """The block's terms with and without a materialised mask and with and without a KV cache."""
    return {(masked, cache): attention_terms(model, training, masked=masked, cache=cache)
            for masked in (False, True) for cache in (False, True)}


def _attention_bytes(t: AttentionTerms, tp: FloatArray, s: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(whole block, attention core) bytes per token on one rank."""
    lse = FP32 * t.lse_heads * np.ceil(s / t.lse_rows) * t.lse_rows / s
    core = (t.core + t.core_per_key * s + lse) / tp
    return t.outside / tp + core, core


def torch_layer(model: ModelConfig, training: TrainingConfig, tp: FloatArray, s: FloatArray, b: FloatArray,
                seq_shard: FloatArray | float = 1.0) -> TorchLayer:
    """Per-token bytes of one layer (``tp``, ``s`` the keys per query and ``b`` the micro-batch are arrays over
    configurations). ``seq_shard`` is 1/tp under torchtitan's sequence parallelism (else 1): the norms' own
    tensors, the dropout masks and the layer input are then the rank's sequence shard, while the linears after
    each norm save its all-gathered output whole (docs/memory-model.md, section 3, "Sequence parallelism")."""
    h, f = model.hidden_size, model.ffn_hidden_size
    stream, bm = dtype_bytes(training)
    drop = (MASK_BYTES * h if model.hidden_dropout > 0 else 0) * seq_shard
    attn_side, mlp_side = _norms(model, training, _mlp_consumers(model))
    # (sequence parallel: each norm's own tensors shrink to the shard; what its linears save is the gathered
    # output, as without it)
    sharded = norm_bytes(model, training, 0) * (1.0 - np.asarray(seq_shard, dtype=np.float64))
    norm_attn, norm_mlp = attn_side - sharded, mlp_side - sharded
    dense_mlp = norm_mlp + drop + _mlp_body(model, training, f, bm) / tp
    moe_mlp = 0.0 * tp
    if model.moe is not None:
        moe_mlp = _moe_mlp(model, training, _norms(model, training, _moe_consumers(model))[1] + drop, tp)
    variants = _attention_variants(model, training)
    n_local = _local_layers(model)
    local_share = n_local / model.num_layers
    masked = (s >= float(model.sliding_window or 0)) & (training.attention is not Attention.EAGER)
    cache_on = model.returns_kv_cache and model.causal

    @functools.cache
    def block(local: bool, cache: bool) -> tuple[FloatArray, FloatArray, AttentionTerms]:
        """(whole block, core, terms) of a local or global layer, with or without a cache (each computed once)."""
        if local:
            on, off = variants[(True, cache)], variants[(False, cache)]
            b_on, c_on = _attention_bytes(on, tp, s)
            b_off, c_off = _attention_bytes(off, tp, s)
            pick = masked if np.ndim(masked) else bool(masked)
            return np.where(pick, b_on, b_off), np.where(pick, c_on, c_off), on
        whole, core = _attention_bytes(variants[(False, cache)], tp, s)
        return whole, core, variants[(False, cache)]

    kinds = [(True, local_share), (False, 1.0 - local_share)]
    attn_c = sum(w * block(k, cache_on)[0] for k, w in kinds if w > 0)
    attn_n = sum(w * block(k, False)[0] for k, w in kinds if w > 0)
    core = sum(w * block(k, cache_on)[1] for k, w in kinds if w > 0)
    excess = np.maximum.reduce([block(k, False)[0] - attn_n for k, w in kinds if w > 0])
    kv = sum(w * block(k, True)[2].kv_cache for k, w in kinds if w > 0) / tp if cache_on else 0.0 * tp
    kv_extra = sum(w * block(k, True)[2].kv_extra for k, w in kinds if w > 0) / tp if cache_on else 0.0 * tp
    grad = max(t.score_grad for t in variants.values()) * s / tp
    base = norm_attn + drop
    mlp_grad = _mlp_grad(model, training, f) / tp
    if model.moe is not None:
        mlp_grad = np.maximum(mlp_grad, _moe_grad(model, training) / tp)
    freed = max(t.freed_before_core for t in variants.values())
    post_attn_norm = norm_bytes(model, training, 0) if model.norm_placement in (
        NormPlacement.SANDWICH, NormPlacement.POST) else 0.0
    # The residual stream's gradient and the branch gradient being added into it, beside any layer's backward.
    residual_grad = 2.0 * stream * h
    return TorchLayer(
        dense=np.asarray(base + attn_c + dense_mlp), moe=np.asarray(base + attn_c + moe_mlp),
        kind_excess=np.asarray(excess), core=np.asarray(core),
        layer_input=np.asarray(stream * h * seq_shard + 0 * tp), cache_delta=np.asarray(attn_c - attn_n),
        kv_cache=np.asarray(kv), kv_extra=np.asarray(kv_extra), score_grad=np.asarray(grad + residual_grad),
        mlp_grad=np.asarray(mlp_grad + residual_grad + 0 * s),
        freed_before_core=np.asarray(dense_mlp + post_attn_norm + freed / tp + 0 * s), masks=_masks(model, training, s, b))
