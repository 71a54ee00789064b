"""cursor_path: where the cursor value lives in a row, validated at `incremental(...)` so a typo
fails at definition time, not mid-run.
"""

from __future__ import annotations

# Supported (validated at `incremental(...)`, so a typo fails at definition time, not mid-run):
# - a column name: `updated_at` (also with spaces: `updated at`);
# - a dotted path: `meta.updated_at`;
# - a JSONPath subset: `$.meta.updated_at`, `$['a b'].c`, `items[0].ts`, and `$` (the whole row,
#   useful with a callable last_value_func).
# Wildcards, filters and slices are rejected: dlt silently used the first of several matches.
#
# Dict rows distinguish a *missing* value (MISSING) from an explicit None. Tabular inputs address a
# top-level column, and a dotted path may continue into struct fields.

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.errors import IncrementalConfigError


class _Missing:
    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()

_NAME = r"[^.\[\]$'\"]+"
_TOKEN = re.compile(
    r"\.(?P<dot>" + _NAME + r")"
    r"|\[(?P<idx>-?\d+)\]"
    r"|\['(?P<sq>(?:[^'\\]|\\.)*)'\]"
    r'|\["(?P<dq>(?:[^"\\]|\\.)*)"\]'
)


@dataclass(frozen=True)
class CursorPath:
    """A parsed cursor path: `parts` are field names (str) and list indices (int)."""

    raw: str
    parts: tuple[str | int, ...]

    @property
    def is_whole_row(self) -> bool:
        return not self.parts

    @property
    def column(self) -> str | None:
        """The top-level column a tabular input must have (None for `$`)."""
        return self.parts[0] if self.parts and isinstance(self.parts[0], str) else None

    def extract(self, row: Any) -> Any:
        """The value at this path in a dict row (or object), or MISSING."""
        current = row
        for part in self.parts:
            if isinstance(part, int):
                if isinstance(current, Sequence) and not isinstance(current, (str, bytes)):
                    try:
                        current = current[part]
                    except IndexError:
                        return MISSING
                else:
                    return MISSING
            elif isinstance(current, Mapping):
                if part not in current:
                    return MISSING
                current = current[part]
            elif current is not None and hasattr(current, part):
                current = getattr(current, part)
            else:
                return MISSING
        return current

    def arrow_column(self, table: pa.Table | pa.RecordBatch) -> pa.Array | None:
        """The cursor column of a table (struct fields followed), or None when it is missing."""
        if self.is_whole_row:
            raise IncrementalConfigError(
                f"cursor_path {self.raw!r} (the whole row) only works with dict rows and a callable "
                "last_value_func; for tables name a column."
            )
        name = self.parts[0]
        if not isinstance(name, str) or name not in table.schema.names:
            return None
        col = table.column(name)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
        for part in self.parts[1:]:
            if isinstance(part, int) or not pa.types.is_struct(col.type):
                raise IncrementalConfigError(
                    f"cursor_path {self.raw!r}: tables support a column or struct fields "
                    f"(a.b), not list indices; column {name!r} has type {table.schema.field(name).type}."
                )
            if col.type.get_field_index(part) < 0:
                return None
            col = pc.struct_field(col, part)
        return col

    def __str__(self) -> str:
        return self.raw


def parse_cursor_path(path: Any) -> CursorPath:
    """Parse `path`; raises IncrementalConfigError saying what is supported."""
    if not isinstance(path, str) or not path.strip():
        raise IncrementalConfigError(
            f"cursor_path={path!r} is not valid: give a column name ('updated_at'), a dotted path "
            "('meta.updated_at') or a JSONPath like '$.meta.updated_at' or '$'."
        )
    raw = path
    text = path.strip()
    parts: list[str | int] = []
    if text == "$":
        return CursorPath(raw, ())
    if text.startswith("$"):
        rest = text[1:]
    else:
        m = re.match(_NAME, text)
        if not m:
            _bad(raw, "it must start with a field name or '$'")
        parts.append(m.group(0).strip())
        rest = text[m.end() :]
    pos = 0
    while pos < len(rest):
        m = _TOKEN.match(rest, pos)
        if not m:
            _bad(raw, f"cannot read {rest[pos:]!r} (wildcards, filters and slices are not supported)")
        if m.group("dot") is not None:
            name = m.group("dot").strip()
            if not name or name == "*":
                _bad(raw, "empty or wildcard field name")
            parts.append(name)
        elif m.group("idx") is not None:
            parts.append(int(m.group("idx")))
        else:
            quoted = m.group("sq") if m.group("sq") is not None else m.group("dq")
            parts.append(re.sub(r"\\(.)", r"\1", quoted))
        pos = m.end()
    if not parts:
        _bad(raw, "no field named")
    return CursorPath(raw, tuple(parts))


def _bad(raw: str, why: str) -> NoReturn:
    raise IncrementalConfigError(
        f"cursor_path={raw!r} is not a valid path: {why}. Supported: a column name ('updated_at'), "
        "a dotted path ('meta.updated_at'), a JSONPath subset ('$.meta.updated_at', \"$['a b'].c\", "
        "'items[0].ts') or '$' for the whole row."
    )
