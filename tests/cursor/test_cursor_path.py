"""cursor_path parsing and extraction (missing vs None; tables: columns and struct fields)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dagster_incremental.cursor.paths import MISSING, parse_cursor_path
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.cursor.spec import incremental


@pytest.mark.parametrize(
    "path, parts",
    [
        ("updated_at", ("updated_at",)),
        ("updated at", ("updated at",)),
        ("meta.updated_at", ("meta", "updated_at")),
        ("$.meta.updated_at", ("meta", "updated_at")),
        ("$['a b'].c", ("a b", "c")),
        ('$["x.y"]', ("x.y",)),
        ("items[0].ts", ("items", 0, "ts")),
        ("$", ()),
    ],
)
def test_parse(path, parts):
    assert parse_cursor_path(path).parts == parts


@pytest.mark.parametrize("path", ["", "  ", "a..b", "$.", "a[*]", "$..a", ".a", "$.a[?(@.x)]", "a[", 5, None])
def test_unparsable_paths_fail_at_definition(path):
    with pytest.raises(IncrementalConfigError, match="cursor_path"):
        incremental(path)


def test_extract_distinguishes_missing_from_none():
    row = {"a": {"b": None, "c": [{"t": 1}]}, "z": None}
    assert parse_cursor_path("a.b").extract(row) is None
    assert parse_cursor_path("z").extract(row) is None
    assert parse_cursor_path("a.x").extract(row) is MISSING
    assert parse_cursor_path("q").extract(row) is MISSING
    assert parse_cursor_path("a.c[0].t").extract(row) == 1
    assert parse_cursor_path("a.c[1].t").extract(row) is MISSING
    assert parse_cursor_path("z.deeper").extract(row) is MISSING
    assert parse_cursor_path("$").extract(row) is row


def test_arrow_column_and_struct_field():
    t = pa.Table.from_pylist([{"meta": {"ts": 1}, "x": 2}, {"meta": {"ts": 3}, "x": 4}])
    assert parse_cursor_path("x").arrow_column(t).to_pylist() == [2, 4]
    assert parse_cursor_path("meta.ts").arrow_column(t).to_pylist() == [1, 3]
    assert parse_cursor_path("nope").arrow_column(t) is None
    assert parse_cursor_path("meta.nope").arrow_column(t) is None
    with pytest.raises(IncrementalConfigError):
        parse_cursor_path("$").arrow_column(t)


def test_nested_cursor_filters_dicts_and_arrow():
    rows = [{"id": 1, "meta": {"ts": 1}}, {"id": 2, "meta": {"ts": 5}}]
    spec = incremental("$.meta.ts", initial_value=2)
    assert spec.bind().filter(rows) == [rows[1]]
    assert spec.bind().filter(pa.Table.from_pylist(rows)).to_pylist() == [rows[1]]
