"""Test helper: the same dict rows as each input kind the engine takes, and back.

Kinds: "dicts" (a list of dict rows), "pages" (a list of lists of dicts), "arrow" (a pyarrow
Table), "pandas" (a DataFrame) and "spark" (a pyspark DataFrame; needs the `spark` fixture).
`canonical(...)` turns any kind back into a sorted list of plain dicts (None fields dropped,
instants as UTC ISO, integral floats as ints) so results of different kinds compare equal.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pyarrow as pa
import pytest

KINDS = ("dicts", "pages", "arrow", "pandas", "spark")
PAGE = 3


def kind_params(kinds: tuple[str, ...] = KINDS) -> list[Any]:
    """pytest params for `kind`, with the Spark kind marked `spark`."""
    return [pytest.param(k, marks=pytest.mark.spark) if k == "spark" else k for k in kinds]


def to_kind(rows: list[dict], kind: str, spark: Any = None, schema: pa.Schema | None = None) -> Any:
    if kind == "dicts":
        return [dict(r) for r in rows]
    if kind == "pages":
        return [[dict(r) for r in rows[i : i + PAGE]] for i in range(0, len(rows), PAGE)]
    table = pa.Table.from_pylist(rows, schema=schema)
    if kind == "arrow":
        return table
    if kind == "pandas":
        return table.to_pandas()
    if kind == "spark":
        assert spark is not None, "the spark kind needs the spark fixture"
        from pyspark.sql.pandas.types import from_arrow_schema

        if not rows:
            return spark.createDataFrame([], from_arrow_schema(table.schema))
        return spark.createDataFrame(table.to_pandas(), from_arrow_schema(table.schema))
    raise ValueError(kind)


def _clean(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(value) if value.is_integer() else value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc).isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return _clean(value.item())
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if _clean(v) is not None}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_rows(result: Any) -> list[dict]:
    """Any kind's result as a list of plain dicts (in the result's order)."""
    if isinstance(result, list):
        return [_clean(dict(r)) for r in result]
    if isinstance(result, (pa.Table, pa.RecordBatch)):
        return [_clean(r) for r in result.to_pylist()]
    if type(result).__name__ == "DataFrame" and type(result).__module__.startswith("pandas"):
        return [_clean(r) for r in pa.Table.from_pandas(result, preserve_index=False).to_pylist()]
    if type(result).__name__ == "DataFrame" and type(result).__module__.startswith("pyspark"):
        return [_clean(r.asDict(recursive=True)) for r in result.collect()]
    raise TypeError(type(result))


def canonical(result: Any) -> list[dict]:
    """Result rows, sorted, comparable across kinds."""
    return sorted(to_rows(result), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def result_kind_ok(result: Any, kind: str) -> bool:
    """The engine returns the kind it was given (a list of dicts for dicts and pages)."""
    if kind in ("dicts", "pages"):
        return isinstance(result, list)
    if kind == "arrow":
        return isinstance(result, pa.Table)
    return type(result).__name__ == "DataFrame" and type(result).__module__.startswith(
        "pandas" if kind == "pandas" else "pyspark"
    )
