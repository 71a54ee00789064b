"""The "upstream snapshot" cursor: which changes of an upstream table a downstream run reads.

A downstream asset's cursor is the upstream snapshot it has read up to. The next run reads the
changes between that snapshot and the upstream's current one. Which read that takes is decided
here from the upstream's snapshot history alone (no Spark): nothing new, the whole table (first
run, full refresh), appended files only (every commit since was an append or a compaction), or
the general change read (any commit may have updated or deleted rows). A cursor that is not an
ancestor of the current snapshot means the upstream was rewritten: the changes since it cannot
be known, so the plan refuses rather than skip them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from dagster_incremental.errors import UpstreamRewritten

ReadKind = Literal["none", "full", "append", "changes"]
# Iceberg operations whose commits only add rows ("replace" rewrites files, rows unchanged).
_APPEND_ONLY = frozenset({"append", "replace"})


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of the upstream's history, as Iceberg's `snapshots` table lists it."""

    snapshot_id: int
    parent_id: int | None
    operation: str


@dataclass(frozen=True)
class UpstreamRead:
    """What a run reads of one upstream: `kind`, from `start` (exclusive) to `end` (inclusive);
    `commits` is the snapshots in between, oldest first, and `operations` their Iceberg operations;
    `table_id` the upstream's identity where its snapshot ids do not tell it (Delta's versions)."""

    kind: ReadKind
    start: int | None
    end: int | None
    commits: tuple[int, ...] = ()
    operations: tuple[str, ...] = ()
    table_id: str | None = None


def plan_read(table: str, history: Sequence[Snapshot], current: int | None, cursor: int | None) -> UpstreamRead:
    """The read from the `cursor` snapshot (None: never read) to the `current` one."""
    if current is None:
        return UpstreamRead("none", cursor, None)
    if cursor is None:
        return UpstreamRead("full", None, current)
    if cursor == current:
        return UpstreamRead("none", cursor, current)
    between = _commits_after(history, current, cursor)
    if between is None:
        raise UpstreamRewritten(
            f"upstream table {table} no longer has snapshot {cursor} (the one this asset read up to) in the "
            "history of its current snapshot: it was replaced (a full refresh), rolled back, or the snapshot "
            "was expired. The changes since can't be read; nothing was written. Run a full refresh of this "
            "asset to recompute it from the whole upstream table.",
            upstream=table, snapshot_id=cursor,
        )
    return _read_of(cursor, [snap.snapshot_id for snap in between], [snap.operation for snap in between])


def cut_read(read: UpstreamRead, commits_per_slice: int | None) -> list[UpstreamRead]:
    """`read` as consecutive reads of at most `commits_per_slice` commits each, oldest first:
    each starts where the one before ended, so committing each with its end as the cursor
    passes through the states one read would reach. A full read (one snapshot) stays whole."""
    if commits_per_slice is None or read.kind not in ("append", "changes") or len(read.commits) <= commits_per_slice:
        return [read]
    out, start = [], read.start
    for first in range(0, len(read.commits), commits_per_slice):
        part = slice(first, first + commits_per_slice)
        out.append(replace(_read_of(start, read.commits[part], read.operations[part]), table_id=read.table_id))
        start = out[-1].end
    return out


def _read_of(start: int | None, commits: Sequence[int], operations: Sequence[str]) -> UpstreamRead:
    """The read of `commits` (oldest first) after `start`: appends only, or general changes."""
    kind: ReadKind = "append" if set(operations) <= _APPEND_ONLY else "changes"
    return UpstreamRead(kind, start, commits[-1], tuple(commits), tuple(operations))


def _commits_after(history: Sequence[Snapshot], current: int, cursor: int) -> list[Snapshot] | None:
    """The snapshots after `cursor` up to `current`, oldest first; None when `cursor` is not an
    ancestor of `current` (or an ancestor between them was expired)."""
    by_id: Mapping[int, Snapshot] = {snap.snapshot_id: snap for snap in history}
    chain: list[Snapshot] = []
    snapshot_id: int | None = current
    while snapshot_id is not None and snapshot_id in by_id and len(chain) <= len(by_id):
        if snapshot_id == cursor:
            return chain[::-1]
        chain.append(by_id[snapshot_id])
        snapshot_id = by_id[snapshot_id].parent_id
    return None


# -- what the asset function receives -------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamOf:
    """`orders: Changes = changes_of("shop/orders")`: the upstream asset a `Changes` parameter
    reads, when its name is not the parameter's."""

    asset: tuple[str, ...]


def changes_of(asset: str | Sequence[str]) -> UpstreamOf:
    """Name the upstream asset of a `Changes` parameter: "orders", "shop/orders" or a key path."""
    path = tuple(asset.split("/")) if isinstance(asset, str) else tuple(asset)
    if not path or not all(isinstance(p, str) and p for p in path):
        raise ValueError(f"changes_of({asset!r}): give an asset key such as 'orders' or 'shop/orders'")
    return UpstreamOf(path)


@dataclass(frozen=True)
class Changes:
    """What an upstream table changed since this asset last read it (annotate a parameter with it).

    `df`: a Spark DataFrame of the upstream's columns plus `_change_type`, "INSERT" (a new row or
    the new version of an updated one) or "DELETE" (a row gone, or the old version of an updated
    one). `table`: the whole upstream as of the snapshot read up to, for what needs more than
    the changed rows (an aggregate recomputes the groups the changes touch). `kind`: "full" (first run or full refresh: every row, all INSERT), "append" (only
    appended rows), "changes" (inserts and deletes) or "none" (nothing new).
    """

    upstream: str  # the upstream table's name
    kind: ReadKind
    start_snapshot_id: int | None  # exclusive: what the previous run read up to
    end_snapshot_id: int | None  # inclusive: this run's cursor
    df: Any = None
    table: Any = None  # the whole upstream table as of end_snapshot_id (a lazy DataFrame)
    table_id: str | None = None  # the upstream's identity where snapshot ids do not tell it (Delta)

    def upserts(self) -> Any:
        """The INSERT rows (new rows and new versions), without `_change_type`."""
        from pyspark.sql import functions as F

        return self.df.where(F.col("_change_type") == "INSERT").drop("_change_type")

    def deletes(self, key: str | Sequence[str]) -> Any:
        """The DELETE rows whose key has no INSERT: rows the upstream removed for good."""
        from pyspark.sql import functions as F

        keys = [key] if isinstance(key, str) else list(key)
        gone = self.df.where(F.col("_change_type") == "DELETE").drop("_change_type")
        return gone.join(self.upserts().select(*keys), keys, "left_anti")
