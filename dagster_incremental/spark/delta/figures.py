"""What one Delta commit did, from its own operation metrics where they are exact, and from the
two versions' rows where a statement's metrics count rewritten rows as changed (a window replace,
delete-insert: both delete and re-insert a row that may not have changed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from dagster_incremental.spark.delta.commit import DeltaCommit
from dagster_incremental.spark.delta.data_files import plain_schema, read_files
from dagster_incremental.spark.delta.log import Commit, DeltaLog
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WindowReplace, WriteResult

# (key groups, batch): a MERGE changed only rows whose values of some group are a batch row's
Touched = tuple[Sequence[Sequence[str]], DataFrame]
_WRITES = ("WRITE", "CREATE TABLE AS SELECT", "REPLACE TABLE AS SELECT", "CREATE OR REPLACE TABLE AS SELECT")


def result(spark: SparkSession, pending: DeltaCommit, made: Commit | None, *, deleted: int = 0,
           net_by: Sequence[str] | None = None, window: WindowReplace | None = None,
           touched: Touched | None = None) -> WriteResult:
    """The WriteResult of `made` (None: the statement committed nothing). net_by: the MERGE
    deleted rows to insert them again (a window replace, delete-insert on a merge_key), so the
    two versions' rows are netted, paired by these keys: the window's rows only when `window`
    is the window the MERGE replaced, else the rows of the key groups `touched` names (a
    delete-insert: its key groups and its batch)."""
    table = pending.table
    version = made.version if made is not None else pending.log.current_version()
    inserted = updated = removed = 0
    if made is not None and made.operation in _WRITES:
        inserted, removed = made.count("numOutputRows"), deleted
    elif made is not None and made.operation == "MERGE" and window is not None and made.version > 0:
        inserted, updated, removed = window_change(spark, table, made.version, window, net_by or ())
    elif made is not None and made.operation == "MERGE" and net_by is not None and made.version > 0:
        inserted, updated, removed = net_change(spark, table, made.version, net_by, touched)
    elif made is not None and made.operation == "MERGE" and touched is not None:  # delete-insert on the primary key
        inserted, updated, removed = _keyed_delete_insert(spark, pending, made, touched)
    elif made is not None and made.operation == "MERGE":
        inserted = made.count("numTargetRowsInserted")
        updated = made.count("numTargetRowsUpdated")
        removed = made.count("numTargetRowsDeleted")
    return WriteResult(
        rows_inserted=inserted,
        rows_updated=updated,
        rows_deleted=removed,
        row_count=row_count(spark, table, version),
        snapshot_id=version,
        schema=schema(spark, table),
    )


def _keyed_delete_insert(spark: SparkSession, pending: DeltaCommit, made: Commit,
                         touched: Touched) -> tuple[int, int, int]:
    """delete-insert on the primary key, counted as a MERGE on the key counts (as on Iceberg): a
    batch key the table held is an update, equal values too; a tombstone's key it held a delete,
    and so is every other row the MERGE removed (the copies of a key the table held twice).
    `touched`: the batch (one row per key) is its second item."""
    from dagster_incremental.spark.statistics import keyed_counts, matched_keys, resolve_column

    matched, removed = (0, 0), made.count("numTargetRowsDeleted")
    if made.version > 0 and removed:  # none removed: the table held none of the batch's keys
        batch = touched[1]
        keys = [resolve_column(pending.table, batch.schema, k) for k in pending.spec.primary_key]
        matched = matched_keys(batch, at_version(spark, pending.table, made.version - 1), keys)
    counts = keyed_counts(made.count("numTargetRowsInserted"), matched, removed=removed)
    return counts.inserted, counts.updated, counts.deleted


def unchanged(table: TableRef, version: int | None, spark: Callable[[], SparkSession]) -> WriteResult:
    """A run that commits nothing: the table as it is, read from its commit log (no JVM) where
    the log holds it; `spark` gives the session otherwise."""
    if version is None:
        return WriteResult(0, 0, 0, 0, None, ())
    assert table.location is not None, "a Delta table has a location"
    log = DeltaLog(table.location)
    rows, columns = log.row_count(version), log.schema(version)
    if rows is None:
        rows = row_count(spark(), table, version)
    return WriteResult(0, 0, 0, rows, version, columns if columns is not None else schema(spark(), table))


def net_change(spark: SparkSession, table: TableRef, version: int, keys: Sequence[str],
               touched: Touched | None = None) -> tuple[int, int, int]:
    """(inserted, updated, deleted) between `version` and the one before, netted: the rows of
    the key groups `touched` names (the only rows its MERGE could change), else all rows."""
    from dagster_incremental.spark.statistics import net_counts, rows_of_groups

    from_files = _net_of_commit_files(spark, table, version, keys)
    if from_files is not None:  # only the files the MERGE rewrote: no need to find the touched groups
        return from_files
    after, before = at_version(spark, table, version), at_version(spark, table, version - 1)
    if touched is not None:
        of_groups = rows_of_groups(table, *touched)
        after, before = of_groups(after), of_groups(before)
    counts = net_counts(after, before, keys)
    return counts.inserted, counts.updated, counts.deleted


def window_change(spark: SparkSession, table: TableRef, version: int, window: WindowReplace,
                  keys: Sequence[str]) -> tuple[int, int, int]:
    """(inserted, updated, deleted) of the window replace `version`: from the files it added and
    removed where they hold the rows, else from the window's rows of the two versions (the live
    row counts from the log's file statistics)."""
    from dagster_incremental.spark.statistics import window_replace_counts

    from_files = _net_of_commit_files(spark, table, version, keys)
    if from_files is not None:  # every row the commit changed is in the files it added or removed
        return from_files
    counts = window_replace_counts(table, at_version(spark, table, version), at_version(spark, table, version - 1),
                                   window, keys, live_rows=(row_count(spark, table, version - 1),
                                                            row_count(spark, table, version)))
    return counts.inserted, counts.updated, counts.deleted


def _net_of_commit_files(spark: SparkSession, table: TableRef, version: int,
                         keys: Sequence[str]) -> tuple[int, int, int] | None:
    """(inserted, updated, deleted) of commit `version` netted from its files (commit_sides)."""
    from dagster_incremental.spark.statistics import net_counts

    sides = commit_sides(spark, table, version)
    if sides is None:
        return None
    counts = net_counts(*sides, keys)
    return counts.inserted, counts.updated, counts.deleted


def commit_sides(spark: SparkSession, table: TableRef, version: int) -> tuple[DataFrame, DataFrame] | None:
    """(rows of the data files commit `version` added, rows of those it removed), netted they give
    what the commit changed (rows it rewrote unchanged cancel) without two time-travel reads
    (spark/delta/data_files.py). None where the files alone don't hold the rows."""
    location = table.location
    assert location is not None, "a Delta table has a location"
    log = DeltaLog(location)
    actions, schema = log.actions(version), plain_schema(log, version)
    if actions is None or schema is None:
        return None
    files = {kind: [a[kind] for a in actions if kind in a] for kind in ("add", "remove")}
    if any(f.get("deletionVector") for side in files.values() for f in side):
        return None
    added, removed = ([f["path"] for f in files[kind]] for kind in ("add", "remove"))
    return read_files(spark, location, added, schema), read_files(spark, location, removed, schema)


def at_version(spark: SparkSession, table: TableRef, version: int) -> DataFrame:
    return spark.sql(f"SELECT * FROM {table.sql} VERSION AS OF {int(version)}")


def row_count(spark: SparkSession, table: TableRef, version: int | None) -> int:
    """Rows at `version`: from the files' statistics in the commit log (no Spark job), else a count."""
    if version is None:
        return 0
    assert table.location is not None, "a Delta table has a location"
    counted = DeltaLog(table.location).row_count(version)
    return counted if counted is not None else int(at_version(spark, table, version).count())


def schema(spark: SparkSession, table: TableRef) -> tuple[tuple[str, str], ...]:
    return tuple((f.name, f.dataType.simpleString()) for f in spark.table(table.sql).schema.fields)


def window_counts(spark: SparkSession, table: TableRef, version: int, column: str,
                  windows: Sequence[tuple[Any, ...]], keys: Sequence[str]) -> list[Any]:
    """What commit `version` changed in each window of `column` (a range run's figures per
    partition), in one aggregate over the two versions."""
    from dagster_incremental.spark.statistics import net_window_counts

    sides = commit_sides(spark, table, version) if version > 0 else None
    if sides is not None:
        return net_window_counts(table, *sides, column, windows, keys)
    before = at_version(spark, table, version - 1) if version > 0 else None
    return net_window_counts(table, at_version(spark, table, version), before, column, windows, keys)
