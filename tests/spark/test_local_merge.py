"""The keyed merge of local rows (pyarrow + one Iceberg RowDelta) leaves the table, the counts and
the cursor exactly as Spark's MERGE of the same rows does, and hands back to Spark where it can't."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.run_commit import CursorGuard
from dagster_incremental.spark.iceberg.commit import iceberg_table
from dagster_incremental.spark.iceberg.local import merge as local_merge
from dagster_incremental.spark.local.stage import arrow_to_spark
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
SPARK_COMMIT = "spark.app.id"  # in the summary of every commit Spark's writers make


def rows(ids, version=0, dead=None) -> pa.Table:
    columns = {
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i}-{version}" if i % 3 else None for i in ids], pa.string()),
        "version": pa.array([version] * len(ids), pa.int32()),
        "updated_at": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i + version) for i in ids]),
    }
    if dead is not None:
        columns["deleted"] = pa.array(dead, pa.bool_())
    return pa.table(columns)


def new_table(hint: str) -> TableRef:
    return TableRef("lake", (f"lmerge_{uuid.uuid4().hex[:6]}",), hint)


def spec(table: TableRef, strategy: str = "upsert", **kwargs) -> WriteSpec:
    return WriteSpec(table=table, disposition="merge", strategy=strategy, primary_key=("id",), **kwargs)


def contents(spark, table: TableRef) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(table.sql).collect())


def summary(spark, table: TableRef, snapshot_id: int) -> dict:
    return dict(iceberg_table(spark, table).snapshot(snapshot_id).summary())


def write_both(spark, local: TableRef, remote: TableRef, batch: pa.Table, state: dict, **spec_kwargs):
    """The batch into `local` as Arrow and into `remote` as a Spark frame: (local, spark) results."""
    writer = TableWriter(spark)
    commit = CommitInfo(state=state, run_id=f"run-{state}")
    mine = writer.write(spec(local, **spec_kwargs), batch, commit=commit, deduplicated=True)
    theirs = writer.write(spec(remote, **spec_kwargs), arrow_to_spark(spark, batch), commit=commit, deduplicated=True)
    return mine, theirs


def same_outcome(spark, local: TableRef, remote: TableRef, mine, theirs, state: dict, same_files: bool = True) -> None:
    """Same rows, counts, schema and cursor snapshot. Delete files: one per data file with deleted
    rows in both; their number is Spark's when both tables had the same data files (Spark's MERGE
    splits its new rows over its tasks' files, the local merge writes one file)."""
    assert contents(spark, local) == contents(spark, remote)
    strip = lambda r: (r.rows_inserted, r.rows_updated, r.rows_deleted, r.row_count, r.schema, r.position_deletes)  # noqa: E731
    assert strip(mine) == strip(theirs)
    assert deletes_per_data_file(spark, local) == [1] * mine.delete_files
    if same_files:
        assert mine.delete_files == theirs.delete_files
    committed = TableWriter(spark).read_committed_state(local)
    assert committed.state == state and committed.snapshot_id == mine.snapshot_id


def deletes_per_data_file(spark, table: TableRef) -> list[int]:
    """How many delete files apply to each data file that has any (Iceberg's scan planning)."""
    iceberg = iceberg_table(spark, table)
    iceberg.refresh()
    tasks = iceberg.newScan().planFiles()
    iterator, counts = tasks.iterator(), []
    while iterator.hasNext():
        counts.append(iterator.next().deletes().size())
    tasks.close()
    return [n for n in counts if n]


def test_an_upsert_into_an_existing_table_is_one_row_delta_without_spark(spark):
    local, remote = new_table("local"), new_table("remote")
    write_both(spark, local, remote, rows(list(range(1, 101))), {"v": 1})
    mine, theirs = write_both(spark, local, remote, rows([5, 50, 500, 501], version=1), {"v": 2})

    same_outcome(spark, local, remote, mine, theirs, {"v": 2})
    assert (mine.rows_inserted, mine.rows_updated, mine.row_count) == (2, 2, 102)
    assert SPARK_COMMIT not in summary(spark, local, mine.snapshot_id)
    assert SPARK_COMMIT in summary(spark, remote, theirs.snapshot_id)


@pytest.mark.parametrize("strategy", ["upsert", "delete-insert"])
def test_tombstones_delete_matched_rows_and_insert_nothing(spark, strategy):
    local, remote = new_table("local"), new_table("remote")
    write_both(spark, local, remote, rows(list(range(1, 21)), dead=[False] * 20), {"v": 1}, strategy=strategy, hard_delete_column="deleted")
    batch = rows([3, 4, 30, 31], version=1, dead=[True, False, True, False])
    mine, theirs = write_both(spark, local, remote, batch, {"v": 2}, strategy=strategy, hard_delete_column="deleted")

    same_outcome(spark, local, remote, mine, theirs, {"v": 2})
    assert (mine.rows_inserted, mine.rows_updated, mine.rows_deleted, mine.row_count) == (1, 1, 1, 20)
    assert 3 not in {r[0] for r in contents(spark, local)} and 30 not in {r[0] for r in contents(spark, local)}
    assert SPARK_COMMIT not in summary(spark, local, mine.snapshot_id)


def test_repeated_merges_fold_earlier_deletes_into_one_delete_file_per_data_file(spark):
    local, remote = new_table("local"), new_table("remote")
    write_both(spark, local, remote, rows(list(range(1, 51))), {"v": 0})
    for version, ids in enumerate([[1, 2, 60], [2, 3, 61], [1, 60, 61, 62], [10, 20, 30]], start=1):
        mine, theirs = write_both(spark, local, remote, rows(ids, version=version), {"v": version})
        same_outcome(spark, local, remote, mine, theirs, {"v": version}, same_files=False)
        assert SPARK_COMMIT not in summary(spark, local, mine.snapshot_id)
    assert mine.position_deletes == theirs.position_deletes > 0
    assert pyiceberg_rows(spark, local) == pyiceberg_rows(spark, remote)


@pytest.mark.parametrize(
    "kwargs",
    [dict(partition_by=("bucket(4, id)",)), dict(table_properties={"write.merge.mode": "copy-on-write"})],
    ids=["partitioned", "copy-on-write"],
)
def test_a_partitioned_or_copy_on_write_table_keeps_sparks_merge(spark, kwargs):
    local, remote = new_table("local"), new_table("remote")
    write_both(spark, local, remote, rows(list(range(1, 21))), {"v": 1}, **kwargs)
    mine, theirs = write_both(spark, local, remote, rows([2, 40], version=1), {"v": 2}, **kwargs)

    same_outcome(spark, local, remote, mine, theirs, {"v": 2})
    assert SPARK_COMMIT in summary(spark, local, mine.snapshot_id)


def test_a_format_version_3_table_keeps_sparks_merge_and_says_why(spark, caplog):
    """Iceberg takes only deletion vectors in a v3 table ("Must use DVs for position deletes in
    V3"): the local merge, which writes position delete files, hands over instead of failing the run."""
    local, remote = new_table("local"), new_table("remote")
    v3 = dict(table_properties={"format-version": "3"})
    write_both(spark, local, remote, rows(list(range(1, 21))), {"v": 1}, **v3)
    with caplog.at_level(logging.DEBUG, logger=local_merge.__name__):
        mine, theirs = write_both(spark, local, remote, rows([2, 40], version=1), {"v": 2}, **v3)

    same_outcome(spark, local, remote, mine, theirs, {"v": 2})
    assert SPARK_COMMIT in summary(spark, local, mine.snapshot_id)
    assert any("declined for" in m and local.namespace[0] in m and "format version 3" in m for m in caplog.messages)


def test_a_key_the_table_holds_twice_keeps_sparks_merge(spark):
    """An upsert MERGE updates every copy of a key: the local merge would keep one, so it hands over."""
    local, remote = new_table("local"), new_table("remote")
    write_both(spark, local, remote, rows([1, 2, 3]), {"v": 1})
    for table in (local, remote):  # someone appends a second row for key 2
        TableWriter(spark).write(WriteSpec(table=table, disposition="append"), rows([2], version=9), commit=CommitInfo(state=None))
    mine, theirs = write_both(spark, local, remote, rows([2, 4], version=1), {"v": 2})

    same_outcome(spark, local, remote, mine, theirs, {"v": 2})
    assert [r[2] for r in contents(spark, local) if r[0] == 2] == [1, 1]  # both copies updated
    assert SPARK_COMMIT in summary(spark, local, mine.snapshot_id)


def test_equality_deletes_keep_sparks_merge(spark, tmp_path):
    local = new_table("local")
    writer = TableWriter(spark)
    writer.write(spec(local), rows(list(range(1, 11))), commit=CommitInfo(state={"v": 1}), deduplicated=True)
    add_equality_delete(spark, local, ids=[7], folder=tmp_path)
    result = writer.write(spec(local), rows([7, 8, 20], version=1), commit=CommitInfo(state={"v": 2}), deduplicated=True)

    assert SPARK_COMMIT in summary(spark, local, result.snapshot_id)
    table = {r[0]: r[2] for r in contents(spark, local)}
    assert sorted(table) == [*range(1, 11), 20] and (table[7], table[8], table[9]) == (1, 1, 0)


def add_equality_delete(spark, table: TableRef, ids, folder) -> None:
    """Another engine's equality delete of rows `ids` (by `id`), committed through the Java API."""
    import pyarrow.parquet as pq

    jvm, iceberg = spark._jvm, iceberg_table(spark, table)
    field_id = iceberg.schema().findField("id").fieldId()
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(field_id)})])
    path = str(folder / "eq-deletes.parquet")
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}, schema=schema), path)
    written = iceberg.io().newInputFile(path)
    metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(written, jvm.org.apache.iceberg.MetricsConfig.forTable(iceberg))
    equality_ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
    equality_ids[0] = field_id
    delete = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(iceberg.spec()).ofEqualityDeletes(equality_ids)
        .withInputFile(written).withFormat("parquet").withMetrics(metrics).build()
    )
    iceberg.newRowDelta().addDeletes(delete).commit()
    spark.catalog.refreshTable(table.sql)


def pyiceberg_rows(spark, table: TableRef) -> list[tuple]:
    """The table as pyiceberg reads it from its current metadata file (delete files applied)."""
    from pyiceberg.table import StaticTable

    location = str(iceberg_table(spark, table).operations().current().metadataFileLocation())
    arrow = StaticTable.from_metadata(location).scan().to_arrow()
    return sorted(tuple(r.values()) for r in arrow.to_pylist())


@pytest.mark.parametrize("guarded", [False, True])
def test_a_concurrent_writer_makes_the_local_merge_fail_and_leave_the_table_to_it(spark, monkeypatch, guarded):
    """Another writer commits between the local merge's read of the table and its commit: the
    RowDelta's validation refuses it (as Spark's MERGE commit would), nothing of it is visible."""
    table, writer = new_table("raced"), TableWriter(spark)
    first = writer.write(spec(table), rows(list(range(1, 21))), commit=CommitInfo(state={"v": 1}), deduplicated=True)
    other_writer = spec(table)
    matched = local_merge.match_target

    def match_then_race(*args, **kwargs):
        found = matched(*args, **kwargs)
        frame = arrow_to_spark(spark, rows([5], version=7))
        writer.write(other_writer, frame, commit=CommitInfo(state=None), deduplicated=True)
        return found

    monkeypatch.setattr(local_merge, "match_target", match_then_race)
    guard = CursorGuard(expected_snapshot_id=first.snapshot_id, scope=None) if guarded else None
    with pytest.raises(ConcurrentRunError, match="another writer committed"):
        writer.write(spec(table), rows([5, 6, 40], version=1), commit=CommitInfo(state={"v": 2}), deduplicated=True, guard=guard)

    assert {r[0]: r[2] for r in contents(spark, table)} == {**{i: 0 for i in range(1, 21)}, 5: 7}
    assert writer.read_committed_state(table).state == {"v": 1}
    assert not [b for b in iceberg_table(spark, table).refs().keySet() if str(b) != "main"]  # no branch left


KEYS = st.integers(min_value=0, max_value=24)
BATCH = st.dictionaries(KEYS, st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=12)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(["upsert", "delete-insert"]),
    hard_delete=st.booleans(),
    first=st.lists(KEYS, min_size=1, max_size=20, unique=True),
    changes=st.lists(BATCH, min_size=1, max_size=3),
)
def test_the_local_merge_makes_the_table_sparks_merge_makes(spark, strategy, hard_delete, first, changes):
    """Any sequence of keyed batches (updates, inserts, tombstones) into a table loaded from the
    same files: the same rows (read by Spark and by pyiceberg), counts, position deletes and
    cursor snapshot as Spark's MERGE, every commit made without Spark."""
    local, remote = new_table("local"), new_table("remote")
    kwargs = dict(strategy=strategy, hard_delete_column="deleted" if hard_delete else None)
    writer = TableWriter(spark)
    for table in (local, remote):  # the same one data file in both
        writer.write(spec(table, **kwargs), rows(first, dead=[False] * len(first)), commit=CommitInfo(state={"v": 0}), deduplicated=True)
    for number, change in enumerate(changes, start=1):
        ids = sorted(change)
        batch = rows(ids, version=number, dead=[change[i][1] and hard_delete for i in ids])
        batch = batch.set_column(2, "version", pa.array([change[i][0] + 10 * number for i in ids], pa.int32()))
        mine, theirs = write_both(spark, local, remote, batch, {"v": number}, **kwargs)
        same_outcome(spark, local, remote, mine, theirs, {"v": number}, same_files=number == 1)
        if mine.snapshot_id is not None and (mine.rows_inserted or mine.rows_updated or mine.rows_deleted):
            assert SPARK_COMMIT not in summary(spark, local, mine.snapshot_id)
    assert pyiceberg_rows(spark, local) == pyiceberg_rows(spark, remote)


def test_position_delete_metrics_take_the_form_each_iceberg_line_has():
    """Iceberg 1.10 (Spark 3.5) asks for the table; Iceberg 1.12 (Spark 4.1) has only the
    form without it, and py4j answers the other with "does not exist"."""
    from types import SimpleNamespace

    from py4j.protocol import Py4JError

    from dagster_incremental.spark.iceberg.local.merge import _position_delete_metrics

    def iceberg_112(*table):
        if table:
            raise Py4JError("Method forPositionDelete([class org.apache.iceberg.BaseTable]) does not exist")
        return "metrics of 1.12"

    def jvm_with(method):
        return SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(iceberg=SimpleNamespace(
            MetricsConfig=SimpleNamespace(forPositionDelete=method)))))

    assert _position_delete_metrics(jvm_with(iceberg_112), "table") == "metrics of 1.12"
    assert _position_delete_metrics(jvm_with(lambda table: f"metrics of {table}"), "t") == "metrics of t"
