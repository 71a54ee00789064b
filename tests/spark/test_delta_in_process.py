"""Small local batches committed to Delta by delta-rs (spark/delta/in_process.py): the same table,
cursor and figures as the Spark path for any history, and the same compare-and-set."""

from __future__ import annotations

import contextlib
import os
import uuid
from datetime import datetime

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalogs import assert_delta_rs_agrees, delta_by_spark_only
from dagster_incremental.spark.run_commit import BaseMoved, CursorGuard, StaleCursor
from dagster_incremental.spark.delta import commit as delta_commit
from dagster_incremental.spark.delta import in_process
from dagster_incremental.spark.delta import writer as delta_writer
from dagster_incremental.spark.delta.log import DeltaLog
from dagster_incremental.spark.delta.writer import DeltaWriter
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.delta.table_ref import DeltaTableRef
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("amount", pa.float64()), ("at", pa.timestamp("us"))])
AT = datetime(2024, 3, 1, 12, 30)


def new_table(warehouse: str) -> TableRef:
    name = "t_" + uuid.uuid4().hex[:8]
    return DeltaTableRef.at(TableRef("lake", ("in_process",), name), f"{warehouse}/delta/in_process/{name}")


def engine(table: TableRef, version: int) -> str:
    """Who made commit `version`: delta-rs, or Spark (Apache-Spark/... Delta-Lake/...)."""
    info = next(a["commitInfo"] for a in DeltaLog(table.location).actions(version) if "commitInfo" in a)
    return str(info.get("engineInfo", ""))


def table_rows(spark, table: TableRef) -> list[tuple]:
    return sorted((tuple(r) for r in spark.sql(f"SELECT id, v, amount, at FROM {table.sql}").collect()), key=repr)


def batch(rows: list[tuple]) -> pa.Table:
    """Rows of (id, v, amount[, at]); `at` is a timestamp without a zone (AT when not given)."""
    return pa.Table.from_pylist([{"id": r[0], "v": r[1], "amount": r[2], "at": r[3] if len(r) > 3 else AT}
                                 for r in rows], schema=SCHEMA)


def write_outside_the_lock(monkeypatch, *args, **kwargs):
    """A write by a writer that does not take the library's lock on the table (a notebook, a job
    on a machine with another lock), made while ours holds it: the commit race the cursor check
    still has to win."""
    with monkeypatch.context() as patch:
        patch.setattr(delta_writer, "commit_lease", lambda location, table: contextlib.nullcontext())
        return write(*args, **kwargs)


def write(spark, table: TableRef, disposition: str, rows, state: int, guard=None):
    merge = disposition in ("upsert", "delete-insert")
    spec = WriteSpec(table=table, disposition="merge" if merge else "append",
                     strategy=disposition if merge else None, primary_key=("id",))
    return DeltaWriter(spark).write(spec, batch(rows), commit=CommitInfo(state={"last_value": state}, run_id=f"r{state}"),
                                    deduplicated=True, guard=guard)


ROWS = st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", "c"]),
                          st.one_of(st.none(), st.floats(-5, 5, allow_nan=False)),
                          st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1))),
                min_size=1, max_size=4, unique_by=lambda r: r[0])
# (disposition, rows, whether our table takes this batch through Spark too: a Spark MERGE or
# INSERT into a table delta-rs created or last wrote)
HISTORY = st.lists(st.tuples(st.sampled_from(["append", "upsert", "delete-insert"]), ROWS, st.booleans()),
                   min_size=1, max_size=4)


@settings(max_examples=int(os.environ.get("DI_PROPERTY_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(first=ROWS, history=HISTORY)
def test_any_history_gives_the_spark_paths_table_cursor_and_figures(spark, spark_warehouse, monkeypatch, first, history):
    """The same batches into two tables, one by delta-rs and one by Spark: after each write the
    same rows (read by Spark and by delta-rs), the same cursor and the same figures. The session
    is in a zone other than UTC, in which Spark reads a timestamp without one."""
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")  # +05:30 all year
    try:
        _same_as_spark(spark, spark_warehouse, monkeypatch, first, history)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def _same_as_spark(spark, spark_warehouse, monkeypatch, first, history):
    ours, theirs = new_table(spark_warehouse), new_table(spark_warehouse)
    steps = [("append", first, False), *history]
    for state, (disposition, rows, both_by_spark) in enumerate(steps):
        with monkeypatch.context() as m:
            if both_by_spark:
                delta_by_spark_only(m)
            mine = write(spark, ours, disposition, rows, state)
        assert ("delta-rs" in engine(ours, mine.snapshot_id)) is not both_by_spark
        with monkeypatch.context() as m:
            delta_by_spark_only(m)
            spark_made = write(spark, theirs, disposition, rows, state)
        assert "delta-rs" not in engine(theirs, spark_made.snapshot_id)
        assert table_rows(spark, ours) == table_rows(spark, theirs)
        assert (mine.rows_inserted, mine.rows_updated, mine.rows_deleted, mine.row_count) == (
            spark_made.rows_inserted, spark_made.rows_updated, spark_made.rows_deleted, spark_made.row_count)
        assert mine.schema == spark_made.schema
        assert spark.table(ours.sql).schema == spark.table(theirs.sql).schema
        assert DeltaLog(ours.location).committed_cursor(None).state == {"last_value": state}
    assert_delta_rs_agrees(spark, ours)


def test_a_commit_another_writer_made_after_the_check_wins_and_ours_writes_nothing(spark, spark_warehouse, monkeypatch):
    """The in-process commit lands exactly at the version after the one it loaded: another
    cursor commit made between our check and our commit takes that version, ours fails
    (BaseMoved: checked again, then refused as stale) and writes nothing."""
    table = new_table(spark_warehouse)
    created = write(spark, table, "append", [(1, "a", 1.0)], 0)
    checked = delta_commit.DeltaCommit.checked_count

    def another_run_commits_after_our_check(self):
        count = checked(self)
        monkeypatch.setattr(delta_commit.DeltaCommit, "checked_count", checked)
        write_outside_the_lock(monkeypatch, spark, table, "upsert", [(2, "other", 2.0)], 5,
                               guard=CursorGuard(created.snapshot_id, None))
        return count

    monkeypatch.setattr(delta_commit.DeltaCommit, "checked_count", another_run_commits_after_our_check)
    with pytest.raises(BaseMoved):
        write(spark, table, "upsert", [(3, "ours", 3.0)], 1, guard=CursorGuard(created.snapshot_id, None))
    assert table_rows(spark, table) == [(1, "a", 1.0, AT), (2, "other", 2.0, AT)]
    assert DeltaLog(table.location).committed_cursor(None).state == {"last_value": 5}


def test_a_run_that_loses_the_race_to_create_the_table_writes_nothing_past_the_winners_cursor(spark, spark_warehouse,
                                                                                              monkeypatch):
    """Two runs find no table; the other one creates it first (between our look and our commit).
    Ours, expecting no cursor, is refused as stale (the Spark path's CREATE race ends the same
    way) and the table holds the winner's rows and cursor only."""
    table = new_table(spark_warehouse)
    schema_of = in_process.creatable_schema

    def another_run_creates_it_first(*args):
        monkeypatch.setattr(in_process, "creatable_schema", schema_of)
        write_outside_the_lock(monkeypatch, spark, table, "append", [(2, "other", 2.0)], 5)
        return schema_of(*args)

    monkeypatch.setattr(in_process, "creatable_schema", another_run_creates_it_first)
    with pytest.raises(StaleCursor):
        write(spark, table, "append", [(3, "ours", 3.0)], 1, guard=CursorGuard(None, None))
    assert table_rows(spark, table) == [(2, "other", 2.0, AT)]
    assert DeltaLog(table.location).committed_cursor(None).state == {"last_value": 5}
    assert "delta-rs" in engine(table, 0)


def test_a_batch_the_table_does_not_fit_takes_the_spark_path(spark, spark_warehouse):
    """A new column (schema evolution) and a type change are the Spark path's: it evolves the
    table or refuses the change, as for any batch."""
    table = new_table(spark_warehouse)
    write(spark, table, "append", [(1, "a", 1.0)], 0)
    spec = WriteSpec(table=table, disposition="append")
    wider = pa.Table.from_pylist([{"id": 2, "v": "b", "amount": 2.0, "at": AT, "note": "new"}])
    made = DeltaWriter(spark).write(spec, wider, commit=CommitInfo(state={"last_value": 1}))
    assert "delta-rs" not in engine(table, made.snapshot_id)
    assert ("note", "string") in made.schema


@pytest.mark.parametrize("catalog", ["delta-s3"], indirect=True)
def test_on_s3_the_in_process_commit_is_made_by_delta_rs_and_read_back(spark, catalog):
    """On S3 too (the session's S3A settings, under the commit lease): delta-rs creates the table
    and commits the change, Spark and delta-rs read the same rows and cursor."""
    import dagster as dg

    table = catalog.io_manager("in_process_" + uuid.uuid4().hex[:6]).table_name(dg.AssetKey("orders"))
    assert table.location.startswith("s3a://")
    created = write(spark, table, "append", [(1, "a", 1.0), (2, "b", None)], 0)
    made = write(spark, table, "upsert", [(2, "B", 2.0), (3, "c", 3.0)], 1)
    assert "delta-rs" in engine(table, created.snapshot_id)
    assert "delta-rs" in engine(table, made.snapshot_id)
    assert (made.rows_inserted, made.rows_updated, made.row_count) == (1, 1, 3)
    assert table_rows(spark, table) == [(1, "a", 1.0, AT), (2, "B", 2.0, AT), (3, "c", 3.0, AT)]
    assert DeltaLog(table.location).committed_cursor(None).state == {"last_value": 1}
    assert_delta_rs_agrees(spark, table, catalog.delta_rs_options())


def test_only_an_upsert_into_an_existing_table_is_bounded_in_rows(spark, spark_warehouse, monkeypatch):
    """A first load and an append of any batch held in memory are delta-rs's; an upsert into
    the table past MAX_MERGE_ROWS is Spark's MERGE (delta-rs would hold the touched files)."""
    monkeypatch.setattr(in_process, "MAX_MERGE_ROWS", 2)
    table = new_table(spark_warehouse)
    three = [(1, "a", 1.0), (2, "b", 2.0), (3, "c", 3.0)]
    created = write(spark, table, "upsert", three, 0)
    appended = write(spark, table, "append", [(4, "d", 4.0), (5, "e", 5.0), (6, "f", 6.0)], 1)
    upserted = write(spark, table, "upsert", [(1, "A", 1.0), (7, "g", 7.0), (8, "h", 8.0)], 2)
    small = write(spark, table, "upsert", [(2, "B", 2.0)], 3)
    assert ["delta-rs" in engine(table, made.snapshot_id) for made in (created, appended, upserted, small)] == [
        True, True, False, True]
    assert (upserted.rows_inserted, upserted.rows_updated, small.row_count) == (2, 1, 8)


def spilled(rows: list[tuple]) -> LocalRows:
    """The rows as a batch spilled to disk, one spill file per row."""
    local = LocalRows(spill_bytes=1)
    for row in rows:
        local.add(batch([row]))
    return local.finish()


def test_a_batch_spilled_to_disk_is_created_and_appended_from_its_spill_files(spark, spark_warehouse):
    """A batch too large to hold in memory streams from its spill files into delta-rs's commit
    (a first load, an append); an upsert of one is Spark's MERGE. Same rows as the batches."""
    table = new_table(spark_warehouse)
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    writer = DeltaWriter(spark)
    first = spilled([(1, "a", 1.0), (2, "b", None), (3, "c", 3.0)])
    assert first.spilled
    created = writer.write(spec, first, commit=CommitInfo(state={"last_value": 0}), deduplicated=True)
    appended = writer.write(WriteSpec(table=table, disposition="append"), spilled([(4, "d", 4.0), (5, "e", 5.0)]),
                            commit=CommitInfo(state={"last_value": 1}))
    upserted = writer.write(spec, spilled([(1, "A", 1.5), (6, "f", 6.0)]), commit=CommitInfo(state={"last_value": 2}),
                            deduplicated=True)
    assert ["delta-rs" in engine(table, made.snapshot_id) for made in (created, appended, upserted)] == [True, True, False]
    assert (created.rows_inserted, appended.rows_inserted, upserted.rows_inserted, upserted.rows_updated) == (3, 2, 1, 1)
    assert table_rows(spark, table) == [(1, "A", 1.5, AT), (2, "b", None, AT), (3, "c", 3.0, AT), (4, "d", 4.0, AT),
                                        (5, "e", 5.0, AT), (6, "f", 6.0, AT)]
    assert_delta_rs_agrees(spark, table)
