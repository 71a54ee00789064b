"""Cursor values as comparable keys, whatever shape they came in: ISO strings with different offsets,
datetimes, dates, epochs and numbers compare as instants / numbers, never as text.
"""

from __future__ import annotations

# Why: dlt compares raw Python values, so ISO strings with different offsets compare as text and an
# int row against a datetime cursor fails deep inside a pipeline. Here every value is first mapped
# to a *key* of its cursor type, and all filtering happens on keys:
#
# | cursor type     | key                                   | state (canonical JSON)        | public value        |
# |-----------------|---------------------------------------|-------------------------------|---------------------|
# | timestamp       | int microseconds since epoch, UTC     | "2024-01-01T10:00:00Z"        | pendulum.DateTime   |
# | date            | int microseconds of midnight UTC      | "2024-01-01"                  | pendulum.Date       |
# | epoch_seconds   | int microseconds since epoch, UTC     | the number in seconds         | the number          |
# | epoch_millis    | int microseconds since epoch, UTC     | the number in milliseconds    | the number          |
# | number          | the int / float itself                | the number                    | the number          |
# | string          | the str itself (compared as text)     | the str                       | the str             |
#
# The four temporal types share one key space, so a date bound and timestamp rows compare as instants.
# Naive datetimes and ISO strings without an offset mean UTC.

import calendar
import dataclasses
import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.cursor.vocabulary import TEMPORAL_TYPES, CursorType


Key = Union[int, float, str]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_DAY_US = 86_400_000_000
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# An ISO-8601 date at the start is required before `fromisoformat` is even tried: it also accepts
# things like "2024" or compact forms we do not want to silently treat as instants.
_ISO_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?(Z|z|[+-]\d{2}(:?\d{2})?)?$")
_EPOCH_UNIT_US = {"epoch_seconds": 1_000_000, "epoch_millis": 1_000}


class KeyConversionError(ValueError):
    """A value that cannot become a key of the cursor type (callers add path and row)."""

    def __init__(self, value: Any, cursor_type: str, reason: str, index: int | None = None):
        super().__init__(reason)
        self.value = value
        self.cursor_type = cursor_type
        self.reason = reason
        self.index = index


# ---------------------------------------------------------------------------------------------
# Python scalars
# ---------------------------------------------------------------------------------------------


def parse_iso_as_written(text: str) -> dt.date | dt.datetime | None:
    """An ISO-8601 string in this library's one dialect, or None: a date-only string as a date,
    anything else as a datetime keeping its offset as written (naive stays naive).

    The dialect is calendar dates `YYYY-MM-DD`, optionally with a time (`T` or a space) and an
    offset (`Z` or `+HH:MM`). Week dates (`2024-W01-1`), ordinal dates (`2024-001`) and compact
    forms (`20240101`) are refused everywhere: config, cursors and scd2 timestamps alike.
    """
    text = text.strip()
    if not _ISO_LIKE.match(text):
        return None
    try:
        if _DATE_ONLY.match(text):
            return dt.date.fromisoformat(text)
        return dt.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None


def parse_iso(text: str) -> dt.datetime | None:
    """An ISO-8601 string as an aware UTC datetime (naive => UTC), or None if it is not ISO."""
    value = parse_iso_as_written(text)
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def parse_iso_duration(text: str) -> dt.timedelta | None:
    """An ISO-8601 duration of fixed length (`PT2H`, `P30D`, `P1DT12H`, `P2W`), or None.

    Years and months are refused here: their length depends on the date they start from (steps
    and lags take them as a `Duration`).
    """
    duration = parse_duration(text)
    if duration is None or duration.is_calendar:
        return None
    return dt.timedelta(seconds=duration.seconds)


_CALENDAR_DURATION = re.compile(
    r"^P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


@dataclasses.dataclass(frozen=True)
class Duration:
    """An ISO-8601 duration as calendar months (a year is 12) plus a fixed part in seconds.

    Months are added on the calendar, the day clamped to the month's end (2024-01-31 + P1M is
    2024-02-29), so "P1M" steps from one month's start to the next whatever its length.
    """

    months: int
    seconds: float

    @property
    def is_calendar(self) -> bool:
        return self.months != 0

    def shift(self, key: int, times: int) -> int:
        """A temporal key (UTC micros) moved by `times` durations (negative: back)."""
        moved = micros_to_datetime(key)
        if self.months:
            moved = add_months(moved, self.months * times)
        return datetime_to_micros(moved) + int(round(self.seconds * 1_000_000)) * times


def parse_duration(text: str) -> Duration | None:
    """Any ISO-8601 duration of years, months, weeks, days, hours, minutes and seconds, or None."""
    text = text.strip().upper()
    match = _CALENDAR_DURATION.match(text)
    if match is None or text in ("P", "PT") or text.endswith("T"):
        return None
    parts = {name: float(value) for name, value in match.groupdict().items() if value is not None}
    months = int(parts.pop("years", 0) * 12 + parts.pop("months", 0))
    return Duration(months, dt.timedelta(**parts).total_seconds())


def add_months(value: dt.datetime, months: int) -> dt.datetime:
    """`value` moved by whole calendar months, the day clamped to the target month's last day."""
    index = value.year * 12 + value.month - 1 + months
    year, month = divmod(index, 12)
    day = min(value.day, calendar.monthrange(year, month + 1)[1])
    return value.replace(year=year, month=month + 1, day=day)


def is_date_string(text: str) -> bool:
    return bool(_DATE_ONLY.match(text.strip()))


def detect_type(value: Any) -> CursorType | None:
    """The cursor type a Python value suggests; None for None and for non-scalar values."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, dt.datetime):
        return "timestamp"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, (int, float, Decimal)):
        return "number"
    if _is_numpy_number(value):
        return "number"
    if isinstance(value, str):
        if is_date_string(value):
            return "date"
        return "timestamp" if parse_iso(value) is not None else "string"
    return None


def _is_numpy_number(value: Any) -> bool:
    mod = type(value).__module__
    return mod == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf"


def datetime_to_micros(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def date_to_micros(value: dt.date) -> int:
    return (value - dt.date(1970, 1, 1)).days * _DAY_US


def micros_to_datetime(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=int(micros))


Formats = tuple[str, ...]  # strptime formats a string cursor is written in (tried in order, then ISO)


def parse_formatted(text: str, formats: Formats) -> dt.datetime | None:
    """`text` parsed by the first of `formats` that matches it (naive = UTC), else as ISO-8601,
    else None."""
    for fmt in formats:
        try:
            parsed = dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
        return parsed.replace(tzinfo=dt.timezone.utc) if parsed.tzinfo is None else parsed
    return parse_iso(text)


# Formats a source commonly writes its timestamps in: tried on a value that is not ISO-8601, so
# an error can name the cursor_datetime_formats that would read it (instead of a text cursor).
COMMON_FORMATS: Formats = (
    "%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y", "%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M", "%m/%d/%Y",
    "%d.%m.%Y %H:%M:%S", "%d.%m.%Y %H:%M", "%d.%m.%Y", "%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M", "%Y/%m/%d",
    "%d-%m-%Y %H:%M:%S", "%d-%m-%Y %H:%M", "%d-%m-%Y", "%b %d %Y %H:%M", "%b %d %Y", "%d %b %Y %H:%M", "%d %b %Y",
)


def matching_formats(value: Any) -> list[str]:
    """The COMMON_FORMATS that read `value` (a string that is not ISO-8601), in their order; a
    day-first and a month-first format may both match ("04/03/2024"): the caller names both."""
    if not isinstance(value, str) or parse_iso(value) is not None:
        return []
    return [fmt for fmt in COMMON_FORMATS if parse_formatted(value.strip(), (fmt,)) is not None]


def what_value_is(value: Any) -> str:
    """What a cursor value holds, in a user's words ("an ISO-8601 timestamp string", "a number")."""
    detected = detect_type(value)
    if isinstance(value, str):
        return {"timestamp": "an ISO-8601 timestamp string", "date": "an ISO-8601 date string"}.get(
            detected or "", "a string that is not an ISO-8601 date or timestamp")
    return {"timestamp": "a datetime", "date": "a date", "number": "a number"}.get(detected or "", "no scalar value")


def bound_like(bound: Any, cursor_type: str) -> str:
    """A bound (initial_value, end_value) rewritten as a value of `cursor_type`, as TOML/Python
    text: a yyyymmdd number becomes that day; anything else gets an example of the type."""
    day = None
    if isinstance(bound, int) and not isinstance(bound, bool) and 19000101 <= bound <= 29991231:
        try:
            day = dt.datetime.strptime(str(bound), "%Y%m%d").date()
        except ValueError:
            day = None
    day = day or dt.date(2024, 1, 1)
    return {"date": f'"{day.isoformat()}"', "timestamp": f'"{day.isoformat()}T00:00:00Z"'}.get(cursor_type, "0")


def no_format_matches(formats: Formats) -> str:
    """The reason a string is not a cursor value of a formatted cursor."""
    return f"it matches none of the cursor_datetime_formats {list(formats)} and is not ISO-8601"


def to_key(value: Any, cursor_type: str, formats: Formats = ()) -> Key:
    """A Python value as a key of `cursor_type`; raises KeyConversionError when it cannot be one.

    `formats`: strptime formats a temporal cursor's strings are written in (tried first)."""
    if value is None:
        raise KeyConversionError(value, cursor_type, "None is not a cursor value")
    if cursor_type in TEMPORAL_TYPES:
        if isinstance(value, dt.datetime):
            return datetime_to_micros(value)
        if isinstance(value, dt.date):
            return date_to_micros(value)
        if isinstance(value, str):
            parsed = parse_formatted(value, formats)
            if parsed is None:
                reason = no_format_matches(formats) if formats else "it is not an ISO-8601 date or timestamp"
                raise KeyConversionError(value, cursor_type, reason)
            return datetime_to_micros(parsed)
        if type(value).__module__ == "numpy" and getattr(value, "dtype", None) is not None:
            if value.dtype.kind == "M":  # numpy.datetime64: naive = UTC
                return int(value.astype("datetime64[us]").astype("int64"))
        if cursor_type in _EPOCH_UNIT_US and _is_number(value):
            unit = _EPOCH_UNIT_US[cursor_type]
            if isinstance(value, int):
                return value * unit
            return int(round(float(value) * unit))
        raise KeyConversionError(value, cursor_type, "it is not a date, datetime or ISO-8601 string")
    if cursor_type == "number":
        if _is_number(value):
            if isinstance(value, Decimal):
                return int(value) if value == value.to_integral_value() else float(value)
            if _is_numpy_number(value):
                return value.item()
            return value
        raise KeyConversionError(value, cursor_type, "it is not a number")
    if cursor_type == "string":
        if isinstance(value, str):
            return value
        raise KeyConversionError(value, cursor_type, "it is not a string")
    raise KeyConversionError(value, cursor_type, f"unknown cursor type {cursor_type!r}")


class BadBound(ValueError):
    """A cursor bound (initial_value, end_value) the engine cannot use: what is wrong, what to do."""

    def __init__(self, problem: str, hint: str) -> None:
        super().__init__(problem)
        self.problem, self.hint = problem, hint


def check_bound(value: Any, cursor_type: str | None, *, string_type: str = 'cursor_type="string"',
                formats: Formats = ()) -> None:
    """One rule for a bound, in code and in config: a word like "yesterday" is not a cursor value
    unless the cursor is declared a string (`string_type` says how, where the caller writes it)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise BadBound("is not a finite number", "use a finite number, a date, a datetime or an ISO-8601 string")
    if isinstance(value, str) and not value.strip():
        raise BadBound("is empty", 'use a date, a datetime, a number or an ISO-8601 string such as "2024-01-01"')
    detected = cursor_type or detect_type(value)
    if cursor_type is None and detected == "string":
        raise BadBound("is not an ISO-8601 date or datetime",
                       'use a date, a datetime, a number or an ISO-8601 string such as "2024-01-01T00:00:00Z"; '
                       f"for a cursor column holding other strings, also set {string_type}")
    if detected is None:
        return  # not a cursor value at all: the caller names the types it takes
    try:
        to_key(value, detected, formats)
    except KeyConversionError as exc:
        raise BadBound(f"is not a valid {detected} ({exc.reason})",
                       f"give a {detected} value, or change cursor_type") from None


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)) or _is_numpy_number(
        value
    )


def key_to_canonical(key: Key | None, cursor_type: str) -> Any:
    """The JSON form stored in state."""
    if key is None:
        return None
    if cursor_type == "timestamp":
        return format_instant(micros_to_datetime(int(key)))
    if cursor_type == "date":
        return micros_to_datetime(int(key)).date().isoformat()
    if cursor_type in _EPOCH_UNIT_US:
        unit = _EPOCH_UNIT_US[cursor_type]
        whole, rest = divmod(int(key), unit)
        return whole if rest == 0 else int(key) / unit
    return key


def format_instant(value: dt.datetime) -> str:
    """ISO-8601 UTC with a Z, with microseconds only when there are some."""
    value = value.astimezone(dt.timezone.utc) if value.tzinfo else value
    base = value.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{value.microsecond:06d}Z" if value.microsecond else f"{base}Z"


def key_to_public(key: Key | None, cursor_type: str) -> Any:
    """What users see as start_value / last_value: pendulum values for instants and dates."""
    if key is None:
        return None
    if cursor_type == "timestamp":
        import pendulum

        return pendulum.instance(micros_to_datetime(int(key)), tz="UTC")
    if cursor_type == "date":
        import pendulum

        d = micros_to_datetime(int(key)).date()
        return pendulum.Date(d.year, d.month, d.day)
    return key_to_canonical(key, cursor_type)


def key_type_for(cursor_type: str) -> pa.DataType:
    if cursor_type in TEMPORAL_TYPES:
        return pa.int64()
    if cursor_type == "string":
        return pa.string()
    return pa.float64()


# ---------------------------------------------------------------------------------------------
# lag (pure)
# ---------------------------------------------------------------------------------------------


def lag_delta(lag: float, cursor_type: str) -> int | float:
    """`lag` in key units: seconds for timestamps (and epoch cursors), days for dates."""
    if cursor_type in ("timestamp", "epoch_seconds"):
        return int(round(lag * 1_000_000))
    if cursor_type == "epoch_millis":
        return int(round(lag * 1_000))  # native units (milliseconds)
    if cursor_type == "date":
        return int(round(lag * _DAY_US))
    if cursor_type == "number":
        return lag
    raise ValueError(f"lag is not supported for a {cursor_type} cursor")


def duration_problem(duration: Duration, cursor_type: str | None) -> str | None:
    """Why an ISO-8601 duration (a step or a lag) cannot move a cursor of this type, or None."""
    if cursor_type is None or (cursor_type in TEMPORAL_TYPES and cursor_type != "date"):
        return None
    if cursor_type == "date":
        if duration.seconds % 86_400:
            return "a date cursor moves in whole days; give whole days (P1D), months (P1M) or years (P1Y)"
        return None
    return (f"an ISO-8601 duration needs a date or timestamp cursor; for a {cursor_type} cursor give a "
            "number in the cursor's own units")


def apply_lag(last: Key, lag: float | str, cursor_type: str, direction: str, floor: Key | None) -> Key:
    """`last` moved back by `lag` against the direction of last_value_func, never past `floor`.

    `lag` is a number in lag's units or an ISO-8601 duration (calendar months included, for a
    temporal cursor). Ints stay ints by truncation (as in dlt: lag 1.5 from 10 gives 8).
    """
    if isinstance(lag, str):
        duration = parse_duration(lag)
        if duration is None:
            raise ValueError(f"lag={lag!r} is not an ISO-8601 duration")
        lagged: Key = duration.shift(int(last), -1 if direction == "max" else 1)
    else:
        delta = lag_delta(lag, cursor_type)
        lagged = last - delta if direction == "max" else last + delta  # type: ignore[operator]
    if isinstance(last, int) and not isinstance(lagged, int):
        lagged = int(lagged)
    if floor is not None:
        if direction == "max" and lagged < floor:  # type: ignore[operator]
            return floor
        if direction == "min" and lagged > floor:  # type: ignore[operator]
            return floor
    return lagged


# ---------------------------------------------------------------------------------------------
# Arrow arrays (vectorised)
# ---------------------------------------------------------------------------------------------


def detect_arrow_type(arr: pa.Array) -> CursorType | None:
    """The cursor type an Arrow column suggests (strings: from the first non-null value)."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        valid = arr.drop_null()
        return detect_type(valid[0].as_py()) if len(valid) else None
    if pa.types.is_null(t):
        return None
    valid = arr.drop_null()
    return detect_type(valid[0].as_py()) if len(valid) else None


def timestamps_in_micros(arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A timestamp column in microseconds, finer digits dropped (floored, as a datetime drops
    them): Spark, Iceberg and Delta hold microseconds, and the cursor keeps what the table keeps."""
    unit = arr.type.unit
    if unit in ("s", "ms", "us"):
        return arr.cast(pa.timestamp("us", arr.type.tz))
    return pc.floor_temporal(arr, unit="microsecond").cast(pa.timestamp("us", arr.type.tz))


def arrow_to_keys(arr: pa.Array | pa.ChunkedArray, cursor_type: str, formats: Formats = ()) -> pa.Array:
    """An Arrow column as a key array (nulls stay null); raises KeyConversionError with the row index.

    Arrow casts do the work; a per-value parse runs only for a string column Arrow's ISO parser
    rejects as a whole (e.g. offsets and no offsets mixed in one column).
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], arr.type)
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), key_type_for(cursor_type))
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if cursor_type in TEMPORAL_TYPES:
        if pa.types.is_timestamp(t):
            return timestamps_in_micros(arr).cast(pa.int64())
        if pa.types.is_date(t):
            return arr.cast(pa.date32()).cast(pa.timestamp("us")).cast(pa.int64())
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if formats:
                return _formatted_to_micros(arr, cursor_type, formats)
            return _strings_to_micros(arr, cursor_type)
        if cursor_type in _EPOCH_UNIT_US and (pa.types.is_integer(t) or pa.types.is_floating(t)):
            unit = _EPOCH_UNIT_US[cursor_type]
            if pa.types.is_integer(t):
                return pc.multiply(arr.cast(pa.int64()), unit)
            as_float = arr.cast(pa.float64())
            as_float = pc.if_else(pc.is_nan(as_float), pa.scalar(None, pa.float64()), as_float)
            return pc.round(pc.multiply(as_float, float(unit))).cast(pa.int64())
        _raise_first(arr, cursor_type, f"a {t} column is not a date/timestamp column")
    if cursor_type == "number":
        if pa.types.is_integer(t):
            return arr.cast(pa.int64())
        if pa.types.is_floating(t) or pa.types.is_decimal(t):
            out = arr.cast(pa.float64())
            return pc.if_else(pc.is_nan(out), pa.scalar(None, pa.float64()), out)  # NaN = NULL
        _raise_first(arr, cursor_type, f"a {t} column is not a number column")
    if cursor_type == "string":
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return arr.cast(pa.string())
        _raise_first(arr, cursor_type, f"a {t} column is not a string column")
    raise KeyConversionError(None, cursor_type, f"unknown cursor type {cursor_type!r}")


def _raise_first(arr: pa.Array, cursor_type: str, reason: str) -> None:
    valid = pc.indices_nonzero(arr.is_valid())
    if len(valid) == 0:
        return None  # all null: nothing to compare; caller gets an all-null key array
    i = valid[0].as_py()
    raise KeyConversionError(arr[i].as_py(), cursor_type, reason, index=i)


_OFFSET_SUFFIX = r"(Z|z|[+-]\d{2}(:?\d{2})?)$"


def _strings_to_micros(arr: pa.Array, cursor_type: str) -> pa.Array:
    """ISO strings as UTC micros: Arrow parses strings with an offset (any offset) and strings
    without one (= UTC) in two casts; only values Arrow rejects are parsed one by one."""
    for target in (pa.timestamp("us", "UTC"), pa.timestamp("us")):
        try:
            return arr.cast(target).cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    import numpy as np

    n = len(arr)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    has_offset = pc.fill_null(pc.match_substring_regex(arr, _OFFSET_SUFFIX), False).to_numpy(
        zero_copy_only=False
    )
    out = np.zeros(n, dtype=np.int64)
    for mask, target in (
        (valid & has_offset, pa.timestamp("us", "UTC")),
        (valid & ~has_offset, pa.timestamp("us")),
    ):
        idx = np.flatnonzero(mask)
        if not len(idx):
            continue
        sub = arr.take(pa.array(idx))
        try:
            out[idx] = sub.cast(target).cast(pa.int64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            try:
                out[idx] = values_to_keys(sub.to_pylist(), cursor_type, _force_scalar=True).to_numpy(
                    zero_copy_only=False
                )
            except KeyConversionError as e:
                e.index = int(idx[e.index]) if e.index is not None else None
                raise
    return pa.array(out, pa.int64(), mask=~valid)


def _formatted_to_micros(arr: pa.Array, cursor_type: str, formats: Formats) -> pa.Array:
    """Strings in the cursor's strptime formats as UTC micros (vectorised: one Arrow strptime
    per format, the first match wins; naive = UTC); what no format matches is parsed as ISO-8601,
    and a value neither is raises KeyConversionError with its index."""
    import numpy as np

    arr = arr.cast(pa.string())
    keys = pa.nulls(len(arr), pa.int64())
    for fmt in formats:
        parsed = pc.strptime(arr, format=fmt, unit="us", error_is_null=True)
        keys = pc.coalesce(keys, parsed.cast(pa.timestamp("us", parsed.type.tz)).cast(pa.int64()))
    rest = np.flatnonzero(pc.and_(arr.is_valid(), keys.is_null()).to_numpy(zero_copy_only=False))
    if not len(rest):
        return keys
    try:
        iso = _strings_to_micros(arr.take(pa.array(rest)), cursor_type)
    except KeyConversionError as e:
        index = int(rest[e.index]) if e.index is not None else None
        raise KeyConversionError(e.value, cursor_type, no_format_matches(formats), index) from None
    out = keys.fill_null(0).to_numpy(zero_copy_only=False).copy()
    valid = keys.is_valid().to_numpy(zero_copy_only=False).copy()
    out[rest], valid[rest] = iso.to_numpy(zero_copy_only=False), True
    return pa.array(out, pa.int64(), mask=~valid)


def values_to_keys(values: list[Any], cursor_type: str, *, _force_scalar: bool = False,
                   formats: Formats = ()) -> pa.Array:
    """Python cursor values (None allowed) as a key array; raises KeyConversionError with the index.

    Homogeneous lists go through one Arrow conversion; mixed ones are converted per value.
    """
    if not _force_scalar:
        kinds = {type(v) for v in values if v is not None}
        try:
            if cursor_type in TEMPORAL_TYPES and kinds and all(issubclass(k, dt.datetime) for k in kinds):
                return pa.array(values, type=pa.timestamp("us", "UTC")).cast(pa.int64())
            if (
                cursor_type in TEMPORAL_TYPES
                and kinds
                and all(issubclass(k, dt.date) and not issubclass(k, dt.datetime) for k in kinds)
            ):
                return arrow_to_keys(pa.array(values, type=pa.date32()), cursor_type)
            if kinds and all(issubclass(k, str) for k in kinds):
                return arrow_to_keys(pa.array(values, type=pa.string()), cursor_type, formats)
            if kinds and all(issubclass(k, (int, float)) and not issubclass(k, bool) for k in kinds):
                return arrow_to_keys(pa.array(values), cursor_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
    keys: list[Key | None] = []
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            keys.append(None)
            continue
        try:
            keys.append(to_key(v, cursor_type, formats))
        except KeyConversionError as e:
            e.index = i
            raise
    if cursor_type == "number":
        if all(k is None or isinstance(k, int) for k in keys):
            return pa.array(keys, type=pa.int64())
        return pa.array(keys, type=pa.float64())
    return pa.array(keys, type=key_type_for(cursor_type))


def key_scalar(key: Key, keys: pa.Array) -> pa.Scalar:
    """`key` as a scalar comparable with the key array `keys`."""
    if isinstance(key, float) and pa.types.is_integer(keys.type):
        return pa.scalar(key, pa.float64())
    if isinstance(key, int) and pa.types.is_floating(keys.type):
        return pa.scalar(float(key), pa.float64())
    return pa.scalar(key, keys.type)
