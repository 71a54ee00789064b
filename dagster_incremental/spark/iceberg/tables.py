"""The tables of one destination (catalog, namespace, Spark conf): what the IO manager asks of them.

Why a service apart from the IO manager: everything here is Spark and Iceberg (the session, the
table's files, the commit and its compare-and-set, compaction); the IO manager keeps Dagster's
side (contexts, asset keys, metadata), as Dagster's own DbIOManager keeps a thin shell over its
database client. Questions a run can answer from the table's files (no cursor change, no rows)
never start Spark.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.iceberg.files import TableFiles
from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WindowReplace, WriteResult, WriteSpec

PUBLISH_ATTEMPTS = 5  # a compare-and-set refused by writers that left the cursor alone is retried
NO_TABLE = WriteResult(0, 0, 0, 0, None, ())


class TableService:
    """One destination's Iceberg tables: cursor reads, the run's one commit, and what the checks
    read. The session and the commit's retry loop serve every format (spark/delta/tables.py
    answers the same questions for Delta).

    Args:
        conf: a function returning the flat Spark conf (called once, at first use: secrets are
            read then, not when the code location loads).
    """

    def __init__(self, conf: Callable[[], Mapping[str, str]]) -> None:
        self._conf_source = conf
        self._conf: Mapping[str, str] | None = None
        self._session: Any = None
        self._lock = threading.Lock()
        self._starting = False

    # -- the session -------------------------------------------------------------------------------

    @property
    def conf(self) -> Mapping[str, str]:
        if self._conf is None:
            self._conf = self._conf_source()
        return self._conf

    @property
    def spark(self) -> Any:
        """The process's SparkSession for this destination (built once, on first use)."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    from dagster_incremental.spark.session import build_spark_session

                    self._session = build_spark_session(dict(self.conf))
        return self._session

    @property
    def spark_started(self) -> bool:
        """Whether the session is built or being built (a run then has no Spark start to wait for)."""
        return self._session is not None or self._starting

    def start_in_background(self, spec: WriteSpec | None = None) -> None:
        """Start the session on a daemon thread, so the JVM starts while the asset function is
        still extracting; `spec`'s write then waits for it. A failure surfaces at that first use.
        Not for a write pyiceberg is likely to commit (a JVM would only slow the process down)."""
        from dagster_incremental.spark.java_check import java_binary

        if self._session is not None or self._starting or java_binary() is None:
            return  # without Java, the run's own first use says what to install
        if spec is not None and self._python_may_commit(spec):
            return
        self._starting = True
        # pyspark is imported here, on the run's thread (~0.2 s): imported by both threads at
        # once, it half-initialises in one of them ("partially initialized module 'pyspark.sql'").
        import pyspark.sql  # noqa: F401  (see above)

        def start() -> None:
            try:
                self.spark
            except Exception:  # noqa: BLE001 - raised again, in the run, by the next `spark`
                pass

        threading.Thread(target=start, name="dagster-incremental-spark-start", daemon=True).start()

    def table(self, catalog: str, namespace: str, key_path: Sequence[str]) -> TableRef:
        """The table of the asset whose key is `key_path`."""
        return TableRef.for_asset(catalog, namespace, key_path)

    @property
    def writer(self) -> Any:
        from dagster_incremental.spark.iceberg.writer import TableWriter

        return TableWriter(self.spark)

    def files(self, table: TableRef) -> TableFiles:
        """The table's files as they are now (read once; see TableFiles)."""
        return TableFiles.find(self.conf, table)

    # -- reading -----------------------------------------------------------------------------------

    def committed_state(self, table: TableRef, scope: str | None, files: TableFiles | None = None) -> CommittedState | None:
        """The cursor stored with the table's newest commit of `scope` (None: none): from its
        files when readable here, so a run that has nothing to write needs no JVM."""
        files = files or self.files(table)
        if not files.readable:
            return self.writer.read_committed_state(table, scope=scope)
        return files.metadata.committed_cursor(scope) if files.metadata is not None else None

    def unchanged(self, table: TableRef, files: TableFiles | None = None) -> WriteResult:
        """What a run that commits nothing reports: the table as it is."""
        files = files or self.files(table)
        if files.missing:
            return NO_TABLE
        if files.metadata is not None:
            snapshot_id, _ = files.metadata.current_summary()
            schema, rows = files.metadata.spark_schema(), files.metadata.row_count()
            if schema is not None and rows is not None:
                return WriteResult(0, 0, 0, rows, snapshot_id, schema)
        return self.writer.unchanged(table)

    def only_rewrites_left(self, table: TableRef) -> bool:
        """Whether the table has rows and every snapshot it still holds is a rewrite (Iceberg
        operation "replace": a compaction, no data change): the history that carried the cursor
        was expired by maintenance, not lost with the rows (a dropped and recreated table starts
        with an append or overwrite)."""
        files = self.files(table)
        if files.missing:
            return False
        if files.metadata is not None:
            operations = [(snap.get("summary") or {}).get("operation") for snap in files.metadata.lineage()]
        elif self.writer.table_exists(table):
            operations = [row[0] for row in self.spark.sql(f"SELECT operation FROM {table.sql}.snapshots").collect()]
        else:
            return False
        return bool(operations) and set(operations) == {"replace"} and bool(self.unchanged(table, files).row_count)

    def snapshot(self, table: TableRef) -> int | None:
        """The table's current snapshot id (None: no table yet)."""
        files = self.files(table)
        if files.readable:
            return files.metadata.current_snapshot_id() if files.metadata is not None else None
        from dagster_incremental.spark.key_check import current_snapshot_id

        return current_snapshot_id(self.spark, table)

    def commits_since(self, table: TableRef, snapshot_id: int | None) -> list[tuple[str, dict[str, str]]] | None:
        """The table's commits after `snapshot_id` (see TableMetadata.commits_since); None when
        its files are not readable here or the snapshot is not an ancestor."""
        metadata = self.files(table).metadata
        return metadata.commits_since(snapshot_id) if metadata is not None else None

    def duplicate_keys(self, table: TableRef, keys: Sequence[str], **options: Any) -> Any:
        from dagster_incremental.spark.key_check import duplicate_keys

        return duplicate_keys(self.spark, table, keys, **options)

    def duplicate_keys_without_jvm(self, table: TableRef, keys: Sequence[str], *, snapshot_id: int | None,
                                   current: tuple[str, Any] | None, examples: int) -> Any:
        """duplicate_keys counted in this process by pyiceberg and pyarrow (spark/local/key_check.py);
        None: the table's catalog is not one pyiceberg reads here, or Spark must count it."""
        from dagster_incremental.spark.iceberg.local import catalog_table
        from dagster_incremental.spark.local.key_check import iceberg_duplicates

        files = self.files(table)
        loaded = catalog_table.load(self.conf, files) if catalog_table.reachable(self.conf, files) else None
        if loaded is None:
            return None
        return iceberg_duplicates(loaded[0], keys, snapshot_id=snapshot_id, current=current, examples=examples)

    def window_counts(self, spec: WriteSpec, snapshot_id: int, column: str, windows: Sequence[tuple[Any, Any]]) -> list:
        """What one commit changed in each window of `column`: a range run's figures per partition."""
        from dagster_incremental.spark.statistics import pairing_key, window_counts

        return window_counts(self.spark, spec.table, snapshot_id, column, windows, pairing_key(spec))

    def read(self, table: TableRef, window: WindowReplace | None = None) -> Any:
        """The table as a DataFrame, narrowed to `window` when given."""
        frame = self.spark.table(table.sql)
        if window is None:
            return frame
        from pyspark.sql import functions as F

        from dagster_incremental.spark.sql import in_window, quote

        return frame.where(in_window(F.col(quote(window.column)), *window.bounds))

    # -- writing -----------------------------------------------------------------------------------

    def write_frame(self, spec: WriteSpec, frame: Any, run_id: str, window: WindowReplace | None) -> WriteResult:
        """A plain DataFrame asset's output: one commit, no cursor."""
        with self.files(spec.table).commit_lock():
            return self.writer.write(spec, frame, commit=CommitInfo(state=None, run_id=run_id), window=window)

    def commit(self, batch: IncrementalBatch, asset: str, log: Any) -> tuple[WriteResult, int | None]:
        """Commit `batch` (rows and cursor in one commit) and return what the commit did and the
        snapshot that now holds the batch's cursor: the new snapshot, or
        `batch.expected_snapshot_id` when there was nothing to commit."""
        table = batch.spec.table
        files = self.files(table)
        current = self._refuse_stale_writer(batch, asset, files) if batch.check_stale else None
        if _rowless(batch, files):
            batch = dataclasses.replace(batch, data=None)  # a typed empty batch is an empty list
        batch = without_empty_frame(batch, current)
        if _nothing_to_create(batch, files):
            return NO_TABLE, batch.expected_snapshot_id  # no rows, no schema, no table
        if nothing_to_commit(batch, current):
            # No rows and the table already holds this cursor: a commit would change nothing
            # (Spark is not needed), unless a replace must empty the table.
            unchanged = self.unchanged(table, files)
            if batch.spec.disposition != "replace" or not unchanged.row_count:
                return unchanged, batch.expected_snapshot_id
        with files.commit_lock():
            result = self._write_in_python(batch, asset, files) or self._write_guarded(batch, asset)
            self._compact_if_needed(log, table, result)
        return result, result.snapshot_id

    def _write_in_python(self, batch: IncrementalBatch, asset: str, files: TableFiles) -> WriteResult | None:
        """The commit made by pyiceberg when the table's catalog is one it commits to and the
        batch is local rows it can write (spark/iceberg/local/python_write.py); None: the writer's paths."""
        if not self._python_may_commit(batch.spec, files):
            return None
        from dagster_incremental.spark.run_commit import StaleCursor
        from dagster_incremental.spark.iceberg.local import catalog_table
        from dagster_incremental.spark.iceberg.local.python_write import write_in_python

        try:
            return write_in_python(lambda: catalog_table.load(self.conf, files), batch, self._case_sensitive, jvm_running=self.spark_started)
        except StaleCursor as exc:
            raise stale_error(asset, batch.spec.table, exc.run_id) from None

    def _python_may_commit(self, spec: WriteSpec, files: TableFiles | None = None) -> bool:
        """Whether the table and disposition let pyiceberg commit local rows (the batch decides
        the rest: see python_write.py)."""
        from dagster_incremental.spark.iceberg.local import catalog_table
        from dagster_incremental.spark.iceberg.local.python_write import takes

        return takes(spec) and catalog_table.reachable(self.conf, files or self.files(spec.table))

    @property
    def _case_sensitive(self) -> bool:
        return str(self.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"

    def _write_guarded(self, batch: IncrementalBatch, asset: str) -> WriteResult:
        """The writer's one commit; for a cursor-carrying run a compare-and-set on the snapshot
        the run read its cursor from (see commit.RunBranch), whatever the catalog. A commit
        refused only because another writer moved the table without touching this cursor (a
        backfill, a compaction) is made again on the new snapshot."""
        from dagster_incremental.spark.run_commit import BaseMoved, CursorGuard, StaleCursor

        guard = CursorGuard(batch.expected_snapshot_id, batch.commit.scope) if batch.check_stale else None
        for _ in range(PUBLISH_ATTEMPTS):
            try:
                return self.writer.write(
                    batch.spec,
                    batch.data,
                    commit=batch.commit,
                    window=batch.window,
                    full_refresh=batch.full_refresh,
                    run_started_at=batch.run_started_at,
                    deduplicated=batch.deduplicated,
                    guard=guard,
                )
            except StaleCursor as exc:
                raise stale_error(asset, batch.spec.table, exc.run_id) from None
            except BaseMoved:
                continue
        raise ConcurrentRunError(
            f"asset {asset}: other writers committed to {batch.spec.table.display} during each of "
            f"this run's {PUBLISH_ATTEMPTS} attempts to commit, so it wrote nothing. Re-run it; "
            "limit the asset's concurrency pool to 1 to have runs wait their turn.",
            asset=asset, table=batch.spec.table.display,
        )

    def _refuse_stale_writer(self, batch: IncrementalBatch, asset: str, files: TableFiles) -> CommittedState | None:
        """Two runs that read the same cursor must not both commit: the second would load twice.
        Returns the committed state it checked (None: the table has none)."""
        current = self.committed_state(batch.spec.table, batch.commit.scope, files)
        current_id = current.snapshot_id if current is not None else None
        if current_id != batch.expected_snapshot_id:
            raise stale_error(asset, batch.spec.table, current.run_id if current is not None else None)
        return current

    def _compact_if_needed(self, log: Any, table: TableRef, result: WriteResult) -> None:
        """Fold merge-on-read delete files into the data (see maintenance). The run's data and
        cursor are committed already: a failed compaction is a warning, retried next run."""
        from dagster_incremental.spark.iceberg import maintenance

        if not maintenance.needs_compaction(result):
            return
        try:
            done = maintenance.compact(self.spark, table)
        except Exception as exc:  # noqa: BLE001 - maintenance must not fail a committed run
            log.warning(f"{table.display}: compaction of delete files failed, retried next run: {exc}")
            return
        log.info(
            f"{table.display}: folded {result.position_deletes} deleted rows "
            f"({result.delete_files} delete files) into the data files: {done}"
        )


def stale_error(asset: str, table: TableRef, other: str | None) -> ConcurrentRunError:
    return ConcurrentRunError(
        f"asset {asset}: another run ({other or 'unknown'}) committed to {table.display} after "
        "this run read its cursor, so this run wrote nothing (a run commits only if the table "
        "still holds the snapshot it read its cursor from). Re-run it to continue from the new "
        "cursor; to have runs of one asset wait their turn instead of failing, limit its "
        "concurrency pool to 1 (dagster.yaml: `concurrency: {pools: {default_limit: 1}}`).",
        asset=asset, table=table.display, other_run=other,
    )


def nothing_to_commit(batch: IncrementalBatch, current: CommittedState | None) -> bool:
    """A run without rows (not even a schema) whose cursor state is the one committed last."""
    return batch.data is None and _cursor_unchanged(batch, current)


def without_empty_frame(batch: IncrementalBatch, current: CommittedState | None) -> IncrementalBatch:
    """`batch` without its data when that is a Spark DataFrame with no rows and the cursor is the
    one committed last: a chain asset whose upstream committed nothing new returns such a frame
    (a transformation of no changes), and committing it would add an empty snapshot that its own
    downstream reads as a change, moving that cursor for nothing. One Spark job (a LIMIT 1), run
    only when the cursor did not move; a replace keeps its frame (it empties the table)."""
    if batch.data is None or batch.spec.disposition == "replace" or not _cursor_unchanged(batch, current):
        return batch
    is_empty = getattr(batch.data, "isEmpty", None)  # a Spark DataFrame (local rows have no isEmpty)
    if is_empty is None or not callable(is_empty) or not is_empty():
        return batch
    return dataclasses.replace(batch, data=None)


def _cursor_unchanged(batch: IncrementalBatch, current: CommittedState | None) -> bool:
    """The batch's cursor state is the one the table committed last (no window, no full refresh)."""
    from dagster_incremental.cursor.state import resumable, state_json

    if batch.window is not None or batch.full_refresh or current is None:
        return False
    if batch.commit.state is None or batch.commit.scope != current.scope:
        return False
    return state_json(resumable(batch.commit.state)) == state_json(resumable(current.state))


def _rowless(batch: IncrementalBatch, files: TableFiles) -> bool:
    """Local rows, none of them, whose columns the table already has (or that are untyped): a
    typed empty batch (an empty Arrow table or DataFrame with columns) has nothing to write,
    like an empty list; so a run that finds nothing new commits nothing whatever its kind.
    A table whose metadata isn't readable here keeps the commit (an empty one)."""
    import pyarrow as pa

    from dagster_incremental.spark.local.stage import as_local

    if batch.window is not None or batch.full_refresh or files.missing or files.metadata is None:
        return False
    local = as_local(batch.data)
    if local is None or local.num_rows:
        return False
    held = files.metadata.spark_schema()
    if held is None:
        return False
    names = {name.lower() for name, _ in held}
    return all(f.name.lower() in names or pa.types.is_null(f.type) for f in local.schema)


def _nothing_to_create(batch: IncrementalBatch, files: TableFiles) -> bool:
    """No rows, no schema and no table: the writer would create nothing and commit nothing."""
    if batch.data is not None or batch.window is not None or batch.full_refresh:
        return False
    return files.missing
