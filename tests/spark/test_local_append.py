"""Local rows written by pyarrow and committed with Iceberg's Java API: the same table, cursor
and pruning metrics as Spark's own writer, and nothing left behind when a commit fails."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from dagster_incremental.spark.iceberg.local.append import LocalAppend
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.local.stage import arrow_to_spark
from dagster_incremental.spark.errors import is_commit_conflict
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
UPSERT = dict(disposition="merge", strategy="upsert", primary_key=("id",))


def rows(ids, version=0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" if i % 3 else None for i in ids],
            "amount": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(12, 2)),
            "updated_at": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i) for i in ids]),
            "day": [dt.date(2024, 1, 1 + i % 28) for i in ids],
            "tags": [{"k": i, "vs": [i, version]} for i in ids],
            "version": pa.array([version] * len(ids), pa.int32()),
            "nothing": pa.nulls(len(ids)),
        }
    )


def table(name: str) -> TableRef:
    return TableRef("lake", (f"local_{uuid.uuid4().hex[:6]}",), name)


def contents(spark, name: TableRef) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark.table(name.sql).orderBy("id", "version").collect()]


def data_files(spark, name: TableRef) -> list[str]:
    return [r.file_path for r in spark.sql(f"SELECT file_path FROM {name}.files").collect()]


@pytest.mark.parametrize("disposition", [dict(disposition="append"), UPSERT, dict(disposition="replace")])
def test_local_rows_make_the_same_table_as_spark_with_the_cursor_in_the_same_commit(spark, disposition):
    writer = TableWriter(spark)
    local, via_spark = table("local"), table("spark")
    batch = rows(list(range(1, 200)))
    commit = CommitInfo(state={"last_value": "2024-01-09T06:00:00Z"}, run_id="r1")
    done = writer.write(WriteSpec(table=local, **disposition), batch, commit=commit, deduplicated=True)
    frame = arrow_to_spark(spark, batch)  # the same rows the way Spark's own writer gets them
    writer.write(WriteSpec(table=via_spark, **disposition), frame, commit=commit, deduplicated=True)

    assert contents(spark, local) == contents(spark, via_spark)
    assert spark.table(local.sql).schema == spark.table(via_spark.sql).schema
    assert (done.rows_inserted, done.row_count) == (199, 199)
    committed = writer.read_committed_state(local)
    assert committed.state == commit.state and committed.snapshot_id == done.snapshot_id
    # Iceberg has each file's bounds from the footers: a filter on id prunes files.
    bounds = spark.sql(f"SELECT readable_metrics.id.lower_bound AS lo, readable_metrics.id.upper_bound AS hi FROM {local}.files").collect()
    assert [(b.lo, b.hi) for b in bounds] == [(1, 199)]


def test_appends_evolve_the_schema_and_merges_read_the_local_files(spark):
    writer = TableWriter(spark)
    name = table("orders")
    writer.write(WriteSpec(table=name, **UPSERT), rows([1, 2, 3]), commit=CommitInfo(state={"v": 1}), deduplicated=True)
    # An upsert into the existing table goes through Spark's MERGE over the pyarrow-written files.
    changed = rows([2, 4], version=1).append_column("note", pa.array(["x", "y"]))
    result = writer.write(WriteSpec(table=name, **UPSERT), changed, commit=CommitInfo(state={"v": 2}), deduplicated=True)
    assert (result.rows_inserted, result.rows_updated, result.row_count) == (1, 1, 4)
    got = {r["id"]: (r["version"], r["note"]) for r in contents(spark, name)}
    assert got == {1: (0, None), 2: (1, "x"), 3: (0, None), 4: (1, "y")}

    log = table("log")
    writer.write(WriteSpec(table=log), rows([1]), commit=CommitInfo(state={"v": 1}))
    wider = rows([2]).set_column(6, "version", pa.array([7], pa.int64())).append_column("extra", pa.array([1.5]))
    writer.write(WriteSpec(table=log), wider, commit=CommitInfo(state={"v": 2}))
    assert dict(spark.table(log.sql).dtypes)["version"] == "bigint"  # int -> bigint, as Spark's path does
    assert [(r["id"], r["version"], r["extra"]) for r in contents(spark, log)] == [(1, 0, None), (2, 7, 1.5)]


def test_a_first_load_that_another_writer_beat_is_refused_and_leaves_no_files(spark):
    writer = TableWriter(spark)
    name = table("raced")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name.namespace_sql}")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING iceberg")
    target = LocalAppend.open(spark, name)
    paths: list[str] = []
    data_files = target.write_files(LocalRows.of(pa.table({"id": [1], "v": ["mine"]})), False, paths)
    spark.sql(f"INSERT INTO {name} VALUES (1, 'theirs')")  # another run's first load lands first
    with pytest.raises(Exception) as caught:
        target.commit(data_files, {"dagster_incremental.state": "{}"}, only_if_empty=True)
    assert is_commit_conflict(caught.value)
    assert [(r.id, r.v) for r in spark.table(name.sql).collect()] == [(1, "theirs")]


def test_a_failed_commit_removes_the_files_it_wrote_and_changes_nothing(spark, monkeypatch):
    writer = TableWriter(spark)
    name = table("failing")
    writer.write(WriteSpec(table=name), rows([1]), commit=CommitInfo(state={"v": 1}))
    before = sorted(data_files(spark, name))
    folder = before[0].rsplit("/", 1)[0].removeprefix("file:")

    def boom(self, paths, properties, *, only_if_empty, branch=None):
        raise RuntimeError("disk full")

    monkeypatch.setattr(LocalAppend, "commit", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        writer.write(WriteSpec(table=name), rows([2]), commit=CommitInfo(state={"v": 2}))
    import os

    assert sorted("file:" + os.path.join(folder, f) for f in os.listdir(folder)) == sorted(
        p if p.startswith("file:") else "file:" + p for p in before
    )
    assert [r["id"] for r in contents(spark, name)] == [1]
    assert writer.read_committed_state(name).state == {"v": 1}


def test_partitioned_tables_keep_the_spark_path(spark):
    writer = TableWriter(spark)
    name = table("parted")
    spec = WriteSpec(table=name, partition_by=("day",))
    writer.write(spec, rows([1, 2]), commit=CommitInfo(state={"v": 1}))
    writer.write(spec, rows([3]), commit=CommitInfo(state={"v": 2}))
    assert [r["id"] for r in contents(spark, name)] == [1, 2, 3]
    assert LocalAppend.open(spark, name) is None
    assert spark.sql(f"SELECT count(*) AS n FROM {name}.partitions").first().n == 3


@pytest.mark.parametrize("sorted_here", [True, False], ids=["arrow-dedup", "past-max-sorted-rows-spark-dedup"])
def test_rows_spilled_to_disk_are_deduplicated_across_pages_and_streamed_into_files(spark, monkeypatch, sorted_here):
    from types import SimpleNamespace

    from dagster_incremental.spark.local.stage import stage_batches

    monkeypatch.setattr("dagster_incremental.spark.local.rows.SPILL_BYTES", 1)  # every page to disk
    monkeypatch.setattr("dagster_incremental.spark.iceberg.local.append.ROWS_PER_FILE", 150)
    if not sorted_here:  # a batch too large to sort in this process: Spark keeps the same rows
        monkeypatch.setattr("dagster_incremental.spark.local.dedup.MAX_SORTED_ROWS", 100)
    name = table("spilled")
    spec = WriteSpec(table=name, cursor_column="version", **UPSERT)
    pages = [rows(list(range(p * 100, p * 100 + 100)), version=p) for p in range(4)]
    pages.append(rows([5, 105], version=9))  # newer versions of keys from the first pages
    staged = stage_batches(pages, {}, SimpleNamespace(name="spilled"), spec)
    assert staged.local.spilled and staged.deduplicated is sorted_here
    assert staged.local.num_rows == (400 if sorted_here else 402)
    TableWriter(spark).write(spec, staged.data(lambda: spark), commit=CommitInfo(state={"v": 1}),
                             deduplicated=staged.deduplicated)
    got = {r["id"]: r["version"] for r in contents(spark, name)}
    assert len(got) == 400 and got[5] == got[105] == 9 and got[399] == 3
    counts = [r.record_count for r in spark.sql(f"SELECT record_count FROM {name}.files").collect()]
    assert sum(counts) == 400  # one row per key
    assert not sorted_here or (len(counts) > 1 and max(counts) <= 150)  # the local writer's files: streamed
    staged.local.close()
