"""The atomic cursor: a run's data change and its cursor state land in ONE Iceberg commit, made
by compare-and-set when the run carries a cursor.

Everything about that one commit is here: the properties it carries, how a SQL statement's
commit gets them, the run's branch and its publication, conflicts, and reading the committed
cursor back."""


# The cursor rides in the snapshot summary of the data commit (`dagster_incremental.state`,
# `.run_id`, `.scope`), so "data written, Dagster event lost" is recognisable from the table alone
# (`read_committed_state`). Two ways to put properties on a commit, verified on Spark 3.5.9 +
# Iceberg 1.10.2 (tests/spark/test_commit.py):
#
# - DataFrameWriterV2: `.option("snapshot-property.<key>", value)` (`write_options`);
# - SQL (MERGE, CREATE OR REPLACE ... AS SELECT): the session conf is ignored on Spark 3.5, but
#   `org.apache.iceberg.spark.CommitMetadata.withCommitProperties(map, callable, exClass)` works.
#   It keeps the properties in a JVM ThreadLocal while `callable` runs; we call it over py4j with a
#   Python `java.util.concurrent.Callable` whose call() runs the statement (`with_commit_properties`).
#   With PySpark's pinned-thread mode (the default) the callback's Spark calls run on the very JVM
#   thread that holds the ThreadLocal; that is checked on every call, never assumed.
#
# Over Spark Connect (no JVM here) a SQL statement's commit gets them from the session's conf
# instead, `spark.sql.iceberg.snapshot-property.<key>` (Iceberg 1.11 on; over_connect.py).

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pyspark is imported where a session is used: a pyiceberg commit needs none
    from pyspark.sql import DataFrame, SparkSession

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark import errors as spark_errors
from dagster_incremental.spark.committed_state import CommittedState, cursor_of
from dagster_incremental.spark.run_commit import BaseMoved, CursorGuard, StaleCursor, case_sensitive, commit_fields
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.storage import TableStorage
from dagster_incremental.spark.iceberg.branch import (
    BRANCH_PREFIX,
    TAKE_ATTEMPTS,
    CatalogBranch,
    branch_ref,
    is_leftover,
    new_branch_name,
)
from dagster_incremental.spark.iceberg.over_connect import CatalogTables, session_commit_properties
from dagster_incremental.spark.iceberg.snapshots import JavaSnapshots, Snapshots, java_class, java_json
from dagster_incremental.spark.write_spec import (
    RUN_ID_PROPERTY,
    SCOPE_PROPERTY,
    STATE_PROPERTY,
    CommitInfo,
    WriteSpec,
)

SNAPSHOT_PROPERTY_PREFIX = "snapshot-property."

R = TypeVar("R")

_CALLBACK_LOCK = threading.Lock()


def write_options(properties: Mapping[str, str]) -> dict[str, str]:
    """DataFrameWriterV2 options that put `properties` on the commit's snapshot summary."""
    return {SNAPSHOT_PROPERTY_PREFIX + k: v for k, v in properties.items()}


class _CommitCallable:
    """A `java.util.concurrent.Callable` run by Iceberg inside its commit-properties scope.

    Python errors are kept and re-raised by the caller with their own type (an AnalysisException
    stays one) instead of surfacing as an opaque Py4JJavaError.
    """

    def __init__(self, jvm: Any, expected: Mapping[str, str], fn: Callable[[], Any]) -> None:
        self._jvm = jvm
        self._expected = dict(expected)
        self._fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            seen = _thread_properties(self._jvm)
            if any(seen.get(k) != v for k, v in self._expected.items()):
                raise RuntimeError(
                    "Iceberg commit properties are not visible on the JVM thread running the "
                    "statement, so the cursor would not be committed with the data. Keep "
                    "PySpark's pinned-thread mode on (PYSPARK_PIN_THREAD unset or 'true')."
                )
            self.result = self._fn()
        except BaseException as exc:  # re-raised by with_commit_properties, never swallowed
            self.error = exc
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]


def _pinned_properties_slot(spark: SparkSession) -> Any:
    """Iceberg's ThreadLocal behind CommitMetadata, when it can be set from here directly.

    Why: withCommitProperties runs the statement inside a py4j callback into Python, which
    costs ~0.4 s a statement. With PySpark's pinned-thread mode (the default: a ClientServer
    gateway) this Python thread's calls all run on one JVM thread, the one that executes and
    commits the statement, so setting its ThreadLocal is the same scope without the round trip.
    None (use the callback) without pinned threads or when this Iceberg has no such field.
    """
    from py4j.clientserver import ClientServer

    if not isinstance(spark.sparkContext._gateway, ClientServer):
        return None
    try:
        field = _jvm(spark).org.apache.iceberg.spark.CommitMetadata._java_lang_class.getDeclaredField(
            "COMMIT_PROPERTIES"
        )
        field.setAccessible(True)
        return field.get(None)
    except Exception:  # noqa: BLE001 - another Iceberg: the callback works everywhere
        return None


def _run_with_slot(jvm: Any, slot: Any, java_map: Any, props: Mapping[str, str], fn: Callable[[], R]) -> R:
    """Run `fn` with the properties in the ThreadLocal of this thread's JVM thread; checked
    visible first (as the callback checks), always cleared after."""
    slot.set(java_map)
    try:
        seen = _thread_properties(jvm)
        if any(seen.get(k) != v for k, v in props.items()):  # pragma: no cover - not pinned after all
            raise RuntimeError("Iceberg commit properties are not visible on this thread's JVM thread.")
        return fn()
    finally:
        slot.remove()


def _thread_properties(jvm: Any) -> dict[str, str]:
    """The commit properties Iceberg holds for the current JVM thread (as JSON: iterating the
    Java map over py4j cost 37-54 ms, twice a commit)."""
    return java_json(jvm, java_class(jvm, "org.apache.iceberg.spark.CommitMetadata").commitProperties())


def ensure_callback_server(spark: SparkSession) -> None:
    """Start py4j's callback server once per process, and only on a loopback address.

    Why loopback: the server executes Python on behalf of whoever connects; py4j binds it to
    127.0.0.1 by default, and we refuse to run if something configured it otherwise.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    gateway: Any = spark.sparkContext._gateway
    with _CALLBACK_LOCK:
        if gateway.__dict__.get("_callback_server") is None:
            ensure_callback_server_started(gateway)
        host = gateway._callback_server.server_socket.getsockname()[0]
    if not ipaddress.ip_address(host).is_loopback:
        raise RuntimeError(
            f"the py4j callback server listens on {host}, not on loopback; refusing to use it."
        )


def with_commit_properties(spark: SparkSession, properties: Mapping[str, str], fn: Callable[[], R]) -> R:
    """Run `fn` (e.g. `lambda: spark.sql(merge, args=...)`) so its Iceberg commit carries `properties`.

    Thread-safe: the properties live in a ThreadLocal of the calling thread's own JVM thread.
    Re-entrant-safe: Iceberg clears the ThreadLocal when a scope ends, so a nested scope would
    strip the outer one; a nested call with the same properties just runs `fn`, one with other
    properties raises instead of committing without a cursor.
    """
    jvm = _jvm(spark)
    props = {k: str(v) for k, v in properties.items()}
    current = _thread_properties(jvm)
    if current:
        if current == props:
            return fn()
        raise RuntimeError(
            "with_commit_properties is already active on this thread with other properties "
            f"({sorted(current)}); nested commit-property scopes are not supported."
        )
    java_map = jvm.java.util.HashMap()
    for key, value in props.items():
        java_map.put(key, value)
    slot = _pinned_properties_slot(spark)
    if slot is not None:
        return _run_with_slot(jvm, slot, java_map, props, fn)
    ensure_callback_server(spark)
    callable_ = _CommitCallable(jvm, props, fn)
    java_class(jvm, "org.apache.iceberg.spark.CommitMetadata").withCommitProperties(
        java_map, callable_, jvm.java.lang.RuntimeException._java_lang_class
    )
    if callable_.error is not None:
        raise callable_.error
    return callable_.result


def iceberg_table(spark: SparkSession, table: TableRef) -> Any:
    """The org.apache.iceberg.Table behind a Spark table (py4j; no Spark job)."""
    return java_class(_jvm(spark), "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(spark._jsparkSession, table.sql)


def _jvm(spark: SparkSession) -> Any:
    """The session's py4j view of the JVM (typed Optional by pyspark; always set on a session)."""
    jvm = spark._jvm
    assert jvm is not None, "a SparkSession without a JVM"
    return jvm


def read_committed_state(
    spark: SparkSession, table: TableRef, scope: str | None = None
) -> CommittedState | None:
    """The newest cursor committed with the table's current history (None: no table / no cursor).

    Only snapshots that are ancestors of the current one count (a rolled-back or replaced
    history doesn't). With `scope`, only commits of that scope; without, the newest of any.
    One metadata-table job; a missing table is None (checked via the catalog, errors propagate).
    """
    if not spark.catalog.tableExists(table.sql):
        return None
    try:
        iceberg = iceberg_table(spark, table)
    except Exception:  # noqa: BLE001 - not an Iceberg table object here: ask the metadata tables
        iceberg = None
    if iceberg is not None:
        return _walk_lineage(_jvm(spark), iceberg, scope)
    # Another process (a run killed after its commit, a concurrent run) may have committed since
    # this session cached the table's metadata (Iceberg's catalog cache): read the newest.
    spark.catalog.refreshTable(table.sql)
    args: dict[str, Any] = {"state_key": STATE_PROPERTY}
    scope_filter = ""
    if scope is not None:
        scope_filter = "AND s.summary[:scope_key] = :scope"
        args.update(scope_key=SCOPE_PROPERTY, scope=scope)
    rows = spark.sql(
        f"""SELECT s.snapshot_id, unix_micros(s.committed_at) AS committed_us, s.summary
            FROM {table}.`snapshots` AS s JOIN {table}.`history` AS h ON s.snapshot_id = h.snapshot_id
            WHERE h.is_current_ancestor AND s.summary[:state_key] IS NOT NULL {scope_filter}
            ORDER BY s.committed_at DESC, h.made_current_at DESC LIMIT 1""",
        args=args,
    ).collect()
    if not rows:
        return None
    row = rows[0]
    summary = dict(row.summary)
    return CommittedState(
        state=json.loads(summary[STATE_PROPERTY]),
        run_id=summary.get(RUN_ID_PROPERTY),
        scope=summary.get(SCOPE_PROPERTY),
        snapshot_id=row.snapshot_id,
        committed_at=_from_micros(row.committed_us),
    )


def _walk_lineage(jvm: Any, iceberg: Any, scope: str | None) -> CommittedState | None:
    """The newest snapshot in the current lineage carrying a cursor (of `scope`), read from the
    Iceberg Table object over py4j: no Spark job (a metadata-table query costs ~0.2 s a read,
    twice per run). The table is refreshed first: another process may have committed since
    this session cached it."""
    iceberg.refresh()
    snapshot = iceberg.currentSnapshot()
    while snapshot is not None:
        fields = cursor_of(java_json(jvm, snapshot.summary()), snapshot.snapshotId(), snapshot.timestampMillis(), scope)
        if fields is not None:
            return fields
        parent = snapshot.parentId()
        snapshot = iceberg.snapshot(parent) if parent is not None else None
    return None


def _from_micros(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc)


# -- the run's branch: compare-and-set by the catalog's own commit ---------------------------------
#
# The compare-and-set of a run's commit, made by the catalog's own atomic commit.
#
# Why a branch: Iceberg retries a refused commit on top of the newest snapshot (an append
# re-applied onto another run's append loads the same rows twice), and every attempt, the first
# included, starts from a fresh read of the table; so no table property makes a plain write
# fail when the table moved after the run read its cursor. Instead the run's one data commit
# (Spark append, overwrite or MERGE; the local append's Java commit) goes onto a private branch
# taken at the snapshot the run checked, and `main` is then moved to that branch's head by ONE
# catalog commit whose base is exactly that snapshot's metadata, without retry. Every Iceberg
# catalog makes that commit atomic against its base (JDBC: `UPDATE ... WHERE metadata_location =
# <base>`; Hive: a lock and the same check; Glue: the table version; REST: `assert-ref-snapshot-id`),
# so a run whose base moved is refused and `main` never sees its snapshot. The Hadoop catalog's
# metadata rename on a local disk is not atomic: there the file lock stays (io_manager).

class RunBranch:
    """One run's branch: taken at the checked snapshot, published to main by compare-and-set."""

    def __init__(self, iceberg: Any, jvm: Any, name: str) -> None:
        self.iceberg, self.jvm, self.name = iceberg, jvm, name
        self.base: int | None = None

    def take(self, guard: CursorGuard) -> None:
        """Check the cursor against main's newest state and branch there, in one metadata
        commit on the state checked (raises StaleCursor). Retried when another writer committed
        first: the check is then made again on the newer state."""
        for _ in range(TAKE_ATTEMPTS):
            base = self._ops.refresh()
            head = base.currentSnapshot()
            if head is None:  # a table created empty: main needs a first snapshot to branch at
                self._first_snapshot()
                continue
            found = _newest_cursor(self.jvm, base, head, guard.scope)
            if (found.snapshot_id if found else None) != guard.expected_snapshot_id:
                raise StaleCursor(found.run_id if found else None)
            ref = self.jvm.org.apache.iceberg.SnapshotRef.branchBuilder(head.snapshotId()).build()
            if self._commit(base, self._builder(base).setRef(self.name, ref)):
                self.base = head.snapshotId()
                return
        raise BaseMoved()

    def _first_snapshot(self) -> None:
        """Give main an empty first snapshot, only while main has none (compare-and-set).

        Why not `newAppend().commit()`: Iceberg retries a refused append onto the newest main,
        so a run that lost the race for an empty table would commit an empty snapshot after the
        winner's, without a cursor (expiring all but the current snapshot then loses the cursor).
        A refused commit leaves nothing: the caller reads the table again."""
        snapshot = self.iceberg.newAppend().apply()  # written against the table as read just now
        base = self._ops.current()
        if base.currentSnapshot() is not None or snapshot.parentId() is not None:
            self._discard(snapshot)  # another writer gave main a snapshot meanwhile
            return
        moved = _table_moved_since(self.iceberg)
        try:
            done = self._commit(base, self._builder(base).setBranchSnapshot(snapshot, "main"))
        except Exception as exc:
            # a REST catalog may refuse it as a bad request: another writer's snapshot took its
            # sequence number (see conflicts_as_concurrent_run)
            if not (spark_errors.is_catalog_bad_request(exc) and moved is not None and moved()):
                raise
            done = False
        if not done:
            self._discard(snapshot)

    def _discard(self, snapshot: Any) -> None:
        """Delete the manifest list of a snapshot that was never committed (best effort)."""
        with contextlib.suppress(Exception):
            self.iceberg.io().deleteFile(snapshot.manifestListLocation())

    def publish(self) -> None:
        """Move main to the branch's head, only if main is still the snapshot branched at.

        One catalog commit on the exact base just read, never retried; this run's branch and
        day-old ones of runs killed before publishing are removed in it.
        """
        base = self._ops.refresh()
        main, ref = base.currentSnapshot(), base.ref(self.name)
        if main is None or main.snapshotId() != self.base or ref is None:
            raise BaseMoved()
        head = base.snapshot(ref.snapshotId())
        if head.parentId() != self.base:
            raise BaseMoved()
        builder = self._builder(base).setBranchSnapshot(head.snapshotId(), "main")
        for name in _leftovers(self.jvm, base, head.timestampMillis()) + [self.name]:
            builder.removeRef(name)
        if not self._commit(base, builder):
            raise BaseMoved()

    def abandon(self) -> None:
        """Drop the branch of a commit that was not published (best effort: a later publish
        removes a day-old one too)."""
        try:
            for _ in range(TAKE_ATTEMPTS):
                base = self._ops.refresh()
                if base.ref(self.name) is None or self._commit(base, self._builder(base).removeRef(self.name)):
                    return
        except Exception:  # noqa: BLE001 - the run's own error matters, not this cleanup
            pass

    @property
    def _ops(self) -> Any:
        return self.iceberg.operations()

    def _builder(self, base: Any) -> Any:
        return self.jvm.org.apache.iceberg.TableMetadata.buildFrom(base)

    def _commit(self, base: Any, builder: Any) -> bool:
        """One catalog commit of `builder` on exactly `base`; False when another writer
        committed first (the catalog refused it, nothing changed)."""
        try:
            self._ops.commit(base, builder.build())
        except Exception as exc:
            if spark_errors.is_commit_conflict(exc):
                return False
            raise
        finally:
            self.iceberg.refresh()  # Spark's cached table object sees the branch / new main
        return True


def _leftovers(jvm: Any, metadata: Any, now_ms: int) -> list[str]:
    """Branches of runs killed between branching and publishing, a day old: no run lives that long."""
    return [str(name) for name in java_json(jvm, metadata.refs().keySet())
            if is_leftover(str(name), metadata.snapshot(metadata.ref(name).snapshotId()).timestampMillis(), now_ms)]


def _newest_cursor(jvm: Any, metadata: Any, snapshot: Any, scope: str | None) -> CommittedState | None:
    """The newest cursor (of `scope`) in the lineage ending at `snapshot` (of `metadata`)."""
    while snapshot is not None:
        fields = cursor_of(java_json(jvm, snapshot.summary()), snapshot.snapshotId(), snapshot.timestampMillis(), scope)
        if fields is not None:
            return fields
        parent = snapshot.parentId()
        snapshot = metadata.snapshot(parent) if parent is not None else None
    return None


# -- the pending commit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingCommit:
    """The one commit a write makes: its id (to find its snapshot afterwards), the properties it
    carries (the cursor) and, for a cursor-carrying run, the compare-and-set it is made by."""

    spec: WriteSpec
    commit_id: str
    properties: Mapping[str, str]
    started: datetime  # the run's start: scd2's default boundary
    case_sensitive: bool
    guard: CursorGuard | None = None  # a cursor-carrying run: commit by compare-and-set (RunBranch)
    branch: str = ""  # the run's branch name under a guard
    iceberg: Any = None  # the table's org.apache.iceberg.Table, refreshed; None: no table yet, or over Connect
    catalog: CatalogTables | None = None  # over Spark Connect: the catalog as pyiceberg reaches it here

    @classmethod
    def open(
        cls, spark: SparkSession, spec: WriteSpec, info: CommitInfo, started: datetime | None, guard: CursorGuard | None,
        catalog: CatalogTables | None = None,
    ) -> PendingCommit:
        """The commit about to be made on the table as it is now (its state validated first).
        `catalog`: the session is a Spark Connect one, and the table's catalog is reached here."""
        if catalog is not None:
            _refresh_on_server(spark, spec.table)
        return cls(
            **commit_fields(case_sensitive(spark.conf.get), spec, info, started, guard),
            branch=new_branch_name() if guard is not None else "",
            iceberg=_refreshed_table(spark, spec.table) if catalog is None else None,
            catalog=catalog,
        )

    def snapshots(self, spark: SparkSession) -> Snapshots:
        """The table's snapshots, read where this process can read them (see snapshots.py)."""
        return snapshots_of(spark, self.table, self.catalog, self.iceberg)

    @property
    def table(self) -> TableRef:
        return self.spec.table

    @property
    def target(self) -> TableRef:
        """What the data statement writes: the run's branch under a guard, else the table."""
        return branch_ref(self.table, self.branch) if self.guard is not None else self.table

    def unguarded(self) -> PendingCommit:
        """For CREATE [OR REPLACE] TABLE ... AS SELECT: a create is atomic in every catalog (it
        fails when the table exists), a full refresh replaces the table whatever it holds."""
        return dataclasses.replace(self, guard=None)

    def run(self, spark: SparkSession, fn: Callable[[], Any]) -> Any:
        """Run the SQL statement in `fn` (written against `target`) as this commit; conflicts
        become ConcurrentRunError."""
        with self.guarded(spark):
            if self.catalog is not None:
                with session_commit_properties(spark, self.properties):
                    return fn()
            return with_commit_properties(spark, self.properties, fn)

    def append(self, spark: SparkSession, frame: DataFrame) -> None:
        """Append `frame`'s rows as this commit."""
        with self.guarded(spark):
            frame.writeTo(self.target.sql).options(**write_options(self.properties)).append()

    def overwrite_all(self, spark: SparkSession, frame: DataFrame) -> None:
        """Replace every row of the table by `frame`'s, as this commit."""
        from pyspark.sql import functions as F

        with self.guarded(spark):
            frame.writeTo(self.target.sql).options(**write_options(self.properties)).overwrite(F.lit(True))

    @contextmanager
    def guarded(self, spark: SparkSession, written: list[str] | None = None, storage: TableStorage | None = None) -> Iterator[None]:
        """Around the data commit (also the local append's): conflicts as ConcurrentRunError;
        under a guard, the branch is taken first and published after (raises StaleCursor or
        BaseMoved, nothing visible written). `written`: the files (locations in `storage`, a
        local folder when None) the local path writes for this commit, deleted if it does not
        happen (they would be nobody's)."""
        moved = self._moved_since(spark)
        with (_removed_on_failure([] if written is None else written, storage or TableStorage.local()),
              conflicts_as_concurrent_run(self.table, moved)):
            if self.guard is None:
                yield
                return
            branch = self._branch(spark)
            try:
                branch.take(self.guard)  # inside: what fails after branching drops the branch too
                yield
                branch.publish()
            except BaseException:
                branch.abandon()
                raise


    def _branch(self, spark: SparkSession) -> RunBranch | CatalogBranch:
        """The run's branch: through the catalog over Connect, else through the driver's Iceberg."""
        if self.catalog is None:
            return RunBranch(iceberg_table(spark, self.table), spark._jvm, self.branch)
        return CatalogBranch(self.catalog.snapshots(self.table), self.table, self.branch, self.commit_id,
                             lambda: _refresh_on_server(spark, self.table))

    def _moved_since(self, spark: SparkSession) -> Callable[[], bool] | None:
        """Whether another writer committed after now (see _table_moved_since)."""
        if self.catalog is None:
            return _table_moved_since(self.iceberg if self.iceberg is not None else _existing_table(spark, self.table))
        snapshots = self.catalog.snapshots(self.table)
        if snapshots.metadata is None:
            return None
        before = int(snapshots.metadata.raw.get("last-sequence-number", 0))
        return lambda: snapshots.last_sequence_number() > before


def snapshots_of(spark: SparkSession, table: TableRef, catalog: CatalogTables | None, iceberg: Any = None) -> Snapshots:
    """`table`'s snapshots: from its catalog over Connect, else from the driver's Table object
    (`iceberg` when held)."""
    if catalog is not None:
        return catalog.snapshots(table)
    return JavaSnapshots(_jvm(spark), iceberg if iceberg is not None else iceberg_table(spark, table))


def _refresh_on_server(spark: SparkSession, table: TableRef) -> None:
    """The Spark Connect server caches the table: make it see what this process, or another,
    committed through the catalog (nothing when there is no table yet)."""
    if spark.catalog.tableExists(table.sql):
        spark.catalog.refreshTable(table.sql)


@contextmanager
def _removed_on_failure(paths: list[str], storage: TableStorage) -> Iterator[None]:
    try:
        yield
    except BaseException:
        for path in paths:
            with contextlib.suppress(OSError):
                storage.delete(path)
        raise


def _existing_table(spark: SparkSession, table: TableRef) -> Any:
    """The table's Iceberg object if the table exists now (another run may have created it
    since this one found none), else None."""
    try:
        return iceberg_table(spark, table) if spark.catalog.tableExists(table.sql) else None
    except Exception:  # noqa: BLE001 - no table object: no moved check
        return None


def _table_moved_since(iceberg: Any) -> Callable[[], bool] | None:
    """Whether another writer committed to the table after now (asked after a refused commit),
    by its metadata's last sequence number, which every snapshot on any branch advances; None
    for a table not there yet. Now is the metadata this run opened (no catalog round trip)."""
    if iceberg is None:
        return None
    try:
        before = int(iceberg.operations().current().lastSequenceNumber())
    except Exception:  # noqa: BLE001 - not an Iceberg table object: no such check
        return None

    def moved() -> bool:
        try:
            return int(iceberg.operations().refresh().lastSequenceNumber()) > before
        except Exception:  # noqa: BLE001 - unknown: the original error stands
            return False

    return moved


@contextmanager
def conflicts_as_concurrent_run(table: TableRef, moved: Callable[[], bool] | None = None) -> Iterator[None]:
    """Re-raise Iceberg commit conflicts as ConcurrentRunError (the table is unchanged). moved:
    whether the table moved since the run read it; then a REST catalog's refusal of the commit
    as a bad request (what SeaweedFS answers when another writer's snapshot took the sequence
    number this commit's snapshot carries) is that conflict too."""
    try:
        yield
    except Exception as exc:
        conflict = spark_errors.is_commit_conflict(exc) or (
            moved is not None and spark_errors.is_catalog_bad_request(exc) and moved())
        if conflict:
            raise ConcurrentRunError(
                f"table {table}: another writer committed to the table while this run was "
                "writing, so this run's commit was rejected and nothing was written. Re-run it.",
                table=table.display,
            ) from exc
        raise


def _refreshed_table(spark: SparkSession, table: TableRef) -> Any:
    """The table's Iceberg object brought up to date, None when there is no table: the cursor may
    have been read from the table's files, not through this session, and another process may
    have committed since this session cached the table, or deleted its files (then the cached
    table is dropped and the table does not exist)."""
    if not spark.catalog.tableExists(table.sql):
        return None
    try:
        iceberg = iceberg_table(spark, table)
        iceberg.refresh()
        return iceberg
    except Exception:  # noqa: BLE001 - looked at again below; a real error is raised again
        spark.catalog.refreshTable(table.sql)
        if not spark.catalog.tableExists(table.sql):
            return None
        iceberg = iceberg_table(spark, table)
        iceberg.refresh()
        return iceberg
