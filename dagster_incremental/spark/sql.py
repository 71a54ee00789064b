"""Spark SQL helpers: every identifier is quoted, no value ever becomes SQL text, and the one
window condition ([start, end) of a column) every window of the library uses."""

# Values reach SQL only as named parameters (`spark.sql(text, args={...})`, Spark >= 3.4) or as
# Column literals; this module only ever renders identifiers as text.

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any


def quote(identifier: str) -> str:
    """Backtick-quote one identifier part; backticks inside are doubled (Spark's escaping)."""
    if not isinstance(identifier, str) or identifier == "":
        raise ValueError(f"an identifier must be a non-empty string, got {identifier!r}")
    return "`" + identifier.replace("`", "``") + "`"


def qualified(*parts: str) -> str:
    """`catalog`.`namespace`.`table` from unquoted parts."""
    return ".".join(quote(p) for p in parts)


def column_list(columns: Iterable[str], alias: str | None = None) -> str:
    """`a`, `b` or s.`a`, s.`b`."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + quote(c) for c in columns)


def sql_param(value: Any) -> Any:
    """A window bound as a SQL parameter or literal; a naive datetime means UTC (as in the cursor engine)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


def in_window(ref: Any, start: Any, end: Any, start_open: bool = False, end_closed: bool = False) -> Any:
    """The Column condition `ref` in [start, end) (None: unbounded): every window of the library
    (a partition's, a backfill's, a slice's) is this one rule. A cursor's range_start="open" /
    range_end="closed" make it (start, ...] so the window holds exactly the rows its filter kept."""
    from pyspark.sql import functions as F

    inside = F.lit(True)
    if start is not None:
        low = F.lit(sql_param(start))
        inside = inside & (ref > low if start_open else ref >= low)
    if end is not None:
        high = F.lit(sql_param(end))
        inside = inside & (ref <= high if end_closed else ref < high)
    return inside


def in_window_sql(
    ref: str, start: Any, end: Any, start_open: bool = False, end_closed: bool = False, *, param: str
) -> tuple[str, dict[str, Any]]:
    """in_window as SQL text over `ref` (a quoted column), for statements written whole: the
    bounds are the named parameters `<param>_start` and `<param>_end`. Returns (condition, args)."""
    bounds, args = [], {}
    if start is not None:
        bounds.append(f"{ref} {'>' if start_open else '>='} :{param}_start")
        args[f"{param}_start"] = sql_param(start)
    if end is not None:
        bounds.append(f"{ref} {'<=' if end_closed else '<'} :{param}_end")
        args[f"{param}_end"] = sql_param(end)
    return " AND ".join(bounds) or "TRUE", args
