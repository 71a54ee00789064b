"""Quoting for Spark SQL: every identifier is quoted, no value ever becomes SQL text.

Values reach SQL only as named parameters (`spark.sql(text, args={...})`, Spark >= 3.4) or as
Column literals; this module only ever renders identifiers.
"""

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


def split_identifier(table: str) -> list[str]:
    """The parts of a (partly) backtick-quoted multipart name: "`a`.`b``c`.d" -> [a, b`c, d]."""
    parts: list[str] = []
    i, n = 0, len(table)
    while i < n:
        if table[i] == "`":
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise ValueError(f"unbalanced backticks in table name {table!r}")
                if table[j] == "`":
                    if j + 1 < n and table[j + 1] == "`":
                        buf.append("`")
                        j += 2
                        continue
                    break
                buf.append(table[j])
                j += 1
            parts.append("".join(buf))
            i = j + 1
        else:
            j = table.find(".", i)
            j = n if j == -1 else j
            parts.append(table[i:j].strip())
            i = j
        if i < n:
            if table[i] != ".":
                raise ValueError(f"unexpected {table[i]!r} in table name {table!r}")
            i += 1
    if not parts or any(p == "" for p in parts):
        raise ValueError(f"bad table name {table!r}")
    return parts
