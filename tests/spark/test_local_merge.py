"""The keyed merge of local rows (pyarrow + one Iceberg RowDelta) leaves the table, the counts and
the cursor exactly as Spark's MERGE of the same rows does, and hands back to Spark where it can't."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.branch_commit import CursorGuard
from dagster_incremental.spark.commit import iceberg_table
from dagster_incremental.spark.local import merge as local_merge
from dagster_incremental.spark.local.stage import arrow_to_spark
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.writer import TableWriter
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


def same_outcome(spark, local: TableRef, remote: TableRef, mine, theirs, state: dict) -> None:
    assert contents(spark, local) == contents(spark, remote)
    strip = lambda r: (r.rows_inserted, r.rows_updated, r.rows_deleted, r.row_count, r.schema, r.delete_files, r.position_deletes)  # noqa: E731
    assert strip(mine) == strip(theirs)
    committed = TableWriter(spark).read_committed_state(local)
    assert committed.state == state and committed.snapshot_id == mine.snapshot_id


def test_an_upsert_into_an_existing_table_is_one_row_delta_without_spark(spark):
    local, remote = new_table("local"), new_table("remote")
    write_both(spark, local, remote, rows(list(range(1, 101))), {"v": 1})
    mine, theirs = write_both(spark, local, remote, rows([5, 50, 500, 501], version=1), {"v": 2})

    same_outcome(spark, local, remote, mine, theirs, {"v": 2})
    assert (mine.rows_inserted, mine.rows_updated, mine.row_count) == (2, 2, 102)
    assert SPARK_COMMIT not in summary(spark, local, mine.snapshot_id)
    assert SPARK_COMMIT in summary(spark, remote, theirs.snapshot_id)
