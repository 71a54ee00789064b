"""The seam between the table formats: what a run asks of one destination's tables (`Tables`:
the cursor in force, the one commit with its compare-and-set, the figures, the history, the
reads), what a format's writer takes (`Writer`; the order every writer follows is
spark/batch_writer.py's), and what a format's one commit offers the format-neutral statements
that run as it (`DataCommit`: the strategies' MERGE, the window replace).

The formats are siblings that implement it: spark/iceberg/ and spark/delta/ (their shared half is
spark/tables.py). spark/destination.py is the one place that picks a format. Staging, dedup, the
strategies' SQL, schema fitting, the commit's guard and the cursor belong to neither."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dagster_incremental.spark.data_commit import DataCommit
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WindowReplace, WriteResult, WriteSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dagster_incremental.cursor.upstream import Snapshot, UpstreamRead
    from dagster_incremental.spark.committed_state import CommittedState
    from dagster_incremental.spark.errors import Storage
    from dagster_incremental.spark.key_check import DuplicateKeys
    from dagster_incremental.spark.run_commit import CursorGuard


class Log(Protocol):
    """Where a commit's maintenance reports (Dagster's run log)."""

    def info(self, msg: str) -> None: ...

    def warning(self, msg: str) -> None: ...


class Writer(Protocol):
    """A format's writer: one run's batch into its table as ONE commit carrying the cursor."""

    def write(self, spec: WriteSpec, batch: Any, *, commit: CommitInfo, window: WindowReplace | None = None,
              full_refresh: bool = False, run_started_at: datetime | None = None, deduplicated: bool = False,
              guard: CursorGuard | None = None) -> WriteResult: ...


class Tables(Protocol):
    """One destination's tables, as the IO manager and the run loop ask of them (any format)."""

    @property
    def spark(self) -> SparkSession: ...

    @property
    def spark_started(self) -> bool: ...

    @property
    def conf(self) -> Mapping[str, str]: ...  # the destination's flat Spark conf, secrets included

    @property
    def over_connect(self) -> bool: ...  # the session is a Spark Connect one ([spark] remote, a format that runs over it)

    def start_in_background(self, spec: WriteSpec | None = None) -> None: ...

    def table(self, catalog: str, namespace: str, key_path: Sequence[str]) -> TableRef: ...

    def storage(self, catalog: str, conf: Mapping[str, str], warehouse: str) -> Storage: ...  # as errors name it

    def committed_state(self, table: TableRef, scope: str | None) -> CommittedState | None: ...

    def only_rewrites_left(self, table: TableRef) -> bool: ...

    def snapshot(self, table: TableRef) -> int | None: ...

    def commits_since(self, table: TableRef, snapshot_id: int | None) -> list[tuple[str, dict[str, str]]] | None: ...

    def duplicate_keys(self, table: TableRef, keys: Sequence[str], **options: Any) -> DuplicateKeys: ...

    def duplicate_keys_without_jvm(self, table: TableRef, keys: Sequence[str], *, snapshot_id: int | None,
                                   current: tuple[str, Any] | None, examples: int) -> DuplicateKeys | None: ...

    def window_counts(self, spec: WriteSpec, snapshot_id: int, column: str, windows: Sequence[tuple[Any, Any]]) -> list: ...

    def read(self, table: TableRef, window: WindowReplace | None = None) -> DataFrame: ...

    def write_frame(self, spec: WriteSpec, frame: DataFrame, run_id: str, window: WindowReplace | None) -> WriteResult: ...

    def commit(self, batch: IncrementalBatch, asset: str, log: Log) -> tuple[WriteResult, int | None]: ...


class UpstreamChanges(Protocol):
    """What a `Changes` read asks of an upstream table's format (spark/upstream_changes.py nets
    the two sides it returns and marks each row)."""

    def snapshot_history(self, spark: SparkSession, table: TableRef) -> tuple[list[Snapshot], int | None]: ...

    def table_id(self, table: TableRef) -> str | None: ...  # tells a table created again at one place

    def missing(self, spark: SparkSession, table: TableRef) -> bool: ...

    def rows_written(self, spark: SparkSession, table: TableRef, commits: Sequence[int], above: int) -> int: ...

    def snapshot_facts(self, spark: SparkSession, table: TableRef, snapshot_id: int,
                       rows: bool) -> tuple[int | None, int | None]: ...

    def table_at(self, spark: SparkSession, table: TableRef, snapshot_id: int | None) -> DataFrame: ...

    def changed_rows(self, spark: SparkSession, table: TableRef,
                     read: UpstreamRead) -> tuple[DataFrame, DataFrame | None]: ...


class FormatPackage(Protocol):
    """A format's package (spark/iceberg/, spark/delta/), as spark/destination.py picks one."""

    def open_tables(self, conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables: ...

    def upstream_changes(self, conf: Callable[[], Mapping[str, str]]) -> UpstreamChanges: ...

    def session_conf(self, user: Mapping[str, str], catalog: str | None,
                     warehouse: str | Path | None) -> dict[str, str]: ...  # jars, extensions, catalog

    def catalog_kinds(self, conf: Mapping[str, str], catalog: str) -> set[str]: ...  # the UI's kinds


__all__ = ["DataCommit", "FormatPackage", "Log", "Tables", "UpstreamChanges", "Writer"]
