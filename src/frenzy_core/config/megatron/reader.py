"""Read a Megatron-LM command line into the three configs (``writer`` writes one back).

Defaults follow Megatron-LM's argument parser (``megatron/training/arguments.py``: ``_add_*_args`` and
``validate_args``). Flags whose memory effect the configs cannot express raise :class:`ConfigError`
(or, with ``strict=False``, are listed in :attr:`MegatronJob.ignored` and warned about); flags that do not
change memory (learning rate, data, logging, checkpointing, kernel-fusion switches) are ignored silently.
"""

from __future__ import annotations

import warnings
from typing import Literal

from frenzy_core._base import FrozenModel
from frenzy_core.config.layout import validate_layout
from frenzy_core.config.megatron.args import OFF_VALUES, FlagReader, MegatronArgs, flag_table
from frenzy_core.config.megatron.model_flags import read_model
from frenzy_core.config.megatron.pattern import PipelineLayout, pipeline_layout
from frenzy_core.config.megatron.tables import FIELD_FLAGS
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import (
    Attention,
    Framework,
    OffloadDevice,
    Optimizer,
    OptimizerImpl,
    Precision,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    TrainingConfig,
)
from frenzy_core.errors import ConfigError

__all__ = ["MegatronJob", "from_megatron_args", "parse_megatron_args"]

_SGD_MOMENTUM = 0.9  # arguments.py: --sgd-momentum default

class MegatronJob(FrozenModel):
    """What a Megatron-LM command line describes, plus the memory-relevant flags that were not modelled."""

    model: ModelConfig
    training: TrainingConfig
    parallel: ParallelConfig
    ignored: tuple[str, ...] = ()
    """Unsupported or unknown flags skipped because ``strict=False`` (each: ``"--flag: reason"``)."""


def parse_megatron_args(
    args: MegatronArgs, world_size: int, *, model_type: Literal["gpt", "bert"] = "gpt", strict: bool = True
) -> MegatronJob:
    """Read a Megatron-LM command line (``pretrain_gpt.py`` or ``pretrain_bert.py``) on ``world_size`` GPUs.

    ``strict=False`` skips unsupported or unknown flags and lists them in :attr:`MegatronJob.ignored`; flags
    that change what the estimate would mean (an optimizer offload fraction below 1.0, offload without the flags
    Megatron-LM requires with it) are refused either way.
    """
    if model_type not in ("gpt", "bert"):
        raise ConfigError(
            f"model_type must be 'gpt' or 'bert', got {model_type!r}", field="model_type", value=model_type
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= 0:
        raise ConfigError(
            f"world_size must be a positive integer, got {world_size!r}", field="world_size", value=world_size
        )
    r = FlagReader(args)
    problems: list[tuple[str, str]] = []  # (flag, reason) not modelled

    parallel, layout = _parallel(r, world_size)
    model = read_model(r, model_type, parallel.tp, problems)
    parallel = parallel.replace(
        stage_layers=_stage_split(r, model.num_layers, parallel.pp, parallel.vpp, layout),
        microbatch_group_size=_microbatch_group(r, parallel))
    training = _training(r, parallel, problems)
    _check_megatron_layout(r, model, training, parallel)

    table = flag_table()
    for flag in sorted(set(r.raw) - r.used):
        if flag in table.unsupported:
            if r.raw[flag] not in OFF_VALUES:
                problems.append((flag, table.unsupported[flag]))
        elif flag in table.ignored or flag.startswith(table.ignored_prefixes):
            continue
        else:
            problems.append((flag, "unknown flag; its effect on memory is not known"))
    if problems and strict:
        flag, reason = problems[0]
        others = ", ".join(f for f, _ in problems[1:])
        more = f" (and {len(problems) - 1} more: {others})" if others else ""
        raise ConfigError(
            f"{flag} is not supported: {reason}{more}",
            field=flag,
            value=r.raw.get(flag),
            hint="remove the flag, or pass strict=False to estimate without it",
        )
    try:
        validate_layout(model, training, parallel, names=FIELD_FLAGS)
    except ConfigError as exc:
        raise ConfigError(f"the Megatron-LM command line gives an invalid layout: {exc}", field=exc.field,
                          value=exc.value) from None
    return MegatronJob(
        model=model,
        training=training,
        parallel=parallel,
        ignored=tuple(f"{flag}: {reason}" for flag, reason in problems),
    )


def from_megatron_args(
    args: MegatronArgs, world_size: int, *, model_type: Literal["gpt", "bert"] = "gpt", strict: bool = True
) -> tuple[ModelConfig, TrainingConfig, ParallelConfig]:
    """The model, recipe and layout of a Megatron-LM command line; see :func:`parse_megatron_args`.

    With ``strict=False`` each skipped flag is reported with :func:`warnings.warn`.
    """
    job = parse_megatron_args(args, world_size, model_type=model_type, strict=strict)
    for item in job.ignored:
        warnings.warn(f"from_megatron_args ignored {item}", UserWarning, stacklevel=2)
    return job.model, job.training, job.parallel


def _parallel(r: FlagReader, world_size: int) -> tuple[ParallelConfig, PipelineLayout | None]:
    """The layout flags, and --pipeline-model-parallel-layout parsed (read once: it also gives the stage split)."""
    tp = r.positive("--tensor-model-parallel-size", 1)
    pp = r.positive("--pipeline-model-parallel-size", 1)
    cp = r.positive("--context-parallel-size", 1)
    ep = r.positive("--expert-model-parallel-size", 1)
    assert tp is not None and pp is not None and cp is not None and ep is not None
    if world_size % (tp * pp * cp) != 0:
        raise ConfigError(
            f"world_size={world_size} is not divisible by --tensor-model-parallel-size x "
            f"--pipeline-model-parallel-size x --context-parallel-size = {tp} x {pp} x {cp} = {tp * pp * cp}",
            field="--tensor-model-parallel-size",
            value=tp,
            hint=f"use a world size that is a multiple of {tp * pp * cp}",
        )
    dp = world_size // (tp * pp * cp)
    layout = _layout(r, pp)
    vpp = layout.vpp if layout is not None else _virtual_stages(r, pp)
    etp = r.positive("--expert-tensor-parallel-size")
    # Megatron-Core lays routed experts out as etp x ep x expert-dp = tp x cp x dp (parallel_state.py)
    expert_tp = tp if etp is None else etp
    if (tp * dp * cp) % (expert_tp * ep) != 0:
        raise ConfigError(
            f"--expert-model-parallel-size x --expert-tensor-parallel-size = {ep} x {expert_tp} must divide "
            f"tensor x data x context parallel = {tp * dp * cp}",
            field="--expert-model-parallel-size",
            value=ep,
        )
    parallel = ParallelConfig(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=None if etp in (None, tp) else etp)
    return parallel, layout


def _layout(r: FlagReader, pp: int) -> PipelineLayout | None:
    """--pipeline-model-parallel-layout (validate_args: it excludes the other ways to cut the pipeline)."""
    if not r.has("--pipeline-model-parallel-layout"):
        return None
    others = [f for f in ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                          *_UNEVEN_STAGE_FLAGS[:2], *_UNEVEN_STAGE_FLAGS[3:]) if r.has(f)]
    if others:
        raise ConfigError(f"--pipeline-model-parallel-layout cannot be combined with {others[0]}", field=others[0],
                          hint="give the layout alone: it fixes the virtual stages and every chunk's layers")
    r.used.add("--pipeline-model-parallel-layout")
    layout = pipeline_layout(r.raw["--pipeline-model-parallel-layout"], pp, r.required("--num-layers"))
    if layout.mtp_layers:  # as --mtp-num-layers: their memory is not modelled, so they may not drop out silently
        raise ConfigError("--pipeline-model-parallel-layout places multi-token-prediction layers (m), which are not "
                          "modelled", field="--pipeline-model-parallel-layout",
                          value=r.raw["--pipeline-model-parallel-layout"],
                          hint="remove the m entries to estimate the run without MTP")
    return layout


def _virtual_stages(r: FlagReader, pp: int) -> int:
    """Virtual stages per rank of a pipeline cut without --pipeline-model-parallel-layout."""
    per_stage = r.positive("--num-layers-per-virtual-pipeline-stage")
    stages = r.positive("--num-virtual-stages-per-pipeline-rank")
    if per_stage is not None and stages is not None:
        raise ConfigError(
            "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank "
            "cannot both be set",
            field="--num-virtual-stages-per-pipeline-rank",
            value=stages,
        )
    if stages is not None:
        vpp = stages
    elif per_stage is not None:
        num_layers = r.required("--num-layers")
        # validate_args counts the embedding and the loss as layers with --account-for-*-in-pipeline-split
        # (peeked, not read: the flags themselves stay unsupported).
        for flag in ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"):
            num_layers += r.raw.get(flag, False) not in OFF_VALUES
        if num_layers % pp != 0 or (num_layers // pp) % per_stage != 0:
            raise ConfigError(
                f"--num-layers={num_layers} / --pipeline-model-parallel-size={pp} is not a multiple of "
                f"--num-layers-per-virtual-pipeline-stage={per_stage}",
                field="--num-layers-per-virtual-pipeline-stage",
                value=per_stage,
            )
        vpp = num_layers // pp // per_stage
    else:
        return 1
    if vpp > 1 and pp == 1:
        raise ConfigError(
            "a virtual pipeline needs --pipeline-model-parallel-size > 1",
            field="--pipeline-model-parallel-size",
            value=pp,
        )
    return vpp


def _training(r: FlagReader, parallel: ParallelConfig, problems: list[tuple[str, str]]) -> TrainingConfig:
    seq = r.positive("--seq-length") or r.positive("--encoder-seq-length")
    if seq is None:
        raise ConfigError("--seq-length is required", field="--seq-length")
    mbs = r.required("--micro-batch-size")
    gbs = r.positive("--global-batch-size")
    recompute, recompute_method, recompute_layers, recompute_modules = _recompute(r, problems)
    return TrainingConfig(
        seq_len=seq,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        precision=_precision(r),
        # Transformer Engine keeps the weights as fp8 tensors (row- and column-wise data), no bf16 copy
        fp8_param_gather=r.switch("--fp8-param-gather"),
        optimizer=_optimizer(r, problems),
        optimizer_impl=OptimizerImpl.FUSED,
        offload_optimizer=_optimizer_offload(r),
        distributed_optimizer=r.switch("--use-distributed-optimizer"),
        zero_stage=3 if r.switch("--use-torch-fsdp2") else 0,
        recompute=recompute,
        recompute_method=recompute_method,
        recompute_num_layers=recompute_layers,
        recompute_modules=recompute_modules,
        cross_entropy_fusion=_cross_entropy_fusion(r),
        attention=_attention(r),
        # validate_args switches sequence parallelism off when tp == 1.
        sequence_parallel=r.switch("--sequence-parallel") and parallel.tp > 1,
        tp_comm_overlap=_tp_comm_overlap(r, parallel),
        framework=Framework.MEGATRON,
    )


def _optimizer_offload(r: FlagReader) -> OffloadDevice:
    """--optimizer-cpu-offload: Megatron-Core's HybridDeviceOptimizer, modelled with --optimizer-offload-fraction
    1.0 (every parameter's fp32 copy, states and step on the host); Megatron-LM requires
    --use-precision-aware-optimizer with it (at its default fp32 dtypes it changes no byte), hence the distributed
    optimizer and Adam; and --overlap-cpu-optimizer-d2h-h2d, as the time model overlaps the copies with the host
    step. These refusals hold under ``strict=False`` too: the recipe cannot be half-modelled."""
    fraction = r.number("--optimizer-offload-fraction", 0.0)  # the default of megatron/training/arguments.py
    if not r.switch("--optimizer-cpu-offload"):
        return OffloadDevice.NONE
    if fraction != 1.0:
        raise ConfigError(f"--optimizer-offload-fraction {fraction:g} with --optimizer-cpu-offload is not modelled: "
                          "below 1.0 HybridDeviceOptimizer keeps part of the optimizer on the GPU (torch's fused "
                          "Adam over its own fp32 copies) and the memory model offloads the whole optimizer or none "
                          "of it", field="--optimizer-offload-fraction", value=fraction,
                          hint="use --optimizer-offload-fraction 1.0, or drop --optimizer-cpu-offload")
    if not r.switch("--use-precision-aware-optimizer"):
        raise ConfigError("--optimizer-cpu-offload needs --use-precision-aware-optimizer (Megatron-LM's "
                          "validate_args asserts it: the hybrid optimizer reuses that code path)",
                          field="--use-precision-aware-optimizer", value=None,
                          hint="add --use-precision-aware-optimizer")
    if not r.switch("--use-distributed-optimizer"):
        raise ConfigError("--optimizer-cpu-offload needs --use-distributed-optimizer (Megatron-Core's "
                          "get_megatron_optimizer refuses the precision-aware optimizer without it)",
                          field="--use-distributed-optimizer", value=None, hint="add --use-distributed-optimizer")
    if r.choice("--optimizer", "adam") != "adam":
        raise ConfigError("--optimizer-cpu-offload is modelled with --optimizer adam only (the precision-aware "
                          "optimizer it needs asserts adam: megatron/core/optimizer/optimizer_config.py)",
                          field="--optimizer", value=r.raw.get("--optimizer"), hint="use --optimizer adam")
    if not r.switch("--overlap-cpu-optimizer-d2h-h2d"):
        raise ConfigError("--optimizer-cpu-offload is timed with its copies overlapped with the host step, as "
                          "--overlap-cpu-optimizer-d2h-h2d runs them; without that flag they run in turn, which the "
                          "time model does not time", field="--overlap-cpu-optimizer-d2h-h2d", value=None,
                          hint="add --overlap-cpu-optimizer-d2h-h2d (the writer emits it)")
    return OffloadDevice.CPU


def _tp_comm_overlap(r: FlagReader, parallel: ParallelConfig) -> bool:
    """--tp-comm-overlap; validate_args asserts sequence parallelism (switched off at tp = 1)."""
    overlap = r.switch("--tp-comm-overlap")
    if overlap and not (r.switch("--sequence-parallel") and parallel.tp > 1):
        raise ConfigError("--tp-comm-overlap needs --sequence-parallel with --tensor-model-parallel-size > 1 "
                          "(Megatron-LM's validate_args asserts it)", field="--tp-comm-overlap", value=True,
                          hint="add --sequence-parallel, or drop --tp-comm-overlap")
    return overlap


def _cross_entropy_fusion(r: FlagReader) -> bool:
    """--cross-entropy-loss-fusion with --cross-entropy-fusion-impl native (the default; validate_args refuses
    'te')."""
    fused = r.switch("--cross-entropy-loss-fusion")
    impl = r.choice("--cross-entropy-fusion-impl", "native", ("native", "te"))
    if fused and impl == "te":
        raise ConfigError("--cross-entropy-fusion-impl te is refused by Megatron-LM's validate_args (stability)",
                          field="--cross-entropy-fusion-impl", value=impl, hint="use native")
    return fused


def _precision(r: FlagReader) -> Precision:
    bf16, fp16 = r.switch("--bf16"), r.switch("--fp16")
    if bf16 and fp16:
        raise ConfigError("--bf16 and --fp16 exclude each other", field="--fp16")
    fp8 = r.choice("--fp8-format", None, ("e4m3", "hybrid"))
    if fp8 is not None:
        if not (bf16 or fp16):
            raise ConfigError("--fp8-format needs --bf16 or --fp16 weights", field="--fp8-format", value=fp8)
        return Precision.FP8_MIXED
    if bf16:
        return Precision.BF16_MIXED
    return Precision.FP16_MIXED if fp16 else Precision.FP32


def _optimizer(r: FlagReader, problems: list[tuple[str, str]]) -> Optimizer:
    # Megatron's "adam" is Adam with decoupled weight decay (TE/Apex FusedAdam with adam_w_mode=True,
    # torch.optim.AdamW as fallback): AdamW, two fp32 moments per parameter.
    name = r.choice("--optimizer", "adam")
    momentum = r.number("--sgd-momentum", _SGD_MOMENTUM)  # read (and so accepted) with any optimizer
    if name == "adam":
        return Optimizer.ADAMW
    if name == "sgd":
        return Optimizer.SGD_MOMENTUM if momentum != 0 else Optimizer.SGD
    problems.append(("--optimizer", f"optimizer {name!r} is not modelled"))
    return Optimizer.ADAMW


_Recompute = tuple[Recompute, RecomputeMethod, int | None, tuple[RecomputeModule, ...]]


def _recompute(r: FlagReader, problems: list[tuple[str, str]]) -> _Recompute:
    """(mode, method, layers, modules) from --recompute-granularity/-method/-num-layers/-modules."""
    granularity = r.choice("--recompute-granularity", None, ("full", "selective"))
    if r.switch("--recompute-activations"):  # validate_args: --recompute-activations means selective
        granularity = "selective"
    method = r.choice("--recompute-method", None, ("uniform", "block"))
    num_layers = r.positive("--recompute-num-layers")
    words = r.words("--recompute-modules")
    if r.raw.get("--recompute-modules") is True:  # the flag with no value: an empty list (nargs='*')
        words = []
    default = (RecomputeModule.CORE_ATTN,)
    if granularity == "selective":
        # transformer_config.py: only read under selective granularity; default ["core_attn"]
        modelled = {m.value: m for m in RecomputeModule}
        unknown = [w for w in (words or []) if w not in modelled]
        if unknown:
            problems.append(("--recompute-modules", f"selective recompute of {unknown} is not modelled (modelled: "
                                                    f"{sorted(modelled)})"))
        modules = default if words is None else tuple(modelled[w] for w in dict.fromkeys(words) if w in modelled)
        if RecomputeModule.MOE_ACT in modules and not r.switch("--moe-grouped-gemm"):
            raise ConfigError("--recompute-modules moe_act needs --moe-grouped-gemm (Megatron-Core raises "
                              "otherwise)", field="--recompute-modules", value=words)
        return Recompute.SELECTIVE, RecomputeMethod.UNIFORM, None, modules
    if granularity == "full":
        if method is None:
            raise ConfigError(
                "--recompute-granularity full needs --recompute-method uniform or block",
                field="--recompute-method",
            )
        if num_layers is None:
            raise ConfigError(
                "--recompute-granularity full needs --recompute-num-layers", field="--recompute-num-layers"
            )
        return Recompute.FULL, RecomputeMethod(method), num_layers, default
    return Recompute.NONE, RecomputeMethod.UNIFORM, None, default


def _attention(r: FlagReader) -> Attention:
    """unfused/local attention materialises the score matrix; flash, fused (cuDNN) and TE's auto do not."""
    impl = r.choice("--transformer-impl", "transformer_engine", ("local", "transformer_engine"))
    spec = r.words("--spec")
    backend = r.choice("--attention-backend", "auto", ("flash", "fused", "unfused", "local", "auto"))
    if r.switch("--use-flash-attn"):
        backend = "flash"
    if backend in ("unfused", "local"):
        return Attention.EAGER
    if backend == "auto" and (impl == "local" or spec == ["local"]):
        return Attention.EAGER  # the local spec's DotProductAttention is unfused
    return Attention.FLASH


def _microbatch_group(r: FlagReader, parallel: ParallelConfig) -> int | None:
    """--microbatch-group-size-per-virtual-pipeline-stage (Megatron's default, pp, as None)."""
    group = r.positive("--microbatch-group-size-per-virtual-pipeline-stage")
    return None if group in (None, parallel.pp) or parallel.vpp == 1 else group


def _stage_split(r: FlagReader, num_layers: int, pp: int, vpp: int,
                 layout: PipelineLayout | None) -> tuple[int, ...] | None:
    """Chunk layer counts of an uneven Megatron pipeline (None: even), see :func:`megatron_split`, or as
    --pipeline-model-parallel-layout places them."""
    if layout is not None:
        even = len(set(layout.chunk_layers)) == 1
        return None if even else layout.chunk_layers
    first = r.integer("--decoder-first-pipeline-num-layers")
    last = r.integer("--decoder-last-pipeline-num-layers")
    embedding = r.switch("--account-for-embedding-in-pipeline-split")
    loss = r.switch("--account-for-loss-in-pipeline-split")
    return megatron_split(num_layers, pp, vpp, first=first, last=last, embedding=embedding, loss=loss)


def megatron_split(num_layers: int, pp: int, vpp: int, *, first: int | None = None, last: int | None = None,
                   embedding: bool = False, loss: bool = False) -> tuple[int, ...] | None:
    """Chunk layer counts (model order) as Megatron-Core's ``get_num_layers_to_build`` cuts them (None: even):
    --decoder-first/last-pipeline-num-layers fix the first and last stage and the other stages share the rest
    evenly, each stage's layers split evenly over its virtual chunks; --account-for-embedding/loss-in-pipeline-
    split count the embedding and the loss as one layer each, taken from the first and the last chunk."""
    if first is None and last is None:
        if not (embedding or loss):
            return None
        total, chunks = num_layers + embedding + loss, pp * vpp
        if total % chunks != 0:
            raise ConfigError(f"--num-layers={num_layers} plus the embedding and loss counted as layers ({total}) "
                              f"is not divisible by the {chunks} pipeline chunks", field="--num-layers",
                              value=num_layers, hint=f"use --num-layers with {chunks} dividing it plus "
                                                     f"{total - num_layers}")
        split = [total // chunks] * chunks
        split[0] -= embedding
        split[-1] -= loss
        return tuple(split)
    if embedding or loss:
        raise ConfigError("--account-for-embedding/loss-in-pipeline-split cannot be combined with "
                          "--decoder-first/last-pipeline-num-layers", field="--decoder-first-pipeline-num-layers",
                          value=first)
    fixed = {0: first, pp - 1: last}
    rest = num_layers - sum(v for v in fixed.values() if v is not None)
    others = pp - sum(v is not None for v in fixed.values())
    if rest < 0 or (others > 0 and rest % others != 0) or (others == 0 and rest != 0):
        raise ConfigError(f"--num-layers={num_layers} less the first and last stages' layers leaves {rest}, which "
                          f"the other {others} stages cannot share evenly", field="--decoder-first-pipeline-num-layers",
                          value=first, hint="choose first/last counts that leave a multiple of the other stages")
    share = rest // max(others, 1)
    stages = [share if fixed.get(s) is None else int(fixed[s] or 0) for s in range(pp)]
    if any(n % vpp for n in stages):
        raise ConfigError(f"pipeline stages of {stages} layers do not split into {vpp} virtual chunks evenly",
                          field="--decoder-first-pipeline-num-layers", value=first)
    return tuple(stages[c % pp] // vpp for c in range(pp * vpp))


_UNEVEN_STAGE_FLAGS = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                       "--pipeline-model-parallel-layout", "--account-for-embedding-in-pipeline-split",
                       "--account-for-loss-in-pipeline-split")
def _check_megatron_layout(r: FlagReader, model: ModelConfig, training: TrainingConfig,
                           parallel: ParallelConfig) -> None:
    """The rules Megatron-LM adds to the shared ones (:func:`validate_layout`): even pipeline stages unless a
    flag splits them otherwise, and a position table at least as long as the sequence, whatever the scheme."""
    chunks = parallel.pp * parallel.vpp
    if not any(r.has(f) for f in _UNEVEN_STAGE_FLAGS) and model.num_layers % chunks != 0:
        raise ConfigError(
            f"--num-layers={model.num_layers} is not divisible by --pipeline-model-parallel-size x virtual stages "
            f"= {parallel.pp} x {parallel.vpp}", field="--num-layers", value=model.num_layers)
    if RecomputeModule.MLA_UP_PROJ in training.recompute_modules and model.mla is None:
        raise ConfigError("--recompute-modules mla_up_proj needs --multi-latent-attention (Megatron-Core raises "
                          "otherwise)", field="--recompute-modules", value="mla_up_proj")
    if training.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"--max-position-embeddings={model.max_position_embeddings} is less than --seq-length={training.seq_len}",
            field="--max-position-embeddings", value=model.max_position_embeddings)
