"""Example data sources the `definitions` code location ships with (nothing is downloaded).

- `shop_db`: a SQLite shop database (orders with soft deletes, customers with real deletes)
  that changes step by step: the source of cursor-based merge, upsert and scd2 assets.
- `events_api`: a paginated JSON HTTP API on loopback serving events newest first: the source
  of an asset that stops pulling pages once they are older than its cursor.
- `event_files`: daily JSON-lines event files that can be rewritten: the source of a
  daily-partitioned asset whose window re-runs must drop rows the source no longer has.

Every timestamp these sources write is one canonical UTC text form, `2024-03-01T10:15:00Z`
(whole seconds, fixed width), so that comparing the text (in SQL, in `bisect`) is the same as
comparing the instants. The helpers below turn whatever a caller passes (ISO strings with any
offset, naive or aware datetimes, pendulum values, dates) into that form.
"""

from __future__ import annotations

import os
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

__all__ = [
    "DATA_DIR_ENV",
    "TIMESTAMP_FORMAT",
    "TimeLike",
    "data_dir",
    "events_root",
    "iso_utc",
    "iso_utc_ceil",
    "shop_db_path",
    "to_utc",
    "utc_now",
]

#: Environment variable that moves the example data (default: <repo>/data/sources, git-ignored).
DATA_DIR_ENV = "DAGSTER_INCREMENTAL_EXAMPLE_DATA"

#: strftime form of every stored timestamp: fixed width, so text order == time order.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

#: What every public function of these sources accepts as a point in time.
TimeLike = str | datetime | date


def to_utc(value: TimeLike) -> datetime:
    """An aware UTC datetime from an ISO string, datetime or date (naive means UTC, as in the API)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed: datetime | date = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"cannot read {value!r} as a timestamp: pass ISO-8601 such as '2024-03-01T10:15:00Z'"
            ) from None
        value = parsed
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)
    if isinstance(value, date):
        return datetime.combine(value, time.min, tzinfo=timezone.utc)
    raise TypeError(f"expected an ISO-8601 string, datetime or date, got {type(value).__name__}: {value!r}")


def iso_utc(value: TimeLike) -> str:
    """The canonical stored form of `value`, truncated to whole seconds (used when writing)."""
    return to_utc(value).strftime(TIMESTAMP_FORMAT)


def iso_utc_ceil(value: TimeLike) -> str:
    """The canonical form of `value` rounded *up* to a whole second (used for query bounds).

    Stored values are whole seconds, so for any stored `ts`: `ts >= v` iff `ts >= ceil(v)` and
    `ts < v` iff `ts < ceil(v)`. Rounding the bound keeps a text comparison exact even when the
    caller passes sub-second precision.
    """
    dt = to_utc(value)
    if dt.microsecond:
        dt = dt.replace(microsecond=0) + timedelta(seconds=1)
    return dt.strftime(TIMESTAMP_FORMAT)


def utc_now() -> datetime:
    """Wall-clock now in UTC, truncated to whole seconds like every stored timestamp."""
    return datetime.now(timezone.utc).replace(microsecond=0)



def data_dir(path: str | Path | None = None) -> Path:
    """Where `python -m definitions.simulate` keeps the example data, and the assets find it.

    `path` wins, then $DAGSTER_INCREMENTAL_EXAMPLE_DATA, then `<repo>/data/sources`.
    """
    if path is None:
        path = os.environ.get(DATA_DIR_ENV) or Path(__file__).resolve().parents[2] / "data" / "sources"
    return Path(path)


def shop_db_path(path: str | Path | None = None) -> Path:
    """The shop SQLite file inside `data_dir(path)`."""
    return data_dir(path) / "shop.db"


def events_root(path: str | Path | None = None) -> Path:
    """The root of the daily event files (`dt=YYYY-MM-DD/part-0.jsonl`) inside `data_dir(path)`."""
    return data_dir(path) / "events"
