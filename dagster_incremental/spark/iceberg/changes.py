"""What an Iceberg upstream changed between two of its snapshots (spark/table_format.py's
`UpstreamChanges`; the rows and `_change_type` are put together in spark/upstream_changes.py, and
a Delta upstream's sibling is spark/delta/changes.py).

- append: Iceberg's incremental read between two snapshot ids (only appended files are read);
- changes: any commit may have updated or deleted rows. Iceberg's changelog scan refuses delete
  files (merge-on-read tables, which keyed merges write), so the change set is built from the
  commits' file entries: rows live at the end in data files added since the start are the
  inserted side; rows live at the start in data files removed since, or at positions deleted
  since, are the gone side (the commits' file lists come from their own manifests; only the new
  delete files are read). The caller nets the two sides: a row on both (a file rewritten by
  copy-on-write or compaction, the row itself unchanged) is dropped from both.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from dagster_incremental.cursor.upstream import Snapshot, UpstreamRead
from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.iceberg.commit import iceberg_table
from dagster_incremental.spark.iceberg.storage import TableStorage
from dagster_incremental.spark.local.stage import arrow_to_spark
from dagster_incremental.spark.table_ref import TableRef

_FILE, _POS = "_file", "_pos"

# Snapshot summary counts of the rows a commit touched: rows in the data files it added and
# removed, rows it deleted by position or equality (a merge-on-read update adds a row and a
# position delete; a copy-on-write one counts its rewritten files' rows twice).
_WRITTEN_ROWS = ("added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")


def snapshot_history(spark, table: TableRef) -> tuple[list[Snapshot], int | None]:
    """The table's snapshots and its current one (None: no table or no commit yet); no Spark job.
    The first question of every read: over Spark Connect, refused before anything is written."""
    _refuse_over_connect(spark, table)
    if not spark.catalog.tableExists(table.sql):
        return [], None
    iceberg = iceberg_table(spark, table)
    iceberg.refresh()  # another process may have committed since this session cached it
    history = [
        Snapshot(snap.snapshotId(), snap.parentId(), snap.operation())
        for snap in iceberg.snapshots()
    ]
    current = iceberg.currentSnapshot()
    return history, current.snapshotId() if current is not None else None


def _refuse_over_connect(spark, table: TableRef) -> None:
    """An Iceberg upstream's changes are read through Iceberg's Java API in the Spark driver,
    which a Spark Connect session does not have here."""
    from dagster_incremental.errors import IncrementalConfigError
    from dagster_incremental.spark.connect import is_connect

    if is_connect(spark):
        raise IncrementalConfigError(
            f"upstream {table.display}: reading an Iceberg table's changes (Changes) over Spark Connect is not "
            "supported yet (they are read through Iceberg's Java API in the Spark driver). Run this asset's code "
            "location with a classic session ([spark] master, no [spark] remote or SPARK_REMOTE), or read the "
            "upstream whole instead of its changes. Nothing was written.")


def table_id(table: TableRef) -> str | None:
    """None: Iceberg's snapshot ids are random, so a table created again is told by them alone."""
    return None


def missing(spark, table: TableRef) -> bool:
    """Known to be no table (its catalog says so)."""
    return not spark.catalog.tableExists(table.sql)


def rows_written(spark, table: TableRef, commits: Sequence[int], above: int) -> int:
    """How many rows `commits` touched, by their snapshot summaries (no Spark job), counted until
    the sum passes `above`."""
    iceberg = iceberg_table(spark, table)
    total = 0
    for snapshot_id in commits:
        snapshot = iceberg.snapshot(snapshot_id)
        if snapshot is None:  # expired meanwhile: unknown, so past any bound
            return above + 1
        summary = snapshot.summary()
        total += sum(int(summary.get(key) or 0) for key in _WRITTEN_ROWS)
        if total > above:
            break
    return total


def snapshot_facts(spark, table: TableRef, snapshot_id: int, rows: bool) -> tuple[int | None, int | None]:
    """When `snapshot_id` was committed (epoch milliseconds) and, when `rows`, how many rows the
    table held then, from its snapshot; None where unknown. No job."""
    snapshot = iceberg_table(spark, table).snapshot(snapshot_id)
    if snapshot is None:
        return None, None
    total = snapshot.summary().get("total-records") if rows else None
    return int(snapshot.timestampMillis()), int(total) if total is not None else None


def table_at(spark, table: TableRef, snapshot_id: int | None):
    """The table as of one snapshot (lazy: no Spark job until it is used)."""
    if snapshot_id is None:
        return spark.table(table.sql)
    # `versionAsOf`, not Iceberg's own `snapshot-id` (refused from Iceberg 1.12, Spark 4.1), and
    # through format("iceberg").load: Spark 3.5's `.table()` read ignores `versionAsOf`.
    return spark.read.format("iceberg").option("versionAsOf", str(int(snapshot_id))).load(table.sql)


def changed_rows(spark, table: TableRef, read: UpstreamRead):
    """(rows inserted, rows gone or None) between `read`'s snapshots: an append read has no gone side."""
    if read.kind == "append":
        frame = (
            spark.read.format("iceberg")
            .option("start-snapshot-id", str(read.start))
            .option("end-snapshot-id", str(read.end))
            .load(table.sql)
        )
        return frame, None
    return _both_sides(spark, table, read)


def _both_sides(spark, table: TableRef, read: UpstreamRead):
    from pyspark.sql import functions as F

    added, removed, delete_files = _file_entries(spark, table, read.commits)
    end, start = table_at(spark, table, read.end), table_at(spark, table, read.start)
    columns = end.columns
    inserted = end.where(F.col(_FILE).isin(added)).select(*columns) if added else end.limit(0)
    located = [*start.columns, _FILE, _POS]
    gone = start.where(F.col(_FILE).isin(removed)).select(*located) if removed else start.select(*located).limit(0)
    if delete_files:  # a row deleted by position whose file was also removed (compacted) counts once
        positions, files = _delete_positions(spark, table, delete_files)
        gone = gone.unionByName(_position_deleted(start, positions, files)).dropDuplicates([_FILE, _POS])
    gone = gone.drop(_FILE, _POS)
    gone = gone.select(*[F.col(c) if c in gone.columns else F.lit(None).cast(end.schema[c].dataType).alias(c) for c in columns])
    return inserted, gone


def _file_entries(spark, table: TableRef, commits: Sequence[int]) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Data files added and removed, and position-delete files added (path, format), by
    `commits`: read from each commit's own manifests through Iceberg's API (no Spark job, and
    no reading of the history's other manifests)."""
    iceberg = iceberg_table(spark, table)
    io = iceberg.io()
    added, removed, deletes = [], [], []
    for snapshot_id in commits:
        snapshot = iceberg.snapshot(int(snapshot_id))
        added += [f.location() for f in _java_list(spark, snapshot.addedDataFiles(io))]
        removed += [f.location() for f in _java_list(spark, snapshot.removedDataFiles(io))]
        for f in _java_list(spark, snapshot.addedDeleteFiles(io)):
            if f.content().name() != "POSITION_DELETES":
                raise DataShapeError(
                    f"table {table.display}: snapshot {snapshot_id} holds equality deletes (written by another "
                    "engine, e.g. Flink); its changes can't be read incrementally. Run a full refresh of the "
                    "downstream asset."
                )
            deletes.append((f.location(), f.format().name().lower()))
    return added, sorted(set(removed) - set(added)), deletes


def _java_list(spark, iterable) -> list:
    """A Java Iterable's items (py4j iterates a java.util.List, not an Iterable)."""
    return list(spark._jvm.java.util.ArrayList(spark._jvm.org.apache.iceberg.relocated.com.google.common.collect.Lists.newArrayList(iterable)))


def _delete_positions(spark, table: TableRef, delete_files: Sequence[tuple[str, str]]) -> tuple[Any, list[str]]:
    """(`_file`, `_pos`) of the rows the new position-delete files delete, only those files read,
    and the data files they point into.

    Read through the table's own storage where this process can (pyarrow: a local folder, or S3
    as the table's S3FileIO reaches it, which Spark's file reader cannot without Hadoop's S3A);
    else (HDFS, S3A, a delete file that is not Parquet) by Spark's reader, which reaches those."""
    from pyspark.sql import functions as F

    storage = TableStorage.of_table(spark._jvm, iceberg_table(spark, table))
    if storage is not None and all(fmt == "parquet" for _, fmt in delete_files):
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        read = pa.concat_tables(pq.read_table(storage.path(path), filesystem=storage.filesystem,
                                              columns=["file_path", "pos"]) for path, _ in delete_files)
        files = pc.unique(read.column("file_path")).to_pylist()  # known here: no Spark job for them
        return arrow_to_spark(spark, read.rename_columns([_FILE, _POS])).distinct(), files
    parts = [
        spark.read.format(file_format).load([path for path, fmt in delete_files if fmt == file_format])
        .select(F.col("file_path").alias(_FILE), F.col("pos").alias(_POS))
        for file_format in sorted({fmt for _, fmt in delete_files})
    ]
    positions = functools.reduce(lambda a, b: a.unionByName(b), parts).distinct()
    return positions, [r[0] for r in positions.select(_FILE).distinct().collect()]


def _position_deleted(start, positions, files: list[str]):
    """Rows live at the start snapshot at `positions` (in data `files`), with `_file` and `_pos`."""
    from pyspark.sql import functions as F

    if not files:
        return start.select(*start.columns, _FILE, _POS).limit(0)
    rows = start.where(F.col(_FILE).isin(files)).select(*start.columns, _FILE, _POS)
    return rows.join(positions, [_FILE, _POS], "left_semi")
