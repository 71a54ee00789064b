"""The Delta tables of one destination: what the IO manager asks of them, as TableService answers
it for Iceberg (the session, the run loop's questions and the one commit are shared there).

A Delta table lives at <warehouse>/<namespace>/<table> (a path, not a catalog entry: a Spark
session without a Hive metastore forgets catalog tables when it stops). Questions the commit log
answers (the cursor, the version, the commits since one) are read from it without a JVM."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.delta.log import Commit, DeltaLog
from dagster_incremental.spark.delta.storage import S3_SCHEMES, S3Settings, as_s3a, on_s3, use_s3_settings
from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.tables import NO_TABLE, TableService, nothing_to_commit, without_empty_frame
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WindowReplace, WriteResult, WriteSpec

OPTIMIZE = "OPTIMIZE"  # a compaction: no row changes


class DeltaTables(TableService):
    """One destination's Delta tables (see the module's docstring)."""

    def __init__(self, conf: Callable[[], Mapping[str, str]], warehouse: str) -> None:
        super().__init__(conf)
        scheme = warehouse.split("://", 1)[0].lower() if "://" in warehouse else ""
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
            use_s3_settings(S3Settings.from_spark_conf(self.conf))
            self._s3_settings_set = True
        name = TableRef.for_asset(catalog, namespace, key_path)
        return name.at("/".join((self.warehouse, *name.namespace, name.name)))

    @property
    def writer(self) -> Any:
        from dagster_incremental.spark.delta.writer import DeltaWriter

        return DeltaWriter(lambda: self.spark, settings=self.conf)

    # -- reading -----------------------------------------------------------------------------------

    def committed_state(self, table: TableRef, scope: str | None, files: Any = None) -> CommittedState | None:
        return _log(table).committed_cursor(scope)

    def unchanged(self, table: TableRef, files: Any = None) -> WriteResult:
        from dagster_incremental.spark.delta import figures

        return figures.unchanged(table, _log(table).current_version(), lambda: self.spark)

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
                                   current: tuple[str, Any] | None, examples: int) -> Any:
        """As TableService's, read by delta-rs; None (Spark counts) without the `delta` extra,
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

    def _python_may_commit(self, spec: WriteSpec, files: Any = None) -> bool:
        """Whether delta-rs may commit local rows of this write in the run's process."""
        from dagster_incremental.spark.delta.in_process import may_take

        return may_take(spec)

    # -- writing -----------------------------------------------------------------------------------

    def write_frame(self, spec: WriteSpec, frame: Any, run_id: str, window: WindowReplace | None) -> WriteResult:
        return self.writer.write(spec, frame, commit=CommitInfo(state=None, run_id=run_id), window=window)

    def commit(self, batch: IncrementalBatch, asset: str, log: Any) -> tuple[WriteResult, int | None]:
        """As TableService.commit: refuse a stale cursor, skip a commit that would change nothing,
        else the one guarded commit."""
        table = batch.spec.table
        current = self._refuse_stale(batch, asset) if batch.check_stale else None
        if _local_and_empty(batch) and _log(table).current_version() is not None:
            batch = dataclasses.replace(batch, data=None)
        batch = without_empty_frame(batch, current)
        if batch.data is None and batch.window is None and not batch.full_refresh and _log(table).current_version() is None:
            return NO_TABLE, batch.expected_snapshot_id
        if nothing_to_commit(batch, current):
            unchanged = self.unchanged(table)
            if batch.spec.disposition != "replace" or not unchanged.row_count:
                return unchanged, batch.expected_snapshot_id
        result = self._write_guarded(batch, asset)
        return result, result.snapshot_id

    def _refuse_stale(self, batch: IncrementalBatch, asset: str) -> CommittedState | None:
        from dagster_incremental.spark.iceberg.tables import stale_error

        current = self.committed_state(batch.spec.table, batch.commit.scope)
        if (current.snapshot_id if current is not None else None) != batch.expected_snapshot_id:
            raise stale_error(asset, batch.spec.table, current.run_id if current is not None else None)
        return current

    def _compact_if_needed(self, log: Any, table: TableRef, result: WriteResult) -> None:
        """Delta's merges write no delete files here (deletion vectors are off by default)."""


def _log(table: TableRef) -> DeltaLog:
    assert table.location is not None, f"{table.display} is not a Delta table at a path"
    return DeltaLog(table.location)


def _as_summary(commit: Commit) -> tuple[str, dict[str, str]]:
    if commit.operation == OPTIMIZE:
        return "replace", dict(commit.properties)
    changes_rows = commit.operation not in ("CREATE TABLE",) or bool(commit.metrics)
    return commit.operation.lower(), {**commit.properties, **({"added-records": "1"} if changes_rows else {})}


def _local_and_empty(batch: IncrementalBatch) -> bool:
    """Local rows, none of them: nothing to write, like an empty list (columns a table lacks
    still wait for a row that has them)."""
    from dagster_incremental.spark.local.stage import as_local

    if batch.window is not None or batch.full_refresh:
        return False
    local = as_local(batch.data)
    return local is not None and local.num_rows == 0
