"""The Hugging Face model, batch and torch optimizer the probe runs for a config and a ``TrainingConfig``.

The model is the class a Hugging Face config's ``architectures`` names (its family's causal-LM class when none is
named), built with ``_from_config`` from ``transformers.AutoConfig.for_model``: no weights, no network, no remote
code. A :class:`ModelConfig` is first written as the config ``to_hf_config`` makes. How each setting maps (one
process, data-parallel degree 1; ZeRO, tensor, pipeline, context and expert parallelism are analytic only):

- attention: eager -> ``attn_implementation="eager"``; sdpa and flash -> ``"sdpa"``, which the probe runs as the
  CUDA kernel CUDA would pick (FlashAttention-2 for half precision without a mask; see ``cuda_kernels``).
- recompute: full -> ``activation_checkpointing_enable`` (non-re-entrant), every layer checkpointed
  (uniform chunks of 1 layer, or block over all layers); selective with sdpa/flash runs as none, since
  the attention core then saves no s x s tensor and Megatron's selective recompute removes nothing
  more; selective with eager attention has no Transformers equivalent and is refused.
- precision: fp32 as is; bf16/fp16 -> built in that dtype (``from_config(dtype=...)``, as ``model.to``);
  amp-bf16/amp-fp16 -> fp32 model under autocast, casting as CUDA autocast does (see ``cuda_autocast``); the grad
  scaler of amp-fp16 is not modelled; Megatron-style *-mixed recipes are refused.
- optimizer: torch.optim AdamW/Adam/SGD, SGD momentum 0.9; for-loop / foreach / fused implementations;
  8-bit Adam (bitsandbytes) is refused.
- framework: torch only (Megatron's Transformer Engine kernels save other tensors).
- model: a head class (``...ForCausalLM``, ``...LMHeadModel``, ``...ForMaskedLM``) trains on its own loss; a bare
  ``...Model`` on the sum of its last hidden state (whose backward saves nothing). Dropout as the config sets it
  (train mode); ``use_cache`` as the config sets it (the family default when absent; a ModelConfig: its
  ``returns_kv_cache``);
  the batch is ``micro_batch_size x seq_len`` token ids used as labels (no padding, no attention mask, one
  sequence per row).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from frenzy_core import _limits as limits
from frenzy_core._files import is_dir, is_file, load_json, read_text
from frenzy_core._limits import beyond_message
from frenzy_core.config.layout import num_microbatches
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
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
from frenzy_core.errors import ConfigError, OptionalDependencyError, closest_names, short_repr

if TYPE_CHECKING:
    import torch

__all__ = ["HFTrainingSetup", "hf_module_factory", "hf_training_setup"]

_ADAM_BETAS = (0.9, 0.95)  # common LLM pre-training betas; they do not change memory
_SGD_MOMENTUM = 0.9  # usual momentum; any non-zero value creates the one momentum buffer
# Class-name endings of the heads the probe trains on their own loss (labels = the input ids).
_HEAD_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration")


@dataclass(frozen=True)
class HFTrainingSetup:
    """Factories the probe calls under fake-tensor mode, and notes on what differs from the request."""

    module_factory: Callable[[], torch.nn.Module]
    batch_factory: Callable[[], dict[str, Any]]
    optimizer_factory: Callable[[Any], torch.optim.Optimizer]
    autocast_dtype: torch.dtype | None
    label: str
    """The case, for error messages: where the config came from, its class and the training settings."""
    loss_fn: Callable[[Any], torch.Tensor] | None = None
    backbone: str | None = None
    """Submodule before the language-model head (None: no head)."""
    runtime: Callable[[], AbstractContextManager[None]] = field(default=contextlib.nullcontext)
    """Context the probe runs in (patches the fake-tensor run needs)."""
    notes: list[str] = field(default_factory=list)
    """Filled while setting up and while running (read it after the run)."""


def _import_hf() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        package = "torch" if (exc.name or "").split(".")[0] == "torch" else "transformers"
        raise OptionalDependencyError(package, "hf", "probing a Hugging Face model") from None
    return torch, transformers


def _read_config(source: Mapping[str, Any] | str | PathLike[str]) -> tuple[dict[str, Any], str]:
    """The config dict of a dict, a ``config.json`` path or its folder, and a name for messages."""
    if isinstance(source, Mapping):
        return dict(source), str(source.get("_name_or_path") or "config dict")
    if not isinstance(source, (str, PathLike)):
        raise ConfigError(f"a Hugging Face config must be a dict or a path, got {type(source).__name__}",
                          field="config", value=source, hint="pass a config.json file, a folder holding one, or a dict")
    path = Path(source)
    if is_dir(path):
        path = path / "config.json"
    if not is_file(path):
        raise ConfigError(f"no Hugging Face config at {path}", field="config", value=str(source),
                          hint="pass a config.json file, a folder holding one, or the parsed dict")
    data = load_json(read_text(path, "Hugging Face config"), str(path))  # size, UTF-8, NaN, depth: ConfigError
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}", field="config", value=str(path))
    return data, str(path)


def _hf_config(data: dict[str, Any], origin: str, transformers: Any) -> Any:
    """The Transformers config object of ``data``; an unknown family names the closest ones."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from frenzy_core.config.hf import SUPPORTED_HF_FAMILIES

    family = data.get("model_type")
    if not isinstance(family, str) or family not in CONFIG_MAPPING_NAMES:
        remote = " (its auto_map names remote code, which the probe does not run)" if "auto_map" in data else ""
        closest = closest_names(str(family), CONFIG_MAPPING_NAMES) if isinstance(family, str) else []
        raise ConfigError(
            f"{origin}: model_type {family!r} is not a Transformers {transformers.__version__} family{remote}",
            field="model_type", value=family,
            hint=f"closest: {', '.join(closest) or 'none'}; families the estimator reads: "
            f"{', '.join(SUPPORTED_HF_FAMILIES)}",
        )
    kwargs = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version")}
    try:
        return transformers.AutoConfig.for_model(family, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a config's own validators raise their own types (StrictDataclass...)
        raise ConfigError(f"{origin}: Transformers rejects the {family} config: "
                          f"{short_repr(' '.join(str(exc).split()), 300)}", field="config", value=family) from None


def _model_class(data: dict[str, Any], config: Any, origin: str, transformers: Any) -> tuple[Any, bool]:
    """The class the config's ``architectures`` names (else the family's LM class), and whether it has a head."""
    from transformers.models.auto import modeling_auto

    family = data["model_type"]
    archs = data.get("architectures")
    if archs:
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise ConfigError(f"{origin}: architectures={archs!r} is not a list of class names", field="architectures",
                              value=archs, hint='e.g. "architectures": ["LlamaForCausalLM"]')
        name = archs[0]
    else:
        maps = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_MAPPING_NAMES")
        name = next((getattr(modeling_auto, m)[family] for m in maps if family in getattr(modeling_auto, m)), "")
    cls = getattr(transformers, name, None) if name else None
    if cls is None or not isinstance(config, cls.config_class):
        known = _family_classes(family, modeling_auto)
        raise ConfigError(f"{origin}: architectures names {name!r}, which is no {family} model class in Transformers "
                          f"{transformers.__version__}", field="architectures", value=name,
                          hint=f"closest: {', '.join(closest_names(name, known) or known)}")
    head = name.endswith(_HEAD_SUFFIXES)
    if not head and not name.endswith("Model"):
        raise ConfigError(f"{origin}: {name} has a task head the probe does not train", field="architectures",
                          value=name, hint="use the family's causal-LM, masked-LM or bare model class")
    return cls, head


def _family_classes(family: str, modeling_auto: Any) -> list[str]:
    """The model classes Transformers' auto mappings list for ``family`` (no class is imported)."""
    names: set[str] = set()
    for attribute in dir(modeling_auto):
        mapping = getattr(modeling_auto, attribute)
        if attribute.endswith("MAPPING_NAMES") and isinstance(mapping, Mapping) and family in mapping:
            value = mapping[family]
            names.update([value] if isinstance(value, str) else value)
    return sorted(names)


def _attn_implementation(training: TrainingConfig, notes: list[str]) -> str:
    if training.attention in (Attention.FLASH, Attention.TRITON):
        notes.append(f"attention {training.attention.value} probed as sdpa (on CUDA: FlashAttention-2, output and "
                     "log-sum-exp saved)")
        return "sdpa"
    return training.attention.value


def _check_recompute(num_layers: int, training: TrainingConfig, notes: list[str]) -> bool:
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
        training.recompute_method is RecomputeMethod.BLOCK and (n is None or n >= num_layers)
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


def _builder(cls: Any, config: Any, origin: str, transformers: Any, **kwargs: Any) -> Callable[[], Any]:
    """A factory of ``cls`` from ``config``; Transformers' refusals become ConfigErrors naming the config."""
    if "dtype" in kwargs and int(transformers.__version__.split(".")[0]) < 5:
        kwargs["torch_dtype"] = kwargs.pop("dtype")  # renamed in Transformers 5.0

    def build() -> Any:
        try:
            return cls._from_config(config, **kwargs)
        except Exception as exc:  # noqa: BLE001 - constructors fail on a bad config with any type: ZeroDivisionError
            # on 0 KV heads, RuntimeError on a size torch refuses (negative, a storage beyond int64), ValueError...
            raise ConfigError(f"{origin}: Transformers could not build {cls.__name__}: "
                              f"{short_repr(' '.join(str(exc).split()), 300)}", field="config",
                              value=cls.__name__) from None

    return build


def hf_module_factory(source: Mapping[str, Any] | str | PathLike[str], *, microbatches: int = 1,
                      steps: int = 2) -> tuple[Callable[[], Any], str | None]:
    """A factory of the class a Hugging Face config names (fp32, the config's attention), and its backbone;
    ConfigError when ``microbatches`` x ``steps`` passes over its layers are more than a probe runs."""
    _, transformers = _import_hf()
    data, origin = _read_config(source)
    config = _hf_config(data, origin, transformers)
    _check_work(config.get_text_config(), origin, microbatches, steps)
    cls, head = _model_class(data, config, origin, transformers)
    return _builder(cls, config, origin, transformers), cls.base_model_prefix if head else None


_SIZE_LIMITS = {
    "hidden_size": limits.HIDDEN, "intermediate_size": limits.FFN, "moe_intermediate_size": limits.FFN,
    "vocab_size": limits.VOCAB, "num_attention_heads": limits.HEADS, "num_key_value_heads": limits.HEADS,
    "head_dim": limits.HEAD_DIM, "max_position_embeddings": limits.POSITIONS, "num_experts": limits.EXPERTS,
    "num_local_experts": limits.EXPERTS, "n_routed_experts": limits.EXPERTS,
}
"""The bounds of ModelConfig's fields on the Transformers config keys they are read from (a config the probe
builds directly is held to what the estimator would accept)."""


def _check_work(text: Any, origin: str, microbatches: int, steps: int) -> int:
    """The config's ``num_hidden_layers``; ConfigError, before its class is imported or built, unless it is a
    positive integer, ``(layers + 1) x microbatches x steps`` is within
    :data:`~frenzy_core._limits.PROBE_LAYER_PASSES` (a probe's time grows with its passes, not with widths: fake
    tensors hold no data; the + 1 is the rest of each pass) and every integer size is within its bound
    (``_SIZE_LIMITS``)."""
    for key, limit in _SIZE_LIMITS.items():
        value = getattr(text, key, None)
        if isinstance(value, int) and value > limit.high:
            raise ConfigError(f"{origin}: " + beyond_message(value, limit, key), field=key, value=value)
    layers = getattr(text, "num_hidden_layers", None)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ConfigError(f"{origin}: num_hidden_layers={short_repr(layers)} is not a positive integer",
                          field="num_hidden_layers", value=layers)
    passes = (layers + 1) * microbatches * steps
    if passes > limits.PROBE_LAYER_PASSES.high:
        what = f"({layers:,} layers + 1) x {microbatches:,} micro-batches x {steps:,} steps"
        raise ConfigError(
            f"{origin}: " + beyond_message(passes, limits.PROBE_LAYER_PASSES, what), field="num_hidden_layers",
            value=layers, hint="probe fewer layers (layers of one kind hold the same memory, so 2 to 4 show the "
            "pattern; estimate_memory scales to the whole model), fewer micro-batches (each after the second "
            "repeats it: global_batch_size = 2 x micro_batch_size) or steps=2")
    return layers


def _config_data(model: ModelConfig | Mapping[str, Any] | str | PathLike[str],
                 use_cache: bool | None) -> tuple[dict[str, Any], str]:
    if isinstance(model, ModelConfig):
        from frenzy_core.config.hf import to_hf_config

        data, origin = dict(to_hf_config(model)), model.name or "ModelConfig"  # use_cache: returns_kv_cache
    else:
        data, origin = _read_config(model)
    if use_cache is not None:
        data["use_cache"] = use_cache
    return data, origin


def hf_training_setup(model: ModelConfig | Mapping[str, Any] | str | PathLike[str], training: TrainingConfig, *,
                      use_cache: bool | None = None, steps: int = 2) -> HFTrainingSetup:
    """The Transformers model, batch and optimizer that reproduce ``training`` of ``model`` on one rank;
    ConfigError when ``steps`` optimizer steps of it are more layer passes than a probe runs."""
    torch, transformers = _import_hf()
    if training.framework is not Framework.TORCH:
        raise ConfigError(
            f"framework={training.framework.value!r} cannot be probed: the probe runs Hugging Face modules in torch",
            field="framework", value=training.framework.value, hint="probe framework='torch'",
        )
    data, origin = _config_data(model, use_cache)
    config = _hf_config(data, origin, transformers)
    text = config.get_text_config()
    num_layers = _check_work(text, origin, num_microbatches(training, ParallelConfig()), steps)
    cls, head = _model_class(data, config, origin, transformers)
    notes: list[str] = []
    attn = _attn_implementation(training, notes)
    checkpointing = _check_recompute(num_layers, training, notes)
    weight_dtype, autocast_dtype = _dtypes(training, torch)
    build = _builder(cls, config, origin, transformers, attn_implementation=attn, dtype=weight_dtype)

    def module_factory() -> Any:
        module = build()
        if checkpointing:
            _enable_checkpointing(module)
        return module

    shape, vocab = (training.micro_batch_size, training.seq_len), int(text.vocab_size)

    def batch_factory() -> dict[str, Any]:
        ids = torch.randint(0, vocab, shape)
        return {"input_ids": ids, "labels": ids} if head else {"input_ids": ids}

    @contextlib.contextmanager
    def runtime() -> Iterator[None]:
        fallback = _grouped_mm_fallback(notes) if weight_dtype is not torch.bfloat16 else contextlib.nullcontext()
        with _unpacked_batches(), fallback:
            yield

    if not head:
        notes.append("no language-model head: the loss is the sum of the last hidden state (saves nothing)")
    t = training
    label = (f"{origin} ({cls.__name__}; {t.precision.value}, {attn}, {t.micro_batch_size} x {t.seq_len} tokens, "
             f"recompute {t.recompute.value})")
    return HFTrainingSetup(
        module_factory=module_factory, batch_factory=batch_factory, optimizer_factory=_optimizer_factory(t, torch),
        autocast_dtype=autocast_dtype, label=label, loss_fn=None if head else _hidden_state_sum,
        backbone=cls.base_model_prefix if head else None, runtime=runtime, notes=notes,
    )


@contextlib.contextmanager
def _patched(module_name: str, attribute: str, replacement: Any) -> Iterator[Any]:
    """Swap ``module_name.attribute`` for ``replacement`` in the block (nothing if either is missing)."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        module = None
    original = getattr(module, attribute, None)
    if original is None:
        yield None
        return
    setattr(module, attribute, replacement)
    try:
        yield original
    finally:
        setattr(module, attribute, original)


def _unpacked_batches() -> AbstractContextManager[Any]:
    """Tell Transformers' mask builder that the batch holds one sequence per row, as the probe's batches do.

    ``masking_utils.find_packed_sequence_indices`` reads the position ids' values, which fake tensors do not have
    (``is_tracing`` is true for them), so it reports packed sequences and every model builds a (b, 1, s, s) mask
    that attention then saves (and, for GQA, expanded k/v copies); on a GPU the check sees consecutive positions
    and returns None, and SDPA runs with ``is_causal=True`` and no mask. (Where the check does not exist, nothing
    is patched.)
    """
    return _patched("transformers.masking_utils", "find_packed_sequence_indices", lambda position_ids: None)


@contextlib.contextmanager
def _grouped_mm_fallback(notes: list[str]) -> Iterator[None]:
    """Route MoE experts to Transformers' grouped-mm fallback op, noting it when an MoE layer uses it.

    torch's fake (meta) kernel of ``grouped_mm`` accepts bf16 only, so fp32 experts cannot run under
    fake tensors; the fallback custom op (transformers/integrations/moe.py) has a fake kernel, the same
    output and the same saved tensors (input and weight). (Older Transformers loop over experts instead.)
    """
    note = "MoE experts ran Transformers' grouped-mm fallback (same saved tensors): torch's fake grouped_mm is bf16-only"

    def cannot_use_grouped_mm(*args: Any, **kwargs: Any) -> bool:
        if note not in notes:
            notes.append(note)
        return False

    with _patched("transformers.integrations.moe", "_can_use_grouped_mm", cannot_use_grouped_mm):
        yield


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
