"""``distinct`` numbers the distinct combinations of columns; ``gather`` takes per-combination values back to rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from frenzy_core._distinct import collapsed, distinct, gather

POOLS = [[0, 1, 2, 3], [1, 2, 4, 64, 512], [5, 2**40], [-3, 0, 9]]
"""Values of one column: a narrow span (entered as offsets), sparse ones (ranked through a table), a span too wide
for a table (sorted), negative ones."""
columns = st.integers(1, 5).flatmap(lambda k: st.integers(1, 60).flatmap(lambda n: st.lists(
    st.sampled_from(POOLS).flatmap(lambda pool: hnp.arrays(np.int64, n, elements=st.sampled_from(pool))),
    min_size=k, max_size=k)))


@settings(max_examples=30, deadline=None)
@given(cols=columns)
def test_first_and_inverse_rebuild_every_column(cols: list[np.ndarray]) -> None:
    """``x[first][inverse] == x`` for every column, one entry of ``first`` per distinct combination (rows with
    the same combination, and only they, share a number)."""
    first, inverse = distinct(*cols)
    for x in cols:
        assert np.array_equal(x[first][inverse], x)
    combos = list(zip(*(x.tolist() for x in cols)))
    assert len(first) == len(set(combos))
    assert {combos[i]: int(inverse[i]) for i in range(len(combos))} == {combos[j]: k for k, j in enumerate(first)}


@settings(max_examples=30, deadline=None)
@given(cols=columns, data=st.data())
def test_rows_number_the_combinations_of_those_rows(cols: list[np.ndarray], data: st.DataObject) -> None:
    """``distinct(*cols, rows=r)`` is ``distinct`` of the columns taken at ``r`` (repeats and any order of rows
    allowed), with a column that is one value broadcast over every row among them."""
    n = len(cols[0])
    rows = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n)), dtype=np.intp)
    cols = [*cols, np.broadcast_to(np.int64(data.draw(st.sampled_from([0, 7, -2]))), (n,))]
    first, inverse = distinct(*cols, rows=rows)
    expected_first, expected_inverse = distinct(*(x[rows] for x in cols))
    assert np.array_equal(first, expected_first) and np.array_equal(inverse, expected_inverse)


def test_wide_columns_are_sorted_instead() -> None:
    """Combinations beyond a lookup table (here 2^60 of them) are numbered by sorting, with the same law."""
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 2**30, 500) for _ in range(2)] + [np.repeat([3, 5], 250)]
    first, inverse = distinct(*cols)
    for x in cols:
        assert np.array_equal(x[first][inverse], x)


@dataclass(frozen=True)
class _Terms:
    per_key: np.ndarray
    per_stage: np.ndarray
    again: np.ndarray
    scalar: float
    zero_d: np.ndarray
    nothing: None
    parts: tuple[np.ndarray, ...]


def test_gather_takes_the_last_axis_and_keeps_shared_arrays_shared() -> None:
    """Arrays are taken along their last axis (stages x keys stays stages x rows); an array held twice is taken
    once and held twice after; scalars, 0-d arrays and None stay."""
    per_key = np.array([10.0, 20.0, 30.0])
    per_stage = np.array([[1, 2, 3], [4, 5, 6]])
    terms = _Terms(per_key=per_key, per_stage=per_stage, again=per_key, scalar=2.5, zero_d=np.array(7.0),
                   nothing=None, parts=(per_key, per_stage))
    inverse = np.array([2, 0, 0, 1])
    out = gather(terms, inverse, 3)
    assert np.array_equal(out.per_key, [30.0, 10.0, 10.0, 20.0])
    assert np.array_equal(out.per_stage, [[3, 1, 1, 2], [6, 4, 4, 5]])
    assert out.again is out.per_key and out.parts[0] is out.per_key and out.parts[1] is out.per_stage
    assert out.scalar == 2.5 and out.zero_d is terms.zero_d and out.nothing is None


def test_gather_refuses_an_array_computed_per_row() -> None:
    """An array whose last axis is neither one entry nor one per combination was computed per row: taking it by
    combination numbers would mix rows up silently, so gather refuses it."""
    per_row = np.arange(4.0)
    with pytest.raises(ValueError, match="last axis 4 among terms of 3 combinations"):
        gather((np.zeros(3), per_row), np.array([2, 0, 0, 1]), 3)


@settings(max_examples=30, deadline=None)
@given(per_key=hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 6)),
                          elements=st.sampled_from([0.0, 1.5, -2.0, np.nan])), data=st.data())
def test_collapsed_terms_gather_to_the_same_rows(per_key: np.ndarray, data: st.DataObject) -> None:
    """A term alike for every combination (per stage) is cut to one entry and gathered as a broadcast view (NaN,
    equal to nothing, keeps its array whole); every term, cut or not, gathers to the values of the uncut one."""
    inverse = np.asarray(data.draw(st.lists(st.integers(0, per_key.shape[1] - 1), min_size=1, max_size=10)),
                         dtype=np.intp)
    alike = np.repeat(per_key[:, :1], per_key.shape[1], axis=1)
    terms = _Terms(per_key=per_key, per_stage=alike, again=per_key, scalar=1.0, zero_d=np.array(0.0), nothing=None,
                   parts=(alike,))
    cut = collapsed(terms)
    whole = per_key.shape[1] if np.isnan(per_key[:, 0]).any() else 1
    assert cut.per_stage.shape == (per_key.shape[0], whole) and cut.parts[0] is cut.per_stage
    assert cut.per_key.shape[1] in (1, per_key.shape[1]) and cut.again is cut.per_key
    for before, after in ((terms.per_key, cut.per_key), (terms.per_stage, cut.per_stage)):
        assert np.array_equal(gather(after, inverse, per_key.shape[1]), before[:, inverse], equal_nan=True)
