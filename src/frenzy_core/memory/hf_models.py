"""A ``ModelConfig`` + ``TrainingConfig`` as a Hugging Face model, batch and torch optimizer for the probe.

How each setting maps (one process, data-parallel degree 1; ZeRO, tensor, pipeline, context and
expert parallelism are analytic only and are not probed):

- attention: eager -> ``attn_implementation="eager"``; sdpa -> ``"sdpa"``; flash -> ``"sdpa"`` (on the
  CPU, SDPA runs its flash kernel, which like FlashAttention saves the output and log-sum-exp only).
- recompute: full -> ``activation_checkpointing_enable`` (non-re-entrant), every layer checkpointed
  (uniform chunks of 1 layer, or block over all layers); selective with sdpa/flash runs as none, since
  the attention core then saves no s x s tensor and Megatron's selective recompute removes nothing
  more; selective with eager attention has no Transformers equivalent and is refused.
- precision: fp32 as is; bf16/fp16 -> built in that dtype (``from_config(dtype=...)``, as ``model.to``);
  amp-bf16/amp-fp16 -> fp32 model under ``torch.autocast("cpu", dtype)``, with softmax, log_softmax,
  layer_norm and pow moved to fp32 as CUDA autocast does (see the probe); the grad scaler of amp-fp16 is
  not modelled;
  Megatron-style *-mixed recipes are refused.
- optimizer: torch.optim AdamW/Adam/SGD, SGD momentum 0.9; for-loop / foreach / fused implementations;
  8-bit Adam (bitsandbytes) is refused.
- framework: torch only (Megatron's Transformer Engine kernels save other tensors).
- model: the class ``to_hf_config`` names (``...ForCausalLM``, ``BertForMaskedLM`` or a bare ``...Model``,
  whose loss is then the sum of its last hidden state); dropout active (train mode); ``use_cache=False``
  as in training; the batch is ``micro_batch_size x seq_len`` token ids used as labels (no padding, no
  attention mask, one sequence per row).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import (
    Attention,
    Framework,
    Optimizer,
    OptimizerImpl,
    Precision,
    Recompute,
    RecomputeMethod,
    TrainingConfig,
)
from frenzy_core.errors import ConfigError, OptionalDependencyError

if TYPE_CHECKING:
    import torch

__all__ = ["HFTrainingSetup", "hf_training_setup"]

_ADAM_BETAS = (0.9, 0.95)  # common LLM pre-training betas; they do not change memory
_SGD_MOMENTUM = 0.9  # usual momentum; any non-zero value creates the one momentum buffer


@dataclass(frozen=True)
class HFTrainingSetup:
    """Factories the probe calls under fake-tensor mode, and notes on what differs from the request."""

    module_factory: Callable[[], torch.nn.Module]
    batch_factory: Callable[[], dict[str, Any]]
    optimizer_factory: Callable[[Any], torch.optim.Optimizer]
    autocast_dtype: torch.dtype | None
    loss_fn: Callable[[Any], torch.Tensor] | None = None
    backbone: str | None = None
    """Submodule before the language-model head (None: no head)."""
    runtime: Callable[[], AbstractContextManager[None]] = field(default=contextlib.nullcontext)
    """Context the probe runs in (patches the fake-tensor run needs)."""
    notes: tuple[str, ...] = field(default=())


def _import_hf() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        package = "torch" if (exc.name or "").split(".")[0] == "torch" else "transformers"
        raise OptionalDependencyError(package, "hf", "probing a ModelConfig") from None
    return torch, transformers


def _attn_implementation(training: TrainingConfig, notes: list[str]) -> str:
    if training.attention is Attention.FLASH:
        notes.append("attention flash probed as sdpa (CPU flash kernel: saves output and log-sum-exp)")
        return "sdpa"
    return training.attention.value


def _check_recompute(model: ModelConfig, training: TrainingConfig, notes: list[str]) -> bool:
    """Whether to enable gradient checkpointing on every layer."""
    if training.recompute is Recompute.NONE:
        return False
    if training.recompute is Recompute.SELECTIVE:
        if training.attention is Attention.EAGER:
            raise ConfigError(
                "recompute='selective' with attention='eager' has no Hugging Face equivalent to probe",
                field="recompute",
                value=training.recompute.value,
                hint="probe attention='sdpa' (selective then equals none) or recompute='full'",
            )
        notes.append("selective recompute probed as none: sdpa saves no s x s tensor to drop")
        return False
    n = training.recompute_num_layers
    every_layer = (training.recompute_method is RecomputeMethod.UNIFORM and n in (None, 1)) or (
        training.recompute_method is RecomputeMethod.BLOCK and (n is None or n >= model.num_layers)
    )
    if not every_layer:
        raise ConfigError(
            f"recompute_method={training.recompute_method.value!r} with recompute_num_layers={n} cannot be "
            "probed: Transformers checkpoints every layer separately",
            field="recompute_num_layers",
            value=n,
            hint="probe recompute_num_layers=None (uniform, one layer per chunk)",
        )
    return True


def _dtypes(training: TrainingConfig, torch: Any) -> tuple[Any, Any]:
    """(dtype of the weights, autocast dtype or None)."""
    p = training.precision
    if p is Precision.FP32:
        return torch.float32, None
    if p is Precision.BF16:
        return torch.bfloat16, None
    if p is Precision.FP16:
        return torch.float16, None
    if p is Precision.AMP_BF16:
        return torch.float32, torch.bfloat16
    if p is Precision.AMP_FP16:
        return torch.float32, torch.float16
    raise ConfigError(
        f"precision={p.value!r} (Megatron/DeepSpeed master weights) cannot be probed with plain torch",
        field="precision",
        value=p.value,
        hint="probe one of fp32, bf16, fp16, amp-bf16, amp-fp16",
    )


def _optimizer_factory(training: TrainingConfig, torch: Any) -> Callable[[Any], Any]:
    impl = training.optimizer_impl
    flags = {"foreach": impl is OptimizerImpl.FOREACH, "fused": impl is OptimizerImpl.FUSED}
    opt = training.optimizer
    if opt is Optimizer.ADAMW:
        return lambda params: torch.optim.AdamW(params, lr=1e-4, betas=_ADAM_BETAS, **flags)
    if opt is Optimizer.ADAM:
        return lambda params: torch.optim.Adam(params, lr=1e-4, betas=_ADAM_BETAS, **flags)
    if opt is Optimizer.SGD:
        return lambda params: torch.optim.SGD(params, lr=1e-2, **flags)
    if opt is Optimizer.SGD_MOMENTUM:
        return lambda params: torch.optim.SGD(params, lr=1e-2, momentum=_SGD_MOMENTUM, **flags)
    raise ConfigError(
        f"optimizer={opt.value!r} needs bitsandbytes on a GPU and cannot be probed",
        field="optimizer",
        value=opt.value,
        hint="probe adamw, adam, sgd or sgd-momentum",
    )


def hf_training_setup(model: ModelConfig, training: TrainingConfig) -> HFTrainingSetup:
    """The Transformers model, batch and optimizer that reproduce ``training`` of ``model`` on one rank."""
    torch, transformers = _import_hf()
    from frenzy_core.config.hf import to_hf_config

    if training.framework is not Framework.TORCH:
        raise ConfigError(
            f"framework={training.framework.value!r} cannot be probed: the probe runs Hugging Face modules "
            "in torch",
            field="framework",
            value=training.framework.value,
            hint="probe framework='torch'",
        )
    notes: list[str] = []
    attn = _attn_implementation(training, notes)
    checkpointing = _check_recompute(model, training, notes)
    weight_dtype, autocast_dtype = _dtypes(training, torch)
    hf_kwargs = dict(to_hf_config(model))
    hf_kwargs["use_cache"] = False
    hf_config = transformers.AutoConfig.for_model(**hf_kwargs)
    model_class = getattr(transformers, hf_kwargs["architectures"][0])
    dtype_key = (
        "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    )  # renamed in 5.0

    def module_factory() -> Any:
        module = model_class._from_config(hf_config, attn_implementation=attn, **{dtype_key: weight_dtype})
        if checkpointing:
            _enable_checkpointing(module)
        return module

    shape = (training.micro_batch_size, training.seq_len)

    def batch_factory() -> dict[str, Any]:
        ids = torch.randint(0, model.vocab_size, shape)
        return {"input_ids": ids, "labels": ids} if model.lm_head else {"input_ids": ids}

    grouped_mm_fallback = model.moe is not None and weight_dtype is not torch.bfloat16
    if grouped_mm_fallback:
        notes.append(
            "MoE experts run Transformers' grouped-mm fallback (same saved tensors) for non-bf16 weights"
        )

    @contextlib.contextmanager
    def runtime() -> Iterator[None]:
        with _unpacked_batches(), _grouped_mm_fallback() if grouped_mm_fallback else contextlib.nullcontext():
            yield

    loss_fn = _hidden_state_sum if not model.lm_head else None
    if loss_fn is not None:
        notes.append("no language-model head: the loss is the sum of the last hidden state (saves nothing)")
    return HFTrainingSetup(
        module_factory=module_factory,
        batch_factory=batch_factory,
        optimizer_factory=_optimizer_factory(training, torch),
        autocast_dtype=autocast_dtype,
        loss_fn=loss_fn,
        backbone=model_class.base_model_prefix if model.lm_head else None,
        runtime=runtime,
        notes=tuple(notes),
    )


@contextlib.contextmanager
def _patched(module_name: str, attribute: str, replacement: Any) -> Iterator[None]:
    """Swap ``module_name.attribute`` for ``replacement`` in the block (nothing if either is missing)."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        module = None
    original = getattr(module, attribute, None)
    if original is None:
        yield
        return
    setattr(module, attribute, replacement)
    try:
        yield
    finally:
        setattr(module, attribute, original)


def _unpacked_batches() -> AbstractContextManager[None]:
    """Tell Transformers' mask builder that the batch holds one sequence per row, as the probe's batches do.

    ``masking_utils.find_packed_sequence_indices`` cannot read fake position ids, so it assumes packed
    sequences and makes every model build a (b, 1, s, s) mask that SDPA then saves (and, for GQA, expanded
    k/v copies); on a GPU the check passes and SDPA runs with ``is_causal=True`` and no mask. (Where the
    check does not exist, nothing is patched.)
    """
    return _patched("transformers.masking_utils", "find_packed_sequence_indices", lambda position_ids: None)


def _grouped_mm_fallback() -> AbstractContextManager[None]:
    """Route MoE experts to Transformers' grouped-mm fallback op.

    torch's fake (meta) kernel of ``grouped_mm`` accepts bf16 only, so fp32 experts cannot run under
    fake tensors; the fallback custom op (transformers/integrations/moe.py) has a fake kernel, the same
    output and the same saved tensors (input and weight). (Older Transformers loop over experts instead.)
    """
    return _patched("transformers.integrations.moe", "_can_use_grouped_mm", lambda *args, **kwargs: False)


def _enable_checkpointing(module: Any) -> None:
    """Checkpoint every layer without re-entrant autograd (Transformers 5 renamed the method)."""
    kwargs = {"use_reentrant": False}
    if hasattr(module, "activation_checkpointing_enable"):
        module.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _hidden_state_sum(output: Any) -> Any:
    """Loss of a bare backbone: a sum, whose backward needs no saved tensor."""
    return output.last_hidden_state.sum()
