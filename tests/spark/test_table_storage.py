"""The in-process write path on every catalog kind: pyarrow writes the data and delete files where
the table's location says (a local folder, or S3 through the table's S3FileIO settings on the
REST catalog: spark/iceberg/storage.py), Iceberg's Java API commits them, no Spark job; the table
is the one Spark's writers make, and pyiceberg reads it back."""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest
from pyarrow.fs import FileType

from catalogs import ICEBERG_ONLY, assert_other_readers_agree
from dagster_incremental.spark.iceberg.commit import iceberg_table
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.storage import TableStorage
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

pytestmark = [pytest.mark.spark, ICEBERG_ONLY]  # Iceberg's own commit machinery

SPARK_COMMIT = "spark.app.id"  # in the summary of every commit Spark's writers make
UTC = dt.timezone.utc


def _rows(ids: list[int], version: int) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i}-{version}" for i in ids], pa.string()),
        "updated_at": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i + version) for i in ids]),
    })


def _files(spark, table: TableRef) -> list[str]:
    return [r.file_path for r in spark.sql(f"SELECT file_path FROM {table.sql}.`all_files`").collect()]


def test_local_rows_are_appended_and_merged_without_spark_where_the_table_lives(spark, catalog):
    table = TableRef(catalog.name, ("store_" + uuid.uuid4().hex[:8],), "t")
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    writer = TableWriter(spark)
    first = writer.write(spec, _rows(list(range(1, 51)), 0), commit=CommitInfo(state={"v": 1}, run_id="r1"),
                         deduplicated=True)
    second = writer.write(spec, _rows([5, 40, 500], 1), commit=CommitInfo(state={"v": 2}, run_id="r2"),
                          deduplicated=True)

    iceberg = iceberg_table(spark, table)
    iceberg.refresh()
    for result in (first, second):
        assert SPARK_COMMIT not in dict(iceberg.snapshot(result.snapshot_id).summary())
    assert (second.rows_inserted, second.rows_updated, second.row_count) == (1, 2, 51)
    assert second.position_deletes == 2
    expected = {i: f"n{i}-0" for i in range(1, 51)} | {5: "n5-1", 40: "n40-1", 500: "n500-1"}
    spark.sql(f"REFRESH TABLE {table.sql}")
    assert {r.id: r.name for r in spark.table(table.sql).collect()} == expected

    location = str(iceberg.location())
    storage = TableStorage.of_table(spark._jvm, iceberg)
    assert storage is not None and storage.remote == location.startswith("s3://")
    files = _files(spark, table)
    folder = location.removeprefix("file:").rstrip("/") + "/data/"
    assert len(files) == 3 and all(f.removeprefix("file:").startswith(folder) for f in files)
    assert TableWriter(spark).read_committed_state(table).state == {"v": 2}
    assert_other_readers_agree(catalog, spark, table)


def test_the_files_of_a_refused_local_commit_are_removed(spark, catalog, monkeypatch):
    """A local append whose commit fails leaves no file behind, on S3 too."""
    from dagster_incremental.spark.iceberg.local import append as local_append

    table = TableRef(catalog.name, ("store_" + uuid.uuid4().hex[:8],), "t")
    spec = WriteSpec(table=table, disposition="append")
    writer = TableWriter(spark)
    writer.write(spec, _rows([1, 2], 0), commit=CommitInfo(state={"v": 1}, run_id="r1"))
    before = sorted(_files(spark, table))
    written: list[str] = []
    original = local_append.LocalAppend.commit

    def fail(self, data_files, *args, **kwargs):
        written.extend(str(f.location()) for f in data_files)
        raise RuntimeError("the commit failed")

    monkeypatch.setattr(local_append.LocalAppend, "commit", fail)
    with pytest.raises(RuntimeError, match="the commit failed"):
        writer.write(spec, _rows([3], 0), commit=CommitInfo(state={"v": 2}, run_id="r2"))
    monkeypatch.setattr(local_append.LocalAppend, "commit", original)
    assert written, "the local path wrote no file"
    storage = TableStorage.of_table(spark._jvm, iceberg_table(spark, table))
    assert storage is not None
    for location in written:
        assert storage.filesystem.get_file_info(storage.path(location)).type == FileType.NotFound
    assert sorted(_files(spark, table)) == before
