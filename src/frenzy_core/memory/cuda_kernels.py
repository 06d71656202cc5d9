"""CPU dropout and attention that save what their CUDA kernels save, for the probe's CPU run standing in for a GPU.

Both are re-registered in torch's dispatcher (``AutogradCPU`` kernels of ``aten::dropout`` and
``aten::scaled_dot_product_attention``), so every caller is covered (``F.dropout``, ``nn.Dropout``,
``torch.dropout``, checkpoint recomputation in backward) and the registrations are undone on exit:

- ``dropout``: aten/src/ATen/native/Dropout.cpp runs the fused ``native_dropout`` (a 1-byte bool mask saved) when
  ``is_fused_kernel_acceptable`` (a CUDA tensor, 0 < p < 1, not empty) and ``_dropout_impl`` (a noise tensor of the
  input's dtype) otherwise, so on the CPU every dropout keeps the 4-byte noise. The kernel takes the CUDA branch.
  In-place dropout (``dropout_``) runs ``_dropout_impl`` on CUDA as well and is left alone.
- ``scaled_dot_product_attention``: on CUDA ``select_sdp_backend`` (aten/src/ATen/native/transformers/cuda/
  sdp_utils.cpp) tries flash, memory-efficient, then math attention (``torch._C._get_sdp_priority_order``); the
  CPU has only its flash kernel (no dropout, no differing head dimensions) and math, which saves the s x s
  probabilities. :func:`cuda_sdp_backend` applies the CUDA checks and the kernel calls the CUDA op itself
  (``_scaled_dot_product_flash_attention`` / ``_efficient_attention``), whose fake-tensor kernels return, and
  whose autograd saves, exactly the CUDA outputs: output, log-sum-exp (padded to 32 rows for the efficient
  kernel), RNG state. Grouped-query attention reaches flash with its fewer key/value heads; the memory-efficient
  kernel of this build takes equal head counts only, so fp32 GQA with ``enable_gqa`` runs the math kernel on CUDA
  as well (k and v repeated, the s x s probabilities saved). Assumed: an sm80+ GPU (A100, H100, B200); cuDNN
  attention, which torch prefers on sm90/sm100 with cuDNN > 9.15, saves the same output and log-sum-exp bytes as
  flash.
"""

from __future__ import annotations

import contextlib
import enum
import math
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["SDPBackend", "cuda_dropout_and_attention", "cuda_sdp_backend"]

_FLASH_MAX_HEAD_DIM = 256  # check_head_dim_size_flash: "less than or equal to 256" (sdp_utils.cpp)
_FLASH_HEAD_DIM_MULTIPLE = 8  # attention.cpp pads q, k, v to a multiple of 8 (pad_last_dim<8>) before flash
_EFFICIENT_MASK_ALIGNMENT = 16  # preprocess_mask pads the bias's last dimension to 16 (mem_eff_alignment)
# minimum_gemm_alignment on sm80+: 128 bits over the element size (8 halves), at least 4 for fp32.
_EFFICIENT_ALIGNMENT = {2: 8, 4: 4}


class SDPBackend(str, enum.Enum):
    """The CUDA attention kernels ``scaled_dot_product_attention`` chooses between (``torch.nn.attention``)."""

    FLASH = "flash"
    """FlashAttention-2: half precision, no explicit mask, equal head dimensions <= 256."""
    EFFICIENT = "efficient"
    """Memory-efficient attention (xFormers/CUTLASS): fp32 too, additive masks, aligned head dimensions."""
    MATH = "math"
    """The composite fallback: materialises the s x s scores and probabilities."""


def _heads_fit(query: Any, key: Any, value: Any, enable_gqa: bool, supports_gqa: bool) -> bool:
    """check_batch_size_and_num_heads_dense: equal batch; equal heads, or fewer key/value heads with GQA."""
    if not query.size(0) == key.size(0) == value.size(0):
        return False
    q_heads, k_heads, v_heads = query.size(-3), key.size(-3), value.size(-3)
    if enable_gqa and supports_gqa:
        return k_heads == v_heads and q_heads % k_heads == 0
    return q_heads == k_heads == v_heads


def _dense_ok(query: Any, key: Any, value: Any) -> bool:
    """check_tensor_shapes, check_nonzero_sequence_lengths_dense, check_last_dim_stride_equals_1_dense."""
    tensors = (query, key, value)
    return all(t.dim() == 4 and t.size(-2) > 0 and (t.stride(-1) == 1 or t.size(-1) == 1) for t in tensors)


def _can_use_flash(query: Any, key: Any, value: Any, mask: Any, is_causal: bool, enable_gqa: bool) -> bool:
    import torch

    head = query.size(-1)
    return (
        torch.backends.cuda.flash_sdp_enabled()
        and mask is None
        and head == key.size(-1) == value.size(-1) <= _FLASH_MAX_HEAD_DIM
        and not (is_causal and query.size(-2) != key.size(-2))  # check_flash_causal_non_square_seqlens
        and query.dtype == key.dtype == value.dtype
        and query.dtype in (torch.float16, torch.bfloat16)
        and _heads_fit(query, key, value, enable_gqa, supports_gqa=True)
        and _dense_ok(query, key, value)
    )


def _can_use_efficient(query: Any, key: Any, value: Any, enable_gqa: bool) -> bool:
    import torch

    if not torch.backends.cuda.mem_efficient_sdp_enabled():
        return False
    if not (query.dtype == key.dtype == value.dtype and query.dtype in (torch.float16, torch.bfloat16, torch.float32)):
        return False
    align = _EFFICIENT_ALIGNMENT[query.element_size()]
    dims_ok = query.size(-1) == key.size(-1) and query.size(-1) % align == 0 and value.size(-1) % align == 0
    # check_data_ptr_alignment_mem_efficient: storage offsets aligned to `align` elements.
    offsets_ok = all(t.storage_offset() % align == 0 for t in (query, key, value))
    # This build's memory-efficient kernel takes equal head counts only (its fake backward shapes every gradient
    # like the query), so GQA with enable_gqa goes on to the math kernel, which repeats k and v.
    heads_ok = _heads_fit(query, key, value, enable_gqa, supports_gqa=False)
    return dims_ok and offsets_ok and heads_ok and _dense_ok(query, key, value)


def cuda_sdp_backend(
    query: Any, key: Any, value: Any, attn_mask: Any = None, is_causal: bool = False, enable_gqa: bool = False
) -> SDPBackend:
    """The kernel CUDA's ``select_sdp_backend`` runs for these inputs on an sm80+ GPU (see the module docstring)."""
    import torch

    checks = {
        1: lambda: _can_use_flash(query, key, value, attn_mask, is_causal, enable_gqa),
        2: lambda: _can_use_efficient(query, key, value, enable_gqa),
        0: lambda: torch.backends.cuda.math_sdp_enabled(),
    }
    backends = {1: SDPBackend.FLASH, 2: SDPBackend.EFFICIENT, 0: SDPBackend.MATH}
    for code in torch._C._get_sdp_priority_order():  # SDPBackend codes: 0 math, 1 flash, 2 efficient, 3 cudnn
        if code in checks and checks[code]():
            return backends[code]
    return SDPBackend.MATH


def _bool_mask_to_additive(torch: Any, mask: Any, dtype: Any) -> Any:
    """convert_boolean_attn_mask (attention.cpp): True -> 0, False -> -inf, in the query's dtype."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask.logical_not(), -math.inf, torch.scalar_tensor(0.0, dtype=dtype))


def _attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
               is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
    """``aten::scaled_dot_product_attention`` as the CUDA build runs it (attention.cpp, per chosen backend)."""
    import torch
    import torch.nn.functional as F

    aten = torch.ops.aten
    mask = _bool_mask_to_additive(torch, attn_mask, query.dtype)
    backend = cuda_sdp_backend(query, key, value, mask, is_causal, enable_gqa)
    if backend is SDPBackend.FLASH:
        head = query.size(-1)
        pad = -head % _FLASH_HEAD_DIM_MULTIPLE
        scale = 1.0 / math.sqrt(head) if scale is None else scale  # from the unpadded head dimension
        padded = [F.pad(t, (0, pad)) if pad else t for t in (query, key, value)]
        out = aten._scaled_dot_product_flash_attention(*padded, dropout_p, is_causal, False, scale=scale)[0]
        return out[..., :head] if pad else out
    if backend is SDPBackend.EFFICIENT:
        if mask is not None:
            length = mask.size(-1)
            pad = -length % _EFFICIENT_MASK_ALIGNMENT
            mask = F.pad(mask, (0, pad))[..., :length] if pad else mask
            mask = mask.expand(query.size(0), query.size(-3), query.size(-2), key.size(-2))
        needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, mask, needs_lse, dropout_p, is_causal, scale=scale
        )[0]
    return aten._scaled_dot_product_attention_math(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]


def _dropout(input: Any, p: float, train: bool) -> Any:
    """``at::dropout`` with CUDA's branch: the fused kernel (bool mask) whenever it is acceptable."""
    import torch

    if input.is_nested or (train and 0.0 < p < 1.0 and input.numel() > 0):
        return torch.ops.aten.native_dropout.default(input, p, train)[0]
    if p == 1.0 and train:
        return input.mul(torch.zeros((), dtype=input.dtype))  # _dropout_impl: everything dropped
    return input  # _dropout_impl: p == 0, eval mode or an empty input pass through


@contextlib.contextmanager
def cuda_dropout_and_attention() -> Iterator[None]:
    """While open, CPU dropout and scaled-dot-product attention save what the CUDA kernels save."""
    import torch

    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Oo]verrid", category=UserWarning)
            library.impl("dropout", _dropout, "AutogradCPU")
            library.impl("scaled_dot_product_attention", _attention, "AutogradCPU")
        yield
    finally:
        library._destroy()
