"""How objective values read: durations in the unit that reads best, the raw number kept for JSON."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frenzy_core.planning.explain import format_duration, format_value

SECONDS_PER = {"s": 1.0, "min": 60.0, "h": 3600.0, "days": 86400.0}


@pytest.mark.parametrize(("seconds", "text"), [
    (45.0, "45 s"), (119.0, "119 s"), (120.0, "2.0 min"), (750.0, "12.5 min"), (7200.0, "2.0 h"),
    (26_280.0, "7.3 h"), (172_800.0, "2.0 days"), (8_488_754.0, "98.2 days"),
])
def test_durations_read_in_the_largest_unit_of_which_there_are_two(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert format_value(seconds, "s") == text


@given(st.floats(min_value=0.0, max_value=1e10, allow_nan=False))
def test_a_duration_reads_back_to_within_its_rounding(seconds: float) -> None:
    match = re.fullmatch(r"([0-9,]+(?:\.[0-9])?) (s|min|h|days)", format_duration(seconds))
    assert match, format_duration(seconds)
    number, unit = float(match.group(1).replace(",", "")), match.group(2)
    step = 1.0 if unit == "s" else 0.1  # the last digit shown
    assert abs(number * SECONDS_PER[unit] - seconds) <= step / 2 * SECONDS_PER[unit] + 1e-6 * seconds
    assert unit == "s" or number >= 2.0  # never "1.5 h": that reads better as 90.0 min


@given(st.floats(min_value=0.0, max_value=1e9), st.floats(min_value=0.0, max_value=1e9))
def test_longer_durations_never_read_shorter(a: float, b: float) -> None:
    lo, hi = sorted((a, b))

    def seconds(text: str) -> float:
        number, unit = text.split(" ")
        return float(number.replace(",", "")) * SECONDS_PER[unit]

    assert seconds(format_duration(lo)) <= seconds(format_duration(hi)) + 1e-9
