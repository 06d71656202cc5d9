"""The layout rules: when a model, a recipe and a parallel layout can run together, as one table on arrays.

Every rule is a row of :data:`LAYOUT_RULES`: the fields it constrains (the first is the one an error names), a
predicate over :class:`LayoutArrays` (vectorised: one boolean per layout) and the message of a failing row.
:func:`validate_layout` raises the first failing rule of one layout; :func:`layout_mask` gives the rows that
pass every rule, which the batch estimators and the planner's candidate table use; :func:`require_rows` raises
for the first failing row of a batch. Adding a rule is adding a row here (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core import _limits as limits
from frenzy_core._limits import Limit, beyond_message
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Recompute, TrainingConfig
from frenzy_core.errors import ConfigError

__all__ = [
    "BOUND_RULES",
    "LAYOUT_RULES",
    "LayoutRule",
    "RuleRow",
    "global_batch_size",
    "layout_mask",
    "layout_rule",
    "num_microbatches",
    "require_rows",
    "validate_layout",
]

BoolArray = npt.NDArray[np.bool_]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def global_batch_size(training: TrainingConfig, parallel: ParallelConfig) -> int:
    """Samples per optimizer step (default: one micro-batch per data-parallel rank)."""
    if training.global_batch_size is None:
        return training.micro_batch_size * parallel.dp
    return training.global_batch_size


def num_microbatches(training: TrainingConfig, parallel: ParallelConfig) -> int:
    """Micro-batches each data-parallel rank runs per step (gradient accumulation steps)."""
    return global_batch_size(training, parallel) // (training.micro_batch_size * parallel.dp)


class RuleRow:
    """One layout as a failing rule's message sees it: values and display names of fields by their path
    (``parallel.tp``, ``training.seq_len``, ``model.num_kv_heads``), names mapped by ``names`` (e.g. to
    Megatron-LM flags), otherwise the path without its config prefix."""

    def __init__(self, model: ModelConfig, layouts: LayoutArrays, i: int, names: Mapping[str, str] | None = None):
        self.model, self.layouts, self.i, self.names = model, layouts, i, names or {}

    def __getitem__(self, field: str) -> int:
        kind, _, name = field.partition(".")
        if name == "stage_layers":
            return int(self.layouts.split_layer_total()[self.i])
        if kind == "model":
            value: object = self.model
            for part in name.split("."):
                value = getattr(value, part)
            return int(value)  # type: ignore[call-overload]
        return int(getattr(self.layouts, name)[self.i])

    def label(self, field: str) -> str:
        return self.names.get(field, field.partition(".")[2])

    def show(self, field: str) -> str:
        """``label=value``."""
        return f"{self.label(field)}={self[field]}"


@dataclass(frozen=True)
class LayoutRule:
    """One condition on (model, layouts), with what to tell a user whose layout breaks it."""

    name: str
    fields: tuple[str, ...]
    """Paths of the fields the rule constrains; the first is the one a failure names (``ConfigError.field``)."""
    holds: Callable[[ModelConfig, LayoutArrays], npt.ArrayLike]
    """True for each layout that satisfies the rule (numpy broadcasting; values of rejected rows may be garbage)."""
    message: Callable[[RuleRow], str]
    hint: Callable[[RuleRow], str] | None = None

    def error(self, model: ModelConfig, layouts: LayoutArrays, i: int, names: Mapping[str, str] | None = None,
              prefix: str = "") -> ConfigError:
        """The :class:`ConfigError` for row ``i`` (field and names rendered through ``names``)."""
        row = RuleRow(model, layouts, i, names)
        field = self.fields[0]
        value: object = layouts.stage_layers(i) if field == "parallel.stage_layers" else row[field]
        return ConfigError(prefix + self.message(row), field=row.names.get(field, field), value=value,
                           hint=None if self.hint is None else self.hint(row))


def _within(name: str, lo: int | None, hi: float | None) -> Callable[[ModelConfig, LayoutArrays], npt.ArrayLike]:
    """Rows whose column ``name`` lies in [lo, hi] (None: unbounded); True at once when the column's extremes
    do (two reductions instead of comparisons over every row)."""

    def holds(m: ModelConfig, a: LayoutArrays) -> npt.ArrayLike:
        col = getattr(a, name)
        if col.size and (lo is None or int(col.min()) >= lo) and (hi is None or int(col.max()) <= hi):
            return True
        below = col >= lo if lo is not None else True
        return np.asarray(below & (col <= hi) if hi is not None else below)

    return holds


def _unless(unset: Mapping[str, int], holds: Callable[[ModelConfig, LayoutArrays], npt.ArrayLike]
            ) -> Callable[[ModelConfig, LayoutArrays], npt.ArrayLike]:
    """``holds``, which every row passes where each column of ``unset`` has its value (vpp 1, no stage split,
    cp 1...): True at once when the columns hold only those values in every row (two reductions each instead of
    the rule's arithmetic over every row, as a planner's table often leaves the column at its default)."""

    def rule(m: ModelConfig, a: LayoutArrays) -> npt.ArrayLike:
        columns = [getattr(a, name) for name in unset]
        if columns[0].size and all(int(c.min()) == v == int(c.max()) for c, v in zip(columns, unset.values())):
            return True
        return holds(m, a)

    return rule


def _positive(path: str) -> LayoutRule:
    name = path.partition(".")[2]
    return LayoutRule(f"{name}_positive", (path,), _within(name, 1, None),
                      lambda r: f"{r.show(path)} must be >= 1")


def _in_range(path: str, hi: int, what: str) -> LayoutRule:
    name = path.partition(".")[2]
    return LayoutRule(f"{name}_range", (path,), _within(name, 0, hi), lambda r: f"{r.show(path)} must be {what}")


def _at_most(path: str, limit: Limit) -> LayoutRule:
    name = path.partition(".")[2]
    return LayoutRule(f"{name}_bound", (path,), _within(name, None, limit.high),
                      lambda r: beyond_message(r[path], limit, r.label(path)))


def _product_at_most(paths: tuple[str, ...], limit: Limit) -> LayoutRule:
    """The product of columns, formed in float64 (int64 could wrap), at most ``limit``; True at once when the
    columns are nonnegative and the product of their largest values is (float products are monotone there)."""
    names = [p.partition(".")[2] for p in paths]

    def product(a: LayoutArrays) -> npt.NDArray[np.float64]:
        out = np.ones(a.shape)
        for name in names:
            out = out * getattr(a, name).astype(np.float64)
        return out

    def holds(m: ModelConfig, a: LayoutArrays) -> npt.ArrayLike:
        cols = [getattr(a, name) for name in names]
        if a.dp.size and all(int(c.min()) >= 0 for c in cols):
            largest = 1.0
            for c in cols:
                largest = largest * float(c.max())
            if largest <= limit.high:
                return True
        return product(a) <= limit.high

    def message(r: RuleRow) -> str:
        value = int(np.prod([float(r[p]) for p in paths]))
        return beyond_message(value, limit, " x ".join(r.label(p) for p in paths))

    return LayoutRule("_x_".join(names) + "_bound", paths, holds, message)


def _schedule_name(r: RuleRow) -> str:
    return PipelineSchedule.from_code(r["parallel.schedule"]).value


def _microbatches(a: LayoutArrays) -> npt.NDArray[np.int64]:
    return a.global_batch_size // np.maximum(a.micro_batch_size * a.dp, 1)


def _unset_or_positive(field: str) -> LayoutRule:
    """A column whose 0 means unset (None in the configs): negative values are refused."""
    name = field.partition(".")[2]
    return LayoutRule(f"{name}_range", (field,), _within(name, 0, None),
                      lambda r: f"{r.show(field)} must be >= 1 (0: unset)")


BOUND_RULES: tuple[LayoutRule, ...] = (
    *(_positive(f"parallel.{k}") for k in ("dp", "tp", "pp", "vpp", "cp", "ep")),
    *(_unset_or_positive(f"parallel.{k}") for k in ("etp", "shard_group_size", "microbatch_group_size")),
    LayoutRule("stage_split_range", ("parallel.stage_split",),
               lambda m, a: (a.stage_split >= 0) & (a.stage_split < len(a.splits)),
               lambda r: f"{r.show('parallel.stage_split')} indexes none of the layouts' {len(r.layouts.splits)} "
                         "stage splits"),
    *(_positive(f"training.{k}") for k in ("micro_batch_size", "seq_len", "global_batch_size")),
    _in_range("training.zero_stage", 3, "0, 1, 2 or 3"),
    _in_range("training.distributed_optimizer", 1, "0 or 1"),
    _in_range("training.sequence_parallel", 1, "0 or 1"),
    _in_range("training.recompute", len(Recompute) - 1, f"a recompute code in 0..{len(Recompute) - 1}"),
    _in_range("parallel.schedule", len(PipelineSchedule) - 1, f"a schedule code in 0..{len(PipelineSchedule) - 1}"),
    LayoutRule("recompute_num_layers_range", ("training.recompute_num_layers",),
               lambda m, a: a.recompute_num_layers >= 0,
               lambda r: f"{r.show('training.recompute_num_layers')} must be >= 0 (0: the default)"),
    *(_at_most(f"parallel.{k}", limits.DEGREE) for k in ("dp", "tp", "pp", "cp", "ep")),
    _at_most("parallel.vpp", limits.LAYERS),
    _at_most("training.micro_batch_size", limits.MICRO_BATCH),
    _at_most("training.seq_len", limits.SEQ_LEN),
    _at_most("training.global_batch_size", limits.GLOBAL_BATCH),
    _at_most("training.recompute_num_layers", limits.LAYERS),
    _product_at_most(("parallel.dp", "parallel.tp", "parallel.pp", "parallel.cp"), limits.GPUS),
    _product_at_most(("training.micro_batch_size", "training.seq_len"), limits.MICRO_BATCH_TOKENS),
    _product_at_most(("training.global_batch_size", "training.seq_len"), limits.STEP_TOKENS),
)
"""Every column within its range (what the pydantic fields of the configs enforce one config at a time): at least
the smallest meaningful value, at most the bounds of :mod:`frenzy_core._limits` (which keep every count derived
from a layout exact in int64; products are formed in float64 so that they cannot wrap)."""

_COMBINATIONS: tuple[LayoutRule, ...] = (
    LayoutRule("vpp_needs_pp", ("parallel.vpp", "parallel.pp"), _unless({"vpp": 1}, lambda m, a: (a.vpp == 1) | (a.pp > 1)),
               lambda r: f"{r.show('parallel.vpp')} needs {r.label('parallel.pp')} > 1",
               lambda r: f"set {r.label('parallel.pp')} >= 2 or {r.label('parallel.vpp')}=1"),
    LayoutRule("vpp_needs_interleaved", ("parallel.schedule", "parallel.vpp"),
               _unless({"vpp": 1}, lambda m, a: (a.vpp == 1) | (a.schedule == PipelineSchedule.INTERLEAVED.code)),
               lambda r: f"{r.show('parallel.vpp')} needs schedule='interleaved' (got {_schedule_name(r)!r})"),
    LayoutRule("ep_divides_dp_cp", ("parallel.ep", "parallel.dp", "parallel.cp"),
               _unless({"ep": 1, "etp": 0}, lambda m, a: (a.dp * a.cp * a.tp) % np.maximum(a.ep * a.expert_tp, 1) == 0),
               lambda r: f"{r.label('parallel.etp')} x {r.show('parallel.ep')} = "
                         f"{int(r.layouts.expert_tp[r.i])} x {r['parallel.ep']} must divide "
                         f"{r.label('parallel.dp')} x {r.label('parallel.cp')} x {r.label('parallel.tp')} = "
                         f"{r['parallel.dp'] * r['parallel.cp'] * r['parallel.tp']}; expert-parallel ranks are taken "
                         "from the data-, context- and tensor-parallel ranks"),
    LayoutRule("shard_group_divides_dp_cp", ("parallel.shard_group_size", "parallel.dp", "parallel.cp"),
               _unless({"shard_group_size": 0}, lambda m, a: (a.dp * a.cp) % np.maximum(a.shard_group, 1) == 0),
               lambda r: f"{r.show('parallel.shard_group_size')} must divide {r.label('parallel.dp')} x "
                         f"{r.label('parallel.cp')} = {r['parallel.dp'] * r['parallel.cp']}",
               lambda r: f"use {r.label('parallel.shard_group_size')} in "
                         f"{_divisors(r['parallel.dp'] * r['parallel.cp'])}"),
    LayoutRule("microbatch_group_needs_interleaving", ("parallel.microbatch_group_size", "parallel.vpp"),
               _unless({"microbatch_group_size": 0},
                       lambda m, a: (a.microbatch_group_size == 0) | ((a.vpp > 1) & (a.microbatch_group_size >= a.pp))),
               lambda r: f"{r.show('parallel.microbatch_group_size')} needs the interleaved schedule "
                         f"({r.label('parallel.vpp')} > 1) and at least {r.show('parallel.pp')} micro-batches"),
    LayoutRule("stage_layers_one_per_chunk", ("parallel.stage_layers", "parallel.pp", "parallel.vpp"),
               _unless({"stage_split": 0}, lambda m, a: (a.stage_split == 0) | (a.split_chunks() == a.pp * a.vpp)),
               lambda r: f"stage_layers lists {int(r.layouts.split_chunks()[r.i])} chunks, not "
                         f"{r.label('parallel.pp')} x {r.label('parallel.vpp')} = "
                         f"{r['parallel.pp'] * r['parallel.vpp']}",
               lambda r: "give one layer count per pipeline chunk, in model order"),
    LayoutRule("distributed_optimizer_is_zero_1", ("training.zero_stage", "training.distributed_optimizer"),
               _unless({"distributed_optimizer": 0}, lambda m, a: (a.distributed_optimizer == 0) | (a.zero_stage <= 1)),
               lambda r: f"{r.label('training.distributed_optimizer')} (ZeRO-1) cannot be combined with "
                         f"{r.show('training.zero_stage')}; use one of them"),
)
"""Fields of one config that constrain each other (ParallelConfig's and TrainingConfig's own validators)."""

_MODEL_FIT: tuple[LayoutRule, ...] = (
    LayoutRule("heads_divisible_by_tp", ("parallel.tp", "model.num_attention_heads"),
               lambda m, a: m.num_attention_heads % np.maximum(a.tp, 1) == 0,
               lambda r: f"{r.show('model.num_attention_heads')} is not divisible by {r.show('parallel.tp')}",
               lambda r: f"use {r.label('parallel.tp')} in {_divisors(r['model.num_attention_heads'])}"),
    LayoutRule("kv_heads_divisible_by_tp", ("parallel.tp", "model.num_kv_heads"),
               lambda m, a: m.num_kv_heads % np.maximum(a.tp, 1) == 0,
               lambda r: f"{r.show('model.num_kv_heads')} is not divisible by {r.show('parallel.tp')} (Megatron "
                         "splits key/value groups across tensor-parallel ranks)",
               lambda r: f"use {r.label('parallel.tp')} in {_divisors(r['model.num_kv_heads'])}"),
    LayoutRule("stage_layers_sum_to_layers", ("parallel.stage_layers", "model.num_layers"),
               _unless({"stage_split": 0}, lambda m, a: (a.stage_split == 0) | (a.split_layer_total() == m.num_layers)),
               lambda r: f"stage_layers {list(r.layouts.stage_layers(r.i) or ())} sum to "
                         f"{r['parallel.stage_layers']} layers, not {r.show('model.num_layers')}",
               lambda r: f"make the chunk layer counts add up to {r['model.num_layers']}"),
    LayoutRule("layers_cover_pipeline_chunks", ("parallel.pp", "parallel.vpp", "model.num_layers"),
               lambda m, a: (m.num_layers >= a.pp * a.vpp) | (a.stage_split > 0),
               lambda r: f"{r.show('model.num_layers')} is fewer than {r.label('parallel.pp')} x "
                         f"{r.label('parallel.vpp')} = {r['parallel.pp'] * r['parallel.vpp']} pipeline chunks",
               lambda r: f"use {r.label('parallel.pp')} x {r.label('parallel.vpp')} <= {r['model.num_layers']}"),
    LayoutRule("ep_needs_moe", ("parallel.ep",), _unless({"ep": 1}, lambda m, a: (a.ep == 1) | (m.moe is not None)),
               lambda r: f"{r.show('parallel.ep')} needs a mixture-of-experts model",
               lambda r: f"set {r.label('parallel.ep')}=1 for dense models"),
    LayoutRule("experts_divisible_by_ep", ("parallel.ep", "model.moe.num_experts"),
               lambda m, a: True if m.moe is None else m.moe.num_experts % np.maximum(a.ep, 1) == 0,
               lambda r: f"{r.show('model.moe.num_experts')} is not divisible by {r.show('parallel.ep')}",
               lambda r: f"use {r.label('parallel.ep')} in {_divisors(r['model.moe.num_experts'])}"),
    LayoutRule("seq_len_splits_over_cp", ("training.seq_len", "parallel.cp"),
               _unless({"cp": 1}, lambda m, a: (a.cp == 1) | (a.seq_len % np.maximum(2 * a.cp, 1) == 0)),
               lambda r: f"{r.show('training.seq_len')} is not divisible by 2 x {r.label('parallel.cp')} = "
                         f"{2 * r['parallel.cp']} (context parallelism splits each sequence into 2 x cp chunks)"),
    LayoutRule("seq_len_within_learned_positions", ("training.seq_len", "model.max_position_embeddings"),
               lambda m, a: (m.position_embedding is not PositionEmbedding.LEARNED)
               | (a.seq_len <= m.max_position_embeddings),
               lambda r: f"{r.show('training.seq_len')} exceeds the learned position table of "
                         f"{r.show('model.max_position_embeddings')}",
               lambda r: f"use {r.label('training.seq_len')} <= {r['model.max_position_embeddings']}"),
    LayoutRule("global_batch_splits_into_microbatches",
               ("training.global_batch_size", "training.micro_batch_size", "parallel.dp"),
               lambda m, a: a.global_batch_size % np.maximum(a.micro_batch_size * a.dp, 1) == 0,
               lambda r: f"{r.show('training.global_batch_size')} is not divisible by "
                         f"{r.label('training.micro_batch_size')} x {r.label('parallel.dp')} = "
                         f"{r['training.micro_batch_size']} x {r['parallel.dp']} = "
                         f"{r['training.micro_batch_size'] * r['parallel.dp']}",
               lambda r: f"use a multiple of {r['training.micro_batch_size'] * r['parallel.dp']}"),
    LayoutRule("interleaved_microbatches_multiple_of_pp", ("training.global_batch_size", "parallel.pp"),
               _unless({"vpp": 1}, lambda m, a: (a.vpp == 1) | (_microbatches(a) % np.maximum(a.microbatch_group, 1) == 0)),
               lambda r: f"the interleaved schedule needs the number of micro-batches "
                         f"({int(_microbatches(r.layouts)[r.i])}) to be a multiple of "
                         + (r.show('parallel.microbatch_group_size') if r['parallel.microbatch_group_size']
                            else r.show('parallel.pp'))),
)
"""Whether the model splits as the layout asks (what :func:`validate_layout` checks)."""

LAYOUT_RULES: tuple[LayoutRule, ...] = BOUND_RULES + _COMBINATIONS + _MODEL_FIT
"""Every rule, in the order :func:`validate_layout` reports them."""


def layout_rule(name: str) -> LayoutRule:
    """The rule called ``name``."""
    for rule in LAYOUT_RULES:
        if rule.name == name:
            return rule
    raise KeyError(name)


def _evaluate(model: ModelConfig, layouts: LayoutArrays, rules: Iterable[LayoutRule]) -> list[BoolArray]:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return [np.broadcast_to(np.asarray(rule.holds(model, layouts), dtype=bool), layouts.shape) for rule in rules]


def layout_mask(model: ModelConfig, layouts: LayoutArrays,
                rules: tuple[LayoutRule, ...] = LAYOUT_RULES) -> BoolArray:
    """True for each layout that satisfies every rule (what :func:`validate_layout` accepts)."""
    out = np.ones(layouts.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for rule in rules:
            ok = rule.holds(model, layouts)
            if np.ndim(ok) or not ok:  # a rule every row passes says True once
                out &= np.asarray(ok, dtype=bool)
    return out


def require_rows(model: ModelConfig, layouts: LayoutArrays, rules: tuple[LayoutRule, ...] = LAYOUT_RULES,
                 what: str = "candidate") -> None:
    """Raise the ConfigError of the first row (``"{what} {i}: ..."``, rows in C order) that breaks a rule."""
    flat = layouts.flat()
    for rule, ok in zip(rules, _evaluate(model, flat, rules)):
        bad = np.flatnonzero(~ok)
        if bad.size:
            raise rule.error(model, flat, int(bad[0]), prefix=f"{what} {int(bad[0])}: ")


def validate_layout(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig,
                    names: Mapping[str, str] | None = None) -> None:
    """Raise :class:`ConfigError` naming the field of the first rule the three configs break together.

    ``names`` renders field paths (``parallel.tp``) in another vocabulary, e.g. a launcher's flags.
    """
    layouts = LayoutArrays.from_configs(training, parallel)
    for rule, ok in zip(LAYOUT_RULES, _evaluate(model, layouts, LAYOUT_RULES)):
        if not ok[0]:
            raise rule.error(model, layouts, 0, names)
