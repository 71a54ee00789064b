"""Cursor value typing: keys, canonical state form, public form, lag, Arrow normalisation."""

from __future__ import annotations

import datetime as dt

import pendulum
import pyarrow as pa
import pytest

from dagster_incremental.cursor import values as cv
UTC = dt.timezone.utc
T10 = dt.datetime(2024, 1, 1, 10, tzinfo=UTC)
T10_US = cv.datetime_to_micros(T10)


@pytest.mark.parametrize(
    "value, expected",
    [
        (T10, "timestamp"),
        (pendulum.datetime(2024, 1, 1), "timestamp"),
        (dt.date(2024, 1, 1), "date"),
        (pendulum.date(2024, 1, 1), "date"),
        ("2024-01-01", "date"),
        ("2024-01-01T10:00:00+02:00", "timestamp"),
        ("2024-01-01 10:00:00", "timestamp"),
        ("abc", "string"),
        ("2024", "string"),
        (5, "number"),
        (2.5, "number"),
        (None, None),
        ({"a": 1}, None),
    ],
)
def test_detect_type(value, expected):
    assert cv.detect_type(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        T10,
        dt.datetime(2024, 1, 1, 10),  # naive = UTC
        dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        pendulum.datetime(2024, 1, 1, 11, tz="Europe/Paris"),
        "2024-01-01T10:00:00Z",
        "2024-01-01T10:00:00",
        "2024-01-01T05:00:00-05:00",
        "2024-01-01 10:00:00+00:00",
        "2024-01-01T10:00:00.000000Z",
    ],
)
def test_instants_share_one_key(value):
    assert cv.to_key(value, "timestamp") == T10_US


def test_dates_are_midnight_utc_and_comparable_with_instants():
    assert cv.to_key(dt.date(2024, 1, 1), "timestamp") == cv.to_key("2024-01-01T00:00:00Z", "timestamp")
    assert cv.to_key("2024-01-02", "date") - cv.to_key("2024-01-01", "date") == 86_400_000_000


@pytest.mark.parametrize(
    "value, ctype",
    [
        (5, "timestamp"),
        ("abc", "timestamp"),
        ("5", "number"),
        (T10, "number"),
        (5, "string"),
        (True, "number"),
    ],
)
def test_incomparable_values_raise(value, ctype):
    with pytest.raises(cv.KeyConversionError):
        cv.to_key(value, ctype)


def test_canonical_and_public_forms():
    assert cv.key_to_canonical(T10_US, "timestamp") == "2024-01-01T10:00:00Z"
    assert cv.key_to_canonical(T10_US + 5, "timestamp") == "2024-01-01T10:00:00.000005Z"
    assert cv.key_to_canonical(cv.to_key("2024-03-04", "date"), "date") == "2024-03-04"
    public = cv.key_to_public(T10_US, "timestamp")
    assert isinstance(public, pendulum.DateTime) and public == T10 and public.utcoffset() == dt.timedelta(0)
    d = cv.key_to_public(cv.to_key("2024-03-04", "date"), "date")
    assert isinstance(d, pendulum.Date) and d == dt.date(2024, 3, 4)
    assert cv.key_to_canonical(7, "number") == 7
    assert cv.key_to_canonical("x", "string") == "x"


def test_epoch_types_are_instants_in_native_units():
    assert cv.to_key(1_704_103_200, "epoch_seconds") == T10_US
    assert cv.to_key(1_704_103_200_000, "epoch_millis") == T10_US
    assert cv.to_key("2024-01-01T10:00:00Z", "epoch_seconds") == T10_US
    assert cv.key_to_canonical(T10_US, "epoch_seconds") == 1_704_103_200
    assert cv.key_to_canonical(T10_US + 500_000, "epoch_seconds") == 1_704_103_200.5
    assert cv.key_to_public(T10_US, "epoch_millis") == 1_704_103_200_000


@pytest.mark.parametrize("ctype", ["timestamp", "date", "epoch_seconds", "epoch_millis", "number", "string"])
def test_canonical_round_trips(ctype):
    samples = {
        "timestamp": T10_US + 123,
        "date": cv.to_key("2024-02-29", "date"),
        "epoch_seconds": T10_US,
        "epoch_millis": T10_US + 1000,
        "number": 12.5,
        "string": "abc",
    }
    key = samples[ctype]
    assert cv.to_key(cv.key_to_canonical(key, ctype), ctype) == key


def test_lag_units_and_floor():
    assert cv.apply_lag(10, 1.5, "number", "max", None) == 8  # ints stay ints (truncation, as dlt)
    assert cv.apply_lag(10.0, 1.5, "number", "max", None) == 8.5
    assert cv.apply_lag(10, 3, "number", "min", None) == 13
    assert cv.apply_lag(10, 5, "number", "max", 7) == 7  # never below initial_value
    assert cv.apply_lag(10, 5, "number", "min", 12) == 12
    assert cv.apply_lag(T10_US, 60, "timestamp", "max", None) == T10_US - 60_000_000
    d = cv.to_key("2024-01-10", "date")
    assert cv.apply_lag(d, 2, "date", "max", None) == cv.to_key("2024-01-08", "date")
    assert cv.apply_lag(T10_US, 2, "epoch_millis", "max", None) == T10_US - 2_000
    with pytest.raises(ValueError):
        cv.apply_lag("x", 1, "string", "max", None)


def test_arrow_strings_with_any_offset_are_instants():
    arr = pa.array(["2024-01-01T11:00:00+02:00", "2024-01-01T09:30:00Z", None, "2024-01-01T10:00:00"])
    keys = cv.arrow_to_keys(arr, "timestamp").to_pylist()
    assert keys == [T10_US - 3_600_000_000, T10_US - 1_800_000_000, None, T10_US]


def test_arrow_strings_with_and_without_offsets_in_one_column():
    arr = pa.array(
        ["2024-01-01T10:00:00Z", None, "2024-01-01T10:00:00", "2024-01-01T12:00:00+0200", "2024-01-01"]
    )
    assert cv.arrow_to_keys(arr, "timestamp").to_pylist() == [
        T10_US,
        None,
        T10_US,
        T10_US,
        T10_US - 36_000_000_000,
    ]
    with pytest.raises(cv.KeyConversionError) as e:
        cv.arrow_to_keys(pa.array(["2024-01-01T10:00:00Z", None, "2024-01-01T10:00:00", "noon"]), "timestamp")
    assert (e.value.index, e.value.value) == (3, "noon")


def test_arrow_temporal_columns():
    ts = pa.array([T10], pa.timestamp("ns", "Europe/Paris"))
    naive = pa.array([dt.datetime(2024, 1, 1, 10)], pa.timestamp("ms"))
    date = pa.array([dt.date(2024, 1, 1)], pa.date32())
    assert cv.arrow_to_keys(ts, "timestamp").to_pylist() == [T10_US]
    assert cv.arrow_to_keys(naive, "timestamp").to_pylist() == [T10_US]
    assert cv.arrow_to_keys(date, "timestamp").to_pylist() == [T10_US - 36_000_000_000]
    assert cv.arrow_to_keys(pa.array([1_704_103_200]), "epoch_seconds").to_pylist() == [T10_US]


def test_arrow_bad_values_name_the_index():
    with pytest.raises(cv.KeyConversionError) as e:
        cv.arrow_to_keys(pa.array(["2024-01-01T10:00:00Z", "yesterday"]), "timestamp")
    assert e.value.index == 1 and e.value.value == "yesterday"
    with pytest.raises(cv.KeyConversionError) as e:
        cv.arrow_to_keys(pa.array([None, 5]), "timestamp")
    assert e.value.index == 1
    with pytest.raises(cv.KeyConversionError):
        cv.arrow_to_keys(pa.array(["a"]), "number")


def test_python_values_mixed_kinds():
    values = [T10, "2024-01-01T12:00:00+02:00", dt.date(2024, 1, 1), None, pendulum.datetime(2024, 1, 1, 10)]
    keys = cv.values_to_keys(values, "timestamp").to_pylist()
    assert keys == [T10_US, T10_US, T10_US - 36_000_000_000, None, T10_US]
    with pytest.raises(cv.KeyConversionError) as e:
        cv.values_to_keys([1, "a"], "number")
    assert e.value.index == 1
    assert cv.values_to_keys([1, 2.5, None], "number").to_pylist() == [1, 2.5, None]


def test_nanosecond_timestamps_key_as_the_microsecond_they_fall_in_in_arrow_and_python():
    """Finer digits are dropped alike from an Arrow column and from a pandas Timestamp, before
    1970 too (one nanosecond before midnight is in the microsecond before it, not after)."""
    import pandas as pd

    from dagster_incremental.cursor.values import arrow_to_keys, to_key

    stamps = [pd.Timestamp(n, unit="ns", tz="UTC") for n in (-1, -1_001, 1_999, 1_704_067_200_000_001_999)]
    column = pa.array([s.value for s in stamps], pa.timestamp("ns", "UTC"))
    assert arrow_to_keys(column, "timestamp").to_pylist() == [to_key(s, "timestamp") for s in stamps]
    assert [to_key(s, "timestamp") for s in stamps] == [-1, -2, 1, 1_704_067_200_000_001]
