"""The format-neutral half of a destination's tables: its Spark session, the run's one commit
(refuse a stale cursor, skip a commit that would change nothing, the writer's compare-and-set,
retried when only the base moved), and the reads Spark answers alike for every format.

Each format fills in the rest as a sibling subclass (spark/iceberg/tables.py,
spark/delta/tables.py): how it finds a table as it is now (`TableNow`), its writer, and its
history. spark/destination.py picks one; the IO manager sees only spark/table_format.py's `Tables`.
"""

from __future__ import annotations

import dataclasses
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.connect import NOT_SUPPORTED
from dagster_incremental.spark.run_commit import BaseMoved, CursorGuard, StaleCursor
from dagster_incremental.spark.table_format import Log, Writer
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WindowReplace, WriteResult, WriteSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from dagster_incremental.spark.key_check import DuplicateKeys

PUBLISH_ATTEMPTS = 5  # a compare-and-set refused by writers that left the cursor alone is retried
NO_TABLE = WriteResult(0, 0, 0, 0, None, ())


class TableNow(Protocol):
    """One table as a commit (or a question) finds it: read once, asked several times."""

    @property
    def missing(self) -> bool: ...  # known to be no table (not merely unreadable here)

    def committed_state(self, scope: str | None) -> CommittedState | None: ...

    def holds(self, columns: pa.Schema) -> bool: ...  # an existing table has (or may take) these columns

    def unchanged(self) -> WriteResult: ...  # what a run that commits nothing reports

    def commit_lock(self) -> AbstractContextManager[object]: ...


class DestinationSession:
    """The destination's SparkSession, built once on first use or early on a daemon thread.

    Args:
        conf: a function returning the flat Spark conf (called once, at first use: secrets are
            read then, not when the code location loads).
        connect_refusal: why the destination's format cannot run over Spark Connect, None when
            it can (then [spark] remote or SPARK_REMOTE make the session a Connect one).
    """

    def __init__(self, conf: Callable[[], Mapping[str, str]], connect_refusal: str | None) -> None:
        self._conf_source = conf
        self._connect_refusal = connect_refusal  # why the format cannot run over Spark Connect (None: it can)
        self._conf: Mapping[str, str] | None = None
        self._session: SparkSession | None = None
        self._lock = threading.Lock()
        self._starting = False

    @property
    def conf(self) -> Mapping[str, str]:
        if self._conf is None:
            self._conf = self._conf_source()
        return self._conf

    @property
    def spark(self) -> SparkSession:
        """The process's SparkSession for this destination (built once, on first use)."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    from dagster_incremental.spark.session import build_spark_session

                    self._session = build_spark_session(dict(self.conf), self._connect_refusal)
        return self._session

    @property
    def over_connect(self) -> bool:
        """Whether this destination's session is a Spark Connect one (asked for, and the format runs over it)."""
        from dagster_incremental.spark.connect import remote_url

        return self._connect_refusal is None and remote_url(self.conf) is not None

    def refuse_unsupported_connect(self) -> None:
        """Before a commit that may need no session at all (an in-process one): Spark Connect
        asked for a format that cannot run over it is refused all the same."""
        if not self.over_connect:
            from dagster_incremental.spark.connect import NOT_SUPPORTED, refuse_connect

            refuse_connect(self.conf, self._connect_refusal or NOT_SUPPORTED)

    @property
    def started(self) -> bool:
        """Whether the session is built or being built (a run then has no Spark start to wait for)."""
        return self._session is not None or self._starting

    def start_in_background(self, needless: Callable[[], bool]) -> None:
        """Start the session on a daemon thread, so the JVM starts while the asset function is
        still extracting; the write then waits for it. A failure surfaces at that first use.
        Not when `needless()` (a write the format commits without a JVM would only slow down)."""
        from dagster_incremental.spark.java_check import java_binary

        if self._session is not None or self._starting or java_binary() is None or self.over_connect:
            return  # without Java, the run's own first use says what to install; a Connect session starts no JVM
        if needless():
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


Now = TypeVar("Now", bound="TableNow")


class SparkTables(ABC, Generic[Now]):
    """What every format's tables answer alike (see the module's docstring); a format adds how it
    finds a table now, its writer and its history."""

    # Why this format's tables cannot be written over Spark Connect (None: they can, a format says so).
    connect_refusal: str | None = NOT_SUPPORTED

    def __init__(self, conf: Callable[[], Mapping[str, str]]) -> None:
        self.session = DestinationSession(conf, self.connect_refusal)

    @property
    def spark(self) -> SparkSession:
        return self.session.spark

    @property
    def conf(self) -> Mapping[str, str]:
        """The destination's flat Spark conf (config.toml and secrets.toml), read once."""
        return self.session.conf

    @property
    def over_connect(self) -> bool:
        """Whether the destination runs over Spark Connect (its batches may then be Connect DataFrames)."""
        return self.session.over_connect

    @property
    def spark_started(self) -> bool:
        return self.session.started

    def start_in_background(self, spec: WriteSpec | None = None) -> None:
        """Start the JVM while the asset function extracts, unless `spec`'s write needs none."""
        self.session.start_in_background(lambda: spec is not None and self.may_commit_in_process(spec))

    # -- what a format says ------------------------------------------------------------------------

    @abstractmethod
    def now(self, table: TableRef) -> Now: ...

    @property
    @abstractmethod
    def writer(self) -> Writer: ...

    @abstractmethod
    def may_commit_in_process(self, spec: WriteSpec) -> bool: ...

    @abstractmethod
    def write_in_process(self, batch: IncrementalBatch, asset: str, now: Now) -> WriteResult | None: ...

    def after_commit(self, log: Log, table: TableRef, result: WriteResult) -> None:
        """Maintenance a format does once the run's commit is made (none by default)."""

    def refuse_table_over_connect(self, table: TableRef) -> None:
        """Over Spark Connect, refuse a table this format cannot write there (none by default)."""

    # -- reading -----------------------------------------------------------------------------------

    def committed_state(self, table: TableRef, scope: str | None) -> CommittedState | None:
        """The cursor stored with the table's newest commit of `scope` (None: none)."""
        return self.now(table).committed_state(scope)

    def unchanged(self, table: TableRef) -> WriteResult:
        """What a run that commits nothing reports: the table as it is."""
        return self.now(table).unchanged()

    def duplicate_keys(self, table: TableRef, keys: Sequence[str], **options: Any) -> DuplicateKeys:
        from dagster_incremental.spark.key_check import duplicate_keys

        return duplicate_keys(self.spark, table, keys, **options)

    def read(self, table: TableRef, window: WindowReplace | None = None) -> DataFrame:
        """The table as a DataFrame, narrowed to `window` when given."""
        frame = self.spark.table(table.sql)
        if window is None:
            return frame
        from pyspark.sql import functions as F

        from dagster_incremental.spark.sql import in_window, quote

        return frame.where(in_window(F.col(quote(window.column)), *window.bounds))

    # -- writing -----------------------------------------------------------------------------------

    def write_frame(self, spec: WriteSpec, frame: DataFrame, run_id: str, window: WindowReplace | None) -> WriteResult:
        """A plain DataFrame asset's output: one commit, no cursor."""
        self.session.refuse_unsupported_connect()
        self.refuse_table_over_connect(spec.table)
        with self.now(spec.table).commit_lock():
            return self.writer.write(spec, frame, commit=CommitInfo(state=None, run_id=run_id), window=window)

    def commit(self, batch: IncrementalBatch, asset: str, log: Log) -> tuple[WriteResult, int | None]:
        """Commit `batch` (rows and cursor in one commit) and return what the commit did and the
        snapshot that now holds the batch's cursor: the new snapshot, or
        `batch.expected_snapshot_id` when there was nothing to commit."""
        self.session.refuse_unsupported_connect()
        table = batch.spec.table
        self.refuse_table_over_connect(table)
        now = self.now(table)
        current = refuse_stale(now, batch, asset) if batch.check_stale else None
        if _rowless(batch, now):
            batch = dataclasses.replace(batch, data=None)  # a typed empty batch is an empty list
        batch = without_empty_frame(batch, current)
        if _nothing_to_create(batch, now):
            return NO_TABLE, batch.expected_snapshot_id  # no rows, no schema, no table
        if nothing_to_commit(batch, current):
            # No rows and the table already holds this cursor: a commit would change nothing
            # (Spark is not needed), unless a replace must empty the table.
            unchanged = now.unchanged()
            if batch.spec.disposition != "replace" or not unchanged.row_count:
                return unchanged, batch.expected_snapshot_id
        with now.commit_lock():
            result = self.write_in_process(batch, asset, now) or write_guarded(self.writer, batch, asset)
            self.after_commit(log, table, result)
        return result, result.snapshot_id

def write_guarded(writer: Writer, batch: IncrementalBatch, asset: str) -> WriteResult:
    """The writer's one commit; for a cursor-carrying run a compare-and-set on the snapshot
    the run read its cursor from, whatever the format. A commit refused only because another
    writer moved the table without touching this cursor (a backfill, a compaction) is made
    again on the new snapshot."""
    guard = CursorGuard(batch.expected_snapshot_id, batch.commit.scope) if batch.check_stale else None
    for _ in range(PUBLISH_ATTEMPTS):
        try:
            return writer.write(
                batch.spec, batch.data, commit=batch.commit, window=batch.window, full_refresh=batch.full_refresh,
                run_started_at=batch.run_started_at, deduplicated=batch.deduplicated, guard=guard,
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


def refuse_stale(now: TableNow, batch: IncrementalBatch, asset: str) -> CommittedState | None:
    """Two runs that read the same cursor must not both commit: the second would load twice.
    Returns the committed state it checked (None: the table has none)."""
    current = now.committed_state(batch.commit.scope)
    current_id = current.snapshot_id if current is not None else None
    if current_id != batch.expected_snapshot_id:
        raise stale_error(asset, batch.spec.table, current.run_id if current is not None else None)
    return current


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


def _rowless(batch: IncrementalBatch, now: TableNow) -> bool:
    """Local rows, none of them, whose columns the table already has (or may take: see
    `TableNow.holds`): a typed empty batch (an empty Arrow table or DataFrame with columns) has
    nothing to write, like an empty list; so a run that finds nothing new commits nothing
    whatever its kind."""
    from dagster_incremental.spark.local.stage import as_local

    if batch.window is not None or batch.full_refresh or now.missing:
        return False
    local = as_local(batch.data)
    return local is not None and not local.num_rows and now.holds(local.schema)


def _nothing_to_create(batch: IncrementalBatch, now: TableNow) -> bool:
    """No rows, no schema and no table: the writer would create nothing and commit nothing."""
    if batch.data is not None or batch.window is not None or batch.full_refresh:
        return False
    return now.missing
