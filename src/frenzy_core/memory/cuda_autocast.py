"""CPU autocast that casts what CUDA autocast casts, for the probe's CPU run standing in for a GPU.

The probe runs ``torch.autocast("cpu", ...)``, whose op lists differ from CUDA's (CUDA runs exp, log, rsqrt, pow,
layer_norm, rms_norm, softmax, sum, cumsum, ... in fp32 and einsum in the lower precision; the CPU casts cat, stack,
linear-algebra and pooling ops CUDA leaves alone). :func:`cuda_autocast_policy` re-registers the ``AutocastCPU``
kernel of every op whose policy differs, from the lists in ``data/autocast_ops.yaml`` (the build's own lists,
checked against it by the tests): a Python kernel implementing CUDA's policy (the ``CastPolicy`` wrappers of
aten/src/ATen/autocast_mode.h), or a fallthrough where CUDA has no autocast kernel. Ops on which both agree keep
the C++ kernel and its cast cache. Registrations are undone on exit. Needs torch.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from frenzy_core._base import load_yaml_mapping
from frenzy_core._data import data_text

__all__ = ["autocast_op_lists", "cuda_autocast_policy"]

_POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")

# fp32_append_dtype: the overload each wrapped one redispatches to (AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE).
_APPEND_DTYPE_TARGET = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}

# at::autocast::binary_cross_entropy_banned (aten/src/ATen/autocast_mode.cpp), the error CUDA autocast raises.
_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast. Many models use a "
    "sigmoid layer right before the binary cross entropy layer. In this case, combine the two layers using "
    "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss. "
    "binary_cross_entropy_with_logits and BCEWithLogits are safe to autocast."
)


@functools.lru_cache(maxsize=1)
def autocast_op_lists() -> dict[str, dict[str, str]]:
    """{"cuda": {op: policy}, "cpu": {op: policy}} from ``data/autocast_ops.yaml``."""
    data = load_yaml_mapping(data_text("autocast_ops.yaml"), "data file autocast_ops.yaml")
    lists = {device: {op: policy for policy, ops in data[device].items() for op in ops} for device in ("cuda", "cpu")}
    unknown = {p for ops in lists.values() for p in ops.values()} - set(_POLICIES)
    assert not unknown, f"autocast_ops.yaml names unknown policies {sorted(unknown)}"
    return lists


def _op(name: str) -> Any:
    import torch

    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


class _CastCache:
    """CUDA autocast's cast cache (``cached_cast`` in autocast_mode.cpp) for the casts the Python kernels make.

    Only casts of fp32 leaf tensors that require grad to the lower precision are cached; the cache is cleared
    with the C++ one (``torch.clear_autocast_cache``, called when the outermost autocast region exits).
    """

    def __init__(self) -> None:
        self._casts: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def clear(self) -> None:
        self._casts.clear()

    def cast(self, torch: Any, t: Any, dtype: Any) -> Any:
        if not _eligible(torch, t) or t.dtype == dtype:
            return t
        cacheable = (
            dtype == torch.get_autocast_dtype("cpu")
            and t.dtype == torch.float32
            and t.requires_grad
            and t.is_leaf
            and not t._is_view()
            and torch.is_autocast_cache_enabled()
        )
        if not cacheable:
            return t.to(dtype)
        hit = self._casts.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]
        casted = t.to(dtype)
        self._casts[id(t)] = (weakref.ref(t), casted)
        return casted


def _eligible(torch: Any, t: Any) -> bool:
    """``is_eligible`` of autocast_mode.h: a floating, non-double tensor on the autocast device (here the CPU)."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 and t.device.type == "cpu"


def _map_tensors(fn: Callable[[Any], Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
    """``fn`` applied to every tensor argument, inside lists and tuples too (TensorList, Tensor?[])."""

    def one(a: Any) -> Any:
        if isinstance(a, (list, tuple)):
            return type(a)(one(x) for x in a)
        return fn(a)

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _flat_tensors(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for a in (*args, *kwargs.values()):
        items = a if isinstance(a, (list, tuple)) else (a,)
        out += [t for t in items if isinstance(t, torch.Tensor)]
    return out


def _with_dtype(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], dtype: Any) -> tuple[tuple, dict]:
    """The arguments with ``dtype`` set where the caller gave none (``set_opt_dtype``)."""
    names = [a.name for a in op._schema.arguments]
    index = names.index("dtype")
    if index < len(args):
        if args[index] is None:
            args = (*args[:index], dtype, *args[index + 1 :])
    elif kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": dtype}
    return args, kwargs


def _positional(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Every argument of ``op`` in schema order, defaults filled in (the redispatch passes them all)."""
    out = list(args)
    for argument in op._schema.arguments[len(args):]:
        out.append(kwargs[argument.name] if argument.name in kwargs else argument.default_value)
    return out


def _kernel(name: str, policy: str, cache: _CastCache) -> Callable[..., Any]:
    """The ``AutocastCPU`` kernel of ``name`` under CUDA's ``policy`` (the WrapFunction_ specialisations)."""
    import torch

    op = _op(name)
    no_autocast = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(no_autocast):
            if policy == "banned":
                raise RuntimeError(_BANNED_MESSAGE)
            if policy in ("fp32_set_opt_dtype", "fp32_append_dtype"):
                eligible = bool(args) and _eligible(torch, args[0])
                if policy == "fp32_append_dtype":
                    dtype = torch.float32 if eligible else args[0].dtype
                    return _op(_APPEND_DTYPE_TARGET[name])(*_positional(op, args, kwargs), dtype=dtype)
                if eligible:
                    args, kwargs = _with_dtype(op, args, kwargs, torch.float32)
                return op(*args, **kwargs)
            if policy == "fp32":
                target = torch.float32
            elif policy == "lower_precision_fp":
                target = torch.get_autocast_dtype("cpu")
            else:  # promote: float32 if any eligible input is, else the lower precision (doubles ignored)
                dtypes = {t.dtype for t in _flat_tensors(torch, args, kwargs) if _eligible(torch, t)}
                target = torch.float32 if torch.float32 in dtypes else torch.get_autocast_dtype("cpu")
            args, kwargs = _map_tensors(lambda t: cache.cast(torch, t, target), args, kwargs)
            return op(*args, **kwargs)

    return kernel


@contextlib.contextmanager
def cuda_autocast_policy() -> Iterator[None]:
    """While open, CPU autocast casts every aten op as CUDA autocast would (see the module docstring)."""
    import torch

    lists = autocast_op_lists()
    cuda, cpu = lists["cuda"], lists["cpu"]
    cache = _CastCache()
    library = torch.library.Library("aten", "IMPL")
    clear_original = torch.clear_autocast_cache

    def clear_both() -> None:
        cache.clear()
        clear_original()

    try:
        with warnings.catch_warnings():
            # The dispatcher warns once that a kernel is overridden: overriding is the point here.
            warnings.filterwarnings("ignore", message=".*[Oo]verrid", category=UserWarning)
            for name in sorted(cuda.keys() | cpu.keys()):
                policy = cuda.get(name)
                if policy == cpu.get(name):
                    continue  # same policy: keep the C++ kernel (and its cache)
                kernel = torch.library.fallthrough_kernel if policy is None else _kernel(name, policy, cache)
                library.impl(name, kernel, "AutocastCPU")
        torch.clear_autocast_cache = clear_both  # type: ignore[assignment]
        yield
    finally:
        torch.clear_autocast_cache = clear_original  # type: ignore[assignment]
        library._destroy()
        cache.clear()
