"""The checks of single setting values, as pydantic validators.

Each raises `invalid(...)`: a pydantic error carrying what is wrong (and, when it differs from the
field's own description, what to do); `schema_errors` turns it into a located message.
"""

from __future__ import annotations

import math
import zoneinfo
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from typing import Any

from pydantic_core import PydanticCustomError

from dagster_incremental.cursor import values as cv
from dagster_incremental.settings.problems import kind, toml_value
from dagster_incremental.settings.spark_conf import conf_value
from dagster_incremental.settings.problems import BadValue

SETTING_ERROR = "setting"


def invalid(problem: str, hint: str | None = None, *, at: tuple[str, ...] = (), **more: Any) -> PydanticCustomError:
    """A check's error: `at` extends the failing field's key path (a key inside a table)."""
    return PydanticCustomError(SETTING_ERROR, "{problem}", {"problem": problem, "hint": hint, "at": at, **more})


def not_blank(value: str) -> str:
    if not value.strip():
        raise invalid("is empty")
    return value


def no_dot(value: str) -> str:
    if "." in value:
        raise invalid("contains a dot")
    return value


def time_zone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise invalid("is not a known time zone") from None
    return value


def names(*, allow_empty: bool = False, exactly: int | None = None) -> Callable[[Any], tuple[str, ...]]:
    """Column names / key parts: one string or a list of strings, returned as a tuple."""

    def check(value: Any) -> tuple[str, ...]:
        if isinstance(value, str) and exactly is None:
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise invalid(f"is {kind(value)}")
        for item in value:
            if not isinstance(item, str):
                raise invalid(f"has {kind(item)} item {toml_value(item)}")
            if not item.strip():
                raise invalid("has an empty name")
        if len(set(value)) != len(value):
            raise invalid("names a column twice")
        if not value and not allow_empty:
            raise invalid("is empty")
        if exactly is not None and len(value) != exactly:
            raise invalid(f"has {len(value)} names")
        return tuple(value)

    return check


def number_at_least(minimum: float) -> Callable[[Any], int | float]:
    """A finite int or float >= minimum (booleans are not numbers here)."""

    def check(value: Any) -> int | float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(f"is {kind(value)}")
        if not math.isfinite(value) or value < minimum:
            raise invalid("is not allowed")
        return value

    return check


def cursor_value(value: Any) -> Any:
    """initial_value / end_value: a type a cursor column can hold (the value itself: `cursor_bound`)."""
    if isinstance(value, (bool, time)):
        raise invalid(f"is {kind(value)}")
    if not isinstance(value, (str, int, float, date)):
        raise invalid(f"is {kind(value)}")
    return value


def instant(value: Any) -> date | datetime:
    """A date or datetime; strings in the cursor engine's ISO-8601 dialect are parsed."""
    if isinstance(value, date):  # datetime is a date too
        return value
    if not isinstance(value, str):
        raise invalid(f"is {kind(value)}")
    parsed = cv.parse_iso_as_written(value)
    if parsed is None:
        raise invalid("is not an ISO-8601 date or datetime")
    return parsed


def duration_or_number(value: Any) -> str | int | float:
    """`step`: an ISO-8601 duration ("P30D", "P1M") or a number > 0 in lag's units, kept as given."""
    lag_value(value)
    if value == 0 or (isinstance(value, str) and cv.parse_duration(value) == cv.Duration(0, 0.0)):
        raise invalid("is not allowed")
    return value


def lag_value(value: Any) -> str | int | float:
    """`lag`: a number >= 0 in lag's units or an ISO-8601 duration ("P1D", "P1M"), kept as given."""
    if isinstance(value, str):
        if cv.parse_duration(value) is None:
            raise invalid("is not an ISO-8601 duration")
        return value
    return number_at_least(0)(value)


def upper_text(value: Any) -> Any:
    """Keywords such as "warn" / "WARN" read alike."""
    return value.upper() if isinstance(value, str) else value


def freshness(value: Any) -> timedelta:
    """`freshness`: an ISO-8601 duration ("PT2H") or a number of seconds > 0, as a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        parsed = cv.parse_iso_duration(value)
        if parsed is None:
            raise invalid("is not an ISO-8601 duration")
        seconds = parsed.total_seconds()
    else:
        seconds = number_at_least(0)(value)
    if seconds <= 0:
        raise invalid("is not allowed")
    return timedelta(seconds=seconds)


def spark_conf_table(value: Any) -> Mapping[str, str]:
    """[spark.conf]: Spark keys to values, as the strings Spark takes."""
    if not isinstance(value, Mapping):
        raise invalid(f"is {kind(value)}")
    out: dict[str, str] = {}
    for name, item in value.items():
        try:
            out[name] = conf_value(item)
        except BadValue as bad:
            raise invalid(bad.problem, bad.hint, at=(name,), value=item) from None
    return out


def cursor_bound(key: str, value: Any, cursor_type: str | None) -> None:
    """A cursor bound the engine can compare: a word like "yesterday" fails here, not in a run
    (the cursor engine's rule, so `incremental(...)` in code says the same)."""
    try:
        cv.check_bound(value, cursor_type, string_type='cursor_type = "string"')
    except cv.BadBound as bad:
        raise invalid(bad.problem, bad.hint, at=(key,), value=value) from None
