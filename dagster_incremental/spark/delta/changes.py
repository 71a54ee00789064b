"""What a Delta upstream changed between two of its versions (spark/table_format.py's
`UpstreamChanges`; spark/upstream_changes.py marks and nets the rows as it does for Iceberg's).

Delta writes copy-on-write here (no deletion vectors): every change adds and removes whole data
files, and the log lists the files live at each version. So the change between two versions is
the rows of the files live at the end but not at the start (INSERTs) and of the files live at
the start but not at the end (DELETEs), netted as for Iceberg (a row only rewritten, by OPTIMIZE
or a MERGE's copy of untouched rows, is on both sides and drops out). That holds across any
commit in between, a RESTORE or an overwrite too: the two versions' files tell the whole change.
It needs the same table (its id: a table created again at the same place is another) and the
start version's files still on disk (VACUUM deletes them a week after they left the table).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote

from dagster_incremental.cursor.upstream import Snapshot, UpstreamRead
from dagster_incremental.errors import DataShapeError, UpstreamRewritten
from dagster_incremental.spark.delta.data_files import data_file, plain_schema, read_files
from dagster_incremental.spark.delta.log import DeltaLog, file_rows
from dagster_incremental.spark.delta.storage import filesystem_and_path
from dagster_incremental.spark.table_ref import TableRef

_NO_ROW_CHANGE = "replace"  # Iceberg's word for a commit that rewrites files, rows unchanged


def snapshot_history(spark, table: TableRef) -> tuple[list[Snapshot], int | None]:
    """The table's versions (each the parent of the next) and its current one; no Spark job."""
    log = _log(table)
    versions = log.versions()
    history = [Snapshot(v, v - 1 if v > 0 else None, _operation(log, v)) for v in versions]
    return history, (versions[-1] if versions else None)


def table_id(table: TableRef) -> str | None:
    return _log(table).table_id()


def rows_written(spark, table: TableRef, commits: Sequence[int], above: int) -> int:
    """Rows in the data files `commits` added and removed (by the files' statistics), counted
    until the sum passes `above`; a file without a count is past any bound."""
    log, total = _log(table), 0
    for version in commits:
        for action in log.actions(version) or [{"remove": {}}]:
            entry = action.get("add") or action.get("remove")
            if entry is None:
                continue
            rows = file_rows(entry)
            if rows is None:
                return above + 1
            total += rows
            if total > above:
                return total
    return total


def snapshot_facts(spark, table: TableRef, version: int, rows: bool) -> tuple[int | None, int | None]:
    """When `version` was committed (epoch milliseconds) and, when `rows`, the rows it held."""
    log = _log(table)
    commit = log.commit(version)
    return (commit.timestamp_ms or None) if commit is not None else None, log.row_count(version) if rows else None


def missing(spark, table: TableRef) -> bool:
    """False: a Delta table's absence shows when its folder is read."""
    return False


def table_at(spark, table: TableRef, version: int | None):
    """The table as of `version` (None: the current one), lazy."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", int(version))
    return reader.load(table.location)


def changed_rows(spark, table: TableRef, read: UpstreamRead):
    """(rows of the files live at `read.end` only, rows of the files live at `read.start` only
    in the end's columns, or None when no file left): the two sides the change read nets."""
    from pyspark.sql import functions as F

    added, removed = _changed_files(table, read)
    direct = _files_alone(spark, table, read, added, removed)
    if direct is not None:
        return direct
    end = table_at(spark, table, read.end)
    if not removed:
        return _rows_of_files(end, added), None
    gone = _rows_of_files(table_at(spark, table, read.start), removed)
    aligned = [F.col(c) if c in gone.columns else F.lit(None).cast(end.schema[c].dataType).alias(c) for c in end.columns]
    return _rows_of_files(end, added), gone.select(*aligned)


def _changed_files(table: TableRef, read: UpstreamRead) -> tuple[list[str], list[str]]:
    """(files live at the end only, files live at the start only), by name."""
    log = _log(table)
    assert read.start is not None and read.end is not None, "a change read runs between two versions"
    start, end = log.live_files(read.start), log.live_files(read.end)
    if start is None or end is None:
        raise _rewritten(table, read.start, "its log no longer reaches that version")
    if any(add.get("deletionVector") for add in (*start.values(), *end.values())):
        raise DataShapeError(
            f"table {table.display} has deletion vectors (another writer enabled them); its changes "
            "can't be read incrementally yet. Run a full refresh of the downstream asset, or disable "
            "`delta.enableDeletionVectors` on the upstream and rewrite it (REORG TABLE ... APPLY (PURGE))."
        )
    removed = [path for path in start if path not in end]
    if _any_deleted(str(table.location), removed):
        raise _rewritten(table, read.start, "VACUUM deleted data files of that version")
    return [path for path in end if path not in start], removed


def _any_deleted(location: str, paths: Sequence[str]) -> bool:
    """Whether any of the log's `paths` is gone from the table's storage (its folder, or S3),
    asked in one call."""
    from pyarrow import fs

    if not paths:
        return False
    filesystem, _ = filesystem_and_path(location)
    found = filesystem.get_file_info([filesystem_and_path(data_file(location, p))[1] for p in paths])
    return any(f.type == fs.FileType.NotFound for f in found)


def _files_alone(spark, table: TableRef, read: UpstreamRead, added: Sequence[str], removed: Sequence[str]):
    """changed_rows's two sides read from the changed files alone, in the end's columns, without
    two time-travel reads (spark/delta/data_files.py); None where the files alone don't hold the
    rows at either end."""
    assert read.start is not None and read.end is not None and table.location is not None
    log = _log(table)
    schema = plain_schema(log, read.end)
    if schema is None or plain_schema(log, read.start) is None:
        return None
    gone = read_files(spark, table.location, removed, schema) if removed else None
    return read_files(spark, table.location, added, schema), gone


def _rows_of_files(frame, paths: Sequence[str]):
    """The rows of `frame` read from data files `paths` (matched on the file name: Delta names
    each data file with a random UUID)."""
    from pyspark.sql import functions as F

    if not paths:
        return frame.limit(0)
    names = sorted({unquote(p).rsplit("/", 1)[-1] for p in paths})
    name = F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1)
    return frame.where(name.isin(names))


def _operation(log: DeltaLog, version: int) -> str:
    """A commit in Iceberg's terms: "append" when it only added rows, "replace" when it added
    and removed no rows (OPTIMIZE, a schema change), else "overwrite"."""
    actions = log.actions(version) or []
    files = [(kind, a[kind]) for a in actions for kind in ("add", "remove") if kind in a]
    changing = [(kind, f) for kind, f in files if f.get("dataChange", True)]
    if not changing:
        return _NO_ROW_CHANGE
    return "append" if all(kind == "add" for kind, _ in changing) else "overwrite"


def _rewritten(table: TableRef, version: int | None, why: str) -> UpstreamRewritten:
    return UpstreamRewritten(
        f"upstream table {table.display}: the changes since version {version} (the one this asset read up "
        f"to) can't be read: {why}. Nothing was written. Run a full refresh of this asset to recompute it "
        "from the whole upstream table.",
        upstream=table.display, snapshot_id=version,
    )


def _log(table: TableRef) -> DeltaLog:
    assert table.location is not None, f"{table.display} is not a Delta table at a path"
    return DeltaLog(table.location)
