"""Batches a production asset meets every week: an empty change batch, an optional column that
is NULL in every changed row, a backfill whose cursor includes its end value.

Each test runs a real asset twice or more and checks the table, the cursor and the figures.
"""

from __future__ import annotations

import dagster as dg
import pytest

from catalogs import HADOOP_ONLY
from dagster_incremental import Incremental, incremental, incremental_asset

pytestmark = [pytest.mark.spark, HADOOP_ONLY]

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
MERGES = [
    {"disposition": "merge", "strategy": "upsert"},
    {"disposition": "merge", "strategy": "delete-insert"},
    {"disposition": "merge", "strategy": "insert-only"},
    {"disposition": "merge", "strategy": "scd2"},
]


def _run(asset, instance, io, run_config=None) -> dg.ExecuteInProcessResult:
    config = {**QUIET, **(run_config or {})}
    return dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=config)


def _meta(result: dg.ExecuteInProcessResult) -> dict:
    return result.get_asset_materialization_events()[-1].materialization.metadata


def _rows(spark, io, name: str, columns: str = "*") -> list[tuple]:
    frame = spark.table(io.table_name(dg.AssetKey(name)).sql).selectExpr(columns)
    return sorted(map(tuple, frame.collect()), key=repr)


def _figures(meta: dict) -> tuple[int, int, int]:
    return tuple(meta[f"dagster_incremental/rows_{k}"].value for k in ("inserted", "updated", "deleted"))


# (name, write_disposition, extra decorator options). No cursor: a cursor's filter happened to
# drop the empty page before the crash, so these assets are the ones that met it.
EMPTY_CASES = [
    ("upsert", MERGES[0], {}),
    ("delete_insert", MERGES[1], {}),
    ("delete_insert_merge_key", MERGES[1], {"merge_key": "day"}),
    ("insert_only", MERGES[2], {}),
    ("scd2", MERGES[3], {}),
    ("upsert_hard_delete_dedup_sort", MERGES[0], {"columns": {"gone": {"hard_delete": True}, "seq": {"dedup_sort": "desc"}}}),
    ("upsert_delete_missing", {**MERGES[0], "delete_missing": True}, {}),
]


@pytest.mark.parametrize("name,disposition,options", EMPTY_CASES, ids=[c[0] for c in EMPTY_CASES])
def test_a_merge_whose_function_returns_an_empty_list_changes_nothing(spark, instance, io_manager, config_file, name, disposition, options):
    """docs/performance.md: "a run that finds nothing new commits nothing" (dlt loads nothing for an empty resource)."""
    batches = [[{"id": 1, "day": 1, "val": "a", "gone": False, "seq": 1}], []]
    name = f"empty_{name}"

    @incremental_asset(name=name, primary_key="id", write_disposition=disposition, config_path=config_file, **options)
    def asset():
        return batches.pop(0)

    first = _meta(_run(asset, instance, io_manager))
    before = _rows(spark, io_manager, name)
    second = _meta(_run(asset, instance, io_manager))
    assert _figures(second) == (0, 0, 0)
    assert second["dagster_incremental/state"].value == first["dagster_incremental/state"].value
    assert _rows(spark, io_manager, name) == before


@pytest.mark.parametrize("disposition", [*MERGES, "append", "replace"], ids=lambda d: d if isinstance(d, str) else d["strategy"])
def test_a_column_null_in_every_row_of_a_batch_fits_the_tables_type(spark, instance, io_manager, config_file, disposition):
    """dlt: None in a hard_delete column means "not deleted"; NULL fits a bigint column too."""
    batches = [
        [{"id": 1, "val": "foo", "deleted": False, "n": 1}],
        [{"id": 2, "val": "baz", "deleted": None, "n": None}],
        [{"id": 1, "val": "gone", "deleted": True, "n": None}],
    ]
    label = disposition if isinstance(disposition, str) else disposition["strategy"].replace("-", "_")
    name = f"nulls_{label}"
    hints = {"deleted": {"hard_delete": True}} if not isinstance(disposition, str) else None

    @incremental_asset(name=name, primary_key="id", write_disposition=disposition, columns=hints, config_path=config_file)
    def asset():
        return batches.pop(0)

    _run(asset, instance, io_manager)
    _run(asset, instance, io_manager)
    schema = dict(spark.table(io_manager.table_name(dg.AssetKey(name)).sql).dtypes)
    assert (schema["deleted"], schema["n"]) == ("boolean", "bigint")
    current = {
        "upsert": [(1, "foo", False, 1), (2, "baz", None, None)],
        "delete_insert": [(1, "foo", False, 1), (2, "baz", None, None)],
        "insert_only": [(1, "foo", False, 1), (2, "baz", None, None)],
        "scd2": [(2, "baz", None, None)],  # a full extract: id 1 is retired
        "append": [(1, "foo", False, 1), (2, "baz", None, None)],
        "replace": [(2, "baz", None, None)],
    }[label]
    where = "_valid_to IS NULL" if label == "scd2" else "TRUE"
    table = io_manager.table_name(dg.AssetKey(name)).sql
    got = sorted(map(tuple, spark.sql(f"SELECT id, val, deleted, n FROM {table} WHERE {where}").collect()), key=repr)
    assert got == current
    _run(asset, instance, io_manager)  # the hard delete of id 1 (a plain value elsewhere)
    got = sorted(map(tuple, spark.sql(f"SELECT id, val, deleted FROM {table} WHERE {where}").collect()), key=repr)
    expected = {
        "append": [(1, "foo", False), (1, "gone", True), (2, "baz", None)],
        "replace": [(1, "gone", True)],
        "insert_only": [(1, "foo", False), (2, "baz", None)],  # a key loaded once is never changed
        "scd2": [],  # id 2 is absent from the extract, id 1 deleted
    }.get(label, [(2, "baz", None)])
    assert got == expected


def test_an_untyped_column_of_a_first_batch_is_added_when_a_later_batch_types_it(spark, instance, io_manager, config_file):
    batches = [[{"id": 1, "note": None}], [{"id": 2, "note": "typed at last"}]]

    @incremental_asset(name="late_type", primary_key="id", write_disposition="append", config_path=config_file)
    def asset():
        return batches.pop(0)

    _run(asset, instance, io_manager)
    table = io_manager.table_name(dg.AssetKey("late_type")).sql
    assert spark.table(table).columns == ["id"]  # Iceberg has no type for "always NULL"
    _run(asset, instance, io_manager)
    assert dict(spark.table(table).dtypes)["note"] == "string"
    assert _rows(spark, io_manager, "late_type") == [(1, None), (2, "typed at last")]


SOURCE = [{"id": i, "ts": f"2024-01-0{i}T00:00:00Z"} for i in range(1, 8)]
RANGES = [{"range_end": "closed"}, {"range_start": "open"}, {"range_start": "open", "range_end": "closed"}]


@pytest.mark.parametrize("step", [None, "P1D"], ids=["whole", "sliced"])
@pytest.mark.parametrize("options", RANGES, ids=["end_closed", "start_open", "both"])
@pytest.mark.parametrize("disposition", ["append", {"disposition": "merge", "strategy": "upsert"}], ids=["append", "upsert"])
def test_an_end_value_backfill_replaces_exactly_the_range_its_cursor_keeps(spark, instance, io_manager, config_file, step, options, disposition):
    """After an incremental run loaded every row, a backfill of [2024-01-02, 2024-01-05] with
    range_end="closed" keeps the row at its end and range_start="open" drops the one at its
    start: its window replace covers that same range, so re-running it keeps each row once
    (the row at the end is not refused, the one at the start is not removed)."""
    label = "append" if disposition == "append" else "upsert"
    name = f"range_{label}_{'_'.join(options.values())}_{'sliced' if step else 'whole'}".replace("closed", "c").replace("open", "o")
    window = {"initial_value": "2024-01-02T00:00:00Z", "end_value": "2024-01-05T00:00:00Z"}

    @incremental_asset(name=name, primary_key="id", write_disposition=disposition, config_path=config_file)
    def asset(ts: Incremental = incremental("ts", step=step, **options)):
        return SOURCE

    _run(asset, instance, io_manager)
    for _ in range(2):
        result = _run(asset, instance, io_manager, {"ops": {name: {"config": window}}})
    assert [r[0] for r in _rows(spark, io_manager, name, "id")] == list(range(1, 8))
    assert _meta(result)["dagster_incremental/mode"].value == "backfill"
