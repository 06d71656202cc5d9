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

from frenzy_core._base import CodedEnum
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Recompute, TrainingConfig
from frenzy_core.errors import ConfigError

__all__ = ["LAYOUT_COLUMNS", "LayoutArrays", "enum_codes"]

IntArray = npt.NDArray[np.int64]

LAYOUT_COLUMNS: tuple[str, ...] = (
    "dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "global_batch_size", "seq_len", "zero_stage",
    "distributed_optimizer", "recompute", "recompute_num_layers", "sequence_parallel", "schedule",
)
"""The columns of :class:`LayoutArrays`. :meth:`LayoutArrays.from_columns` also takes ``num_microbatches``
instead of ``global_batch_size``."""

_PARALLEL = ("dp", "tp", "pp", "vpp", "cp", "ep")
_CODED: dict[str, type[CodedEnum]] = {"recompute": Recompute, "schedule": PipelineSchedule}


def enum_codes(values: npt.ArrayLike, kind: type[CodedEnum], field: str) -> IntArray:
    """``values`` (members, their string values, or integer codes) as an int64 array of codes."""
    raw = np.asarray(values)
    if raw.dtype.kind in "iub":
        return raw.astype(np.int64)
    by_name = {m.value: m.code for m in kind}
    flat = [v.value if isinstance(v, kind) else v for v in np.asarray(values, dtype=object).ravel()]
    unknown = sorted({str(v) for v in flat if not isinstance(v, (int, np.integer)) and v not in by_name})
    if unknown:
        raise ConfigError(f"{field} has unknown values {unknown}", field=field, value=unknown,
                          hint=f"use one of {sorted(by_name)} or codes {sorted(by_name.values())}")
    return np.array([by_name[v] if isinstance(v, str) else int(v) for v in flat], dtype=np.int64).reshape(raw.shape)


def _int_column(name: str, value: Any) -> IntArray:
    if name in _CODED:
        return enum_codes(value, _CODED[name], name)
    try:
        return np.asarray(value).astype(np.int64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must hold integers, got {value!r}", field=name, value=value) from None


@dataclass(frozen=True)
class LayoutArrays:
    """Layouts as int64 columns of one shape (:data:`LAYOUT_COLUMNS`); enums hold their ``code``, flags 0 or 1.

    Columns are not checked here: :func:`frenzy_core.config.layout.layout_mask` says which rows are valid.
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

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_configs(cls, training: TrainingConfig, parallel: ParallelConfig) -> LayoutArrays:
        """One row: ``parallel`` with ``training``'s searched fields."""
        gbs = training.global_batch_size or training.micro_batch_size * parallel.dp
        row = {name: getattr(parallel, name) for name in _PARALLEL}
        row.update(micro_batch_size=training.micro_batch_size, global_batch_size=gbs, seq_len=training.seq_len,
                   zero_stage=training.zero_stage, distributed_optimizer=int(training.distributed_optimizer),
                   recompute=training.recompute.code, recompute_num_layers=training.recompute_num_layers or 0,
                   sequence_parallel=int(training.sequence_parallel), schedule=parallel.schedule.code)
        return cls(**{k: np.array([v], dtype=np.int64) for k, v in row.items()})

    @classmethod
    def from_columns(cls, columns: Mapping[str, npt.ArrayLike], training: TrainingConfig) -> LayoutArrays:
        """Columns broadcast together; missing ones take ``training``'s value (``schedule``: interleaved where
        vpp > 1, else 1F1B; parallel degrees: 1). ``recompute``/``schedule`` take members, names or codes;
        ``num_microbatches`` may stand in for ``global_batch_size``."""
        if not isinstance(columns, Mapping):
            raise ConfigError(f"layouts must be a LayoutArrays or a mapping of columns, got {type(columns).__name__}",
                              field="layouts")
        unknown = sorted(set(columns) - set(LAYOUT_COLUMNS) - {"num_microbatches"})
        if unknown:
            raise ConfigError(f"unknown configs keys {unknown}", field="configs", value=unknown,
                              hint=f"use keys from {[*LAYOUT_COLUMNS, 'num_microbatches']}")
        if "num_microbatches" in columns and "global_batch_size" in columns:
            raise ConfigError("give configs['num_microbatches'] or configs['global_batch_size'], not both",
                              field="configs")
        defaults: dict[str, Any] = {name: 1 for name in _PARALLEL}
        defaults.update(micro_batch_size=training.micro_batch_size, seq_len=training.seq_len,
                        zero_stage=training.zero_stage, distributed_optimizer=int(training.distributed_optimizer),
                        recompute=training.recompute.code, recompute_num_layers=training.recompute_num_layers or 0,
                        sequence_parallel=int(training.sequence_parallel))
        vals = {k: _int_column(k, columns.get(k, v)) for k, v in defaults.items()}
        interleaved, one_f_one_b = PipelineSchedule.INTERLEAVED.code, PipelineSchedule.ONE_F_ONE_B.code
        vals["schedule"] = (_int_column("schedule", columns["schedule"]) if "schedule" in columns
                            else np.where(vals["vpp"] > 1, interleaved, one_f_one_b))
        per_step = vals["micro_batch_size"] * vals["dp"]
        if "num_microbatches" in columns:
            vals["global_batch_size"] = _int_column("num_microbatches", columns["num_microbatches"]) * per_step
        elif "global_batch_size" in columns or training.global_batch_size is not None:
            vals["global_batch_size"] = _int_column("global_batch_size",
                                                    columns.get("global_batch_size", training.global_batch_size))
        else:
            vals["global_batch_size"] = per_step
        try:
            shape = np.broadcast(*vals.values()).shape
        except ValueError as exc:
            raise ConfigError(f"configs arrays do not broadcast together: {exc}", field="configs") from None
        return cls(**{k: np.broadcast_to(vals[k], shape) for k in LAYOUT_COLUMNS})

    # ------------------------------------------------------------------ rows
    def __len__(self) -> int:
        return int(self.dp.shape[0]) if self.dp.ndim else 1

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.dp.shape)

    def take(self, index: npt.ArrayLike) -> LayoutArrays:
        """The rows at ``index`` (a boolean mask or integer positions)."""
        idx = np.asarray(index)
        return LayoutArrays(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def flat(self) -> LayoutArrays:
        """The same rows as one-dimensional columns (C order)."""
        return LayoutArrays(**{f.name: np.atleast_1d(getattr(self, f.name)).ravel() for f in fields(self)})

    def masked(self, keep: npt.NDArray[np.bool_]) -> LayoutArrays:
        """Rows where ``keep`` is False replaced by the trivial layout (one GPU, one micro-batch, nothing
        sharded or recomputed), so that arithmetic on them stays finite; their results are to be discarded."""
        trivial = {"zero_stage": 0, "distributed_optimizer": 0, "recompute": 0, "recompute_num_layers": 0,
                   "sequence_parallel": 0, "schedule": 0}
        return LayoutArrays(**{f.name: np.where(keep, getattr(self, f.name), trivial.get(f.name, 1))
                               for f in fields(self)})

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
    def active_sequence_parallel(self) -> IntArray:
        """Sequence parallelism where it has an effect (tp > 1), else 0."""
        return np.where(self.tp > 1, self.sequence_parallel, 0)

    def parallel(self, i: int) -> ParallelConfig:
        """Row ``i`` as a :class:`ParallelConfig`."""
        return ParallelConfig(**{k: int(getattr(self, k)[i]) for k in _PARALLEL},
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
        recompute = Recompute.from_code(int(self.recompute[i]))
        zero, dist_opt, sp = int(self.zero_stage[i]), bool(self.distributed_optimizer[i]), bool(self.sequence_parallel[i])
        if compact:
            parts = [f"{k}{v}" for k, v in degrees] + [f"mbs{int(self.micro_batch_size[i])}"]
            parts += [f"recompute={recompute.value}"] if recompute is not Recompute.NONE else []
            parts += ([f"zero{zero}"] if zero else []) + (["dist-opt"] if dist_opt else []) + (["sp"] if sp else [])
            return " ".join(parts)
        parts = [f"{k}={v}" for k, v in degrees]
        parts += [f"micro_batch_size={int(self.micro_batch_size[i])}", f"recompute={recompute.value}"]
        parts.append("distributed_optimizer" if dist_opt else f"zero_stage={zero}")
        parts += ["sequence_parallel"] if sp else []
        return ", ".join(parts)
