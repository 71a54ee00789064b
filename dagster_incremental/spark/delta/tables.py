"""One destination's Delta tables: how a table is found now (its commit log, read without a
JVM), its writer, its history; the sibling of spark/iceberg/tables.py, sharing spark/tables.py
(the session, the one commit and its compare-and-set loop).

A Delta table lives at <warehouse>/<namespace>/<table> (a path, not a catalog entry: a Spark
session without a Hive metastore forgets catalog tables when it stops). Questions the commit log
answers (the cursor, the version, the commits since one) are read from it without a JVM."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.errors import Storage
from dagster_incremental.spark.delta.log import Commit, DeltaLog
from dagster_incremental.spark.delta.storage import S3_SCHEMES, S3Settings, as_s3a, on_s3, use_s3_settings
from dagster_incremental.spark.delta.table_ref import DeltaTableRef
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.tables import SparkTables
from dagster_incremental.spark.write_spec import IncrementalBatch, WriteResult, WriteSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_incremental.spark.delta.writer import DeltaWriter
    from dagster_incremental.spark.key_check import DuplicateKeys

OPTIMIZE = "OPTIMIZE"  # a compaction: no row changes


class DeltaTables(SparkTables["DeltaNow"]):
    """One destination's Delta tables (see the module's docstring)."""

    # Over Spark Connect too, in a folder or on S3: the log is read, the compare-and-set checked
    # and the commit lease taken here, in Python; every Spark call is a DataFrame or SQL one.
    connect_refusal = None

    def __init__(self, conf: Callable[[], Mapping[str, str]], warehouse: str) -> None:
        scheme = warehouse.split("://", 1)[0].lower() if "://" in warehouse else ""
        super().__init__(conf)
        if scheme not in ("", "file", *S3_SCHEMES):
            raise IncrementalConfigError(
                f'[destination] warehouse = "{warehouse}" with format = "delta": Delta tables are written to '
                "a folder (local or mounted) or to S3 (s3://bucket/path, or s3a://). Use one of those, "
                'or format = "iceberg" with a catalog for this storage.'
            )
        self.warehouse = as_s3a(warehouse).removeprefix("file://").rstrip("/")
        self._s3_settings_set = False

    def table(self, catalog: str, namespace: str, key_path: Sequence[str]) -> TableRef:
        if on_s3(self.warehouse) and not self._s3_settings_set:  # at first use: the conf holds secrets
            use_s3_settings(S3Settings.from_spark_conf(self.session.conf))
            self._s3_settings_set = True
        name = TableRef.for_asset(catalog, namespace, key_path)
        return DeltaTableRef.at(name, "/".join((self.warehouse, *name.namespace, name.name)))

    def storage(self, catalog: str, conf: Mapping[str, str], warehouse: str) -> Storage:
        """Delta tables are folders, read through Spark's own catalog; on S3 through S3A's jars."""
        from dagster_incremental.spark.spark_line import coordinates_text, running_hadoop, s3a_artifacts

        jars = coordinates_text(s3a_artifacts(running_hadoop()))  # those of the running PySpark's Hadoop
        return Storage("spark_catalog", "delta", conf.get("spark.sql.catalog.spark_catalog.warehouse") or warehouse, (
            f"this warehouse: Delta on S3 writes through Hadoop's S3A, whose jars ({jars}) must be in the "
            'local Maven repository or in "spark.jars.packages" (docs/delta.md, "On S3").'))

    @property
    def writer(self) -> DeltaWriter:
        from dagster_incremental.spark.delta.writer import DeltaWriter

        return DeltaWriter(lambda: self.spark, settings=self.session.conf)

    def now(self, table: TableRef) -> DeltaNow:
        return DeltaNow(self, table, _log(table))

    # -- history -----------------------------------------------------------------------------------

    def only_rewrites_left(self, table: TableRef) -> bool:
        log = _log(table)
        commits = log.commits_since(None)
        return bool(commits) and all(c.operation == OPTIMIZE for c in commits) and bool(self.unchanged(table).row_count)

    def snapshot(self, table: TableRef) -> int | None:
        return _log(table).current_version()

    def commits_since(self, table: TableRef, snapshot_id: int | None) -> list[tuple[str, dict[str, str]]] | None:
        """(operation, summary) of each commit after `snapshot_id`, in the Iceberg terms the
        run loop reads: a compaction is "replace"; a commit that may change rows says so."""
        log = _log(table)
        if snapshot_id is not None and snapshot_id not in log.versions():
            return None
        return [_as_summary(c) for c in log.commits_since(snapshot_id)]

    def duplicate_keys_without_jvm(self, table: TableRef, keys: Sequence[str], *, snapshot_id: int | None,
                                   current: tuple[str, Any] | None, examples: int) -> DuplicateKeys | None:
        """As IcebergTables', read by delta-rs; None (Spark counts) without the `delta` extra,
        and for a column-mapped table, whose columns delta-rs's Arrow reader reads as NULLs."""
        import importlib.util

        from dagster_incremental.spark.delta.column_mapping import mapped
        from dagster_incremental.spark.delta.in_process import storage_options
        from dagster_incremental.spark.local.key_check import delta_duplicates

        log = _log(table)
        version = log.current_version() if snapshot_id is None else snapshot_id
        if importlib.util.find_spec("deltalake") is None or version is None or mapped(log.configuration(version)):
            return None
        assert table.location is not None, "a Delta table has a location"
        return delta_duplicates(table.location, keys, snapshot_id=snapshot_id, current=current, examples=examples,
                                storage_options=storage_options(table.location))

    def window_counts(self, spec: WriteSpec, snapshot_id: int, column: str, windows: Sequence[tuple[Any, Any]]) -> list:
        from dagster_incremental.spark.delta import figures
        from dagster_incremental.spark.statistics import pairing_key

        return figures.window_counts(self.spark, spec.table, snapshot_id, column, windows, pairing_key(spec))

    def may_commit_in_process(self, spec: WriteSpec) -> bool:
        """Whether delta-rs may commit local rows of this write in the run's process."""
        from dagster_incremental.spark.delta.in_process import may_take

        return may_take(spec)

    def write_in_process(self, batch: IncrementalBatch, asset: str, now: DeltaNow) -> WriteResult | None:
        """None: the writer tries delta-rs first itself, under the table's commit lease."""
        return None


@dataclass(frozen=True)
class DeltaNow:
    """A Delta table as its commit log shows it (spark/tables.py's `TableNow`); each question
    reads the log afresh, as the writer's lease, not this object, orders the writers."""

    tables: DeltaTables
    table: TableRef
    log: DeltaLog

    @property
    def missing(self) -> bool:
        return self.log.current_version() is None

    def committed_state(self, scope: str | None) -> CommittedState | None:
        return self.log.committed_cursor(scope)

    def holds(self, columns: pa.Schema) -> bool:
        """Any existing table: columns it lacks still wait for a row that has them."""
        return True

    def unchanged(self) -> WriteResult:
        from dagster_incremental.spark.delta import figures

        return figures.unchanged(self.table, self.log.current_version(), lambda: self.tables.spark)

    def commit_lock(self) -> AbstractContextManager[object]:
        """None here: the writer holds the table's lease (S3) or file lock (disk) itself."""
        return contextlib.nullcontext()


def _log(table: TableRef) -> DeltaLog:
    assert table.location is not None, f"{table.display} is not a Delta table at a path"
    return DeltaLog(table.location)


def _as_summary(commit: Commit) -> tuple[str, dict[str, str]]:
    if commit.operation == OPTIMIZE:
        return "replace", dict(commit.properties)
    changes_rows = commit.operation not in ("CREATE TABLE",) or bool(commit.metrics)
    return commit.operation.lower(), {**commit.properties, **({"added-records": "1"} if changes_rows else {})}
