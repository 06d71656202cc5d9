"""Terms evaluated once per distinct combination of the columns they read, then gathered back to every row.

A planner's candidate table is a cross product, so a term that reads a few of its columns takes far fewer
distinct values than there are rows: the time model computes its stage terms per distinct stage shape, the
memory model its model states per distinct sharding and pipeline position (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["collapsed", "distinct", "gather"]

T = TypeVar("T")

DENSE_SPAN = 16
"""A column spanning fewer values than this enters the key as its offset from its least value (two operations per
row) while the key's table stays about the size of the rows; a wider one, or one that would outgrow the table, is
ranked through a lookup table first (four operations, two of them indexed), so that sparse values such as powers
of two keep the key's table small."""


def distinct(*columns: npt.NDArray[np.int64] | npt.NDArray[np.bool_], rows: npt.NDArray[np.intp] | None = None
             ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Index of one row of each distinct combination of the integer columns, and each row's combination number:
    ``x[first][inverse] == x`` for every column ``x``. Linear time where columns span few values (layout
    degrees): they are ranked through lookup tables; a column spanning more, or a key that would outgrow int64,
    is ranked by sorting. ``rows``: the combinations of those rows only (positions into one-dimensional columns),
    as of the columns taken there, each taken in its turn (no copy of every column at once)."""
    shape = columns[0].shape if rows is None else rows.shape
    n = int(np.prod(shape))
    key = np.zeros(shape, dtype=np.int64)
    size = 1
    for column in columns:
        if rows is not None and not any(column.strides):  # one value broadcast over the rows
            continue
        col = column if rows is None else column[rows]
        low, high = int(col.min()), int(col.max())
        if low == high:
            continue
        c = col.astype(np.int64, copy=False)
        offset = c - low if low else c
        if high - low < DENSE_SPAN and size * (high - low + 1) <= 2 * n + 65_536:  # the offsets: no lookup
            rank, count = offset, high - low + 1
        elif high - low < 4 * n + 65_536:
            present = np.zeros(high - low + 1, dtype=bool)
            present[offset] = True
            table = np.cumsum(present) - 1
            rank, count = table[offset], int(table[-1] + 1)
        else:
            values, flat_rank = np.unique(c, return_inverse=True)
            rank, count = flat_rank.reshape(c.shape), len(values)
        if size * count >= 2**62:  # renumber the combinations so far (at most n of them)
            values, flat_key = np.unique(key, return_inverse=True)
            key, size = flat_key.reshape(key.shape).astype(np.int64), len(values)
        key = rank if size == 1 else key * count + rank
        size *= count
    if size > 4 * n + 1_000_000:  # too many combinations for a table: sort instead
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse.reshape(key.shape)
    present = np.zeros(size, dtype=bool)
    present[key] = True
    ids = np.cumsum(present) - 1
    inverse = ids[key]
    first = np.empty(int(ids[-1] + 1), dtype=np.intp)
    first[inverse] = np.arange(n, dtype=np.intp).reshape(key.shape)
    return first, inverse


def gather(value: T, inverse: npt.NDArray[np.intp], combinations: int) -> T:
    """``value``, computed with one entry per combination along its last axis, taken back to every row: each
    array becomes ``array[..., inverse]`` (one of length 1 there, as :func:`collapsed` leaves a term alike for
    every combination, a broadcast view), inside frozen dataclasses and tuples too; scalars, 0-d arrays and None,
    alike for every row, stay as they are. An array met twice is taken once (the same object twice after, as
    before: sums that share terms by identity still do). An array whose last axis is neither 1 nor
    ``combinations`` long was computed per row, not per combination: ValueError, never a silent mix-up."""

    def take(a: np.ndarray) -> np.ndarray:
        if a.shape[-1] not in (1, combinations):
            raise ValueError(f"gather: an array of last axis {a.shape[-1]} among terms of {combinations} "
                             "combinations (a term computed per row, not per combination)")
        if a.shape[-1] == 1:
            return np.broadcast_to(a, a.shape[:-1] + inverse.shape)
        return np.take(a, inverse, axis=-1)

    return _map_arrays(value, take, {})  # type: ignore[no-any-return]


def collapsed(value: T) -> T:
    """``value`` with each array that holds one value along its last axis cut to its first entry there, so that
    :func:`gather` broadcasts it instead of copying it to every row (a dense model's MoE layer count, states that
    are 0 throughout)."""

    def cut(a: np.ndarray) -> np.ndarray:
        return a[..., :1] if a.shape[-1] > 1 and bool((a == a[..., :1]).all()) else a

    return _map_arrays(value, cut, {})  # type: ignore[no-any-return]


def _map_arrays(value: Any, fn: Callable[[np.ndarray], np.ndarray], memo: dict[int, Any]) -> Any:
    """``fn`` of every array of at least one dimension in ``value`` (each distinct array once), through tuples and
    dataclasses."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value
        if id(value) not in memo:
            memo[id(value)] = fn(value)
        return memo[id(value)]
    if isinstance(value, tuple):
        items = [_map_arrays(v, fn, memo) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value)(**{f.name: _map_arrays(getattr(value, f.name), fn, memo)
                              for f in dataclasses.fields(value)})
    return value
