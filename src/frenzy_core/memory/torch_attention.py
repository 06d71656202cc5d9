"""What one Hugging Face Transformers 5 attention block saves for backward in eager PyTorch, per token.

The block is followed tensor by tensor from its projections to the output projection's input: which tensors the
attention kernel saves (``eager_attention_forward``, or the CUDA kernel ``scaled_dot_product_attention`` picks),
which projection outputs stay alive because a saved view points into them, and which copies the KV cache adds when
the model returns one. Sources are the Transformers 5 modeling files named per lineage and, for the kernels,
``aten/src/ATen/native/transformers/attention.cpp`` and ``cuda/sdp_utils.cpp`` (docs/memory-model.md, section 3).
Bytes are per token of one micro-batch on one tensor-parallel rank before the division by tp, which the caller
applies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from frenzy_core.config.hf import ModuleLayout, module_layout
from frenzy_core.config.model import ModelConfig, NormKind, NormPlacement, PositionEmbedding, QKNormScope
from frenzy_core.config.training import Attention, Precision, TrainingConfig

__all__ = ["AttentionTerms", "Kernel", "attention_terms", "dtype_bytes", "sdpa_kernel"]

FP32 = 4
"""Bytes of an fp32 element (softmax outputs, upcast copies, statistics)."""
MASK_BYTES = 1
"""Dropout masks and boolean attention masks are 1-byte tensors."""
FLASH_MAX_HEAD_DIM = 256
"""FlashAttention-2 takes head dimensions up to 256 (``check_head_dim_size_flash``, cuda/sdp_utils.cpp); Transformers
also passes ``enable_gqa`` only up to that size (``use_gqa_in_sdpa``, integrations/sdpa_attention.py)."""
EFFICIENT_LSE_ROWS = 32
"""The memory-efficient kernel pads its log-sum-exp to a multiple of 32 query rows (``_efficient_attention_forward``,
attention_backward's ``logsumexp`` of shape (b, heads, ceil(s / 32) x 32))."""
EFFICIENT_BIAS_KEYS = 16
"""An additive mask passed to the memory-efficient kernel is padded to a multiple of 16 keys (``preprocess_mask``,
mem_eff_alignment in attention.cpp)."""


class Kernel(str, enum.Enum):
    """The attention computation a layer runs."""

    EAGER = "eager"
    """Transformers' ``eager_attention_forward`` (or the family's own matmul-softmax-matmul)."""
    FLASH = "flash"
    """FlashAttention-2 through SDPA: half precision, no mask, equal head dimensions up to 256."""
    EFFICIENT = "efficient"
    """The memory-efficient (CUTLASS) SDPA kernel: fp32 or half, additive masks, equal key/value head counts."""
    MATH = "math"
    """SDPA's composite fallback: scores and probabilities materialised, in fp32 for half inputs."""


@dataclass(frozen=True)
class AttentionTerms:
    """Per token: bytes an attention block keeps for backward, by how they scale with the sequence."""

    outside: float
    """Norm, projections, rotary outputs and output-projection input: kept by selective recompute."""
    core: float
    """Attention-core tensors independent of the key count (log-sum-exp): dropped by selective recompute."""
    core_per_key: float
    """Attention-core tensors per key (scores, probabilities, a per-layer additive mask copy)."""
    lse_heads: int
    """Heads whose fp32 log-sum-exp the kernel saves (the caller pads the rows: 32 for the efficient kernel)."""
    lse_rows: int
    """Row multiple the log-sum-exp is padded to (1: none)."""
    kv_cache: float
    """The key and value copies a returned KV cache holds (0 without a cache)."""
    kv_extra: float
    """Of ``kv_cache``, what the block does not also save for backward."""
    score_grad: float
    """Per key: the probability gradient that exists while the layer runs its backward (eager and math only)."""
    freed_before_core: float
    """What the block's backward frees before its softmax backward: the output projection's input and the values
    the probabilities multiplied."""


@dataclass(frozen=True)
class _Dtypes:
    """Bytes per element of the tensors a layer makes."""

    stream: int
    """Residual stream and norm inputs (fp32 under autocast)."""
    matmul: int
    """Linear and matmul outputs (the autocast dtype under autocast)."""
    rotary: int
    """Queries and keys after rotary embeddings: the cos/sin tables take the residual stream's dtype, so under
    autocast the bf16 projections are promoted to fp32 (LlamaRotaryEmbedding.forward: ``cos.to(dtype=x.dtype)``)."""


def dtype_bytes(training: TrainingConfig) -> tuple[int, int]:
    """(residual stream, linear output) bytes per element in eager PyTorch."""
    p = training.precision
    if p is Precision.FP32:
        return FP32, FP32
    if p.is_amp:
        return FP32, 2
    return 2, 2


def _dtypes(model: ModelConfig, training: TrainingConfig) -> _Dtypes:
    stream, matmul = dtype_bytes(training)
    # (DeepSeek-V2's complex rotary casts back with .type_as(xq); ModelConfig does not tell V2 from V3, and under
    # autocast the difference is one transient fp32 copy of the small rotary part.)
    rotary = stream if model.position_embedding is PositionEmbedding.ROTARY else matmul
    return _Dtypes(stream=stream, matmul=matmul, rotary=rotary)


def sdpa_kernel(model: ModelConfig, training: TrainingConfig, *, masked: bool, heads_given: int,
                in_bytes: int) -> Kernel:
    """The kernel CUDA's ``select_sdp_backend`` (sm80+, flash > efficient > math) runs for this layer.

    ``heads_given`` is the key/value head count attention receives (fewer than the query heads only when Transformers
    passes ``enable_gqa``); ``in_bytes`` the element size of the (autocast) inputs. Flash needs half precision, no
    mask and head dimensions up to 256 (``can_use_flash_attention``); the efficient kernel needs equal head counts
    in this build and dimensions aligned to 8 (half) or 4 (fp32) elements (``can_use_mem_efficient_attention``).
    """
    d_qk, d_v = model.head_dim, (model.mla.v_head_dim if model.mla is not None else model.head_dim)
    if in_bytes == 2 and not masked and d_qk == d_v <= FLASH_MAX_HEAD_DIM:
        return Kernel.FLASH
    align = 8 if in_bytes == 2 else 4
    if heads_given == model.num_attention_heads and d_qk % align == 0 and d_v % align == 0:
        return Kernel.EFFICIENT
    return Kernel.MATH


class _Ledger:
    """Storages (bytes per token) a block keeps alive; a storage counts once however many saved views use it."""

    def __init__(self) -> None:
        self.bytes: dict[str, float] = {}

    def keep(self, name: str, nbytes: float) -> None:
        self.bytes[name] = max(self.bytes.get(name, 0.0), nbytes)

    def total(self) -> float:
        return float(sum(self.bytes.values()))


@dataclass(frozen=True)
class _Tensor:
    """A tensor handed along the block: the storage it lives in, that storage's bytes, its element size and width."""

    storage: str
    storage_bytes: float
    nbytes: int
    width: int


def _projections(model: ModelConfig, dt: _Dtypes, layout: ModuleLayout) -> tuple[_Tensor, _Tensor, _Tensor]:
    """Query, key and value as the projections leave them (views where the family splits one fused output)."""
    q, kv, d, b = model.q_size, model.kv_size, model.head_dim, dt.matmul
    if layout is ModuleLayout.FALCON and _falcon_new_architecture(model):
        # FalconAttention._split_heads (new_decoder_architecture): key/value broadcast to every query head and
        # flattened, which copies all three out of the fused output.
        return _Tensor("q_split", b * q, b, q), _Tensor("k_split", b * q, b, q), _Tensor("v_split", b * q, b, q)
    if layout is ModuleLayout.FALCON and model.num_kv_heads == 1:
        # multi_query: fused[..., [-2], :] and [..., [-1], :] index (copy) the single key and value head.
        fused = b * (q + 2 * d)
        return _Tensor("qkv", fused, b, q), _Tensor("k_split", b * d, b, d), _Tensor("v_split", b * d, b, d)
    if model.fused_qkv:
        fused = b * (q + 2 * kv)
        return _Tensor("qkv", fused, b, q), _Tensor("qkv", fused, b, kv), _Tensor("qkv", fused, b, kv)
    if layout is ModuleLayout.LLAMA and model.position_embedding is not PositionEmbedding.ROTARY:
        # OPTAttention: q_proj(x) * scaling is a new tensor; the projection output is not kept.
        return _Tensor("q_scaled", b * q, b, q), _Tensor("k_proj", b * kv, b, kv), _Tensor("v_proj", b * kv, b, kv)
    return _Tensor("q_proj", b * q, b, q), _Tensor("k_proj", b * kv, b, kv), _Tensor("v_proj", b * kv, b, kv)


def _falcon_new_architecture(model: ModelConfig) -> bool:
    """Falcon's new decoder architecture: two parallel norms (ln_attn, ln_mlp), key/value heads broadcast."""
    return model.parallel_block and model.norm_placement is NormPlacement.PRE


def _qk_norm(model: ModelConfig, training: TrainingConfig, dt: _Dtypes, layout: ModuleLayout, x: _Tensor,
             heads: int, name: str, led: _Ledger) -> _Tensor:
    """Saved tensors of one query or key norm over ``x``; returns its output (a new tensor)."""
    w = x.width
    if model.norm is NormKind.LAYERNORM:
        # StableLM's LayerNormPerHead, Phi's LayerNorm(head_dim): F.layer_norm saves its input and mean/rstd per
        # head (in the input's dtype); CUDA autocast runs layer_norm in fp32, on an fp32 copy of the bf16 input.
        upcast = training.precision.is_amp and x.nbytes != FP32
        if upcast:
            led.keep(f"{name}_f32", FP32 * w)
        else:
            led.keep(x.storage, x.storage_bytes)
        led.keep(f"{name}_stats", 2 * (FP32 if upcast else x.nbytes) * heads)
        out = FP32 if upcast else x.nbytes
        return _Tensor(f"{name}_out", out * w, out, w)
    stats = FP32 * (1 if model.qk_norm_scope is QKNormScope.ALL_HEADS else heads)  # rsqrt per normalised vector
    if x.nbytes == FP32:
        led.keep(x.storage, x.storage_bytes)  # x.to(float32) is x itself, saved by pow
    else:
        led.keep(f"{name}_f32", FP32 * w)
    if layout.norm_product_fp32 or x.nbytes == FP32:
        led.keep(f"{name}_prod", FP32 * w)  # the fp32 product x * rsqrt, saved by the weight multiply
    else:
        led.keep(f"{name}_half", x.nbytes * w)  # LlamaRMSNorm: weight * x.to(input_dtype) saves the half copy
    led.keep(f"{name}_rsqrt", stats)
    # LlamaRMSNorm returns weight * x.to(input_dtype): an fp32 weight (autocast) promotes it to fp32; Gemma's and
    # OLMo 2's cast their product back to the input dtype.
    out_bytes = FP32 if (dt.stream == FP32 and layout is ModuleLayout.LLAMA) else x.nbytes
    return _Tensor(f"{name}_out", out_bytes * w, out_bytes, w)


def _heads_major(model: ModelConfig, layout: ModuleLayout) -> bool:
    """Whether the rotated query is laid out heads-major (b, heads, s, d) in memory.

    Elementwise ops keep their input's layout, so Llama's rotary output keeps the projection's (b, s, heads, d); a
    concatenation (partial rotary, Phi-3's and GPT-NeoX's apply_rotary_pos_emb, StableLM's per-head norm) or an op on
    a strided view of a fused projection returns a fresh heads-major tensor. FlashAttention then writes its output
    heads-major too (``empty_like`` of the transposed query) and ``transpose(1, 2).contiguous()`` copies it.
    """
    if model.position_embedding is not PositionEmbedding.ROTARY:
        return False
    each_head_ln = model.qk_norm and model.qk_norm_scope is QKNormScope.EACH_HEAD
    fused_view = model.fused_qkv and not (layout is ModuleLayout.FALCON and _falcon_new_architecture(model))
    return model.partial_rotary_factor < 1.0 or fused_view or each_head_ln


def _eager_probs(model: ModelConfig, training: TrainingConfig, layout: ModuleLayout, dt: _Dtypes) -> float:
    """Bytes per head and key the eager core saves: softmax output, its cast, dropout mask and output, tanh."""
    b = dt.matmul
    dropout = model.attention_dropout > 0 and layout is not ModuleLayout.FALCON
    if layout.eager_softmax_fp32:
        # eager_attention_forward: softmax(dtype=float32) saved, .to(query.dtype) (or autocast's cast for the
        # matmul with v) saved by that matmul unless already fp32; dropout keeps its mask and output instead.
        probs = FP32 + (MASK_BYTES + b if dropout else (0 if b == FP32 else b))
    else:
        # GPT-2 / BERT: softmax in the scores' dtype (fp32 under CUDA autocast: softmax is fp32_set_opt_dtype);
        # Falcon: softmax(dtype=hidden_states.dtype). The matmul with v saves a copy in the matmul dtype.
        soft = FP32 if (dt.stream == FP32 and training.precision.is_amp) else b
        probs = soft + (MASK_BYTES + b if dropout else (b if soft != b else 0))
    if model.attn_logit_softcapping is not None:
        probs += b  # Gemma 2: tanh(scores / cap) saves its output (in the scores' dtype)
    return float(probs)


def _freed_before_core(led: _Ledger) -> float:
    """The output projection's input and the values as the probabilities' matmul saved them: freed (their nodes
    done) by the time the softmax backward runs."""
    names = ("out_copy", "out", "v_rep", "v_cast", "v_math", "v_mm", "v_cache", "v_proj", "v_split")
    return float(sum(led.bytes.get(n, 0.0) for n in names))


def _score_grad(model: ModelConfig, training: TrainingConfig, layout: ModuleLayout, dt: _Dtypes,
                kernel: Kernel) -> float:
    """Per head and key: what the probabilities' backward holds beyond the saved tensors it frees.

    The softmax backward runs with the probabilities' gradient (the softmax's dtype) and writes the scores' gradient
    beside the saved softmax output; the separate copy the matmul with v saved (a cast or the dropout output, with
    the dropout's mask) was freed by then. An fp32 softmax of bf16 scores casts them first and back-propagates in
    fp32; of fp16 scores CUDA runs the fused half-to-float kernel, whose backward writes fp16
    (``_softmax_backward_data``'s meta function in aten/src/ATen/native/SoftMax.cpp). The math kernel works in
    fp32 with no copy.
    """
    b = dt.matmul
    if kernel is Kernel.MATH:
        return 2.0 * FP32
    if kernel is not Kernel.EAGER:
        return 0.0
    dropout = model.attention_dropout > 0 and layout is not ModuleLayout.FALCON
    if layout.eager_softmax_fp32:
        soft = FP32
    else:
        soft = FP32 if (dt.stream == FP32 and training.precision.is_amp) else b
    copy = dropout or soft != b
    fp16 = training.precision in (Precision.FP16, Precision.AMP_FP16)
    scores_grad = b if (soft == b or fp16) else FP32
    # The dropout's mask is freed with its output (its backward has run).
    return float(soft + scores_grad - (b if copy else 0) - (MASK_BYTES if dropout else 0))


def _core_inputs(model: ModelConfig, kernel: Kernel, dt: _Dtypes, t: _Tensor, repeated: bool, name: str,
                 led: _Ledger) -> None:
    """What the kernel keeps of one of q, k, v: the tensor as given, or the copy it makes (cast, repeat, upcast)."""
    q = model.q_size
    if kernel is Kernel.MATH:
        if name == "v" and t.nbytes == FP32 and t.width == q:
            led.keep(t.storage, t.storage_bytes)
        else:
            # _scaled_dot_product_attention_math: half inputs upcast to fp32; q and k scaled (new tensors), keys and
            # values repeated to every query head for grouped heads (repeat_interleave or matmul broadcasting).
            led.keep(f"{name}_math", FP32 * q)
        return
    if kernel is Kernel.EAGER:
        # torch.matmul reshapes its 4-d operands to 3-d for bmm, which copies any that are not contiguous over
        # (batch, heads) - the projections' strided views, the rotary outputs laid out (b, s, heads, d) - and
        # repeat_kv copies too: the saved operand is a tensor of its own, pinning no projection output.
        contiguous = name != "q" and t.storage in ("k_cache", "v_cache") and not repeated
        if contiguous and t.nbytes == dt.matmul:
            led.keep(t.storage, t.storage_bytes)
        else:
            led.keep(f"{name}_mm", dt.matmul * (q if repeated else t.width))
        return
    if repeated:
        led.keep(f"{name}_rep", dt.matmul * q)  # repeat_kv (expand + reshape) copies to every query head
    elif t.nbytes != dt.matmul:
        led.keep(f"{name}_cast", dt.matmul * t.width)  # autocast's cast of an fp32 (rotated) tensor
    else:
        led.keep(t.storage, t.storage_bytes)


def _kernel_for(model: ModelConfig, training: TrainingConfig, layout: ModuleLayout, dt: _Dtypes, masked: bool,
                heads_given: int) -> tuple[Kernel, bool]:
    """The kernel a layer runs and whether keys and values reach it repeated to every query head."""
    a = model.num_attention_heads
    if training.attention is Attention.EAGER:
        return Kernel.EAGER, heads_given < a  # repeat_kv, or matmul broadcasting a single key head (Falcon MQA)
    if layout is ModuleLayout.FALCON:
        # FalconAttention calls SDPA itself, always with its materialised mask and without enable_gqa.
        return sdpa_kernel(model, training, masked=True, heads_given=heads_given, in_bytes=dt.matmul), False
    d_v = model.mla.v_head_dim if model.mla is not None else model.head_dim
    gqa = heads_given < a and not masked and model.head_dim == d_v <= FLASH_MAX_HEAD_DIM  # use_gqa_in_sdpa
    repeated = heads_given < a and not gqa  # sdpa_attention_forward's repeat_kv
    kernel = sdpa_kernel(model, training, masked=masked, heads_given=a if repeated else heads_given,
                         in_bytes=dt.matmul)
    return kernel, repeated and kernel is not Kernel.MATH


def attention_terms(model: ModelConfig, training: TrainingConfig, *, masked: bool, cache: bool) -> AttentionTerms:
    """Saved bytes per token of one attention block (from the projections' outputs to the output projection's input).

    ``masked``: the layer's SDPA gets a materialised mask (a sliding window no longer than the sequence); ``cache``:
    the forward fills a KV cache (Transformers 5 ``DynamicLayer.update``: ``cat([empty, k])`` copies, which the
    attention then reads instead of the projections' tensors; sliding-window layers keep a view of the full copy).
    """
    layout = module_layout(model)
    dt = _dtypes(model, training)
    if model.mla is not None:
        return _mla_terms(model, training, dt, masked=masked, cache=cache)
    a, g, q = model.num_attention_heads, model.num_kv_heads, model.q_size
    masked = masked or layout is ModuleLayout.FALCON  # FalconAttention hands SDPA its materialised mask always
    led = _Ledger()
    qt, kt, vt = _projections(model, dt, layout)
    if model.qk_norm:
        qt = _qk_norm(model, training, dt, layout, qt, a, "q_norm", led)
        kt = _qk_norm(model, training, dt, layout, kt, g, "k_norm", led)
    if model.position_embedding is PositionEmbedding.ROTARY:
        # q * cos + rotate_half(q) * sin: new tensors (cos and sin are saved, shared by the layers).
        qt = _Tensor("q_rot", dt.rotary * qt.width, dt.rotary, qt.width)
        kt = _Tensor("k_rot", dt.rotary * kt.width, dt.rotary, kt.width)
    kv_cache = 0.0
    if cache:
        kt = _Tensor("k_cache", kt.nbytes * kt.width, kt.nbytes, kt.width)
        vt = _Tensor("v_cache", vt.nbytes * vt.width, vt.nbytes, vt.width)
        kv_cache = kt.storage_bytes + vt.storage_bytes
    heads_given = a if (layout is ModuleLayout.FALCON and _falcon_new_architecture(model)) else g
    kernel, repeated = _kernel_for(model, training, layout, dt, masked, heads_given)
    for t, name in ((qt, "q"), (kt, "k"), (vt, "v")):
        _core_inputs(model, kernel, dt, t, repeated and name != "q", name, led)
    core, per_key, lse_rows = 0.0, 0.0, 1
    if kernel is Kernel.EAGER:
        per_key = a * _eager_probs(model, training, layout, dt)
        led.keep("out_copy", dt.matmul * q)  # attn_output.transpose(1, 2).contiguous(), saved by o_proj
    elif kernel is Kernel.MATH:
        per_key = a * FP32  # the (fp32) softmax output
        led.keep("out_copy", dt.matmul * q)
    else:
        lse_rows = EFFICIENT_LSE_ROWS if kernel is Kernel.EFFICIENT else 1
        led.keep("out", dt.matmul * q)  # the kernel's output, saved by it and viewed by o_proj
        if kernel is Kernel.FLASH and _heads_major(model, layout):
            led.keep("out_copy", dt.matmul * q)
        if masked and kernel is Kernel.EFFICIENT:
            per_key = dt.matmul  # convert_boolean_attn_mask: an additive copy per call, saved as attn_bias
    kv_extra = sum(t.storage_bytes for t in (kt, vt) if cache and t.storage not in led.bytes)
    grad = a * _score_grad(model, training, layout, dt, kernel)
    lse_heads = a if kernel in (Kernel.FLASH, Kernel.EFFICIENT) else 0
    return AttentionTerms(outside=led.total(), core=core, core_per_key=per_key, lse_heads=lse_heads,
                          lse_rows=lse_rows, kv_cache=kv_cache, kv_extra=float(kv_extra), score_grad=float(grad),
                          freed_before_core=_freed_before_core(led))


def _rms_norm(dt: _Dtypes, x: _Tensor, name: str, led: _Ledger) -> _Tensor:
    """LlamaRMSNorm-style norm (DeepSeek's q_a/kv_a norms) over one vector per token; returns its output."""
    w = x.width
    if x.nbytes == FP32:
        led.keep(x.storage, x.storage_bytes)
        led.keep(f"{name}_prod", FP32 * w)
    else:
        led.keep(f"{name}_f32", FP32 * w)
        led.keep(f"{name}_half", x.nbytes * w)
    led.keep(f"{name}_rsqrt", FP32)
    out = FP32 if dt.stream == FP32 else x.nbytes
    return _Tensor(f"{name}_out", out * w, out, w)


def _linear_input(dt: _Dtypes, x: _Tensor, name: str, led: _Ledger) -> None:
    """A linear saves its input, or under autocast the cast copy of an fp32 input."""
    if x.nbytes != dt.matmul:
        led.keep(f"{name}_cast", dt.matmul * x.width)
    else:
        led.keep(x.storage, x.storage_bytes)


def _mla_terms(model: ModelConfig, training: TrainingConfig, dt: _Dtypes, *, masked: bool,
               cache: bool) -> AttentionTerms:
    """Multi-head latent attention (transformers models/deepseek_v2 and deepseek_v3, DeepseekV2Attention.forward)."""
    mla = model.mla
    assert mla is not None
    a, b = model.num_attention_heads, dt.matmul
    dn, dr, dv, r = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim, mla.kv_lora_rank
    led = _Ledger()
    if mla.q_lora_rank is not None:
        # q_b_proj(q_a_layernorm(q_a_proj(x))): the norm's tensors and q_b_proj's input.
        qa = _Tensor("q_a", b * mla.q_lora_rank, b, mla.q_lora_rank)
        _linear_input(dt, _rms_norm(dt, qa, "q_a_norm", led), "q_b_in", led)
    # Query: the rotated part is new (V2: complex product cast back; V3: rotate_half with fp32 cos under autocast),
    # then torch.cat((q_nope, q_rot)) makes the query (promoted to fp32 under autocast when q_rot is).
    q_bytes = max(b, dt.rotary)
    qt = _Tensor("q_cat", q_bytes * a * (dn + dr), q_bytes, a * (dn + dr))
    # Keys/values: kv_a_proj_with_mqa's output split into the latent (normalised) and the shared rotary key.
    kv_a = _Tensor("kv_a", b * (r + dr), b, r + dr)
    latent = _rms_norm(dt, _Tensor(kv_a.storage, kv_a.storage_bytes, b, r), "kv_a_norm", led)
    k_rot = _Tensor("k_rot", dt.rotary * dr, dt.rotary, dr)
    kv_cache = 0.0
    if cache:
        latent = _Tensor("latent_cache", latent.nbytes * r, latent.nbytes, r)
        k_rot = _Tensor("k_rot_cache", k_rot.nbytes * dr, k_rot.nbytes, dr)
        kv_cache = latent.storage_bytes + k_rot.storage_bytes
    _linear_input(dt, latent, "kv_b_in", led)  # kv_b_proj saves the latent it expands
    # expand_kv: kv_b_proj's output viewed as k_nope and the values; keys copied into a new (heads, dn + dr) tensor.
    kv_b = b * a * (dn + dv)
    kt = _Tensor("k_new", b * a * (dn + dr), b, a * (dn + dr))
    vt = _Tensor("kv_b", kv_b, b, a * dv)
    heads_major = False
    if training.attention is Attention.EAGER:
        kernel = Kernel.EAGER
    else:
        kernel = sdpa_kernel(model, training, masked=masked, heads_given=a, in_bytes=b)
        heads_major = True  # the query is torch.cat's fresh heads-major tensor
    for t, name in ((qt, "q"), (kt, "k"), (vt, "v")):
        _core_inputs(model, kernel, dt, t, False, name, led)
    layout = module_layout(model)
    per_key, lse_rows = 0.0, 1
    out = b * a * dv
    if kernel is Kernel.EAGER:
        per_key = a * _eager_probs(model, training, layout, dt)
        led.keep("out_copy", out)
    elif kernel is Kernel.MATH:
        per_key = a * FP32
        led.keep("out_copy", out)
    else:
        lse_rows = EFFICIENT_LSE_ROWS if kernel is Kernel.EFFICIENT else 1
        led.keep("out", out)
        if kernel is Kernel.FLASH and heads_major:
            led.keep("out_copy", out)
        if masked and kernel is Kernel.EFFICIENT:
            per_key = b
    kv_extra = sum(t.storage_bytes for t in (latent, k_rot) if cache and t.storage not in led.bytes)
    grad = a * _score_grad(model, training, layout, dt, kernel)
    return AttentionTerms(outside=led.total(), core=0.0, core_per_key=per_key,
                          lse_heads=a if kernel in (Kernel.FLASH, Kernel.EFFICIENT) else 0, lse_rows=lse_rows,
                          kv_cache=kv_cache, kv_extra=float(kv_extra), score_grad=float(grad),
                          freed_before_core=_freed_before_core(led))
