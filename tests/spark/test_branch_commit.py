"""The compare-and-set of a cursor-carrying commit, on the Hadoop and on a JDBC catalog, without
the file lock: a run whose cursor is no longer the newest is refused before it writes, and a run
whose base moved while it wrote is refused at publishing; the table and its cursor stay as the
other writer left them, for every write kind (local append, Spark append, MERGE, window)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from dagster_incremental.spark.commit import BRANCH_PREFIX, BaseMoved, CursorGuard, RunBranch, StaleCursor
from dagster_incremental.spark.commit import iceberg_table
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WindowReplace, WriteSpec
from catalogs import ICEBERG_ONLY

pytestmark = [pytest.mark.spark, ICEBERG_ONLY]  # Iceberg's own commit machinery

KINDS = {
    "local-append": (dict(disposition="append"), None),
    "spark-upsert": (dict(disposition="merge", strategy="upsert", primary_key=("id",)), None),
    "window": (dict(disposition="append"), WindowReplace(column="updated", start=0, end=100)),
}


def _table(catalog) -> TableRef:
    return TableRef(catalog.name, ("cas_" + uuid.uuid4().hex[:8],), "t")


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "updated": pa.array(ids, pa.int64())})


def _state(spark, table: TableRef) -> tuple[list[int], int]:
    spark.sql(f"REFRESH TABLE {table.sql}")
    ids = sorted(r.id for r in spark.table(table.sql).collect())
    return ids, iceberg_table(spark, table).currentSnapshot().snapshotId()


def _refs(spark, table: TableRef) -> list[str]:
    return [str(n) for n in iceberg_table(spark, table).refs().keySet() if str(n).startswith(BRANCH_PREFIX)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_on_a_stale_cursor_is_refused_and_writes_nothing(kind, spark, catalog):
    options, window = KINDS[kind]
    table, writer = _table(catalog), TableWriter(spark)
    spec = WriteSpec(table=table, **options)
    first = writer.write(spec, _rows([1, 2]), commit=CommitInfo(state={"last_value": 2}, run_id="first"))
    writer.write(spec, _rows([3]), commit=CommitInfo(state={"last_value": 3}, run_id="winner"),
                 guard=CursorGuard(first.snapshot_id, None))
    before = _state(spark, table)

    # a run that read the first cursor commits after the winner: refused, nothing written
    with pytest.raises(StaleCursor) as refused:
        writer.write(spec, _rows([3, 4]), commit=CommitInfo(state={"last_value": 4}, run_id="loser"),
                     window=window, guard=CursorGuard(first.snapshot_id, None))
    assert refused.value.run_id == "winner"
    assert _state(spark, table) == before
    assert _refs(spark, table) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_whose_base_moved_while_it_wrote_is_not_published(kind, spark, catalog, monkeypatch):
    """The check passed, then another writer committed before the publish: the catalog's atomic
    commit refuses it (the file lock alone would have let a Spark append rebase onto it)."""
    options, window = KINDS[kind]
    table, writer = _table(catalog), TableWriter(spark)
    spec = WriteSpec(table=table, **options)
    first = writer.write(spec, _rows([1, 2]), commit=CommitInfo(state={"last_value": 2}, run_id="first"))
    publish = RunBranch.publish

    def another_writer_first(self):
        monkeypatch.setattr(RunBranch, "publish", publish)  # the other writer publishes normally
        writer.write(spec, _rows([3]), commit=CommitInfo(state={"last_value": 3}, run_id="winner"),
                     guard=CursorGuard(first.snapshot_id, None))
        self.other = _state(spark, table)
        return publish(self)

    monkeypatch.setattr(RunBranch, "publish", another_writer_first)
    with pytest.raises(BaseMoved):
        writer.write(spec, _rows([3, 4]), commit=CommitInfo(state={"last_value": 4}, run_id="loser"),
                     window=window, guard=CursorGuard(first.snapshot_id, None))
    ids, _ = _state(spark, table)
    assert ids == [1, 2, 3], "the refused run's rows reached the table"
    assert _refs(spark, table) == []


def test_an_empty_table_gets_a_first_snapshot_to_branch_at(spark, catalog):
    table, writer = _table(catalog), TableWriter(spark)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql}")
    spark.sql(f"CREATE TABLE {table.sql} (id bigint, updated bigint) USING iceberg")
    spec = WriteSpec(table=table, disposition="append")
    result = writer.write(spec, _rows([1]), commit=CommitInfo(state={"last_value": 1}, run_id="r"),
                          guard=CursorGuard(None, None))
    assert _state(spark, table) == ([1], result.snapshot_id)
