"""TableWriter against real Iceberg tables: multi-run contents, the cursor in exactly the data
commit, failures that change nothing, pruning, and hostile identifiers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from dagster_incremental.errors import ConcurrentRunError, DataShapeError, IncrementalConfigError
from dagster_incremental.spark.partitioning import parse_partition_field, partition_bounds
from dagster_incremental.spark import merge
from dagster_incremental.spark.iceberg.commit import conflicts_as_concurrent_run
from dagster_incremental.spark.delta.writer import DeltaWriter
from dagster_incremental.spark.errors import is_commit_conflict
from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.delta.log import DeltaLog
from dagster_incremental.spark.delta.table_ref import DeltaTableRef
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.batch_fit import prunable_partition_by
from dagster_incremental.spark.write_spec import (
    RUN_ID_PROPERTY,
    SCOPE_PROPERTY,
    STATE_PROPERTY,
    CommitInfo,
    WindowReplace,
    WriteSpec,
)

D = dt.date


# -- pure helpers --------------------------------------------------------------------------------


def test_table_name_quotes_every_part_and_joins_the_key_prefix():
    assert TableRef.for_asset("lake", "ns", ["sales", "orders"]).sql == "`lake`.`ns`.`sales__orders`"
    assert TableRef.for_asset("lake", "n s", ["it's", "a`b"]).sql == "`lake`.`n s`.`it's__a``b`"
    assert TableRef.parse("`lake`.`n s`.`it's__a``b`").parts == ("lake", "n s", "it's__a`b")
    assert TableRef.parse("lake.ns.t").parts == ("lake", "ns", "t")
    with pytest.raises(ValueError):
        TableRef.parse("`lake`.`open")


def test_partition_spec_parser_validates_and_quotes():
    cols = ["updated_at", "days(x)", "two words", "id"]
    assert parse_partition_field("days(updated_at)", cols).sql() == "days(`updated_at`)"
    assert parse_partition_field("days(x)", cols).sql() == "`days(x)`"  # a real column wins
    assert parse_partition_field("bucket(16, `two words`)", cols).sql() == "bucket(16, `two words`)"
    assert parse_partition_field("ID", cols).sql() == "`id`"
    with pytest.raises(IncrementalConfigError, match="unknown transform 'drop'"):
        parse_partition_field("drop(id)", cols)
    with pytest.raises(IncrementalConfigError, match=re.escape("bucket(N, column)")):
        parse_partition_field("bucket(id)", cols)
    with pytest.raises(IncrementalConfigError, match="not a column"):
        parse_partition_field("days(nope); DROP TABLE x", cols)


def test_helper_prefix_is_the_merge_strategies_one():
    """Helper columns of prepared merge batches never become table columns."""
    from dagster_incremental.spark.merge import sql as merge_sql
    from dagster_incremental.spark.window_replace import KEY_DELETE_OP, WINDOW_OP

    assert WINDOW_OP.startswith(merge_sql.HELPER_PREFIX) and KEY_DELETE_OP.startswith(merge_sql.HELPER_PREFIX)


# -- helpers against Spark ------------------------------------------------------------------------


@pytest.fixture
def table(request):
    return TableRef.for_asset("lake", "tw", [re.sub(r"\W", "_", request.node.name)])


@pytest.fixture
def writer(spark):
    return TableWriter(spark)


@pytest.fixture(params=["iceberg", "delta"])
def format_writer(request, spark, spark_warehouse, table):
    """(writer, table) of each table format: an Iceberg table of the catalog, a Delta table's folder."""
    if request.param == "delta":
        return DeltaWriter(spark), DeltaTableRef.at(table, f"{spark_warehouse}/delta/tw/{table.name}")
    return TableWriter(spark), table


def contents(spark, table):
    frame = spark.table(table.sql)
    return sorted(tuple(r) for r in frame.collect())


def snapshots(spark, table):
    rows = spark.sql(
        f"SELECT snapshot_id, operation, summary FROM {table}.`snapshots` ORDER BY committed_at"
    ).collect()
    return [(r.snapshot_id, r.operation, dict(r.summary)) for r in rows]


def frame(spark, rows, schema="id bigint, day date, v string"):
    return spark.createDataFrame(rows, schema)


def info(n, scope=None):
    return CommitInfo(state={"last_value": n}, run_id=f"run-{n}", scope=scope)


# -- append --------------------------------------------------------------------------------------


def test_append_runs_and_cursor_in_exactly_the_data_commit(spark, writer, table):
    spec = WriteSpec(table=table, disposition="append")
    r1 = writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 1), "b")]), commit=info(1))
    assert contents(spark, table) == [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 1), "b")]
    assert (r1.rows_inserted, r1.rows_updated, r1.rows_deleted, r1.row_count) == (2, 0, 0, 2)
    assert r1.schema == (("id", "bigint"), ("day", "date"), ("v", "string"))

    r2 = writer.write(spec, frame(spark, [(3, D(2024, 1, 2), "c")]), commit=info(2, scope="p1"))
    assert [r[0] for r in contents(spark, table)] == [1, 2, 3]
    assert (r2.rows_inserted, r2.row_count) == (1, 3)

    # an empty batch still makes a commit that records the cursor (Iceberg allows empty appends)
    r3 = writer.write(spec, frame(spark, []), commit=info(3))
    assert (r3.rows_inserted, r3.row_count) == (0, 3)

    history = snapshots(spark, table)
    assert [s[0] for s in history] == [r1.snapshot_id, r2.snapshot_id, r3.snapshot_id]  # one commit per run
    for (snapshot_id, operation, summary), n in zip(history, (1, 2, 3)):
        assert operation == "append"
        assert json.loads(summary[STATE_PROPERTY]) == {"last_value": n}
        assert summary[RUN_ID_PROPERTY] == f"run-{n}"
    assert history[1][2][SCOPE_PROPERTY] == "p1" and SCOPE_PROPERTY not in history[0][2]

    newest = writer.read_committed_state(table)
    assert (newest.state, newest.run_id, newest.snapshot_id) == ({"last_value": 3}, "run-3", r3.snapshot_id)
    assert writer.read_committed_state(table, scope="p1").run_id == "run-2"

    # batch None: nothing to write, but the table exists, so the cursor is still committed
    r4 = writer.write(spec, None, commit=info(4))
    assert writer.read_committed_state(table).snapshot_id == r4.snapshot_id
    assert r4.row_count == 3


def test_no_batch_and_no_table_creates_nothing(spark, writer, table):
    result = writer.write(WriteSpec(table=table), None, commit=info(1))
    assert result.snapshot_id is None and result.row_count == 0
    assert not writer.table_exists(table)
    assert writer.read_committed_state(table) is None

    # an empty first batch with a schema creates the table (and commits the cursor)
    spec = WriteSpec(table=table, disposition="replace", partition_by=("days(ts)",))
    empty = spark.createDataFrame([], "id bigint, ts timestamp, `note` string")
    result = writer.write(spec, empty, commit=info(2))
    assert result.schema == (("id", "bigint"), ("ts", "timestamp"), ("note", "string"))
    assert (result.row_count, writer.read_committed_state(table).snapshot_id) == (0, result.snapshot_id)
    properties = dict(spark.sql(f"SHOW TBLPROPERTIES {table}").collect())
    assert properties["format-version"] == "2" and properties["write.merge.mode"] == "copy-on-write"


def java_error(spark, exception_class: str, message: str):
    """A py4j error carrying a real Java exception of `exception_class` (as a failed commit raises)."""
    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm
    no_args = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 0)
    cls = jvm
    for part in exception_class.split("."):
        cls = getattr(cls, part)
    return Py4JJavaError(f"An error occurred while calling o1.commit. {message}", cls(message, no_args))


def test_commit_conflicts_become_concurrent_run_errors(spark):
    table = TableRef("lake", ("tw",), "t")
    conflict = java_error(spark, "org.apache.iceberg.exceptions.ValidationException", "Found conflicting files")
    with pytest.raises(ConcurrentRunError, match="another writer committed") as caught:
        with conflicts_as_concurrent_run(table):
            raise conflict
    assert caught.value.__cause__ is conflict
    assert (caught.value.table, caught.value.asset, caught.value.other_run) == ("lake.tw.t", None, None)
    assert is_commit_conflict(java_error(spark, "org.apache.iceberg.exceptions.CommitFailedException", "Version 3 already exists"))
    # the class decides, not the text: a message naming the exception is not one
    assert not is_commit_conflict(RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: Version 3"))
    with pytest.raises(KeyError):  # everything else passes through unchanged
        with conflicts_as_concurrent_run(table):
            raise KeyError("x")


# -- replace -------------------------------------------------------------------------------------


def test_replace_whole_table_including_empty_batch(spark, writer, table):
    spec = WriteSpec(table=table, disposition="replace")
    writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 2), "b")]), commit=info(1))
    r2 = writer.write(spec, frame(spark, [(3, D(2024, 1, 3), "c")]), commit=info(2))
    assert contents(spark, table) == [(3, D(2024, 1, 3), "c")]
    assert (r2.rows_inserted, r2.rows_deleted, r2.row_count) == (1, 2, 1)

    r3 = writer.write(spec, frame(spark, []), commit=info(3))  # the source is empty now
    assert contents(spark, table) == []
    assert (r3.rows_inserted, r3.rows_deleted, r3.row_count) == (0, 1, 0)
    assert snapshots(spark, table)[-1][2][STATE_PROPERTY] == '{"last_value":3}'


# -- window replace ------------------------------------------------------------------------------


def test_window_replace_on_an_unpartitioned_table(spark, writer, table):
    """Rows the source no longer has in the window go; other windows stay; one file spans all."""
    spec = WriteSpec(table=table, disposition="append")
    all_rows = [(i, D(2024, 1, d), f"v{i}") for d in (1, 2, 3) for i in (d * 10, d * 10 + 1, d * 10 + 2)]
    writer.write(spec, frame(spark, all_rows).coalesce(1), commit=info(0))
    assert int(snapshots(spark, table)[-1][2]["total-data-files"]) == 1  # overwrite(cond) would fail here

    window = WindowReplace("day", D(2024, 1, 2), D(2024, 1, 3))
    batch = frame(spark, [(20, D(2024, 1, 2), "v20"), (21, D(2024, 1, 2), "changed"), (29, D(2024, 1, 2), "new")])
    r1 = writer.write(spec, batch, commit=info(1, scope="2024-01-02"), window=window)
    expected = [r for r in all_rows if r[1] != D(2024, 1, 2)] + [
        (20, D(2024, 1, 2), "v20"), (21, D(2024, 1, 2), "changed"), (29, D(2024, 1, 2), "new")
    ]
    assert contents(spark, table) == sorted(expected)  # 22 is gone, 21 changed, 29 new
    # net changes: 20 unchanged; 21 (changed) and 22 (gone) deleted, 21' and 29 inserted (no key)
    assert (r1.rows_inserted, r1.rows_updated, r1.rows_deleted, r1.row_count) == (2, 0, 2, 9)
    assert json.loads(snapshots(spark, table)[-1][2][STATE_PROPERTY]) == {"last_value": 1}

    # a row outside the window (or NULL there) is refused before the commit
    before = snapshots(spark, table)
    outside = frame(spark, [(40, D(2024, 1, 2), "in"), (41, D(2024, 1, 4), "outside")])
    with pytest.raises(DataShapeError, match="outside the window"):
        writer.write(spec, outside, commit=info(9), window=window)
    assert snapshots(spark, table) == before

    # an empty batch clears exactly the window
    r2 = writer.write(spec, frame(spark, []), commit=info(2), window=window)
    assert contents(spark, table) == sorted(r for r in all_rows if r[1] != D(2024, 1, 2))
    assert (r2.rows_inserted, r2.rows_deleted, r2.row_count) == (0, 3, 6)
    assert len(snapshots(spark, table)) == 3  # one commit per run


def test_window_replace_prunes_to_the_touched_day(spark, writer, table):
    """A window replace of one day in a days(ts)-partitioned table rewrites only that day's file."""
    spec = WriteSpec(table=table, disposition="replace", partition_by=("days(ts)",))
    start = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)
    rows = [(i, start + dt.timedelta(days=i % 8), f"v{i}") for i in range(32)]
    schema = "id bigint, ts timestamp, v string"
    writer.write(spec, frame(spark, rows, schema), commit=info(0))
    assert int(snapshots(spark, table)[-1][2]["total-data-files"]) == 8

    day = dt.datetime(2024, 1, 3)  # naive: UTC
    result = writer.write(
        spec,
        frame(spark, [(99, start + dt.timedelta(days=2), "new")], schema),
        commit=info(1),
        window=WindowReplace("ts", day, day + dt.timedelta(days=1)),
    )
    summary = snapshots(spark, table)[-1][2]
    assert (summary["changed-partition-count"], summary["deleted-data-files"], summary["added-data-files"]) == ("1", "1", "1")
    assert (result.rows_inserted, result.rows_deleted, result.row_count) == (1, 4, 29)
    assert sorted(r[0] for r in contents(spark, table) if r[1].day == 3) == [99]


# -- full refresh --------------------------------------------------------------------------------


def test_full_refresh_replaces_schema_and_rows_in_one_commit(spark, writer, table):
    spec = WriteSpec(table=table, disposition="append", partition_by=("day",))
    writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 2), "b")]), commit=info(1))
    before = len(snapshots(spark, table))
    new = spark.createDataFrame([("x", 1.5, D(2024, 2, 1))], "id string, score double, day date")
    result = writer.write(spec, new, commit=info(2), full_refresh=True)
    assert result.schema == (("id", "string"), ("score", "double"), ("day", "date"))
    assert contents(spark, table) == [("x", 1.5, D(2024, 2, 1))]
    assert (result.rows_inserted, result.rows_deleted, result.row_count) == (1, 2, 1)
    history = snapshots(spark, table)
    assert len(history) == before + 1
    assert history[-1][0] == result.snapshot_id and history[-1][2][STATE_PROPERTY] == '{"last_value":2}'
    assert writer.read_committed_state(table).run_id == "run-2"
    spec_rows = spark.sql(f"SELECT partition FROM {table}.`partitions`").collect()
    assert [r.partition.day for r in spec_rows] == [D(2024, 2, 1)]


# -- merge ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class _UpsertStandIn:
    """A minimal upsert on `id` (a MergeStrategy): no dedup, no helper columns."""

    fail_prepare: bool = False
    bad_statement: bool = False

    def prepare_batch(self, spec, batch, *, run_started_at, deduplicated=False):
        if self.fail_prepare:
            raise DataShapeError("NULL key in the batch")
        return batch

    def merge_statement(self, spec, *, target, source_view, columns, run_started_at, prune=()):
        on, args = ["t.`id` = s.`id`"], {}
        for i, (column, lo, hi) in enumerate(prune):
            if lo is not None:
                on.append(f"t.{quote(column)} BETWEEN :p{i}_lo AND :p{i}_hi")
                args.update({f"p{i}_lo": lo, f"p{i}_hi": hi})
        if self.bad_statement:
            on.append("t.`no_such_column` = 1")
        text = (
            f"MERGE INTO {target.sql} AS t USING {quote(source_view)} AS s ON {' AND '.join(on)} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        return text, args


@pytest.fixture
def upsert_with(monkeypatch):
    """Install a stand-in as the "upsert" strategy of the registry the writer looks strategies up in."""

    def install(**kwargs):
        monkeypatch.setitem(merge.STRATEGIES, "upsert", _UpsertStandIn(**kwargs))

    return install


def test_merge_failure_before_commit_changes_nothing(spark, table, upsert_with):
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    upsert_with()
    TableWriter(spark).write(spec, frame(spark, [(1, D(2024, 1, 1), "a")]), commit=info(1))
    before = (snapshots(spark, table), contents(spark, table), spark.table(table.sql).schema)
    new_column = spark.createDataFrame([(1, D(2024, 1, 1), "b", 5)], "id bigint, day date, v string, extra int")
    for failure in ({"fail_prepare": True}, {"bad_statement": True}):
        upsert_with(**failure)
        with pytest.raises(Exception, match="NULL key|no_such_column"):
            TableWriter(spark).write(spec, frame(spark, [(1, D(2024, 1, 1), "b")]), commit=info(2))
    assert (snapshots(spark, table), contents(spark, table), spark.table(table.sql).schema) == before
    assert TableWriter(spark).read_committed_state(table).run_id == "run-1"
    # a failing statement after schema evolution: the data and cursor are unchanged; only the
    # (nullable, metadata-only) new column stays
    upsert_with(bad_statement=True)
    with pytest.raises(Exception, match="no_such_column"):
        TableWriter(spark).write(spec, new_column, commit=info(3))
    assert snapshots(spark, table) == before[0] and contents(spark, table) == [(1, D(2024, 1, 1), "a", None)]


def test_prunable_partition_columns_are_key_columns():
    cols = ["id", "day", "ts", "region"]

    def prunable(**kw):
        return prunable_partition_by(WriteSpec(table=TableRef("lake", ("tw",), "t"), disposition="merge", **kw), cols)

    assert prunable(strategy="upsert", primary_key=("id", "day"), partition_by=("day", "days(ts)")) == ["day"]
    # an updated row may move days: pruning on a non-key column would duplicate it
    assert prunable(strategy="upsert", primary_key=("id",), partition_by=("days(ts)",)) == []
    assert prunable(primary_key=("id", "region"), merge_key=("region",), partition_by=("region",)) == ["region"]
    assert prunable(primary_key=("id",), merge_key=("region",), partition_by=("region",)) == []
    assert prunable(strategy="scd2", primary_key=("id", "region"), partition_by=("region",)) == []
    assert prunable(strategy="scd2", merge_key=("region",), partition_by=("region",)) == ["region"]


def test_merge_prunes_with_batch_partition_bounds(spark, table, upsert_with):
    spec = WriteSpec(
        table=table, disposition="merge", strategy="upsert", primary_key=("id", "day"), partition_by=("day",),
        table_properties={"write.merge.mode": "copy-on-write"},  # file rewrites show what was pruned
    )
    upsert_with()
    writer = TableWriter(spark)
    rows = [(i, D(2024, 1, 1 + i % 6), f"v{i}") for i in range(24)]
    writer.write(spec, frame(spark, rows), commit=info(1))
    batch = frame(spark, [(3, D(2024, 1, 4), "changed"), (100, D(2024, 1, 4), "new")])
    assert partition_bounds(batch, spec.partition_by) == [("day", D(2024, 1, 4), D(2024, 1, 4))]
    with_null = frame(spark, [(1, None, "x"), (2, D(2024, 1, 2), "y")])
    assert partition_bounds(with_null, ["months(day)", "id"]) == [("day", None, None), ("id", 1, 2)]
    result = writer.write(spec, batch, commit=info(2))
    summary = snapshots(spark, table)[-1][2]
    assert (summary["changed-partition-count"], summary["deleted-data-files"], summary["added-data-files"]) == ("1", "1", "1")
    assert int(summary["deleted-records"]) == 4  # copy-on-write rewrote the day's file ...
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (1, 1, 0)  # ... but 2 rows changed
    assert (3, D(2024, 1, 4), "changed") in contents(spark, table)
    assert summary[STATE_PROPERTY] == '{"last_value":2}'


def test_merge_on_read_table_counts_exactly(spark, table, upsert_with):
    """merge-on-read writes delete files; counts still say what the MERGE did, run after run."""
    spec = WriteSpec(
        table=table, disposition="merge", strategy="upsert", primary_key=("id",),
        table_properties={"write.merge.mode": "merge-on-read"},
    )
    upsert_with()
    writer = TableWriter(spark)
    writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 1), "b")]), commit=info(1))
    result = writer.write(spec, frame(spark, [(2, D(2024, 1, 1), "B"), (3, D(2024, 1, 1), "c")]), commit=info(2))
    assert int(snapshots(spark, table)[-1][2]["added-delete-files"]) == 1
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted, result.row_count) == (1, 1, 0, 3)
    # the summary of this one also counts the earlier delete file Iceberg rewrites: not used
    again = writer.write(spec, frame(spark, [(2, D(2024, 1, 1), "B2"), (1, D(2024, 1, 1), "A")]), commit=info(3))
    assert (again.rows_inserted, again.rows_updated, again.rows_deleted, again.row_count) == (0, 2, 0, 3)
    assert contents(spark, table) == [(1, D(2024, 1, 1), "A"), (2, D(2024, 1, 1), "B2"), (3, D(2024, 1, 1), "c")]


def test_merge_with_the_real_strategies(spark, writer, table):
    """upsert with hard deletes through merge_strategies: counts from the keys the table held."""
    spec = WriteSpec(
        table=table, disposition="merge", strategy="upsert", primary_key=("id",), hard_delete_column="deleted"
    )
    schema = "id bigint, v string, deleted boolean"
    writer.write(spec, frame(spark, [(1, "a", False), (2, "b", False), (3, "c", False)], schema), commit=info(1))
    result = writer.write(
        spec, frame(spark, [(1, "a", False), (2, "B", False), (3, None, True), (4, "d", False)], schema), commit=info(2)
    )
    assert contents(spark, table) == [(1, "a", False), (2, "B", False), (4, "d", False)]
    # as MERGE counts: 1 and 2 matched (1 with equal values) = updated, 3 deleted, 4 inserted
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted, result.row_count) == (1, 2, 1, 3)
    assert [c for c, _ in result.schema] == ["id", "v", "deleted"]  # no helper columns stored
    assert writer.read_committed_state(table).state == {"last_value": 2}

    # a window on a merge table: replaced by the deduplicated batch (tombstones not inserted)
    window_result = writer.write(
        spec,
        frame(spark, [(5, "e", False), (5, "e2", False), (6, "x", True)], schema),
        commit=info(3),
        window=WindowReplace("id", 4, 10),
    )
    assert contents(spark, table) == [(1, "a", False), (2, "B", False), (5, "e2", False)]
    assert (window_result.rows_inserted, window_result.rows_deleted) == (1, 1)


def test_insert_only_counts_only_the_rows_it_inserted(spark, writer, table):
    """Rows whose key the table holds are neither updated nor counted; no data file is rewritten."""
    spec = WriteSpec(table=table, disposition="merge", strategy="insert-only", primary_key=("id",))
    first = writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 1), "b")]), commit=info(1))
    assert (first.rows_inserted, first.rows_updated, first.rows_deleted, first.row_count) == (2, 0, 0, 2)
    again = writer.write(spec, frame(spark, [(2, D(2024, 1, 2), "B"), (3, D(2024, 1, 2), "c")]), commit=info(2))
    assert (again.rows_inserted, again.rows_updated, again.rows_deleted, again.row_count) == (1, 0, 0, 3)
    assert contents(spark, table) == [(1, D(2024, 1, 1), "a"), (2, D(2024, 1, 1), "b"), (3, D(2024, 1, 2), "c")]
    assert snapshots(spark, table)[-1][2].get("deleted-data-files", "0") == "0"
    assert writer.read_committed_state(table).state == {"last_value": 2}


def test_window_backfill_of_a_merge_table_keeps_one_row_per_key_when_keys_move(spark, format_writer):
    """A key updated into a later window leaves no old version behind in its earlier window."""
    writer, table = format_writer
    spec = WriteSpec(
        table=table, disposition="merge", strategy="delete-insert", primary_key=("id",),
        hard_delete_column="deleted", cursor_column="day",
    )
    schema = "id bigint, day date, v string, deleted boolean"
    d = dt.date
    writer.write(
        spec,
        frame(spark, [(1, d(2024, 1, 1), "a", False), (2, d(2024, 1, 1), "b", False), (3, d(2024, 1, 2), "c", False)], schema),
        commit=info(1),
    )
    # the source now has id 1 updated on day 5 and id 2 deleted (its tombstone sits on day 5)
    moved = writer.write(
        spec,
        frame(spark, [(1, d(2024, 1, 5), "a2", False), (2, d(2024, 1, 5), None, True)], schema),
        commit=info(2),
        window=WindowReplace("day", d(2024, 1, 5), d(2024, 1, 6)),
    )
    assert contents(spark, table) == [(1, d(2024, 1, 5), "a2", False), (3, d(2024, 1, 2), "c", False)]
    # net change: id 1 moved into the window (updated), id 2's tombstone removed it elsewhere
    assert (moved.rows_inserted, moved.rows_updated, moved.rows_deleted, moved.row_count) == (0, 1, 1, 2)


@pytest.mark.parametrize("strategy", ["delete-insert", "upsert"])
def test_window_backfill_counts_the_net_change_of_the_window(spark, format_writer, strategy):
    """A backfill reloading a window reports what changed in it (docs/write-dispositions.md's row counts), not
    the rows the merge-on-read commit rewrote: identical rows count nothing."""
    writer, table = format_writer
    spec = WriteSpec(table=table, disposition="merge", strategy=strategy, primary_key=("id",), cursor_column="day")
    day, other = dt.date(2024, 1, 2), dt.date(2024, 1, 3)
    window = WindowReplace("day", day, other)
    rows = [(1, day, "a"), (2, day, "b"), (3, other, "c")]
    writer.write(spec, frame(spark, rows), commit=info(1))

    def backfill(n: int, batch: list) -> tuple:
        r = writer.write(spec, frame(spark, batch), commit=info(n), window=window)
        return (r.rows_inserted, r.rows_updated, r.rows_deleted)

    assert backfill(2, [(1, day, "a"), (2, day, "b")]) == (0, 0, 0)  # identical reload
    assert backfill(3, [(1, day, "a"), (2, day, "B")]) == (0, 1, 0)  # one changed row
    assert backfill(4, [(1, day, "a")]) == (0, 0, 1)  # a removed row
    assert backfill(5, [(1, day, "a"), (4, day, "d")]) == (1, 0, 0)  # a new row
    assert contents(spark, table) == [(1, day, "a"), (3, other, "c"), (4, day, "d")]


@pytest.mark.parametrize("primary_key", [("id",), ()], ids=["pk-and-day", "day-only"])
def test_a_delete_insert_on_a_merge_key_counts_the_net_change_of_its_groups(spark, format_writer, primary_key):
    """A delete-insert reloading the merge_key groups its batch names reports their net change
    (identical rows count nothing; a tombstone's group is reloaded too), however the format
    rewrote them; a group the batch does not name is neither counted nor touched."""
    writer, table = format_writer
    spec = WriteSpec(table=table, disposition="merge", strategy="delete-insert", primary_key=primary_key,
                     merge_key=("day",), hard_delete_column="deleted", cursor_column="day")
    schema = "id bigint, day date, v string, deleted boolean"
    d1, d2, d3 = dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)
    first = [(1, d1, "a", False), (2, d1, "b", False), (6, d1, "z", False), (3, d2, "c", False), (4, d3, "x", False)]
    writer.write(spec, frame(spark, first, schema), commit=info(1))
    # day 1 reloaded: id 1 identical, ids 2 and 6 gone from it, id 5 new; day 2 reloaded by a tombstone
    # (id 3 deleted) and by id 2, changed; day 3 not in the batch
    batch = [(1, d1, "a", False), (5, d1, "e", False), (2, d2, "B", False), (3, d2, None, True)]
    r = writer.write(spec, frame(spark, batch, schema), commit=info(2))
    assert contents(spark, table) == [(1, d1, "a", False), (2, d2, "B", False), (4, d3, "x", False), (5, d1, "e", False)]
    # paired by id: 5 inserted, 2 updated, 3 and 6 deleted; paired by day: day 1 lost b and z
    # and gained e (an update, a delete), day 2 lost c and gained B (an update)
    expected = (1, 1, 2) if primary_key else (0, 2, 1)
    assert (r.rows_inserted, r.rows_updated, r.rows_deleted, r.row_count) == (*expected, 4)


@pytest.mark.parametrize("source", ["frame", "arrow"])
@pytest.mark.parametrize(("batch", "expected"), [
    ([(2, D(2024, 1, 2), "B", False), (3, D(2024, 1, 2), "c", False)], (1, 1, 1, 3)),
    ([(2, D(2024, 1, 2), "B", False)], (0, 1, 1, 2)),
    ([(2, D(2024, 1, 2), None, True)], (0, 0, 2, 1)),
], ids=["with-a-new-key", "alone", "tombstone"])
def test_a_delete_insert_over_a_key_the_table_holds_twice_counts_the_other_copy_deleted(spark, format_writer, source,
                                                                                       batch, expected):
    """The table holds key 2 twice (someone appended it): a delete-insert on the primary key
    removes both copies, so a batch row for it is one update and the other copy a delete, and a
    tombstone deletes both. As a Spark frame and as local rows (on Delta, delta-rs's commit)."""
    writer, table = format_writer
    schema = "id bigint, day date, v string, deleted boolean"
    tombstones = any(row[3] for row in batch)
    spec = WriteSpec(table=table, disposition="merge", strategy="delete-insert", primary_key=("id",),
                     hard_delete_column="deleted" if tombstones else None)
    writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a", False), (2, D(2024, 1, 1), "b", False)], schema), commit=info(1))
    writer.write(WriteSpec(table=table, disposition="append"), frame(spark, [(2, D(2024, 1, 1), "b2", False)], schema),
                 commit=CommitInfo(state=None))
    arrow = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("v", pa.string()), ("deleted", pa.bool_())])
    rows = (frame(spark, batch, schema) if source == "frame"
            else pa.Table.from_pylist([dict(zip(arrow.names, row)) for row in batch], schema=arrow))
    r = writer.write(spec, rows, commit=info(2), deduplicated=True)
    assert (r.rows_inserted, r.rows_updated, r.rows_deleted, r.row_count) == expected
    assert [row[0] for row in contents(spark, table)] == sorted([1, *(row[0] for row in batch if not row[3])])
    if table.location is not None and source == "arrow" and not tombstones:  # Delta: the in-process commit's count
        made = DeltaLog(table.location).actions(r.snapshot_id) or []
        assert "delta-rs" in str(next(a["commitInfo"] for a in made if "commitInfo" in a).get("engineInfo"))


def test_window_counts_per_partition_add_up_to_the_backfill(spark, writer, table):
    """A two-day backfill of a merge-on-read table, split per day as a range run's partitions are,
    counts each day's net change the way the whole commit was counted."""
    from dagster_incremental.spark.iceberg.figures import window_counts

    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",), cursor_column="day")
    d1, d2, d3 = dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)
    writer.write(spec, frame(spark, [(1, d1, "a"), (2, d1, "b"), (3, d2, "c")]), commit=info(1))
    # day 1 reloaded identical, day 2: id 3 changed and id 4 new
    batch = frame(spark, [(1, d1, "a"), (2, d1, "b"), (3, d2, "C"), (4, d2, "d")])
    r = writer.write(spec, batch, commit=info(2), window=WindowReplace("day", d1, d3))
    assert (r.rows_inserted, r.rows_updated, r.rows_deleted) == (1, 1, 0)
    days = window_counts(spark, table, r.snapshot_id, "day", [(d1, d2), (d2, d3)], ("id",))
    assert [(c.inserted, c.updated, c.deleted) for c in days] == [(0, 0, 0), (1, 1, 0)]


# -- hostile identifiers -------------------------------------------------------------------------

HOSTILE = ["select", "from", "a`b", "it's", "two words"]


def test_hostile_identifiers_round_trip(spark, writer):
    table = TableRef.for_asset("lake", "we'ird ns", ["it's", "a`b table"])
    schema = ", ".join(f"{quote(c)} {t}" for c, t in zip(HOSTILE, ["bigint", "date", "string", "string", "double"]))
    spec = WriteSpec(table=table, disposition="append", partition_by=("from",))

    def rows(*ids):
        return [(i, D(2024, 1, 1 + i % 2), f"x`{i}", f"it's {i}", i / 2) for i in ids]

    writer.write(spec, spark.createDataFrame(rows(1, 2), schema), commit=info(1))
    assert [c for c, _ in writer.write(spec, spark.createDataFrame(rows(3), schema), commit=info(2)).schema] == HOSTILE
    assert contents(spark, table) == sorted(rows(1, 2, 3))

    # window replace on the `from` column
    window = WindowReplace("from", D(2024, 1, 2), D(2024, 1, 3))  # ids 1 and 3
    writer.write(spec, spark.createDataFrame(rows(5), schema), commit=info(3), window=window)
    assert contents(spark, table) == sorted(rows(2, 5))

    # merge with the real strategies, keyed on `select`, pruned on `from`
    merge = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("select",), partition_by=("from",))
    changed = [(2, D(2024, 1, 1), "changed", "it's", 0.0)]
    result = writer.write(merge, spark.createDataFrame(changed + rows(7), schema), commit=info(4))
    assert contents(spark, table) == sorted(changed + rows(5, 7))
    assert (result.rows_inserted, result.rows_updated) == (1, 1)

    # replace, and a new hostile column via schema evolution
    replace = WriteSpec(table=table, disposition="replace")
    extra = spark.createDataFrame([(9, "v")], "`select` bigint, `where``s` string")
    result = writer.write(replace, extra, commit=info(5))
    assert [c for c, _ in result.schema] == [*HOSTILE, "where`s"]
    assert contents(spark, table) == [(9, None, None, None, None, "v")]
    assert writer.read_committed_state(table).run_id == "run-5"
    assert spark.table(table.sql).where(F.col(quote("where`s")) == "v").count() == 1


# -- merge-on-read and its compaction --------------------------------------------------------------


def test_keyed_merge_tables_are_merge_on_read_and_compaction_keeps_rows_and_cursor(spark, writer, table):
    from dagster_incremental.spark.iceberg import maintenance
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    writer.write(spec, frame(spark, [(i, D(2024, 1, 1), "a") for i in range(20)]), commit=info(1))
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    assert properties["write.merge.mode"] == "merge-on-read"
    for n in range(2, 5):
        result = writer.write(spec, frame(spark, [(n, D(2024, 1, n), "b"), (100 + n, D(2024, 1, n), "new")]), commit=info(n))
        assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (1, 1, 0)
    # Iceberg keeps one delete file per data file: 3 deleted positions, 13 % of the rows
    assert (result.delete_files, result.position_deletes, result.row_count) == (1, 3, 23)
    assert not maintenance.needs_compaction(result)  # 13 % of a tiny table: not worth a rewrite
    big = dataclasses.replace(result, row_count=90_000, position_deletes=10_000)
    assert maintenance.needs_compaction(big)
    assert not maintenance.needs_compaction(dataclasses.replace(big, row_count=200_000))  # 5 %
    assert result.data_files >= 1
    many = maintenance.COMPACT_AT_DELETE_FILES
    assert maintenance.needs_compaction(dataclasses.replace(result, delete_files=many, data_files=many // 2))  # piled up
    # one delete file per data file: a scattered change into a large table, not worth rewriting it
    assert not maintenance.needs_compaction(dataclasses.replace(result, delete_files=many, data_files=many))
    before = contents(spark, table)

    maintenance.compact(spark, table)
    assert contents(spark, table) == before
    assert int(snapshots(spark, table)[-1][2].get("total-delete-files", 0)) == 0
    assert writer.read_committed_state(table).state == {"last_value": 4}  # a compaction carries no cursor
    after = writer.write(spec, frame(spark, [(2, D(2024, 1, 9), "c")]), commit=info(5))
    assert (after.rows_inserted, after.rows_updated, after.row_count) == (0, 1, 23)


def test_a_full_refresh_that_loses_the_creation_race_leaves_the_winners_table(format_writer, spark, monkeypatch):
    """A full refresh of a table that did not exist when the run read its cursor (none), while
    another run creates it with rows and a cursor: the refresh writes nothing and says another
    run's cursor came first, on either format (the order of the write is both formats' one)."""
    from dagster_incremental.spark.run_commit import CursorGuard, StaleCursor

    writer, table = format_writer
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a")]), commit=info(1))  # the other creator
    monkeypatch.setattr(type(writer), "_exists", lambda self, pending: False)  # this run looked before it
    with pytest.raises(StaleCursor):
        writer.write(spec, frame(spark, [(2, D(2024, 1, 2), "b")]), commit=info(2), full_refresh=True,
                     guard=CursorGuard(expected_snapshot_id=None, scope=None))
    assert contents(spark, table) == [(1, D(2024, 1, 1), "a")]
    if isinstance(writer, DeltaWriter):
        from dagster_incremental.spark.delta.log import DeltaLog

        assert DeltaLog(table.location).committed_cursor(None).state == {"last_value": 1}
    else:
        assert writer.read_committed_state(table).state == {"last_value": 1}


def test_a_table_created_by_someone_else_meanwhile_is_merged_into_not_recreated(spark, writer, table, monkeypatch):
    """CREATE TABLE AS SELECT for a new table loses the race to another creator: merge instead."""
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    writer.write(spec, frame(spark, [(1, D(2024, 1, 1), "a")]), commit=info(1))  # the other creator
    monkeypatch.setattr(TableWriter, "table_exists", lambda self, name: False)  # this run looked before it
    result = writer.write(spec, frame(spark, [(1, D(2024, 1, 2), "b"), (2, D(2024, 1, 2), "c")]), commit=info(2))
    assert (result.rows_inserted, result.rows_updated, result.row_count) == (1, 1, 2)
    assert contents(spark, table) == [(1, D(2024, 1, 2), "b"), (2, D(2024, 1, 2), "c")]
    assert writer.read_committed_state(table).state == {"last_value": 2}
