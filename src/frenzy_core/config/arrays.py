"""``LayoutArrays``: many layouts of one model as int64 columns, the form every vectorised estimator reads.

One row is a (parallel layout, searched recipe) pair: the degrees of :class:`ParallelConfig` and the fields of
:class:`TrainingConfig` that vary between layouts. The planner enumerates them, the memory and time models
evaluate them, the layout rules (:mod:`frenzy_core.config.layout`) mask them; rows convert back to configs with
:meth:`LayoutArrays.parallel` and :meth:`LayoutArrays.training`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from frenzy_core import _limits as limits
from frenzy_core._base import CodedEnum
from frenzy_core._limits import beyond_message
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Recompute, TrainingConfig
from frenzy_core.errors import ConfigError, short_repr

__all__ = ["LAYOUT_COLUMNS", "LayoutArrays", "enum_codes"]

IntArray = npt.NDArray[np.int64]

LAYOUT_COLUMNS: tuple[str, ...] = (
    "dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "global_batch_size", "seq_len", "zero_stage",
    "distributed_optimizer", "recompute", "recompute_num_layers", "sequence_parallel", "schedule",
    "etp", "shard_group_size", "microbatch_group_size", "stage_split",
)
"""The columns of :class:`LayoutArrays`. :meth:`LayoutArrays.from_columns` also takes ``num_microbatches``
instead of ``global_batch_size`` and ``stage_layers`` (per-row chunk layer counts) instead of ``stage_split``."""

_PARALLEL = ("dp", "tp", "pp", "vpp", "cp", "ep")
_OPTIONAL = ("etp", "shard_group_size", "microbatch_group_size")
"""ParallelConfig fields whose None is stored as 0."""
EVEN_SPLIT: tuple[int, ...] = ()
"""``LayoutArrays.splits[0]``: layers spread as evenly as possible over the pipeline chunks."""
Splits = tuple[tuple[int, ...], ...]
_CODED: dict[str, type[CodedEnum]] = {"recompute": Recompute, "schedule": PipelineSchedule}


_FLAGS = ("distributed_optimizer", "sequence_parallel")
"""Columns that are 0 or 1, where booleans are accepted."""

_INT64_MAX = np.iinfo(np.int64).max


def _where(name: str, raw: np.ndarray, flat_index: int) -> str:
    """``configs['tp'][3]`` (``[1, 2]`` for a 2-d column; no index for a scalar)."""
    if raw.ndim == 0:
        return f"configs[{name!r}]"
    index = np.unravel_index(flat_index, raw.shape)
    return f"configs[{name!r}][{', '.join(str(int(i)) for i in index)}]"


def _array(name: str, value: Any) -> np.ndarray:
    """``value`` as a numpy array with at least one element; ConfigError for ragged nesting or an empty column."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged lists: "inhomogeneous shape"
        raise ConfigError(f"configs[{name!r}] is not a rectangular array ({str(exc).partition('.')[0]})",
                          field=name, value=short_repr(value),
                          hint="give a scalar or an array whose rows have equal lengths") from None
    if raw.size == 0:
        raise ConfigError(f"configs[{name!r}] is empty", field=name, value=short_repr(value),
                          hint="give at least one value, or leave the column out for the recipe's default")
    return raw


def _bad_value(name: str, raw: np.ndarray, i: int, why: str) -> ConfigError:
    value = raw.ravel()[i]
    value = value.item() if isinstance(value, np.generic) else value
    return ConfigError(f"{_where(name, raw, i)} = {short_repr(value)} {why}", field=name, value=value,
                       hint=f"give {name} as whole numbers")


def _exact_ints(name: str, raw: np.ndarray) -> IntArray:
    """An int64 copy of integer-valued ``raw``; ConfigError naming the first element that is not a whole number
    (2.9 would truncate to 2), not finite, or beyond int64 (which would wrap)."""
    kind = raw.dtype.kind
    if kind == "b" and name not in _FLAGS:
        raise _bad_value(name, raw, 0, "is a boolean, not a number")
    if kind in "iub":
        if kind == "u" and int(raw.max()) > _INT64_MAX:
            raise _bad_value(name, raw, int(np.argmax(raw)), "is beyond int64")
        return raw.astype(np.int64)
    if kind == "f":
        with np.errstate(invalid="ignore"):
            for bad, why in ((~np.isfinite(raw), "is not finite"), (raw != np.round(raw), "is not a whole number"),
                             (np.abs(raw) > 2.0**53, "is too large for a float to hold it exactly")):
                if bad.any():
                    raise _bad_value(name, raw, int(np.flatnonzero(bad)[0]), why)
        return raw.astype(np.int64)
    if kind == "O":
        flat = raw.ravel()
        for i, v in enumerate(flat):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise _bad_value(name, raw, i, "is not an integer")
            if not -_INT64_MAX <= int(v) <= _INT64_MAX:
                raise _bad_value(name, raw, i, "is beyond int64")
        return np.array([int(v) for v in flat], dtype=np.int64).reshape(raw.shape)
    raise _bad_value(name, raw, 0, f"is not a number ({raw.dtype} values)")


def enum_codes(values: npt.ArrayLike, kind: type[CodedEnum], field: str) -> IntArray:
    """``values`` (members, their string values, or integer codes) as an int64 array of codes."""
    raw = _array(field, values)
    if raw.dtype.kind in "iuf":
        return _exact_ints(field, raw)
    by_name = {m.value: m.code for m in kind}
    flat = [v.value if isinstance(v, kind) else v for v in np.asarray(values, dtype=object).ravel()]
    unknown = sorted({short_repr(v) for v in flat if not _is_code(v) and not (isinstance(v, str) and v in by_name)})
    if unknown:
        raise ConfigError(f"{field} has unknown values {unknown}", field=field, value=unknown,
                          hint=f"use one of {sorted(by_name)} or codes {sorted(by_name.values())}")
    return np.array([by_name[v] if isinstance(v, str) else int(v) for v in flat], dtype=np.int64).reshape(raw.shape)


def _is_code(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and abs(int(v)) <= _INT64_MAX


def _split_codes(value: Any) -> tuple[IntArray, Splits]:
    """``stage_layers`` given to :meth:`LayoutArrays.from_columns` (None, one tuple, or one entry per row) as
    codes into a table of splits."""
    def one(v: Any) -> tuple[int, ...]:
        if v is None:
            return EVEN_SPLIT
        try:
            split = tuple(int(x) for x in v)
        except (TypeError, ValueError):
            raise ConfigError(f"stage_layers entries must be None or sequences of layer counts, got {short_repr(v)}",
                              field="stage_layers", value=short_repr(v),
                              hint="e.g. (2, 4, 4, 2): layers per pipeline chunk, or None for the even split") from None
        if not split:
            raise ConfigError("stage_layers entries need one layer count per pipeline chunk, got ()",
                              field="stage_layers", value=v, hint="use None for the even split")
        if min(split) < 0:  # as ParallelConfig refuses them: a chunk holds no layers at the least
            raise ConfigError(f"stage_layers entries are layer counts, not negative: {list(split)}",
                              field="stage_layers", value=v, hint="give each chunk 0 or more layers, or None")
        return split

    single = value is None or (isinstance(value, (tuple, list)) and all(isinstance(x, (int, np.integer))
                                                                       for x in value))
    rows = [value] if single else list(value)
    table: dict[tuple[int, ...], int] = {EVEN_SPLIT: 0}
    codes = np.asarray([table.setdefault(one(v), len(table)) for v in rows], dtype=np.int64)
    return (codes[0] if single else codes), tuple(table)


def _int_column(name: str, value: Any) -> IntArray:
    if name in _CODED:
        return enum_codes(value, _CODED[name], name)
    return _exact_ints(name, _array(name, value))


def _global_batch(micro_batches: IntArray, per_step: tuple[IntArray, IntArray]) -> IntArray:
    """``num_microbatches x micro_batch_size x dp``, formed in float64 first: ConfigError where it exceeds the
    global-batch bound (int64 would wrap it into a plausible number)."""
    shape = np.broadcast(micro_batches, *per_step).shape
    product = np.broadcast_to(micro_batches.astype(np.float64) * per_step[0] * per_step[1], shape).ravel()
    too_big = np.flatnonzero(product > limits.GLOBAL_BATCH.high)
    if too_big.size:
        i = int(too_big[0])
        raise ConfigError(f"configs['num_microbatches'] at row {i}: " + beyond_message(
            int(product[i]), limits.GLOBAL_BATCH, "num_microbatches x micro_batch_size x dp"),
            field="num_microbatches", value=int(np.broadcast_to(micro_batches, shape).ravel()[i]))
    return micro_batches * per_step[0] * per_step[1]


@dataclass(frozen=True)
class LayoutArrays:
    """Layouts as int64 columns of one shape (:data:`LAYOUT_COLUMNS`); enums hold their ``code``, flags 0 or 1.

    Columns must be int64 arrays of one shape; their values are not checked here:
    :func:`frenzy_core.config.layout.layout_mask` says which rows are valid.
    """

    dp: IntArray
    tp: IntArray
    pp: IntArray
    vpp: IntArray
    cp: IntArray
    ep: IntArray
    micro_batch_size: IntArray
    global_batch_size: IntArray
    """Samples per optimizer step (always set: one micro-batch per DP rank where the recipe leaves it open)."""
    seq_len: IntArray
    zero_stage: IntArray
    distributed_optimizer: IntArray
    recompute: IntArray
    """:attr:`Recompute.code`."""
    recompute_num_layers: IntArray
    """0: the recipe's default (1 layer per chunk for uniform, all layers for block)."""
    sequence_parallel: IntArray
    schedule: IntArray
    """:attr:`PipelineSchedule.code`."""
    etp: IntArray = None  # type: ignore[assignment]  # filled with zeros in __post_init__
    """Expert tensor-parallel ranks; 0: = tp."""
    shard_group_size: IntArray = None  # type: ignore[assignment]  # filled with zeros in __post_init__
    """GPUs of a ZeRO shard group (HSDP); 0: all dp x cp replicas."""
    microbatch_group_size: IntArray = None  # type: ignore[assignment]  # filled with zeros in __post_init__
    """Interleaved schedule's micro-batch group per virtual stage; 0: pp."""
    stage_split: IntArray = None  # type: ignore[assignment]  # filled with zeros in __post_init__
    """Index into :attr:`splits`: the layers of each pipeline chunk (0: the even split)."""
    splits: Splits = (EVEN_SPLIT,)
    """Chunk layer counts the rows refer to; ``splits[0]`` is the even split."""

    def __post_init__(self) -> None:
        for name in ("etp", "shard_group_size", "microbatch_group_size", "stage_split"):
            if getattr(self, name) is None:  # columns callers that predate them leave out
                object.__setattr__(self, name, np.zeros_like(self.dp))
        if not self.splits or self.splits[0] != EVEN_SPLIT:
            raise ConfigError("LayoutArrays.splits must start with the even split ()", field="splits",
                              value=self.splits)
        shape = np.shape(self.dp)
        for f in fields(self):
            if f.name == "splits":
                continue
            column = getattr(self, f.name)
            if not isinstance(column, np.ndarray) or column.dtype != np.int64 or column.shape != shape:
                raise ConfigError(f"LayoutArrays.{f.name} must be an int64 array of the shape of dp {shape}, got "
                                  f"{type(column).__name__} {getattr(column, 'dtype', '')} {np.shape(column)}",
                                  field=f.name, hint="build layouts with LayoutArrays.from_columns")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_configs(cls, training: TrainingConfig, parallel: ParallelConfig) -> LayoutArrays:
        """One row: ``parallel`` with ``training``'s searched fields."""
        gbs = training.global_batch_size or training.micro_batch_size * parallel.dp
        row = {name: getattr(parallel, name) for name in _PARALLEL}
        row.update({name: getattr(parallel, name) or 0 for name in _OPTIONAL})
        row.update(micro_batch_size=training.micro_batch_size, global_batch_size=gbs, seq_len=training.seq_len,
                   zero_stage=training.zero_stage, distributed_optimizer=int(training.distributed_optimizer),
                   recompute=training.recompute.code, recompute_num_layers=training.recompute_num_layers or 0,
                   sequence_parallel=int(training.sequence_parallel), schedule=parallel.schedule.code,
                   stage_split=0 if parallel.stage_layers is None else 1)
        splits = (EVEN_SPLIT,) if parallel.stage_layers is None else (EVEN_SPLIT, tuple(parallel.stage_layers))
        return cls(**{k: np.array([v], dtype=np.int64) for k, v in row.items()}, splits=splits)

    @classmethod
    def from_columns(cls, columns: Mapping[str, npt.ArrayLike], training: TrainingConfig) -> LayoutArrays:
        """Columns broadcast together; missing ones take ``training``'s value (``schedule``: interleaved where
        vpp > 1, else 1F1B; parallel degrees: 1). ``recompute``/``schedule`` take members, names or codes;
        ``num_microbatches`` may stand in for ``global_batch_size``."""
        if not isinstance(columns, Mapping):
            raise ConfigError(f"layouts must be a LayoutArrays or a mapping of columns, got {type(columns).__name__}",
                              field="layouts")
        unknown = sorted(set(columns) - set(LAYOUT_COLUMNS) - {"num_microbatches", "stage_layers"})
        if unknown:
            raise ConfigError(f"unknown configs keys {unknown}", field="configs", value=unknown,
                              hint=f"use keys from {[*LAYOUT_COLUMNS, 'num_microbatches', 'stage_layers']}")
        if "stage_layers" in columns and "stage_split" in columns:
            raise ConfigError("give configs['stage_layers'] or configs['stage_split'], not both", field="configs")
        if "num_microbatches" in columns and "global_batch_size" in columns:
            raise ConfigError("give configs['num_microbatches'] or configs['global_batch_size'], not both",
                              field="configs")
        defaults: dict[str, Any] = {name: 1 for name in _PARALLEL}
        defaults.update({name: 0 for name in _OPTIONAL})
        splits: Splits = (EVEN_SPLIT,)
        if "stage_layers" in columns:
            defaults["stage_split"], splits = _split_codes(columns["stage_layers"])
        else:
            defaults["stage_split"] = 0
        defaults.update(micro_batch_size=training.micro_batch_size, seq_len=training.seq_len,
                        zero_stage=training.zero_stage, distributed_optimizer=int(training.distributed_optimizer),
                        recompute=training.recompute.code, recompute_num_layers=training.recompute_num_layers or 0,
                        sequence_parallel=int(training.sequence_parallel))
        vals = {k: _int_column(k, columns.get(k, v)) for k, v in defaults.items()}
        interleaved, one_f_one_b = PipelineSchedule.INTERLEAVED.code, PipelineSchedule.ONE_F_ONE_B.code
        vals["schedule"] = (_int_column("schedule", columns["schedule"]) if "schedule" in columns
                            else np.where(vals["vpp"] > 1, interleaved, one_f_one_b))
        batch_name = "num_microbatches" if "num_microbatches" in columns else "global_batch_size"
        batch = (_int_column(batch_name, columns[batch_name]) if batch_name in columns
                 else None if training.global_batch_size is None
                 else _int_column(batch_name, training.global_batch_size))
        try:  # before any product of columns, which would raise numpy's ValueError instead
            shape = np.broadcast(*vals.values(), *([] if batch is None else [batch])).shape
        except ValueError as exc:
            raise ConfigError(f"configs arrays do not broadcast together: {exc}", field="configs",
                              hint="give each column one value or arrays of one common shape") from None
        if batch is None:
            vals["global_batch_size"] = vals["micro_batch_size"] * vals["dp"]
        elif batch_name == "num_microbatches":
            vals["global_batch_size"] = _global_batch(batch, (vals["micro_batch_size"], vals["dp"]))
        else:
            vals["global_batch_size"] = batch
        if int(np.max(vals["stage_split"], initial=0)) >= len(splits) or int(np.min(vals["stage_split"], initial=0)) < 0:
            raise ConfigError("configs['stage_split'] indexes LayoutArrays.splits; only 0 (the even split) is known "
                              "here", field="stage_split", hint="give configs['stage_layers'] instead")
        return cls(**{k: np.broadcast_to(vals[k], shape) for k in LAYOUT_COLUMNS}, splits=splits)

    # ------------------------------------------------------------------ rows
    def __len__(self) -> int:
        return int(self.dp.shape[0]) if self.dp.ndim else 1

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.dp.shape)

    def take(self, index: npt.ArrayLike | slice) -> LayoutArrays:
        """The rows at ``index`` (a boolean mask, integer positions, or a slice: views of the columns)."""
        idx = index if isinstance(index, slice) else np.asarray(index)
        return LayoutArrays(**{k: getattr(self, k)[idx] for k in LAYOUT_COLUMNS}, splits=self.splits)

    def flat(self) -> LayoutArrays:
        """The same rows as one-dimensional columns (C order; views where the columns already are, such as those
        a default broadcasts)."""
        return LayoutArrays(**{k: np.atleast_1d(getattr(self, k)).reshape(-1) for k in LAYOUT_COLUMNS},
                            splits=self.splits)

    def masked(self, keep: npt.NDArray[np.bool_]) -> LayoutArrays:
        """Rows where ``keep`` is False replaced by the trivial layout (one GPU, one micro-batch, nothing
        sharded or recomputed), so that arithmetic on them stays finite; their results are to be discarded."""
        trivial = {"zero_stage": 0, "distributed_optimizer": 0, "recompute": 0, "recompute_num_layers": 0,
                   "sequence_parallel": 0, "schedule": 0, **{k: 0 for k in (*_OPTIONAL, "stage_split")}}
        return LayoutArrays(**{k: np.where(keep, getattr(self, k), trivial.get(k, 1)) for k in LAYOUT_COLUMNS},
                            splits=self.splits)

    @functools.cached_property
    def world_size(self) -> IntArray:
        """GPUs each layout uses (dp x tp x pp x cp)."""
        return self.dp * self.tp * self.pp * self.cp

    @functools.cached_property
    def num_microbatches(self) -> IntArray:
        """Micro-batches per DP rank per step (gradient accumulation steps); rounded down where the global batch
        does not split evenly (a row the layout rules reject)."""
        return self.global_batch_size // np.maximum(self.micro_batch_size * self.dp, 1)

    @functools.cached_property
    def effective_zero_stage(self) -> IntArray:
        """ZeRO stage counting Megatron's distributed optimizer as stage 1."""
        return np.maximum(self.zero_stage, self.distributed_optimizer)

    @functools.cached_property
    def expert_tp(self) -> IntArray:
        """Expert tensor-parallel ranks (etp, or tp where unset)."""
        return np.where(self.etp > 0, self.etp, self.tp)

    @functools.cached_property
    def shard_group(self) -> IntArray:
        """GPUs a ZeRO shard spans: the HSDP group, or all dp x cp replicas."""
        return np.where(self.shard_group_size > 0, self.shard_group_size, self.dp * self.cp)

    @functools.cached_property
    def microbatch_group(self) -> IntArray:
        """Micro-batches per virtual stage of the interleaved schedule (pp where unset)."""
        return np.where(self.microbatch_group_size > 0, self.microbatch_group_size, self.pp)

    @functools.cached_property
    def active_sequence_parallel(self) -> IntArray:
        """Sequence parallelism where it has an effect (tp > 1), else 0."""
        return np.where(self.tp > 1, self.sequence_parallel, 0)

    @functools.cached_property
    def _split_table(self) -> tuple[IntArray, IntArray, IntArray]:
        """Chunk layer counts of every split as a zero-padded matrix, their prefix sums, and their lengths."""
        width = max(len(sp) for sp in self.splits) or 1
        sizes = np.zeros((len(self.splits), width), dtype=np.int64)
        for k, sp in enumerate(self.splits):
            sizes[k, :len(sp)] = sp
        starts = np.cumsum(sizes, axis=1) - sizes
        return sizes, starts, np.array([len(sp) for sp in self.splits], dtype=np.int64)

    def chunk_span(self, num_layers: int, chunk: npt.ArrayLike) -> tuple[IntArray, IntArray]:
        """(first layer, layer count) of pipeline chunk ``chunk`` (0-based, model order) of each row: the row's
        split, or ``num_layers`` cut into pp x vpp chunks with the first ``num_layers mod (pp vpp)`` one longer
        (so stage 0 is never lighter than a middle stage). Chunks beyond a row's pp x vpp are empty."""
        c = np.asarray(chunk, dtype=np.int64)
        chunks = np.maximum(self.pp * self.vpp, 1)
        base, extra = num_layers // chunks, num_layers % chunks
        even_size = np.where(c < chunks, base + (c < extra), 0)
        even_start = c * base + np.minimum(c, extra)
        if len(self.splits) == 1:
            return np.asarray(even_start), np.asarray(even_size)
        sizes, starts, lengths = self._split_table
        code = np.clip(self.stage_split, 0, len(self.splits) - 1)
        inside = (c >= 0) & (c < lengths[code])
        col = np.clip(c, 0, sizes.shape[1] - 1)
        explicit = code > 0
        size = np.where(explicit, np.where(inside, sizes[code, col], 0), even_size)
        start = np.where(explicit, starts[code, col], even_start)
        return np.asarray(start), np.asarray(size)

    def stage_layer_count(self, num_layers: int, stage: npt.ArrayLike) -> IntArray:
        """Transformer layers pipeline stage ``stage`` holds over all its virtual chunks (stage, stage + pp, ...)."""
        st = np.asarray(stage, dtype=np.int64)
        total = np.zeros(np.broadcast(st, self.pp).shape, dtype=np.int64)
        for j in range(int(np.max(self.vpp, initial=1))):
            _, size = self.chunk_span(num_layers, st + j * self.pp)
            total += np.where(j < self.vpp, size, 0)
        return total

    def split_layer_total(self) -> IntArray:
        """Sum of each row's chunk layer counts (-1 for rows on the even split)."""
        sizes, _, _ = self._split_table
        totals = sizes.sum(axis=1)
        totals[0] = -1
        return totals[np.clip(self.stage_split, 0, len(self.splits) - 1)]

    def split_chunks(self) -> IntArray:
        """Chunks each row's split lists (0 for the even split)."""
        return self._split_table[2][np.clip(self.stage_split, 0, len(self.splits) - 1)]

    def stage_layers(self, i: int) -> tuple[int, ...] | None:
        """Row ``i``'s chunk layer counts (None: the even split)."""
        split = self.splits[int(self.stage_split[i])]
        return None if split == EVEN_SPLIT else split

    def parallel(self, i: int) -> ParallelConfig:
        """Row ``i`` as a :class:`ParallelConfig`."""
        fields: dict[str, Any] = {k: int(getattr(self, k)[i]) for k in _PARALLEL}
        fields.update({k: int(getattr(self, k)[i]) or None for k in _OPTIONAL})
        return ParallelConfig(**fields, stage_layers=self.stage_layers(i),
                              schedule=PipelineSchedule.from_code(int(self.schedule[i])))

    def training(self, i: int, base: TrainingConfig) -> TrainingConfig:
        """``base`` with row ``i``'s searched fields and its global batch (sequence length and recompute chunk
        too where the row changes them)."""
        changes: dict[str, Any] = {
            "global_batch_size": int(self.global_batch_size[i]), "micro_batch_size": int(self.micro_batch_size[i]),
            "recompute": Recompute.from_code(int(self.recompute[i])), "zero_stage": int(self.zero_stage[i]),
            "distributed_optimizer": bool(self.distributed_optimizer[i]),
            "sequence_parallel": bool(self.sequence_parallel[i]),
        }
        if int(self.seq_len[i]) != base.seq_len:
            changes["seq_len"] = int(self.seq_len[i])
        if int(self.recompute_num_layers[i]) != (base.recompute_num_layers or 0):
            changes["recompute_num_layers"] = int(self.recompute_num_layers[i]) or None
        return base.replace(**changes)  # type: ignore[no-any-return]

    def describe(self, i: int, *, compact: bool = False) -> str:
        """Row ``i`` in words: degrees (vpp, cp, ep where above 1), micro-batch, recompute, sharding.

        ``dp=2, tp=8, pp=1, micro_batch_size=1, recompute=none, zero_stage=0`` (plans), or compact:
        ``dp2 tp8 pp1 mbs1`` with only what departs from the defaults (scheduler records).
        """
        degrees = [(k, int(getattr(self, k)[i])) for k in _PARALLEL if k in ("dp", "tp", "pp")
                   or int(getattr(self, k)[i]) > 1]
        degrees += [(k, int(getattr(self, k)[i])) for k in _OPTIONAL if int(getattr(self, k)[i]) > 0
                    and not (k == "etp" and int(self.etp[i]) == int(self.tp[i]))]
        recompute = Recompute.from_code(int(self.recompute[i]))
        zero, dist_opt, sp = int(self.zero_stage[i]), bool(self.distributed_optimizer[i]), bool(self.sequence_parallel[i])
        if compact:
            parts = [f"{k}{v}" for k, v in degrees] + [f"mbs{int(self.micro_batch_size[i])}"]
            parts += [f"recompute={recompute.value}"] if recompute is not Recompute.NONE else []
            parts += ([f"zero{zero}"] if zero else []) + (["dist-opt"] if dist_opt else []) + (["sp"] if sp else [])
            return " ".join(parts)
        parts = [f"{k}={v}" for k, v in degrees]
        split = self.stage_layers(i)
        parts += [f"stage_layers={list(split)}"] if split is not None else []
        parts += [f"micro_batch_size={int(self.micro_batch_size[i])}", f"recompute={recompute.value}"]
        parts.append("distributed_optimizer" if dist_opt else f"zero_stage={zero}")
        parts += ["sequence_parallel"] if sp else []
        return ", ".join(parts)
