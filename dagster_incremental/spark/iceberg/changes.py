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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dagster_incremental.cursor.upstream import Snapshot, UpstreamRead
from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.connect import is_connect
from dagster_incremental.spark.iceberg.change_metadata import (
    POSITION_DELETES,
    CatalogChangeMetadata,
    ChangeMetadata,
    JavaChangeMetadata,
)
from dagster_incremental.spark.iceberg.commit import iceberg_table
from dagster_incremental.spark.local.stage import arrow_to_spark
from dagster_incremental.spark.table_ref import TableRef

_FILE, _POS = "_file", "_pos"

# Snapshot summary counts of the rows a commit touched: rows in the data files it added and
# removed, rows it deleted by position or equality (a merge-on-read update adds a row and a
# position delete; a copy-on-write one counts its rewritten files' rows twice).
_WRITTEN_ROWS = ("added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")


class IcebergChanges:
    """An Iceberg upstream's changes. Its metadata is read where this process has it
    (change_metadata.py): the driver's Table object in classic mode, the catalog over Spark
    Connect (`conf`: the destination's flat Spark conf, whose JDBC or REST catalog pyiceberg
    reaches); its rows are read by the session either way."""

    def __init__(self, conf: Callable[[], Mapping[str, str]] = dict) -> None:
        self._conf = conf

    def _metadata(self, spark, table: TableRef) -> ChangeMetadata | None:
        """The table's metadata as it is now; None: there is no such table."""
        if is_connect(spark):
            return self._catalog_metadata(table)
        if not spark.catalog.tableExists(table.sql):
            return None
        return JavaChangeMetadata(spark, iceberg_table(spark, table))

    def _catalog_metadata(self, table: TableRef) -> ChangeMetadata | None:
        from dagster_incremental.spark.connect import refuse_connect
        from dagster_incremental.spark.iceberg.over_connect import CatalogTables, refusal

        catalog = CatalogTables(self._conf())
        if not catalog.reaches(table.catalog):
            refuse_connect(catalog.conf, refusal(table.catalog))  # its destination is in that catalog too
        loaded = catalog.load(table)
        return None if loaded is None else CatalogChangeMetadata(*loaded)

    def snapshot_history(self, spark, table: TableRef) -> tuple[list[Snapshot], int | None]:
        """The table's snapshots and its current one (None: no table or no commit yet); no Spark job."""
        metadata = self._metadata(spark, table)
        return ([], None) if metadata is None else metadata.history()

    def table_id(self, table: TableRef) -> str | None:
        """None: Iceberg's snapshot ids are random, so a table created again is told by them alone."""
        return None

    def missing(self, spark, table: TableRef) -> bool:
        """Known to be no table (its catalog says so)."""
        return self._metadata(spark, table) is None

    def rows_written(self, spark, table: TableRef, commits: Sequence[int], above: int) -> int:
        """How many rows `commits` touched, by their snapshot summaries (no Spark job), counted
        until the sum passes `above`."""
        metadata, total = self._metadata(spark, table), 0
        for snapshot_id in commits:
            found = metadata.snapshots.get(snapshot_id) if metadata is not None else None
            if found is None:  # expired meanwhile: unknown, so past any bound
                return above + 1
            total += sum(int(found.summary.get(key) or 0) for key in _WRITTEN_ROWS)
            if total > above:
                break
        return total

    def snapshot_facts(self, spark, table: TableRef, snapshot_id: int, rows: bool) -> tuple[int | None, int | None]:
        """When `snapshot_id` was committed (epoch milliseconds) and, when `rows`, how many rows
        the table held then, from its snapshot; None where unknown. No job."""
        metadata = self._metadata(spark, table)
        found = metadata.snapshots.get(snapshot_id) if metadata is not None else None
        if found is None:
            return None, None
        total = found.summary.get("total-records") if rows else None
        return round(found.committed_at.timestamp() * 1000), int(total) if total is not None else None

    def table_at(self, spark, table: TableRef, snapshot_id: int | None):
        """The table as of one snapshot (lazy: no Spark job until it is used)."""
        if snapshot_id is None:
            return spark.table(table.sql)
        # `versionAsOf`, not Iceberg's own `snapshot-id` (refused from Iceberg 1.12, Spark 4.1), and
        # through format("iceberg").load: Spark 3.5's `.table()` read ignores `versionAsOf`.
        return spark.read.format("iceberg").option("versionAsOf", str(int(snapshot_id))).load(table.sql)

    def changed_rows(self, spark, table: TableRef, read: UpstreamRead):
        """(rows inserted, rows gone or None) between `read`'s snapshots: an append read has no gone side."""
        if read.kind == "append":
            frame = (
                spark.read.format("iceberg")
                .option("start-snapshot-id", str(read.start))
                .option("end-snapshot-id", str(read.end))
                .load(table.sql)
            )
            return frame, None
        return self._both_sides(spark, table, read)

    def _both_sides(self, spark, table: TableRef, read: UpstreamRead):
        from pyspark.sql import functions as F

        metadata = self._metadata(spark, table)  # loaded once for both sides
        if metadata is None:
            raise ValueError(f"table {table.display} does not exist")
        added, removed, delete_files = _file_entries(metadata, table, read.commits)
        end, start = self.table_at(spark, table, read.end), self.table_at(spark, table, read.start)
        columns = end.columns
        inserted = end.where(F.col(_FILE).isin(added)).select(*columns) if added else end.limit(0)
        located = [*start.columns, _FILE, _POS]
        gone = start.where(F.col(_FILE).isin(removed)).select(*located) if removed else start.select(*located).limit(0)
        if delete_files:  # a row deleted by position whose file was also removed (compacted) counts once
            positions, files = _delete_positions(spark, metadata, delete_files)
            gone = gone.unionByName(_position_deleted(start, positions, files)).dropDuplicates([_FILE, _POS])
        gone = gone.drop(_FILE, _POS)
        gone = gone.select(*[F.col(c) if c in gone.columns else F.lit(None).cast(end.schema[c].dataType).alias(c) for c in columns])
        return inserted, gone


def _file_entries(metadata: ChangeMetadata, table: TableRef,
                  commits: Sequence[int]) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Data files added and removed, and position-delete files added (path, format), by
    `commits`: read from each commit's own manifests (no Spark job, and no reading of the
    history's other manifests)."""
    added, removed, deletes = [], [], []
    for snapshot_id in commits:
        files = metadata.commit_files(int(snapshot_id))
        added += files.added
        removed += files.removed
        for path, file_format, content in files.deletes:
            if content != POSITION_DELETES:
                raise DataShapeError(
                    f"table {table.display}: snapshot {snapshot_id} holds equality deletes (written by another "
                    "engine, e.g. Flink); its changes can't be read incrementally. Run a full refresh of the "
                    "downstream asset."
                )
            deletes.append((path, file_format))
    return added, sorted(set(removed) - set(added)), deletes


def _delete_positions(spark, metadata: ChangeMetadata, delete_files: Sequence[tuple[str, str]]) -> tuple[Any, list[str]]:
    """(`_file`, `_pos`) of the rows the new position-delete files delete, only those files read,
    and the data files they point into: read by this process where it reaches them (see
    ChangeMetadata.positions), else (HDFS, S3A, a file that is not Parquet) by Spark's reader."""
    from pyspark.sql import functions as F

    parquet = all(fmt == "parquet" for _, fmt in delete_files)
    read = metadata.positions([path for path, _ in delete_files]) if parquet else None
    if read is not None:
        import pyarrow.compute as pc

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
