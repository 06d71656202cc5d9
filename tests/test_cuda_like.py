"""The probe's CPU stand-ins for CUDA behaviour: each one changes what autograd saves exactly as CUDA would.

Every patch is checked on a tiny computation whose saved tensors differ with and without it, and the autocast op
lists in ``data/autocast_ops.yaml`` are checked against the installed torch build.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from frenzy_core.memory.cuda_autocast import autocast_op_lists, cuda_autocast_policy  # noqa: E402
from frenzy_core.memory.cuda_kernels import SDPBackend, cuda_dropout_and_attention, cuda_sdp_backend  # noqa: E402


def _saved(fn: Callable[[], Any]) -> list[tuple[torch.dtype, tuple[int, ...]]]:
    """(dtype, shape) of every tensor autograd saves while ``fn`` runs, in order."""
    seen: list[tuple[torch.dtype, tuple[int, ...]]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen.append((t.dtype, tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return seen


def _saved_bytes(fn: Callable[[], Any]) -> int:
    return sum(torch.empty((), dtype=d).element_size() * int(torch.Size(s).numel()) for d, s in _saved(fn))


@contextmanager
def _fake() -> Iterator[None]:
    """Fake tensors, as the probe runs: the CUDA attention ops have fake kernels but no CPU ones."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        yield


@contextmanager
def _cpu_autocast() -> Iterator[None]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield


# ---- dropout ---------------------------------------------------------------------------------------------


def test_dropout_saves_a_bool_mask_as_the_fused_cuda_kernel_does() -> None:
    x = torch.randn(64, 32, requires_grad=True)
    without = _saved(lambda: F.dropout(x * 1.0, 0.1, True))
    with cuda_dropout_and_attention():
        with_patch = _saved(lambda: F.dropout(x * 1.0, 0.1, True))
        module = _saved(lambda: torch.nn.Dropout(0.1)(x * 1.0))
    # Dropout.cpp: the CPU keeps an fp32 noise tensor (_dropout_impl); CUDA's native_dropout a 1-byte mask.
    assert (torch.float32, (64, 32)) in without and (torch.bool, (64, 32)) not in without
    assert (torch.bool, (64, 32)) in with_patch and (torch.float32, (64, 32)) not in with_patch
    assert module == with_patch


def test_in_place_dropout_keeps_its_noise_tensor_as_on_cuda() -> None:
    x = torch.randn(64, 32, requires_grad=True)
    without = _saved(lambda: F.dropout(x * 1.0, 0.1, True, inplace=True))
    with cuda_dropout_and_attention():
        with_patch = _saved(lambda: F.dropout(x * 1.0, 0.1, True, inplace=True))
    # dropout_ runs _dropout_impl on CUDA too: the noise (input dtype) is saved by the in-place multiply.
    assert with_patch == without and (torch.float32, (64, 32)) in with_patch


def test_dropout_off_or_p_zero_saves_nothing() -> None:
    x = torch.randn(8, 8, requires_grad=True)
    with cuda_dropout_and_attention():
        assert F.dropout(x, 0.0, True) is x
        assert F.dropout(x, 0.1, False) is x


# ---- scaled-dot-product attention ---------------------------------------------------------------------------


def _qkv(dtype: torch.dtype, heads: int = 4, kv_heads: int = 4, seq: int = 64, qk_dim: int = 32,
         v_dim: int = 32) -> tuple[torch.Tensor, ...]:
    def make(h: int, d: int) -> torch.Tensor:
        return torch.randn(2, h, seq, d, dtype=dtype, requires_grad=True)

    return make(heads, qk_dim), make(kv_heads, qk_dim), make(kv_heads, v_dim)


@pytest.mark.parametrize(
    "dtype, kwargs, mask, gqa, expected",
    [
        (torch.bfloat16, {}, False, False, SDPBackend.FLASH),
        (torch.float16, {"kv_heads": 1}, False, True, SDPBackend.FLASH),  # MQA/GQA: flash takes fewer kv heads
        (torch.float32, {}, False, False, SDPBackend.EFFICIENT),  # flash is half precision only
        (torch.float32, {"kv_heads": 2}, False, True, SDPBackend.MATH),  # efficient takes equal head counts only
        (torch.bfloat16, {}, True, False, SDPBackend.EFFICIENT),  # flash takes no explicit mask
        (torch.bfloat16, {"qk_dim": 192, "v_dim": 128}, False, False, SDPBackend.EFFICIENT),  # MLA head dims
        (torch.bfloat16, {"qk_dim": 512, "v_dim": 512}, False, False, SDPBackend.EFFICIENT),  # flash: <= 256
        (torch.float32, {"qk_dim": 30, "v_dim": 30}, False, False, SDPBackend.MATH),  # unaligned head dim
        (torch.float64, {}, False, False, SDPBackend.MATH),
        (torch.bfloat16, {"kv_heads": 2}, False, False, SDPBackend.MATH),  # head counts differ, no enable_gqa
    ],
)
def test_the_cuda_backend_follows_select_sdp_backend(dtype: torch.dtype, kwargs: dict[str, int], mask: bool,
                                                     gqa: bool, expected: SDPBackend) -> None:
    q, k, v = _qkv(dtype, **kwargs)
    attn_mask = torch.ones(2, 1, q.size(-2), k.size(-2), dtype=torch.bool) if mask else None
    assert cuda_sdp_backend(q, k, v, attn_mask, is_causal=not mask, enable_gqa=gqa) is expected


@_fake()
def test_attention_dropout_stays_on_the_fused_kernel_as_on_cuda() -> None:
    q, k, v = _qkv(torch.bfloat16, seq=128)
    probabilities = 2 * 4 * 128 * 128 * 2  # the (b, h, s, s) bf16 matrix the math fallback saves

    def run() -> Any:
        return F.scaled_dot_product_attention(q * 1, k * 1, v * 1, dropout_p=0.1, is_causal=True)

    without = _saved_bytes(run)
    with cuda_dropout_and_attention():
        with_patch = _saved_bytes(run)
        grad_fn = type(run().grad_fn).__name__
    # The CPU runs attention dropout in its math kernel; CUDA's flash kernel drops out in-kernel.
    assert grad_fn == "ScaledDotProductFlashAttentionBackward0"
    assert without - with_patch >= probabilities


@_fake()
def test_differing_head_dimensions_run_memory_efficient_attention_as_on_cuda() -> None:
    q, k, v = _qkv(torch.bfloat16, seq=128, qk_dim=192, v_dim=128)

    def run() -> Any:
        return F.scaled_dot_product_attention(q * 1, k * 1, v * 1, is_causal=True)

    without = _saved_bytes(run)
    with cuda_dropout_and_attention():
        with_patch = _saved_bytes(run)
        out = run()
    # The CPU's flash kernel needs equal head dimensions and falls back to math (s x s saved); CUDA runs the
    # memory-efficient kernel, which saves q, k, v, the output and the log-sum-exp.
    assert type(out.grad_fn).__name__ == "ScaledDotProductEfficientAttentionBackward0"
    assert out.shape == (2, 4, 128, 128)
    assert without - with_patch >= 2 * 4 * 128 * 128 * 2


@_fake()
def test_boolean_masks_become_additive_masks_in_the_query_dtype_as_on_cuda() -> None:
    q, k, v = _qkv(torch.bfloat16, seq=64)
    mask = torch.ones(2, 1, 64, 64, dtype=torch.bool).tril()
    with cuda_dropout_and_attention():
        saved = _saved(lambda: F.scaled_dot_product_attention(q * 1, k * 1, v * 1, attn_mask=mask))
    # convert_boolean_attn_mask, then the efficient kernel saves the bias (expanded, no copy).
    assert (torch.bfloat16, (2, 4, 64, 64)) in saved


def test_dispatcher_registrations_are_undone() -> None:
    names = ("aten::dropout", "aten::scaled_dot_product_attention", "aten::exp", "aten::cat", "aten::sum")
    before = [torch._C._dispatch_dump(n) for n in names]
    clear = torch.clear_autocast_cache
    with cuda_dropout_and_attention(), cuda_autocast_policy():
        assert torch._C._dispatch_dump("aten::exp") != before[2]
    assert [torch._C._dispatch_dump(n) for n in names] == before
    assert torch.clear_autocast_cache is clear


# ---- autocast -------------------------------------------------------------------------------------------------


def test_cuda_fp32_ops_run_in_fp32_under_cpu_autocast() -> None:
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    cases = {
        "exp": lambda: torch.exp(x),
        "Tensor.pow": lambda: x.pow(2),
        "rsqrt": lambda: x.abs().rsqrt(),
        "sum": lambda: x.sum(),
        "cumsum": lambda: x.cumsum(-1),
        "softmax": lambda: x.softmax(-1),
        "log_softmax": lambda: F.log_softmax(x, -1),
        "rms_norm": lambda: F.rms_norm(x, (8,)),
        "layer_norm": lambda: F.layer_norm(x, (8,)),
        "norm.Scalar": lambda: torch.ops.aten.norm.Scalar(x),
        "mse_loss": lambda: F.mse_loss(x, x),
    }
    with _cpu_autocast():
        plain_cpu = {name: fn().dtype for name, fn in cases.items()}
        with cuda_autocast_policy():
            like_cuda = {name: fn().dtype for name, fn in cases.items()}
    assert like_cuda == dict.fromkeys(cases, torch.float32)
    assert plain_cpu["exp"] == plain_cpu["Tensor.pow"] == plain_cpu["sum"] == torch.bfloat16  # what CPU autocast does


def test_explicit_dtypes_and_integer_inputs_are_left_alone() -> None:
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    ids = torch.arange(8)
    with _cpu_autocast(), cuda_autocast_policy():
        assert x.softmax(-1, dtype=torch.bfloat16).dtype == torch.bfloat16  # fp32_set_opt_dtype keeps a given dtype
        assert ids.cumsum(-1).dtype == torch.int64  # not eligible
        assert torch.exp(x.double()).dtype == torch.float64  # doubles are never cast


def test_cuda_lower_precision_and_promote_ops() -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    half, full = torch.randn(8, dtype=torch.bfloat16), torch.randn(8)
    with _cpu_autocast(), cuda_autocast_policy():
        # einsum's inputs are cast (CUDA's list; the CPU casts the bmm it decomposes into: see the cache test)
        assert torch.einsum("ij,jk->ik", a, b).dtype == torch.bfloat16
        assert torch.dot(half, full).dtype == torch.float32  # promote: widest floating input
        assert torch.dot(half, half).dtype == torch.bfloat16


def test_cpu_only_casts_are_undone() -> None:
    m = torch.randn(8, 8, dtype=torch.bfloat16)
    with _cpu_autocast():
        assert torch.trace(m).dtype == torch.float32  # the CPU fp32 list
        with cuda_autocast_policy():
            assert torch.trace(m).dtype == torch.bfloat16  # CUDA has no autocast kernel for trace


def test_cuda_autocast_saves_the_fp32_result_where_cpu_autocast_saves_bf16() -> None:
    w = torch.randn(32, 16, requires_grad=True)
    x = torch.randn(4, 16)

    def run() -> Any:
        return torch.exp(F.linear(x, w))  # exp saves its (4, 32) result

    with _cpu_autocast():
        without = _saved(run)
        with cuda_autocast_policy():
            with_patch = _saved(run)
    assert (torch.bfloat16, (4, 32)) in without and (torch.float32, (4, 32)) not in without
    # CUDA: exp casts the bf16 linear output to fp32 (cast saved nothing) and saves an fp32 result.
    assert (torch.float32, (4, 32)) in with_patch and (torch.bfloat16, (4, 32)) not in with_patch


def test_lower_precision_casts_of_weights_are_cached_for_the_autocast_region() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountCasts(TorchDispatchMode):
        casts = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten._to_copy.default:
                CountCasts.casts += 1
            return func(*args, **(kwargs or {}))

    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(4, 8)
    with cuda_autocast_policy():
        for _ in range(2):  # two autocast regions: the cache is cleared between them
            with torch.autocast("cpu", dtype=torch.bfloat16), CountCasts():
                torch.einsum("ij,jk->ik", x, w)
                torch.einsum("ij,jk->ik", x, w)
    # Per region: w (a leaf weight) is cast once, x (no grad) at each use: 3 casts, 6 over both regions.
    assert CountCasts.casts == 6


def test_binary_cross_entropy_is_refused_as_cuda_autocast_refuses_it() -> None:
    p = torch.rand(4)
    with _cpu_autocast(), cuda_autocast_policy(), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)


# ---- the op lists against the installed build ---------------------------------------------------------------


def _registered(key: str) -> set[str]:
    return {n.removeprefix("aten::") for n in torch._C._dispatch_get_all_op_names()
            if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}


@pytest.mark.parametrize("device, key", [("cuda", "AutocastCUDA"), ("cpu", "AutocastCPU")])
def test_the_op_lists_are_the_ones_the_build_registers(device: str, key: str) -> None:
    assert set(autocast_op_lists()[device]) == _registered(key)


def test_the_cuda_lists_are_the_macros_of_the_installed_header() -> None:
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    if not os.path.exists(header):
        pytest.skip(f"{header} is not installed with this torch build")
    text = open(header, encoding="utf-8").read()

    def macro(name: str) -> set[str]:
        match = re.search(rf"#define {name}\(_\)(.*?)(?=\n#|\Z)", text, re.S)
        assert match, name
        pairs = re.findall(r"_\(([A-Za-z0-9_]+)(?:,\s*([A-Za-z0-9_]+))?\)", match.group(1))
        return {f"{op}.{overload}" if overload else op for op, overload in pairs}

    cuda = autocast_op_lists()["cuda"]
    by_policy = {p: {op for op, q in cuda.items() if q == p} for p in set(cuda.values())}
    assert by_policy["fp32"] == macro("AT_FORALL_FP32")
    assert by_policy["fp32_set_opt_dtype"] == macro("AT_FORALL_FP32_SET_OPT_DTYPE")
    assert by_policy["promote"] == macro("AT_FORALL_PROMOTE")
    # autocast_mode.cpp adds the two cuDNN convolutions to the lower-precision list for CUDA.
    extra = {"cudnn_convolution", "cudnn_convolution_transpose"}
    assert by_policy["lower_precision_fp"] == macro("AT_FORALL_LOWER_PRECISION_FP") | extra
    assert by_policy["fp32_append_dtype"] == set(re.findall(r'"(norm\.[A-Za-z_]+)"', text))
