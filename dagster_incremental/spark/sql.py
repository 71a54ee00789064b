"""Quoting for Spark SQL: every identifier is quoted, no value ever becomes SQL text."""

# Values reach SQL only as named parameters (`spark.sql(text, args={...})`, Spark >= 3.4) or as
# Column literals; this module only ever renders identifiers.

from __future__ import annotations

from collections.abc import Iterable


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
