"""What one Iceberg commit did (rows inserted/updated/deleted, rows after, schema), read back from
the snapshot it made, exactly and with as few Spark jobs as each kind of commit allows; the
counting both formats share is spark/statistics.py's, and spark/delta/figures.py is Delta's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_incremental.spark.iceberg.commit import PendingCommit, snapshots_of, write_options
from dagster_incremental.spark.iceberg.metadata import live_row_count, provable_row_count
from dagster_incremental.spark.iceberg.snapshots import SnapshotInfo, Snapshots
from dagster_incremental.spark.statistics import (
    BatchRows,
    Counts,
    key_columns,
    keyed_counts,
    matched_keys,
    net_window_counts,
    resolve_column,
    row_text,
    signed_counts,
    window_replace_counts,
)
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WindowReplace, WriteResult, WriteSpec

# How a commit's rows are counted (see commit_result).
Counting = Literal["summary", "keyed", "changes", "refresh", "window"]


def commit_result(
    spark: SparkSession,
    commit: PendingCommit,
    *,
    kind: Counting,
    keys: Sequence[str] = (),
    previous_rows: int = 0,
    batch_rows: BatchRows | None = None,
    aligned: DataFrame | None = None,
    window: WindowReplace | None = None,
    counts: Counts | None = None,
) -> WriteResult:
    """WriteResult from the snapshot the commit made (found by its commit id).

    kind "summary" (append/replace): the snapshot summary's record counts are exact (whole files
    are added/removed). "changes" (a MERGE under copy-on-write rewrites whole files, so the
    summary counts carried-over rows too): the commit's changelog between the parent and our
    snapshot, where rows identical on both sides cancel out and per key a removed+added pair is
    an update (no key: inserts and deletes only). "keyed" (upsert, delete-insert on the primary
    key alone) counts as MERGE does: a batch row whose key was in the table is an update, a
    tombstone whose key was there a delete, the others inserts, and any other row the commit
    removed a delete (a key the table held twice, under delete-insert). "refresh": the table's
    rows were all replaced (previous_rows deleted). "window" (a window replace): the net change
    of the window's rows between the parent and our snapshot (see _window_net), whatever the
    table's write mode (merge-on-read writes delete files for rows it rewrites unchanged). counts:
    already known to the writer (the local merge matched the batch's keys itself).
    """
    snapshots = commit.snapshots(spark)
    snapshot = snapshots.find(commit.commit_id)
    if snapshot is None:  # the statement made no commit
        snapshot = _record_empty_commit(spark, commit, snapshots)
        kind = "summary"
    if counts is None and kind == "window" and window is not None:
        counts = _window_net(spark, commit.spec.table, snapshot, window, keys, snapshots)
    elif counts is None:
        counts = _counts(spark, commit.spec, snapshot, kind, keys, previous_rows, batch_rows, aligned, snapshots)
    summary = snapshot.summary
    return WriteResult(
        rows_inserted=counts.inserted,
        rows_updated=counts.updated,
        rows_deleted=counts.deleted,
        row_count=row_count(spark, commit.table, snapshot.snapshot_id, snapshots),
        snapshot_id=snapshot.snapshot_id,
        schema=_schema(spark, commit.table),
        delete_files=_int(summary, "total-delete-files"),
        data_files=_int(summary, "total-data-files"),
        position_deletes=_int(summary, "total-position-deletes"),
    )


def unchanged(spark: SparkSession, table: TableRef, snapshots: Snapshots) -> WriteResult:
    """The WriteResult of a run that commits nothing: no changes, the table as it is (its
    current snapshot, read from `snapshots`: no Spark job)."""
    current = snapshots.current()
    snapshot_id = current.snapshot_id if current is not None else None
    return WriteResult(
        rows_inserted=0,
        rows_updated=0,
        rows_deleted=0,
        row_count=row_count(spark, table, snapshot_id, snapshots),
        snapshot_id=snapshot_id,
        schema=_schema(spark, table),
    )


def row_count(spark: SparkSession, table: TableRef, snapshot_id: int | None, snapshots: Snapshots) -> int:
    """Live rows at `snapshot_id`, from the lineage's summaries when they prove it (see
    provable_row_count), else one count job."""
    rows = provable_row_count(s.lineage_entry() for s in snapshots.lineage(snapshot_id))
    if rows is not None:
        return rows
    as_of = f" VERSION AS OF {int(snapshot_id)}" if snapshot_id is not None else ""
    return int(spark.sql(f"SELECT count(*) FROM {table.sql}{as_of}").collect()[0][0])


def _record_empty_commit(spark: SparkSession, commit: PendingCommit, snapshots: Snapshots) -> SnapshotInfo:
    """The statement made no commit (nothing changed): record the cursor with an empty append
    so the table still knows this run happened. Still one commit for the run."""
    table = commit.table
    schema = spark.table(table.sql).schema
    spark.createDataFrame([], schema).writeTo(table.sql).options(**write_options(commit.properties)).append()
    snapshot = snapshots.find(commit.commit_id)
    if snapshot is None:  # pragma: no cover - Iceberg always commits an append
        raise RuntimeError(f"table {table}: the commit {commit.commit_id} is not in its snapshots")
    return snapshot


def _counts(
    spark: SparkSession,
    spec: WriteSpec,
    snapshot: SnapshotInfo,
    kind: Counting,
    keys: Sequence[str],
    previous_rows: int,
    batch: BatchRows | None,
    aligned: DataFrame | None,
    snapshots: Snapshots,
) -> Counts:
    summary = snapshot.summary
    if kind == "keyed" and batch is not None and aligned is not None:
        if spec.delete_missing or spec.merge_strategy == "delete-insert":
            # it may remove rows no batch row replaces: delete_missing's absent keys, the other
            # copies of a key the table held twice (a delete-insert removes every copy)
            removed = _rows_removed(spark, spec, snapshot, batch.rows, snapshots)
            matched = _matched_keys(spark, spec, aligned, snapshot) if removed else (0, 0)  # none held
            return keyed_counts(batch.rows, matched, removed)
        if not batch.tombstones and not _int(summary, "added-equality-deletes"):
            # An upsert adds live rows for its new keys only (every copy of a key the table held
            # is rewritten, not removed): the live rows it added are inserts. Live = records -
            # position deletes, whether files were rewritten (copy-on-write) or deletes written
            # (merge-on-read, where a delete file also absorbs the earlier deletes of its data
            # file: added minus removed is what this commit deleted).
            records = _int(summary, "added-records") - _int(summary, "deleted-records")
            deletes = _int(summary, "added-position-deletes") - _int(summary, "removed-position-deletes")
            inserted = records - deletes
            return Counts(inserted=inserted, updated=batch.rows - inserted)
        return keyed_counts(batch.rows, _matched_keys(spark, spec, aligned, snapshot))
    if kind == "changes" and _int(summary, "added-delete-files"):
        # merge-on-read (a user's table property): Iceberg's changelog scan can't read delete
        # files; the summary says how many rows were added and how many marked deleted, but
        # not which pairs were updates, so an update counts as one delete plus one insert.
        deleted = _int(summary, "added-position-deletes") + _int(summary, "added-equality-deletes")
        return Counts(inserted=_int(summary, "added-records"), deleted=deleted)
    if kind == "changes" and _int(summary, "deleted-data-files") and _int(summary, "added-records"):
        # Files were rewritten: only the changelog tells rewritten rows from changed ones.
        # (No file removed: pure inserts; nothing added: every removed row was deleted. Both
        # are exact from the summary, which saves the changelog job.)
        return _changed_rows(spark, spec.table, snapshot, keys)
    if kind == "refresh":
        return Counts(inserted=_int(summary, "added-records"), deleted=previous_rows)
    return Counts(inserted=_int(summary, "added-records"), deleted=_int(summary, "deleted-records"))


def _matched_keys(spark: SparkSession, spec: WriteSpec, aligned: DataFrame,
                  snapshot: SnapshotInfo) -> tuple[int, int]:
    """(rows, tombstones) of the batch whose key the parent snapshot held (matched_keys)."""
    if snapshot.parent_id is None:
        return 0, 0
    keys = [resolve_column(spec.table, aligned.schema, k) for k in spec.primary_key]
    before = spark.read.format("iceberg").option("versionAsOf", str(snapshot.parent_id)).load(spec.table.sql)
    return matched_keys(aligned, before, keys)


def _rows_removed(spark: SparkSession, spec: WriteSpec, snapshot: SnapshotInfo, rows: int,
                  snapshots: Snapshots) -> int:
    """The live rows the commit took out, from the live rows before and after it (after =
    before + the batch's rows - removed)."""
    before = row_count(spark, spec.table, snapshot.parent_id, snapshots) if snapshot.parent_id is not None else 0
    return before + rows - row_count(spark, spec.table, snapshot.snapshot_id, snapshots)


def _changed_rows(spark: SparkSession, table: TableRef, snapshot: SnapshotInfo, keys: Sequence[str]) -> Counts:
    """Net inserted/updated/deleted rows of one commit from its changelog (one collect; AQE
    runs it as a few small jobs over only the files the commit added or removed)."""
    reader = spark.read.option("end-snapshot-id", str(snapshot.snapshot_id))
    if snapshot.parent_id is not None:
        reader = reader.option("start-snapshot-id", str(snapshot.parent_id))
    changes = reader.table(table.metadata_table("changes"))
    data = [c for c in changes.columns if c not in ("_change_type", "_change_ordinal", "_commit_snapshot_id")]
    sign = F.when(F.col("_change_type") == "INSERT", 1).otherwise(-1)
    signed = changes.select(row_text(data), *key_columns(keys), sign.alias("sign"))
    return signed_counts(signed, len(keys))


def _window_net(
    spark: SparkSession, table: TableRef, snapshot: SnapshotInfo, window: WindowReplace, keys: Sequence[str],
    snapshots: Snapshots,
) -> Counts:
    """Net change of an Iceberg window replace (window_replace_counts), the live row counts read
    from the two snapshots' summaries."""
    def read(snapshot_id: Any) -> DataFrame:
        return spark.read.format("iceberg").option("versionAsOf", str(snapshot_id)).load(table.sql)

    after = read(snapshot.snapshot_id)
    if snapshot.parent_id is None:
        return window_replace_counts(table, after, None, window, keys)
    parent = snapshots.get(snapshot.parent_id)
    before = live_row_count(parent.summary) if parent is not None else None
    return window_replace_counts(table, after, read(snapshot.parent_id), window, keys,
                                 live_rows=(before, live_row_count(snapshot.summary)))


def window_counts(
    spark: SparkSession,
    table: TableRef,
    snapshot_id: int,
    column: str,
    windows: Sequence[tuple[Any, ...]],
    keys: Sequence[str],
    rows_of: tuple[str, Any] | None = None,
    snapshots: Snapshots | None = None,
) -> list[Counts]:
    """What commit `snapshot_id` (a window replace) inserted, updated and deleted in each window
    [start, end) of `column` (e.g. each partition of a ranged run that committed once), counted
    as commit_result counted the whole commit, grouped by window in one aggregate: the windows'
    rows of the parent snapshot (removed) and of this one (added), netted (identical rows
    cancel, per key a removed+added pair is an update), however the commit wrote its files.
    rows_of (column, value): count only those rows (one tenant's). snapshots: the table's (by
    default through the Spark driver's Iceberg)."""
    snapshot = (snapshots or snapshots_of(spark, table, None)).get(snapshot_id)
    parent = snapshot.parent_id if snapshot is not None else None
    after = spark.read.format("iceberg").option("versionAsOf", str(snapshot_id)).load(table.sql)
    before = None if parent is None else spark.read.format("iceberg").option("versionAsOf", str(parent)).load(table.sql)
    return net_window_counts(table, after, before, column, windows, keys, rows_of)


def _schema(spark: SparkSession, table: TableRef) -> tuple[tuple[str, str], ...]:
    schema = spark.table(table.sql).schema
    return tuple((f.name, f.dataType.simpleString()) for f in schema.fields)


def _int(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key, 0) or 0)
