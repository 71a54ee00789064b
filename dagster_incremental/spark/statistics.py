"""What one commit did (rows inserted/updated/deleted, rows after, schema), read back from the
snapshot it made, exactly and with as few Spark jobs as each kind of commit allows."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.iceberg.commit import PendingCommit, snapshots_of, write_options
from dagster_incremental.spark.iceberg.snapshots import SnapshotInfo, Snapshots
from dagster_incremental.spark.merge.sql import DELETED
from dagster_incremental.spark.sql import in_window, quote
from dagster_incremental.spark.iceberg.metadata import live_row_count, provable_row_count
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WindowReplace, WriteResult, WriteSpec

# How a commit's rows are counted (see commit_result).
Counting = Literal["summary", "keyed", "changes", "refresh", "window"]


@dataclass(frozen=True)
class Counts:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class BatchRows:
    """A keyed merge batch: rows to insert or update, and hard-delete tombstones."""

    rows: int
    tombstones: int


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
    tombstone whose key was there a delete, the others inserts. "refresh": the table's rows were
    all replaced (previous_rows deleted). "window" (a window replace): the net change of the
    window's rows between the parent and our snapshot (see _window_net), whatever the table's
    write mode (merge-on-read writes delete files for rows it rewrites unchanged). counts:
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


def pairing_key(spec: WriteSpec) -> tuple[str, ...]:
    """The key that pairs a removed and an added row into one update (scd2: the entity key);
    none for append and replace, whose changes are inserts and deletes."""
    return tuple(spec.primary_key or spec.merge_key) if spec.disposition == "merge" else ()


def batch_rows(aligned: DataFrame, spec: WriteSpec, known_rows: int | None = None) -> BatchRows:
    """One aggregate over the prepared batch (materialised or local: cheap to read again);
    none when the rows were local and there are no tombstones to tell apart."""
    if not spec.hard_delete_column:
        return BatchRows(rows=aligned.count() if known_rows is None else known_rows, tombstones=0)
    dead = _tombstone(aligned).cast("long")
    row = aligned.agg(F.count(F.lit(1)).alias("n"), F.sum(dead).alias("dead")).collect()[0]
    tombstones = int(row.dead or 0)
    return BatchRows(rows=int(row.n) - tombstones, tombstones=tombstones)


def resolve_column(table: TableRef, schema: T.StructType, name: str) -> str:
    """The table's spelling of column `name` (case-insensitively, as Spark resolves it)."""
    names = schema.fieldNames()
    if name in names:
        return name
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:
        return lowered[name.lower()]
    raise DataShapeError(
        f"table {table}: the window column {name!r} is not a column of the table ({', '.join(names)})."
    )


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
    if kind == "keyed" and batch is not None and aligned is not None and spec.delete_missing:
        matched = _matched_keys(spark, spec, aligned, batch, snapshot)
        return _with_missing_deleted(spark, spec, snapshot, matched, snapshots)
    if kind == "keyed" and batch is not None and aligned is not None:
        if not batch.tombstones and not _int(summary, "added-equality-deletes"):
            # Every batch row leaves exactly one live row: the live rows it added are inserts.
            # Live = records - position deletes, whether files were rewritten (copy-on-write)
            # or deletes written (merge-on-read, where a delete file also absorbs the earlier
            # deletes of its data file: added minus removed is what this commit deleted).
            records = _int(summary, "added-records") - _int(summary, "deleted-records")
            deletes = _int(summary, "added-position-deletes") - _int(summary, "removed-position-deletes")
            inserted = records - deletes
            return Counts(inserted=inserted, updated=batch.rows - inserted)
        return _matched_keys(spark, spec, aligned, batch, snapshot)
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


def _matched_keys(
    spark: SparkSession, spec: WriteSpec, aligned: DataFrame, batch: BatchRows, snapshot: SnapshotInfo
) -> Counts:
    """Counts of a keyed MERGE from which batch keys the table held before it: one join of
    the batch (one row per key) with the key columns of the parent snapshot."""
    matched_live = matched_dead = 0
    if snapshot.parent_id is not None:
        keys = [resolve_column(spec.table, aligned.schema, k) for k in spec.primary_key]
        before = (
            spark.read.format("iceberg").option("versionAsOf", str(snapshot.parent_id)).load(spec.table.sql)
            .select(*(F.col(quote(k)) for k in keys))
        )
        dead = _tombstone(aligned)
        row = (
            aligned.select(*(F.col(quote(k)) for k in keys), dead.alias("dead"))
            .join(before, on=keys, how="left_semi")
            .agg(
                F.sum((~F.col("dead")).cast("long")).alias("live"),
                F.sum(F.col("dead").cast("long")).alias("dead"),
            )
            .collect()[0]
        )
        matched_live, matched_dead = int(row.live or 0), int(row.dead or 0)
    return Counts(inserted=batch.rows - matched_live, updated=matched_live, deleted=matched_dead)


def _with_missing_deleted(
    spark: SparkSession, spec: WriteSpec, snapshot: SnapshotInfo, matched: Counts, snapshots: Snapshots
) -> Counts:
    """A delete_missing upsert's counts: the batch's, plus the rows it deleted for lacking their
    key, from the live rows before and after (after = before + inserted - deleted)."""
    before = row_count(spark, spec.table, snapshot.parent_id, snapshots) if snapshot.parent_id is not None else 0
    after = row_count(spark, spec.table, snapshot.snapshot_id, snapshots)
    return Counts(inserted=matched.inserted, updated=matched.updated, deleted=before + matched.inserted - after)


def _changed_rows(spark: SparkSession, table: TableRef, snapshot: SnapshotInfo, keys: Sequence[str]) -> Counts:
    """Net inserted/updated/deleted rows of one commit from its changelog (one collect; AQE
    runs it as a few small jobs over only the files the commit added or removed)."""
    reader = spark.read.option("end-snapshot-id", str(snapshot.snapshot_id))
    if snapshot.parent_id is not None:
        reader = reader.option("start-snapshot-id", str(snapshot.parent_id))
    changes = reader.table(table.metadata_table("changes"))
    data = [c for c in changes.columns if c not in ("_change_type", "_change_ordinal", "_commit_snapshot_id")]
    sign = F.when(F.col("_change_type") == "INSERT", 1).otherwise(-1)
    signed = changes.select(_row_text(data), *_key_columns(keys), sign.alias("sign"))
    result = _net_counts(signed, len(keys)).collect()[0]
    return Counts(int(result.inserted or 0), int(result.updated or 0), int(result.deleted or 0))


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


def window_replace_counts(
    table: TableRef,
    after: DataFrame,
    before: DataFrame | None,
    window: WindowReplace,
    keys: Sequence[str],
    live_rows: tuple[int | None, int | None] = (None, None),
) -> Counts:
    """Net change of a window replace, in either format, from the window's rows alone: the
    window's rows before and after, netted (net_window_counts), plus the rows it removed outside
    the window (batch keys that moved in from another window: an update when the key is back in
    the window, else a delete). Those rows are found from the two versions' live row counts
    (`live_rows`: before, after); only when there are some are their keys looked up. The rest of
    the table is never read: a day's backfill costs a day's rows, whatever the table's size."""
    net = net_window_counts(table, after, before, window.column, [window.bounds], keys, window.rows_of)[0]
    rows_before, rows_after = live_rows
    if before is None or rows_before is None or rows_after is None:
        return net
    outside = (net.inserted - net.deleted) - (rows_after - rows_before)
    if outside <= 0:
        return net
    moved = _moved_in(table, after, before, window, keys) if keys else 0
    return Counts(net.inserted - moved, net.updated + moved, net.deleted + outside - moved)


def _moved_in(table: TableRef, after: DataFrame, before: DataFrame, window: WindowReplace, keys: Sequence[str]) -> int:
    """How many keys of the window's new rows the table held outside the window before (one join)."""
    ref = F.col(quote(resolve_column(table, after.schema, window.column)))
    names = [resolve_column(table, after.schema, k) for k in keys]
    inside = in_window(ref, *window.bounds) & _only(table, after, window.rows_of)
    columns = [F.col(quote(k)) for k in names]
    new = after.where(inside).select(*columns).distinct()
    old = before.where(~inside).select(*columns)
    return new.join(old, on=names, how="left_semi").count()


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


def net_window_counts(
    table: TableRef,
    after: DataFrame,
    before: DataFrame | None,
    column: str,
    windows: Sequence[tuple[Any, ...]],
    keys: Sequence[str],
    rows_of: tuple[str, Any] | None = None,
) -> list[Counts]:
    """What changed from `before` (None: nothing) to `after` (one table's two versions, in any
    format) in each window of `column`, netted in one aggregate (see window_counts)."""
    after = after.where(_only(table, after, rows_of))
    names = after.columns
    ref = F.col(quote(resolve_column(table, after.schema, column)))
    key_names = [resolve_column(table, after.schema, k) for k in keys]
    signed = _windowed(after, names, ref, key_names, windows, 1)
    if before is not None:
        missing = [F.lit(None).alias(n) for n in names if n not in before.columns]
        before = before.where(_only(table, before, rows_of))
        before = before.select(*(F.col(quote(n)) for n in names if n in before.columns), *missing)
        signed = signed.unionByName(_windowed(before, names, ref, key_names, windows, -1))
    counted = _net_counts(signed, len(keys), by=("window",))
    found = {int(r.window): r for r in counted.collect()}
    rows = [found.get(i) for i in range(len(windows))]
    return [Counts(int(r.inserted or 0), int(r.updated or 0), int(r.deleted or 0)) if r else Counts() for r in rows]


def net_counts(after: DataFrame, before: DataFrame, keys: Sequence[str]) -> Counts:
    """What changed from `before` to `after` (one table's two versions, in any format), netted:
    identical rows cancel, per key a removed+added pair is an update."""
    names = after.columns
    missing = [F.lit(None).alias(n) for n in names if n not in before.columns]
    before = before.select(*(F.col(quote(n)) for n in names if n in before.columns), *missing)
    signed = after.select(_row_text(names), *_key_columns(keys), F.lit(1).alias("sign")).unionByName(
        before.select(_row_text(names), *_key_columns(keys), F.lit(-1).alias("sign")))
    row = _net_counts(signed, len(keys)).first()
    return Counts(int(row.inserted or 0), int(row.updated or 0), int(row.deleted or 0)) if row else Counts()


def rows_of_groups(table: TableRef, groups: Sequence[Sequence[str]], batch: DataFrame) -> Callable[[DataFrame], DataFrame]:
    """A function giving the rows of a version of the table whose values of some key group are a
    `batch` row's (equal, NULL matching nothing, as a delete-insert's MERGE matches them): the
    only rows such a MERGE deletes or inserts. Each row once, however many groups it matches (a
    semi-join per group, minus the earlier groups' matches), behind a filter on the batch's key
    ranges (one Spark job, here) that lets the format skip the files outside them."""
    ranges = _key_ranges(table, groups, batch)

    def values(frame: DataFrame, group: Sequence[str]) -> tuple[list[str], DataFrame]:
        names = [resolve_column(table, frame.schema, k) for k in group]
        found = [F.col(quote(resolve_column(table, batch.schema, k))).alias(n) for k, n in zip(group, names)]
        return names, batch.select(*found).distinct()

    def rows(frame: DataFrame) -> DataFrame:
        kept = frame.where(_in_ranges(table, frame, ranges)) if ranges is not None else frame
        parts = []
        for i, group in enumerate(groups):
            names, keys = values(frame, group)
            part = kept.join(keys, on=names, how="left_semi")
            for earlier in groups[:i]:
                other_names, other_keys = values(frame, earlier)
                part = part.join(other_keys, on=other_names, how="left_anti")
            parts.append(part)
        return functools.reduce(DataFrame.unionByName, parts) if parts else frame

    return rows


# key columns whose batch minimum and maximum are compared as literals (their Python values
# come back from Spark as they went: no time zone in between)
_RANGED_TYPES = (T.IntegralType, T.DateType, T.StringType, T.DecimalType)
KeyRanges = list[list[tuple[str, Any, Any]]]  # per group: (batch column, min, max) of each bounded column


def _key_ranges(table: TableRef, groups: Sequence[Sequence[str]], batch: DataFrame) -> KeyRanges | None:
    """The batch's min and max of each group's columns of a type compared as literals (one Spark
    job over the batch), or None when a group has no such column (then nothing is skipped)."""
    bounded = []
    for group in groups:
        columns = [resolve_column(table, batch.schema, k) for k in group]
        columns = [c for c in columns if isinstance(batch.schema[c].dataType, _RANGED_TYPES)]
        if not columns:
            return None
        bounded.append(columns)
    names = list(dict.fromkeys(c for columns in bounded for c in columns))
    values = batch.agg(*(f(F.col(quote(n))) for n in names for f in (F.min, F.max))).collect()[0]
    low_high = {n: (values[2 * i], values[2 * i + 1]) for i, n in enumerate(names)}
    return [[(c, *low_high[c]) for c in columns] for columns in bounded]


def _in_ranges(table: TableRef, frame: DataFrame, ranges: KeyRanges) -> Any:
    """`frame`'s rows within the ranges of every column of some group (a group whose batch
    values are all NULL matches no row)."""
    condition = F.lit(False)
    for columns in ranges:
        inside = F.lit(True)
        for column, low, high in columns:
            if low is None:
                inside = F.lit(False)
                break
            inside = inside & F.col(quote(resolve_column(table, frame.schema, column))).between(F.lit(low), F.lit(high))
        condition = condition | inside
    return condition


def _windowed(
    frame: DataFrame, names: Sequence[str], ref: Any, keys: Sequence[str], windows: Sequence[tuple[Any, ...]], sign: int
) -> DataFrame:
    """The frame's rows inside any of `windows` (in_window's arguments), signed, with the index
    of their window."""
    inside = [in_window(ref, *bounds) for bounds in windows]
    index, anywhere = F.when(inside[0], F.lit(0)), inside[0]
    for i, condition in enumerate(inside[1:], start=1):
        index, anywhere = index.when(condition, F.lit(i)), anywhere | condition
    # the plain comparisons first: Iceberg prunes the files outside the windows
    return frame.where(anywhere).select(
        index.alias("window"), _row_text(names), *_key_columns(keys), F.lit(sign).alias("sign")
    )


def _only(table: TableRef, frame: DataFrame, rows_of: tuple[str, Any] | None) -> Any:
    """The rows whose column holds the value (rows_of: (column, value)); all rows without."""
    if rows_of is None:
        return F.lit(True)
    return F.col(quote(resolve_column(table, frame.schema, rows_of[0]))) == F.lit(rows_of[1])


def _row_text(names: Sequence[str]) -> Any:
    """A row's data as one comparable text (NULL fields left out, as JSON does)."""
    return F.to_json(F.struct(*(F.col(quote(c)) for c in names))).alias("row")


def _key_columns(keys: Sequence[str]) -> list[Any]:
    return [F.col(quote(k)).alias(f"k{i}") for i, k in enumerate(keys)]


def _net_counts(signed: DataFrame, keys: int, by: Sequence[str] = ()) -> DataFrame:
    """Inserted/updated/deleted per `by` group from signed rows (row text, key columns k0..,
    sign +1 added / -1 removed): identical rows cancel out; per key a removed+added pair is an
    update (no key: inserts and deletes only). Without `by`: one row of totals."""
    key_names = [f"k{i}" for i in range(keys)]
    net = signed.groupBy(*by, "row", *key_names).agg(F.sum("sign").alias("n")).where(F.col("n") != 0)
    added = F.greatest(F.col("n"), F.lit(0))
    removed = F.greatest(-F.col("n"), F.lit(0))
    if not key_names:
        return net.groupBy(*by).agg(F.sum(added).alias("inserted"), F.lit(0).alias("updated"), F.sum(removed).alias("deleted"))
    per_key = net.groupBy(*by, *key_names).agg(F.sum(added).alias("a"), F.sum(removed).alias("r"))
    updated = F.least(F.col("a"), F.col("r"))
    return per_key.groupBy(*by).agg(
        F.sum(F.col("a") - updated).alias("inserted"),
        F.sum(updated).alias("updated"),
        F.sum(F.col("r") - updated).alias("deleted"),
    )


def _tombstone(frame: DataFrame) -> Any:
    """The prepared batch's hard-delete flag (FALSE when the batch has none)."""
    return F.col(quote(DELETED)) if DELETED in frame.columns else F.lit(False)


def _schema(spark: SparkSession, table: TableRef) -> tuple[tuple[str, str], ...]:
    schema = spark.table(table.sql).schema
    return tuple((f.name, f.dataType.simpleString()) for f in schema.fields)


def _int(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key, 0) or 0)

