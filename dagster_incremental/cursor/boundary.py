"""Boundary dedup: which rows *at* the high-water mark were already loaded, kept as a bounded set
(at most BOUNDARY_KEY_LIMIT keys) made by one key function for every input kind.
"""

from __future__ import annotations

# Why bounded: dlt keeps one hash per row sharing the max cursor value, forever growing the state
# (dlt issues #4030, #2580, #2186: states of 100 MB). Here at most BOUNDARY_KEY_LIMIT keys are kept;
# beyond that the set is dropped and flagged `overflow`. The next run then keeps *every* row at the
# start value (it never loses one) and tells the writer (`IncrementalRun.boundary_unverified`) to
# anti-join those rows against the table instead.
#
# Keys are the primary-key values as canonical JSON, or a sha256 of the canonical JSON of the whole
# row. Canonical JSON makes the same row give the same key from dicts, Arrow, pandas and Spark:
# keys sorted, None/NaN fields dropped, datetimes as UTC ISO with microseconds, integral floats as
# ints (pandas and Spark turn nullable ints into floats).

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Union

from dagster_incremental.cursor.paths import MISSING
from dagster_incremental.errors import PrimaryKeyMissing

BOUNDARY_KEY_LIMIT = 1000

DedupKey = Union[tuple[str, ...], str]  # ("id",) | "content" | () (= disabled)
CONTENT = "content"


def _canonical(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        value = value.astimezone(dt.timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond:06d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return _canonical(float(value)) if value == value else None
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            c = _canonical(v)
            if c is not None:
                out[str(k)] = c
        return out
    if type(value).__module__ == "numpy":
        if hasattr(value, "tolist"):
            return _canonical(value.tolist())
    if hasattr(value, "to_pydatetime"):  # pandas Timestamp subclasses datetime; NaT does not
        try:
            return _canonical(value.to_pydatetime())
        except ValueError:
            return None
    if isinstance(value, (list, tuple)) or (isinstance(value, Sequence) and not isinstance(value, str)):
        return [_canonical(v) for v in value]
    if value != value:  # NaT and friends
        return None
    return str(value)


def canonical_json(value: Any) -> str:
    """Stable JSON of a value: the same for equal rows from every input kind."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def row_dedup_key(row: Mapping[str, Any], dedup_key: DedupKey, *, where: str = "") -> str:
    """The boundary key of one row: primary-key values as canonical JSON, or a content hash."""
    if dedup_key == CONTENT:
        return hashlib.sha256(canonical_json(row).encode()).hexdigest()
    values = []
    for column in dedup_key:
        value = row.get(column, MISSING) if isinstance(row, Mapping) else getattr(row, column, MISSING)
        if value is MISSING:
            raise PrimaryKeyMissing(
                f"The primary key column {column!r} (primary_key {list(dedup_key)}) is missing in "
                f"{where or 'a row'}{_columns_of(row)}. Add the column to every row, or set primary_key to the "
                "columns that identify a row.",
                columns=[column],
            )
        values.append(value)
    return canonical_json(values[0] if len(values) == 1 else values)


def shown_value(value: Any, limit: int = 120) -> str:
    """One value as an error quotes it: its repr, cut at `limit` characters. Errors quote the
    offending value and the row's key, never a whole row (rows hold personal data)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _columns_of(row: Any) -> str:
    return f" (its columns: {', '.join(map(str, row))})" if isinstance(row, Mapping) else ""


@dataclass(frozen=True)
class Boundary:
    """The keys of the rows at cursor key `value` that are loaded; `overflow`: too many to keep.

    `value` is a key (see values.py); the state stores it in canonical form.
    """

    value: Any
    keys: frozenset[str] = field(default_factory=frozenset)
    overflow: bool = False

    def contains(self, key: str) -> bool:
        return key in self.keys

    def observe(
        self,
        value: Any,
        count: int,
        keys_fn: Callable[[], list[str]],
        direction: str,
        limit: int | None = None,
    ) -> Boundary:
        """The boundary after `count` more kept rows at cursor key `value`.

        A value beyond the current one starts a new set; the same value adds to it; a value behind
        it changes nothing. `keys_fn` is only called when the keys can still fit (no hashing of
        thousands of rows just to throw the keys away).
        """
        cap = BOUNDARY_KEY_LIMIT if limit is None else limit
        if count <= 0:
            return self
        if self.value is None or (value > self.value if direction == "max" else value < self.value):
            if count > cap:
                return Boundary(value, frozenset(), True)
            return Boundary(value, frozenset(keys_fn()), False)
        if value != self.value:
            return self
        if self.overflow or count > cap:
            return Boundary(value, frozenset(), True)
        merged = self.keys | frozenset(keys_fn())
        if len(merged) > cap:
            return Boundary(value, frozenset(), True)
        return Boundary(value, merged, False)
