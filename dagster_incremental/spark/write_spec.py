"""What the table writer is told: the asset's static write settings and one run's batch."""

# These plain dataclasses are the seam between the Dagster side (asset factory, IO manager) and the
# Spark side (table writer, merge strategies): neither imports the other's world to talk.

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dagster_incremental.settings.vocabulary import (
    DEFAULT_STRATEGY,
    Disposition,
    MergeStrategy,
    SortOrder,
    matches_on_primary_key,
)
from dagster_incremental.cursor.vocabulary import RunMode
from dagster_incremental.spark.table_ref import TableRef

# Columns a prepared batch carries for the write and never stores (reserved in user data).
HELPER_PREFIX = "__di_"

TableFormat = Literal["iceberg", "delta"]

STATE_PROPERTY = "dagster_incremental.state"
RUN_ID_PROPERTY = "dagster_incremental.run_id"
SCOPE_PROPERTY = "dagster_incremental.scope"


@dataclass(frozen=True)
class Scd2Options:
    """dlt's scd2 options, with our column defaults."""

    validity_column_names: tuple[str, str] = ("_valid_from", "_valid_to")
    active_record_timestamp: Any = None  # None: NULL valid_to marks the active version
    boundary_timestamp: Any = None  # None: the run's start time
    row_version_column_name: str | None = None  # None: we compute `_row_hash`


@dataclass(frozen=True)
class WriteSpec:
    """How one asset's table is written; static for the asset (decorator < config.toml)."""

    table: TableRef
    disposition: Disposition = "append"
    strategy: MergeStrategy | None = None  # only with disposition == "merge"
    primary_key: tuple[str, ...] = ()
    merge_key: tuple[str, ...] = ()
    hard_delete_column: str | None = None
    dedup_sort: tuple[str, SortOrder] | None = None
    cursor_column: str | None = None  # newest cursor wins in dedup when no dedup_sort
    partition_by: tuple[str, ...] = ()
    scd2: Scd2Options = field(default_factory=Scd2Options)
    table_format: TableFormat = "iceberg"
    table_properties: Mapping[str, str] = field(default_factory=dict)
    delete_missing: bool = False  # upsert of a full extract: rows whose key the batch lacks go

    @property
    def merge_strategy(self) -> MergeStrategy | None:
        """The strategy a merge is made by (dlt's default: delete-insert); None unless merging."""
        if self.disposition != "merge":
            return None
        return self.strategy or DEFAULT_STRATEGY

    @property
    def keyed(self) -> bool:
        """A merge that matches rows by the primary key alone: upsert, insert-only, or
        delete-insert without merge_key (scd2 retires and inserts versions). Its batch is
        deduplicated on the key (in Arrow when local) and its first load is a plain append."""
        strategy = self.merge_strategy
        return strategy is not None and bool(self.primary_key) and matches_on_primary_key(strategy, self.merge_key)

    @property
    def replaces_by_key(self) -> bool:
        """A keyed merge that replaces or deletes the rows of the batch's keys (not insert-only):
        its table is merge-on-read and its counts come from the keys."""
        return self.keyed and self.merge_strategy != "insert-only"

    def replaces_table(self, window: WindowReplace | None) -> bool:
        """A commit of this spec rewrites every row of the table (replace, no partition window):
        its rows_inserted/rows_deleted count every row, changed or not."""
        return self.disposition == "replace" and window is None


@dataclass(frozen=True)
class WindowReplace:
    """Replace exactly the rows of `column` in [start, end) (partitioned runs, backfills); a
    backfill of a cursor with range_start="open" or range_end="closed" replaces (start, ...] as
    its filter keeps."""

    column: str
    start: Any  # a python datetime/date/number literal; never SQL text
    end: Any
    rows_of: tuple[str, Any] | None = None  # (column, value): only these rows, e.g. one tenant's
    start_open: bool = False
    end_closed: bool = False

    @property
    def bounds(self) -> tuple[Any, Any, bool, bool]:
        """(start, end, start_open, end_closed): the arguments of `spark.sql.in_window`."""
        return self.start, self.end, self.start_open, self.end_closed

    def shown(self) -> str:
        """The window as a user reads it: [start, end), or with the cursor's own brackets."""
        return f"{'(' if self.start_open else '['}{self.start}, {self.end}{']' if self.end_closed else ')'}"


@dataclass(frozen=True)
class CommitInfo:
    """What rides along in the table commit, so data and cursor land atomically."""

    state: Mapping[str, Any] | None  # cursor state after the run (None: leave no cursor)
    run_id: str | None = None
    scope: str | None = None  # e.g. a partition key: cursors are per scope


@dataclass(frozen=True)
class WriteResult:
    """What one commit did, read back from the table's snapshot summary."""

    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    row_count: int  # rows in the table after the commit
    snapshot_id: int | None
    schema: tuple[tuple[str, str], ...]  # (column, spark type) of the table after the commit
    delete_files: int = 0  # merge-on-read delete files the table holds (see maintenance)
    data_files: int = 0  # data files the table holds
    position_deletes: int = 0  # rows those delete files remove


@dataclass(frozen=True)
class IncrementalBatch:
    """What an incremental asset hands its IO manager: the kept rows and the cursor to commit.

    The asset body filters and stages; the IO manager writes `data` and `commit` in one table
    commit. `data` is a pyspark DataFrame (None when the run kept no rows and has no schema).
    """

    spec: WriteSpec
    data: Any
    commit: CommitInfo
    mode: RunMode = "incremental"
    window: WindowReplace | None = None  # replace exactly this window (partition runs, backfills)
    full_refresh: bool = False
    run_started_at: Any = None  # datetime; scd2's default boundary
    # Stale-writer check: the snapshot that held this scope's cursor when the run read it
    # (None: no cursor was committed yet). The IO manager refuses to commit if another run
    # committed a cursor for the scope in between.
    check_stale: bool = False
    expected_snapshot_id: int | None = None
    # `data` is already one row per primary key (deduplicated in Arrow by spark/local/dedup.py).
    deduplicated: bool = False
    column_descriptions: Mapping[str, str] = field(default_factory=dict)  # for the column schema


_SAMPLE_CHARS = 500  # of the row's key quoted in an error


def null_key_message(table: TableRef, nulls: int, role: str, column: str, sample: str) -> str:
    """The NULL-key error, the same whether Spark or Arrow (spark/local/dedup.py) found it.
    `sample` names one such row by its key columns (and position), never its other values."""
    return (
        f"{table}: {nulls} row(s) have NULL in {role} column {column!r}, e.g. {sample[:_SAMPLE_CHARS]}. "
        "Key columns must be non-NULL (a NULL key never matches, so the row could not "
        "replace or delete its old version); fill or filter those rows before yielding."
    )
