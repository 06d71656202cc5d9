"""Read a Megatron-LM command line into the three configs (``megatron_writer`` writes one back).

Defaults follow Megatron-LM's argument parser (``megatron/training/arguments.py``: ``_add_*_args`` and
``validate_args``). Flags whose memory effect the configs cannot express raise :class:`ConfigError`
(or, with ``strict=False``, are listed in :attr:`MegatronJob.ignored` and warned about); flags that do not
change memory (learning rate, data, logging, checkpointing, kernel-fusion switches) are ignored silently.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import yaml

from frenzy_core._base import FrozenModel
from frenzy_core._data import data_text
from frenzy_core.config.layout import validate_layout
from frenzy_core.config.model import ArchKind, MLPKind, ModelConfig, MoEConfig, NormKind, PositionEmbedding
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
from frenzy_core.errors import ConfigError

__all__ = [
    "BERT_WORDPIECE_VOCAB_SIZE",
    "GPT2_BPE_VOCAB_SIZE",
    "MegatronArgs",
    "MegatronJob",
    "from_megatron_args",
    "megatron_padded_vocab_size",
    "parse_megatron_args",
]

MegatronArgs = Mapping[str, object] | Sequence[str]
"""A Megatron command line: ``{"--num-layers": 24, "--bf16": True}`` or ``["--num-layers", "24", "--bf16"]``.
"""

GPT2_BPE_VOCAB_SIZE = 50257
"""Tokens of the GPT-2 BPE vocabulary (``gpt2-vocab.json``), Megatron's GPT default (GPT2BPETokenizer)."""

BERT_WORDPIECE_VOCAB_SIZE = 30522
"""Tokens of the BERT uncased WordPiece vocabulary (``bert-large-uncased-vocab.txt``, BertWordPieceLowerCase),
the vocabulary Megatron-LM's BERT examples use; a guess where a command line names only ``--vocab-file``."""

_MAKE_VOCAB_DIVISIBLE_BY = 128  # arguments.py: --make-vocab-size-divisible-by default
_DROPOUT = 0.1  # arguments.py: --hidden-dropout and --attention-dropout defaults
_MOE_TOPK = 2  # arguments.py: --moe-router-topk default
_SGD_MOMENTUM = 0.9  # arguments.py: --sgd-momentum default
_MAX_PATTERN = 1 << 16  # longest --moe-layer-freq list read (a bound, not a Megatron limit)

_OFF: tuple[object, ...] = (False, None, 0, "0", "none", "false", "False")
"""Values of an unsupported flag that switch it off (``--mtp-num-layers 0``, ``--cuda-graph-impl none``)."""


class _FlagTable(FrozenModel):
    """``data/megatron_flags.yaml``: flags not modelled (with why) and flags without a memory effect."""

    unsupported: dict[str, str]
    ignored: frozenset[str]
    ignored_prefixes: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def _flags() -> _FlagTable:
    text = data_text("megatron_flags.yaml")
    table: _FlagTable = _FlagTable.model_validate(yaml.safe_load(text))
    return table


class MegatronJob(FrozenModel):
    """What a Megatron-LM command line describes, plus the memory-relevant flags that were not modelled."""

    model: ModelConfig
    training: TrainingConfig
    parallel: ParallelConfig
    ignored: tuple[str, ...] = ()
    """Unsupported or unknown flags skipped because ``strict=False`` (each: ``"--flag: reason"``)."""


# ---- reading the command line -------------------------------------------------------------------------


def _tokens_to_dict(tokens: Sequence[str]) -> dict[str, object]:
    """``["--a", "1", "--b", "--c", "x", "y"]`` -> ``{"--a": "1", "--b": True, "--c": ["x", "y"]}``."""
    out: dict[str, object] = {}
    key: str | None = None
    values: list[str] = []

    def flush() -> None:
        if key is not None:
            out[key] = True if not values else values[0] if len(values) == 1 else list(values)

    for token in tokens:
        if not isinstance(token, str):
            raise ConfigError(f"command-line token {token!r} is not a string", field="args", value=token)
        if token.startswith("--"):
            flush()
            key, _, inline = token.partition("=")
            values = [inline] if inline else []
        elif key is None:
            raise ConfigError(
                f"value {token!r} comes before any --flag",
                field="args",
                value=token,
                hint="start the command line with a --flag",
            )
        else:
            values.append(token)
    flush()
    return out


class _Reader:
    """Typed access to the flags; remembers which ones were read."""

    def __init__(self, args: MegatronArgs):
        if isinstance(args, Mapping):
            raw = {str(k) if str(k).startswith("--") else "--" + str(k): v for k, v in args.items()}
        elif isinstance(args, (list, tuple)):
            raw = _tokens_to_dict(args)
        else:
            raise ConfigError(
                f"args must be a dict of flags or a list of command-line tokens, got {type(args).__name__}",
                field="args",
                value=args,
            )
        self.raw = {k.replace("_", "-"): v for k, v in raw.items()}
        self.used: set[str] = set()

    def has(self, flag: str) -> bool:
        return flag in self.raw

    def switch(self, flag: str) -> bool:
        """A ``store_true`` flag (dict form: True/False; list form: present)."""
        self.used.add(flag)
        value = self.raw.get(flag, False)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(
            f"{flag} is a switch and takes no value, got {value!r}",
            field=flag,
            value=value,
            hint=f"pass {flag} alone (or true/false in a dict)",
        )

    def _value(self, flag: str) -> object:
        self.used.add(flag)
        value = self.raw[flag]
        if isinstance(value, (bool, list)):
            raise ConfigError(f"{flag} needs one value, got {value!r}", field=flag, value=value)
        return value

    def integer(self, flag: str, default: int | None = None) -> int | None:
        if flag not in self.raw:
            self.used.add(flag)
            return default
        value = self._value(flag)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value))
        except ValueError:
            raise ConfigError(f"{flag} must be an integer, got {value!r}", field=flag, value=value) from None

    def positive(self, flag: str, default: int | None = None) -> int | None:
        value = self.integer(flag, default)
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}", field=flag, value=value)
        return value

    def required(self, flag: str) -> int:
        value = self.positive(flag)
        if value is None:
            raise ConfigError(f"{flag} is required (Megatron-LM's validate_args asserts it)", field=flag)
        return value

    def number(self, flag: str, default: float) -> float:
        if flag not in self.raw:
            self.used.add(flag)
            return default
        value = self._value(flag)
        try:
            return float(str(value))
        except ValueError:
            raise ConfigError(f"{flag} must be a number, got {value!r}", field=flag, value=value) from None

    def choice(self, flag: str, default: str | None, choices: Sequence[str] | None = None) -> str | None:
        if flag not in self.raw:
            self.used.add(flag)
            return default
        value = str(self._value(flag))
        if choices is not None and value not in choices:
            raise ConfigError(
                f"{flag} must be one of {list(choices)}, got {value!r}", field=flag, value=value
            )
        return value

    def words(self, flag: str) -> list[str] | None:
        """A list-valued flag (``nargs='+'``): a list, or a string like ``"[a b]"``."""
        self.used.add(flag)
        if flag not in self.raw:
            return None
        value = self.raw[flag]
        items = value if isinstance(value, list) else [str(value)]
        return [w for item in items for w in re.split(r"[\s,\[\]]+", str(item)) if w]


def megatron_padded_vocab_size(vocab_size: int, tp: int, divisible_by: int = _MAKE_VOCAB_DIVISIBLE_BY) -> int:
    """Vocabulary rows as Megatron stores them: padded up to a multiple of ``divisible_by`` x tp.

    Source: ``_vocab_size_with_padding`` in ``megatron/training/tokenizer/tokenizer.py``.
    """
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


def _moe_layer_pattern(value: object, num_layers: int) -> list[int]:
    """``--moe-layer-freq``: an int k (every k-th layer from 0) or a list expression, ``([0]*3+[1]*9)``."""
    flag = "--moe-layer-freq"
    text = str(value).strip()
    if re.fullmatch(r"\d+", text):
        k = int(text)
        if k <= 0:
            raise ConfigError(f"{flag} must be positive, got {k}", field=flag, value=value)
        return [1 if i % k == 0 else 0 for i in range(num_layers)]
    # Megatron's _eval_pattern admits only digits, brackets, parentheses, commas, + and *.
    if re.search(r"[^,\d\[\]\(\)\+\*\s]", text):
        raise ConfigError(
            f"{flag} must be an integer or a list expression such as ([0]*1+[1]*3), got {text!r}",
            field=flag,
            value=value,
        )
    pattern = _eval_list_expression(text, flag)
    if len(pattern) != num_layers or any(x not in (0, 1) for x in pattern):
        raise ConfigError(
            f"{flag} must give one 0 or 1 per layer ({num_layers}), got {pattern}", field=flag, value=value
        )
    return pattern


def _eval_list_expression(text: str, flag: str) -> list[int]:
    """Evaluate integer lists joined by ``+`` and repeated by ``*`` (what Megatron's ``_eval_pattern``
    admits),
    walking the syntax tree instead of calling ``eval``."""

    def value(node: ast.expr) -> list[int] | int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            items = [value(e) for e in node.elts]
            if all(isinstance(i, int) for i in items):
                return [i for i in items if isinstance(i, int)]
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
                left, right = right, left
            if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
                if len(left) * right > _MAX_PATTERN:
                    raise ConfigError(
                        f"{flag}: {text!r} is longer than {_MAX_PATTERN} layers", field=flag, value=text
                    )
                return left * right
        raise ConfigError(f"{flag}: cannot read list expression {text!r}", field=flag, value=text)

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ConfigError(f"{flag}: cannot read list expression {text!r}", field=flag, value=text) from None
    result = value(tree.body)
    if not isinstance(result, list):
        raise ConfigError(f"{flag}: {text!r} is not a list", field=flag, value=text)
    return result


def _moe_placement(pattern: list[int]) -> tuple[int, int] | None:
    """(first_dense_layers, layer_interval) reproducing ``pattern``, or None if no such pair does."""
    if 1 not in pattern:
        return None
    first = pattern.index(1)
    for interval in range(1, len(pattern) + 1):
        if all(
            pattern[i] == (1 if i >= first and (i - first) % interval == 0 else 0)
            for i in range(len(pattern))
        ):
            return first, interval
    return None


# ---- building the configs -----------------------------------------------------------------------------


def parse_megatron_args(
    args: MegatronArgs, world_size: int, *, model_type: Literal["gpt", "bert"] = "gpt", strict: bool = True
) -> MegatronJob:
    """Read a Megatron-LM command line (``pretrain_gpt.py`` or ``pretrain_bert.py``) on ``world_size`` GPUs.

    ``strict=False`` skips unsupported or unknown flags and lists them in :attr:`MegatronJob.ignored`.
    """
    if model_type not in ("gpt", "bert"):
        raise ConfigError(
            f"model_type must be 'gpt' or 'bert', got {model_type!r}", field="model_type", value=model_type
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= 0:
        raise ConfigError(
            f"world_size must be a positive integer, got {world_size!r}", field="world_size", value=world_size
        )
    r = _Reader(args)
    problems: list[tuple[str, str]] = []  # (flag, reason) not modelled

    parallel = _parallel(r, world_size)
    model = _model(r, model_type, parallel.tp, problems)
    training = _training(r, parallel, problems)
    _check_layout(r, model, training, parallel)

    table = _flags()
    for flag in sorted(set(r.raw) - r.used):
        if flag in table.unsupported:
            if r.raw[flag] not in _OFF:
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
        validate_layout(model, training, parallel)
    except ConfigError as exc:
        raise ConfigError(
            f"the Megatron-LM command line gives an invalid layout: {exc}", field=exc.field, value=exc.value
        ) from None
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


def _parallel(r: _Reader, world_size: int) -> ParallelConfig:
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
    vpp = _virtual_stages(r, pp)
    if ep > 1 and (dp * cp) % ep != 0:
        etp = r.positive("--expert-tensor-parallel-size")
        if etp is not None and etp != tp and (tp * dp * cp) % (etp * ep) == 0:
            # Megatron-Core lays experts out as etp x ep x expert-dp = tp x cp x dp;
            # ParallelConfig keeps etp = tp.
            raise ConfigError(
                f"--expert-tensor-parallel-size={etp} with --expert-model-parallel-size={ep} is not "
                f"supported: the configs take expert-parallel ranks from data x context parallel = {dp * cp} "
                f"(expert tensor parallelism = --tensor-model-parallel-size={tp})",
                field="--expert-tensor-parallel-size",
                value=etp,
            )
        raise ConfigError(
            f"--expert-model-parallel-size={ep} must divide data x context parallel = {dp * cp}",
            field="--expert-model-parallel-size",
            value=ep,
        )
    return ParallelConfig(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep)


def _virtual_stages(r: _Reader, pp: int) -> int:
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
            num_layers += r.raw.get(flag, False) not in _OFF
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


def _model(r: _Reader, model_type: str, tp: int, problems: list[tuple[str, str]]) -> ModelConfig:
    num_layers = r.required("--num-layers")
    hidden = r.required("--hidden-size")
    heads = r.required("--num-attention-heads")
    max_pos = r.required("--max-position-embeddings")

    swiglu, squared_relu, quick_geglu = (
        r.switch("--swiglu"),
        r.switch("--squared-relu"),
        r.switch("--quick-geglu"),
    )
    if sum((swiglu, squared_relu, quick_geglu)) > 1:
        raise ConfigError("--swiglu, --squared-relu and --quick-geglu exclude each other", field="--swiglu")
    mlp = (
        MLPKind.SWIGLU
        if swiglu
        else MLPKind.SQUARED_RELU
        if squared_relu
        else (MLPKind.GEGLU if quick_geglu else MLPKind.GELU)
    )
    ffn = r.positive("--ffn-hidden-size")
    if ffn is None:  # validate_args: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
    head_dim = r.positive("--kv-channels")
    if head_dim is None:
        if hidden % heads != 0:
            raise ConfigError(
                f"--hidden-size={hidden} is not divisible by --num-attention-heads={heads}",
                field="--kv-channels",
                hint="set --kv-channels",
            )
        head_dim = hidden // heads
    kv_heads = heads
    groups = r.positive("--num-query-groups", 1)
    if r.switch("--group-query-attention"):
        assert groups is not None
        kv_heads = groups
    if heads % kv_heads != 0:
        raise ConfigError(
            f"--num-query-groups={kv_heads} does not divide --num-attention-heads={heads}",
            field="--num-query-groups",
            value=kv_heads,
        )

    norm_name = r.choice("--normalization", "LayerNorm", ("LayerNorm", "RMSNorm"))
    pos_name = r.choice(
        "--position-embedding-type",
        "learned_absolute",
        ("learned_absolute", "rope", "mrope", "relative", "none"),
    )
    if r.switch("--use-rotary-position-embeddings"):
        pos_name = "rope"
    if pos_name == "relative":
        problems.append(("--position-embedding-type", "relative position biases are not modelled"))
    position = {"learned_absolute": PositionEmbedding.LEARNED, "none": PositionEmbedding.NONE}.get(
        str(pos_name), PositionEmbedding.ROTARY
    )
    add_bias = not r.switch("--disable-bias-linear")
    qkv_bias = add_bias or r.switch("--add-qkv-bias")  # validate_args: add_bias_linear implies add_qkv_bias

    vocab = _vocab_size(r, model_type, tp)
    moe = _moe(r, num_layers, ffn, tp, problems)
    bert = model_type == "bert"
    binary_head = bert and not r.switch("--bert-no-binary-head")
    return ModelConfig(
        arch=ArchKind.ENCODER if bert else ArchKind.DECODER,
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        ffn_hidden_size=ffn,
        mlp=mlp,
        norm=NormKind.RMSNORM if norm_name == "RMSNorm" else NormKind.LAYERNORM,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        position_embedding=position,
        # pretrain_bert.py: num_tokentypes = 2 if args.bert_binary_head else 0;
        # the binary head brings the pooler.
        type_vocab_size=2 if binary_head else 0,
        pooler=binary_head,
        tied_embeddings=not r.switch("--untie-embeddings-and-output-weights"),
        qkv_bias=qkv_bias,
        linear_bias=add_bias,
        qk_norm=r.switch("--qk-layernorm"),
        hidden_dropout=_dropout(r, "--hidden-dropout"),
        attention_dropout=_dropout(r, "--attention-dropout"),
        moe=moe,
    )


def _dropout(r: _Reader, flag: str) -> float:
    p = r.number(flag, _DROPOUT)
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"{flag} must be in [0, 1), got {p}", field=flag, value=p)
    return p


def _vocab_size(r: _Reader, model_type: str, tp: int) -> int:
    """Padded vocabulary rows: --vocab-size (NullTokenizer adds an EOD token), else the tokenizer default."""
    tokenizer = r.choice("--tokenizer-type", None)
    given = r.positive("--vocab-size")
    if given is not None:
        vocab = given + 1 if tokenizer == "NullTokenizer" else given  # _NullTokenizer.vocab_size = n + 1
    elif tokenizer == "NullTokenizer":
        raise ConfigError("--tokenizer-type NullTokenizer needs --vocab-size", field="--vocab-size")
    else:
        vocab = BERT_WORDPIECE_VOCAB_SIZE if model_type == "bert" else GPT2_BPE_VOCAB_SIZE
    divisible_by = r.positive("--make-vocab-size-divisible-by", _MAKE_VOCAB_DIVISIBLE_BY)
    assert divisible_by is not None
    return megatron_padded_vocab_size(vocab, tp, divisible_by)


def _moe(r: _Reader, num_layers: int, ffn: int, tp: int, problems: list[tuple[str, str]]) -> MoEConfig | None:
    experts = r.integer("--num-experts")
    etp = r.positive("--expert-tensor-parallel-size")
    if not experts:  # validate_args: --num-experts 0 means no MoE
        for flag in (
            "--moe-router-topk",
            "--moe-ffn-hidden-size",
            "--moe-shared-expert-intermediate-size",
            "--moe-layer-freq",
            "--moe-expert-capacity-factor",
            "--moe-shared-expert-gate",
        ):
            r.used.add(flag)  # MoE details without experts change nothing
        return None
    if experts < 0:
        raise ConfigError(
            f"--num-experts must be positive, got {experts}", field="--num-experts", value=experts
        )
    if etp is not None and etp != tp:
        problems.append(
            (
                "--expert-tensor-parallel-size",
                f"expert tensor parallelism ({etp}) different from --tensor-model-parallel-size ({tp})",
            )
        )
    top_k = r.positive("--moe-router-topk", _MOE_TOPK)
    expert_ffn = r.positive("--moe-ffn-hidden-size", ffn)  # validate_args: defaults to ffn_hidden_size
    shared = r.positive("--moe-shared-expert-intermediate-size")
    first_dense, interval = 0, 1
    if r.has("--moe-layer-freq"):
        r.used.add("--moe-layer-freq")
        placement = _moe_placement(_moe_layer_pattern(r.raw["--moe-layer-freq"], num_layers))
        if placement is None:
            problems.append(
                ("--moe-layer-freq", "only 'first n dense, then every k-th layer' placements are modelled")
            )
        else:
            first_dense, interval = placement
    capacity = r.number("--moe-expert-capacity-factor", -1.0)
    assert top_k is not None and expert_ffn is not None
    if top_k > experts:
        raise ConfigError(
            f"--moe-router-topk={top_k} exceeds --num-experts={experts}",
            field="--moe-router-topk",
            value=top_k,
        )
    return MoEConfig(
        num_experts=experts,
        top_k=top_k,
        expert_ffn_hidden_size=expert_ffn,
        num_shared_experts=1 if shared else 0,
        shared_expert_ffn_hidden_size=shared or 0,
        shared_expert_gate=r.switch("--moe-shared-expert-gate"),
        layer_interval=interval,
        first_dense_layers=first_dense,
        capacity_factor=capacity if capacity > 0 else None,
    )


def _training(r: _Reader, parallel: ParallelConfig, problems: list[tuple[str, str]]) -> TrainingConfig:
    seq = r.positive("--seq-length") or r.positive("--encoder-seq-length")
    if seq is None:
        raise ConfigError("--seq-length is required", field="--seq-length")
    mbs = r.required("--micro-batch-size")
    gbs = r.positive("--global-batch-size")
    if gbs is not None and gbs % (mbs * parallel.dp) != 0:
        raise ConfigError(
            f"--global-batch-size={gbs} is not divisible by --micro-batch-size x data-parallel size = "
            f"{mbs} x {parallel.dp} = {mbs * parallel.dp}",
            field="--global-batch-size",
            value=gbs,
            hint=f"use a multiple of {mbs * parallel.dp}",
        )
    recompute, recompute_method, recompute_layers = _recompute(r, problems)
    return TrainingConfig(
        seq_len=seq,
        micro_batch_size=mbs,
        global_batch_size=gbs,
        precision=_precision(r),
        optimizer=_optimizer(r, problems),
        optimizer_impl=OptimizerImpl.FUSED,
        distributed_optimizer=r.switch("--use-distributed-optimizer"),
        zero_stage=3 if r.switch("--use-torch-fsdp2") else 0,
        recompute=recompute,
        recompute_method=recompute_method,
        recompute_num_layers=recompute_layers,
        attention=_attention(r),
        # validate_args switches sequence parallelism off when tp == 1.
        sequence_parallel=r.switch("--sequence-parallel") and parallel.tp > 1,
        framework=Framework.MEGATRON,
    )


def _precision(r: _Reader) -> Precision:
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


def _optimizer(r: _Reader, problems: list[tuple[str, str]]) -> Optimizer:
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


def _recompute(r: _Reader, problems: list[tuple[str, str]]) -> tuple[Recompute, RecomputeMethod, int | None]:
    """(mode, method, layers) from --recompute-granularity/-method/-num-layers/-modules."""
    granularity = r.choice("--recompute-granularity", None, ("full", "selective"))
    if r.switch("--recompute-activations"):  # validate_args: --recompute-activations means selective
        granularity = "selective"
    method = r.choice("--recompute-method", None, ("uniform", "block"))
    num_layers = r.positive("--recompute-num-layers")
    modules = r.words("--recompute-modules")
    if granularity == "selective":
        if modules is not None and modules != ["core_attn"]:
            problems.append(
                (
                    "--recompute-modules",
                    f"selective recompute of {modules} (only core_attn, the default, is modelled)",
                )
            )
        return Recompute.SELECTIVE, RecomputeMethod.UNIFORM, None
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
        return Recompute.FULL, RecomputeMethod(method), num_layers
    return Recompute.NONE, RecomputeMethod.UNIFORM, None


def _attention(r: _Reader) -> Attention:
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


def _check_layout(r: _Reader, model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig) -> None:
    """Megatron's own divisibility rules, reported with the flag that breaks them."""
    tp_flag = "--tensor-model-parallel-size"
    if model.num_attention_heads % parallel.tp != 0:
        raise ConfigError(
            f"--num-attention-heads={model.num_attention_heads} is not divisible by {tp_flag}={parallel.tp}",
            field=tp_flag,
            value=parallel.tp,
        )
    if model.num_kv_heads % parallel.tp != 0:
        raise ConfigError(
            f"--num-query-groups={model.num_kv_heads} is not divisible by {tp_flag}={parallel.tp}",
            field=tp_flag,
            value=parallel.tp,
        )
    uneven = any(
        r.has(f)
        for f in (
            "--decoder-first-pipeline-num-layers",
            "--decoder-last-pipeline-num-layers",
            "--pipeline-model-parallel-layout",
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
        )
    )
    if not uneven and model.num_layers % (parallel.pp * parallel.vpp) != 0:
        raise ConfigError(
            f"--num-layers={model.num_layers} is not divisible by --pipeline-model-parallel-size x virtual"
            f" stages "
            f"= {parallel.pp} x {parallel.vpp}",
            field="--num-layers",
            value=model.num_layers,
        )
    if model.moe is not None and model.moe.num_experts % parallel.ep != 0:
        raise ConfigError(
            f"--num-experts={model.moe.num_experts} is not divisible by "
            f"--expert-model-parallel-size={parallel.ep}",
            field="--expert-model-parallel-size",
            value=parallel.ep,
        )
    if parallel.cp > 1 and training.seq_len % (2 * parallel.cp) != 0:
        raise ConfigError(
            f"--seq-length={training.seq_len} is not a multiple of 2 x --context-parallel-size = "
            f"{2 * parallel.cp}",
            field="--seq-length",
            value=training.seq_len,
        )
    if training.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"--max-position-embeddings={model.max_position_embeddings} is less than --seq-length="
            f"{training.seq_len}",
            field="--max-position-embeddings",
            value=model.max_position_embeddings,
        )
