"""Slice planning (`step`): consecutive half-open slices that cover a range exactly, and the
errors for steps that cannot cut a cursor's range."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_incremental import incremental
from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.slices import plan_run
from dagster_incremental.cursor.step import parse_step, plan_slices
from dagster_incremental.errors import IncrementalConfigError

DAY_US = 86_400_000_000


def _check_cover(slices, start, end, delta):
    assert slices[0][0] == start and slices[-1][1] == end
    for (a, b), (c, _) in zip(slices, slices[1:]):
        assert b == c  # consecutive: each starts where the previous ends
    for a, b in slices:
        assert a < b <= a + delta  # half-open, non-empty, at most one step


@given(st.integers(-10**12, 10**12), st.integers(1, 10**9), st.integers(1, 500))
def test_integer_keys_are_covered_exactly(start, delta, pieces):
    end = start + delta * pieces - (delta // 2)
    slices = plan_slices(start, end, delta)
    _check_cover(slices, start, end, delta)
    assert len(slices) == -(-(end - start) // delta)


@given(st.floats(-1e6, 1e6), st.floats(0.5, 1e3), st.integers(1, 200))
def test_number_keys_are_covered_exactly(start, delta, pieces):
    end = start + delta * pieces * 0.97
    slices = plan_slices(start, end, delta)
    assert slices[0][0] == start and slices[-1][1] == end
    for (a, b), (c, _) in zip(slices, slices[1:]):
        assert b == c
    for a, b in slices:
        assert a < b <= a + delta * (1 + 1e-9)


def test_an_empty_range_has_no_slices():
    assert plan_slices(5, 5, 1) == [] and plan_slices(6, 5, 1) == []


@pytest.mark.parametrize(
    "step, cursor_type, delta",
    [
        ("P1D", "timestamp", DAY_US),
        ("PT6H", "timestamp", 6 * 3_600_000_000),
        ("P1W", "date", 7 * DAY_US),
        ("P1DT12H", "timestamp", 36 * 3_600_000_000),
        ("PT0.5S", "timestamp", 500_000),
        (3600, "timestamp", 3_600_000_000),  # seconds, as lag
        (2, "date", 2 * DAY_US),  # days, as lag
        (2.5, "number", 2.5),  # native units
        (1000, "epoch_millis", 1_000_000),  # native units (milliseconds), as lag
    ],
)
def test_steps_in_key_units(step, cursor_type, delta):
    assert parse_step(step).delta(cursor_type, "c") == delta


@pytest.mark.parametrize("step", ["P", "PT", "1D", "P-1D", "P0D", "P0M", "P1M1Y", 0, -3, float("inf"), True, "daily", [1]])
def test_bad_steps_are_refused(step):
    with pytest.raises(IncrementalConfigError, match="step="):
        incremental("t", initial_value="2024-01-01T00:00:00Z", step=step)


def _dates(slices):
    return [(cv.key_to_canonical(a, "timestamp"), cv.key_to_canonical(b, "timestamp")) for a, b in slices]


def test_a_month_step_cuts_at_calendar_months():
    """P1M moves on the calendar (28 to 31 days); the day is clamped to the month's end and the
    time of day is kept; the last slice ends where the range ends."""
    run = incremental("t", initial_value="2024-01-31T06:00:00Z", end_value="2024-05-15T00:00:00Z",
                      step="P1M").bind(None)
    assert _dates(plan_run(run, NOW)) == [
        ("2024-01-31T06:00:00Z", "2024-02-29T06:00:00Z"),
        ("2024-02-29T06:00:00Z", "2024-03-31T06:00:00Z"),
        ("2024-03-31T06:00:00Z", "2024-04-30T06:00:00Z"),
        ("2024-04-30T06:00:00Z", "2024-05-15T00:00:00Z"),
    ]


def test_year_and_mixed_calendar_steps_on_a_date_cursor():
    run = incremental("d", initial_value=dt.date(2020, 2, 29), end_value=dt.date(2023, 1, 1), step="P1Y").bind(None)
    dates = [(cv.key_to_canonical(a, "date"), cv.key_to_canonical(b, "date")) for a, b in plan_run(run, NOW)]
    assert dates == [("2020-02-29", "2021-02-28"), ("2021-02-28", "2022-02-28"), ("2022-02-28", "2023-01-01")]
    run = incremental("d", initial_value=dt.date(2024, 1, 1), end_value=dt.date(2024, 4, 1), step="P1M15D").bind(None)
    dates = [(cv.key_to_canonical(a, "date"), cv.key_to_canonical(b, "date")) for a, b in plan_run(run, NOW)]
    # the i-th bound is start + i x (1 month 15 days): 2 months and 30 days is March 31
    assert dates == [("2024-01-01", "2024-02-16"), ("2024-02-16", "2024-03-31"), ("2024-03-31", "2024-04-01")]


@given(st.datetimes(dt.datetime(1990, 1, 1), dt.datetime(2090, 1, 1)), st.integers(1, 14), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_calendar_steps_cover_the_range_with_slices_of_one_step(start, months, pieces):
    """Every slice but the last is exactly `months` calendar months (day clamped); the last at
    most that; together they cover [start, end) without gap or overlap."""
    start_key = cv.datetime_to_micros(start)
    end_key = cv.datetime_to_micros(cv.add_months(start, months * pieces)) - 1
    slices = cv_steps(f"P{months}M", start_key, end_key)
    assert slices[0][0] == start_key and slices[-1][1] == end_key
    assert all(b == c for (_, b), (c, _) in zip(slices, slices[1:]))
    for i, (a, b) in enumerate(slices):
        full = cv.datetime_to_micros(cv.add_months(start, months * (i + 1)))
        assert a < b <= full and (b == full or i == len(slices) - 1)


def cv_steps(step, start, end):
    return parse_step(step).cut(start, end, "timestamp", "t")


def test_calendar_step_that_does_not_fit_the_cursor_type():
    with pytest.raises(IncrementalConfigError, match="whole days"):
        incremental("d", initial_value=dt.date(2024, 1, 1), step="P1MT6H")
    with pytest.raises(IncrementalConfigError, match="ISO-8601 duration needs a date or timestamp"):
        incremental("n", initial_value=0, end_value=100, step="P1M")


def test_step_that_does_not_fit_the_cursor_type():
    with pytest.raises(IncrementalConfigError, match="whole days"):
        incremental("d", initial_value=dt.date(2024, 1, 1), step="PT6H")
    with pytest.raises(IncrementalConfigError, match="ISO-8601 duration needs a date or timestamp"):
        incremental("n", initial_value=0, end_value=100, step="P1D")
    with pytest.raises(IncrementalConfigError, match="string cursor"):
        incremental("s", initial_value="a", cursor_type="string", step=5)
    with pytest.raises(IncrementalConfigError, match="last_value_func='max'"):
        incremental("t", initial_value="2024-01-01T00:00:00Z", last_value_func="min", step="P1D")


def test_a_number_cursor_needs_an_end_value():
    with pytest.raises(IncrementalConfigError, match=r"step=10 on the number cursor 'seq' needs an end_value"):
        incremental("seq", initial_value=0, step=10)
    assert incremental("seq", initial_value=0, end_value=100, step=10).parsed_step.number == 10


def test_a_number_cursor_whose_type_comes_from_the_state_needs_an_end_value_at_run_time():
    run = incremental("seq", step=10).bind({"last_value": 5, "cursor_type": "number"})
    with pytest.raises(IncrementalConfigError, match="needs an end_value"):
        plan_run(run, now_key=0)


NOW = cv.to_key("2024-01-06T00:00:00Z", "timestamp")


def test_a_run_longer_than_step_is_planned_up_to_now():
    run = incremental("t", initial_value="2024-01-01T00:00:00Z", step="P1D").bind(None)
    slices = plan_run(run, NOW)
    assert len(slices) == 5 and slices[-1][1] == NOW


def test_a_run_within_one_step_or_without_step_is_not_sliced():
    assert plan_run(incremental("t", initial_value="2024-01-05T12:00:00Z", step="P1D").bind(None), NOW) is None
    assert plan_run(incremental("t", initial_value="2024-01-01T00:00:00Z").bind(None), NOW) is None
    assert plan_run(incremental("t", step="P1D").bind(None), NOW) is None  # nothing to start from


def test_a_backfill_is_planned_to_its_end_value_and_a_date_cursor_in_days():
    spec = incremental("d", initial_value="2024-01-01", end_value="2024-01-11", step=3)
    slices = plan_run(spec.bind(None), NOW)
    assert [cv.key_to_canonical(a, "date") for a, _ in slices] == ["2024-01-01", "2024-01-04", "2024-01-07", "2024-01-10"]
    number = incremental("n", initial_value=0, end_value=25, step=10)
    assert plan_run(number.bind(None), NOW) == [(0, 10), (10, 20), (20, 25)]


def _chain(rows, bounds, state=None, **kwargs):
    """The state after running `rows` slice by slice: each slice bound to the state the slice
    before left, with the slice's window (as a sliced asset run binds them)."""
    spec = incremental("t", initial_value="2024-01-01T00:00:00Z", primary_key="id", **kwargs)
    for window in bounds:
        run = spec.bind(state, window=window)
        run.filter(rows)
        state = run.cursor_state
    return state


DAYS = [f"2024-01-0{d}T00:00:00Z" for d in range(1, 7)]
FOUR_SLICES = list(zip([None, *DAYS[1:4]], [*DAYS[1:4], None]))  # [.., d2) [d2, d3) [d3, d4) [d4, ..)


def test_slices_without_rows_leave_last_value_at_the_newest_row():
    rows = [{"id": 1, "t": "2024-01-01T05:00:00Z"}, {"id": 2, "t": "2024-01-02T07:00:00Z"},
            {"id": 3, "t": "2024-01-02T07:00:00Z"}]
    after = _chain(rows, FOUR_SLICES)
    assert after.last_value == "2024-01-02T07:00:00Z"  # not a slice's bound
    assert after.boundary is not None and after.boundary.keys == (2, 3) and not after.boundary.overflow
    late = {"id": 4, "t": "2024-01-03T10:00:00Z"}  # arrives for an empty slice's day
    nxt = incremental("t", initial_value="2024-01-01T00:00:00Z", primary_key="id").bind(after)
    assert nxt.filter([*rows, late]) == [late]


def test_with_an_open_range_start_slices_without_rows_keep_the_state():
    rows = [{"id": 1, "t": "2024-01-01T05:00:00Z"}]
    assert _chain(rows, FOUR_SLICES, range_start="open").last_value == "2024-01-01T05:00:00Z"


def test_a_slice_sees_the_newest_value_loaded_as_its_last_value_before_any_row():
    before = _chain([{"id": 1, "t": "2024-01-01T05:00:00Z"}], FOUR_SLICES[:1])
    run = incremental("t", initial_value="2024-01-01T00:00:00Z", primary_key="id").bind(before, window=FOUR_SLICES[2])
    assert run.start_value == cv.key_to_public(cv.to_key(DAYS[2], "timestamp"), "timestamp")
    assert run.last_value == cv.key_to_public(cv.to_key("2024-01-01T05:00:00Z", "timestamp"), "timestamp")


HOUR_US = 3_600_000_000


@settings(deadline=None)  # the machine is shared: timing says nothing here
@given(
    hours=st.lists(st.integers(0, 24 * 5 - 1), max_size=40),
    step_hours=st.sampled_from([5, 24, 31]),
    seed=st.sampled_from([None, 2, 30, 60]),
)
def test_a_sliced_run_ends_with_the_state_of_an_unsliced_run(hours, step_hours, seed):
    """Random rows with random gaps (hours of five days, several rows an hour), an optional
    earlier run up to `seed` hours: cut into slices or not, the run leaves the same state."""
    start = cv.to_key("2024-01-01T00:00:00Z", "timestamp")
    rows = [{"id": i, "t": cv.key_to_canonical(start + h * HOUR_US, "timestamp")} for i, h in enumerate(hours)]
    spec = incremental("t", initial_value="2024-01-01T00:00:00Z", primary_key="id")
    state = None
    if seed is not None:
        first = spec.bind(None, window=(None, cv.key_to_public(start + seed * HOUR_US, "timestamp")))
        first.filter(rows)
        state = first.cursor_state
    whole = spec.bind(state)
    end = start + 5 * 24 * HOUR_US
    cuts = plan_slices(whole.start_key, end, step_hours * HOUR_US)
    inner = [cv.key_to_public(b, "timestamp") for _, b in cuts[:-1]]
    bounds = list(zip([None, *inner], [*inner, None]))
    whole.filter(rows)
    sliced = _chain(rows, bounds, state)
    assert dataclasses.replace(sliced, start_value=None) == dataclasses.replace(whole.cursor_state, start_value=None)
