"""A table's snapshots as a run's commit and its figures read them: from Iceberg's Table object in
the Spark driver of this process (classic mode, over py4j: no Spark job), or from the table's
catalog by pyiceberg (over Spark Connect, where this process has no driver and no JVM).

Why one view for both: the commit's compare-and-set and the figures read back from its snapshot
ask the same questions (the head of `main`, a snapshot's parent and summary, the snapshot a
commit id made); only where the answers come from differs."""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dagster_incremental.spark.iceberg.metadata import LineageEntry, TableMetadata
from dagster_incremental.spark.run_commit import COMMIT_ID_PROPERTY


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot: what `<table>.snapshots` shows of it."""

    snapshot_id: int
    parent_id: int | None
    operation: str
    summary: dict[str, str]
    committed_at: datetime

    def lineage_entry(self) -> LineageEntry:
        return LineageEntry(self.operation, self.summary, self.parent_id is None)


class Snapshots(ABC):
    """One table's snapshots, read afresh by `refresh` (another process may have committed)."""

    @abstractmethod
    def refresh(self) -> None: ...

    @abstractmethod
    def current(self) -> SnapshotInfo | None:
        """`main`'s head (None: a table without snapshots)."""

    @abstractmethod
    def get(self, snapshot_id: int) -> SnapshotInfo | None: ...

    def lineage(self, snapshot_id: int | None) -> Iterator[SnapshotInfo]:
        """`snapshot_id` and its parents, newest first, read lazily."""
        while snapshot_id is not None:
            snapshot = self.get(snapshot_id)
            if snapshot is None:
                return
            yield snapshot
            snapshot_id = snapshot.parent_id

    def find(self, commit_id: str) -> SnapshotInfo | None:
        """The snapshot of `main`'s lineage whose summary carries `commit_id` (refreshed first: the
        commit was just made, so it is at or near the head)."""
        self.refresh()
        head = self.current()
        for snapshot in self.lineage(head.snapshot_id if head is not None else None):
            if snapshot.summary.get(COMMIT_ID_PROPERTY) == commit_id:
                return snapshot
        return None


class JavaSnapshots(Snapshots):
    """Through the org.apache.iceberg.Table object Spark's catalog holds (py4j calls only)."""

    def __init__(self, jvm: Any, table: Any) -> None:
        self.jvm, self.table = jvm, table

    def refresh(self) -> None:
        self.table.refresh()

    def current(self) -> SnapshotInfo | None:
        return self._info(self.table.currentSnapshot())

    def get(self, snapshot_id: int) -> SnapshotInfo | None:
        return self._info(self.table.snapshot(snapshot_id))

    def _info(self, snapshot: Any) -> SnapshotInfo | None:
        if snapshot is None:
            return None
        return SnapshotInfo(snapshot_id=snapshot.snapshotId(), parent_id=snapshot.parentId(),
                            operation=str(snapshot.operation()), summary=java_json(self.jvm, snapshot.summary()),
                            committed_at=_utc(snapshot.timestampMillis()))


class CatalogSnapshots(Snapshots):
    """Through the table's catalog, loaded by pyiceberg in this process (`load`: None when the
    table is not there)."""

    def __init__(self, load: Callable[[], tuple[Any, TableMetadata] | None]) -> None:
        self._load = load
        self.table: Any = None
        self.metadata: TableMetadata | None = None
        self.refresh()

    def refresh(self) -> None:
        loaded = self._load()
        self.table, self.metadata = loaded if loaded is not None else (None, None)

    def current(self) -> SnapshotInfo | None:
        current = self.metadata.current_snapshot_id() if self.metadata is not None else None
        return self.get(current) if current is not None else None

    def get(self, snapshot_id: int) -> SnapshotInfo | None:
        raw = self.metadata.snapshots().get(snapshot_id) if self.metadata is not None else None
        if raw is None:
            return None
        summary = dict(raw.get("summary") or {})
        operation = str(summary.pop("operation", ""))
        return SnapshotInfo(snapshot_id=raw["snapshot-id"], parent_id=raw.get("parent-snapshot-id"),
                            operation=operation, summary={k: str(v) for k, v in summary.items()},
                            committed_at=_utc(raw["timestamp-ms"]))

    def last_sequence_number(self) -> int:
        """The catalog's newest, advanced by every snapshot on any branch: whether another writer
        committed since (spark/iceberg/commit.py's moved check)."""
        self.refresh()
        return int(self.metadata.raw.get("last-sequence-number", 0)) if self.metadata is not None else 0


def java_json(jvm: Any, value: Any) -> Any:
    """A Java map or collection of strings (a snapshot summary, table properties, ref names) as
    a dict or list, in one py4j call once the JVM's JSON mapper is known. (`dict(value)` costs
    two calls per entry, and pyspark converts the exception that ends every py4j iteration with
    a dozen more: ~60 round trips for one snapshot summary.)"""
    mapper = _once(jvm, "JsonUtil.mapper()", lambda: java_class(jvm, "org.apache.iceberg.util.JsonUtil").mapper())
    return json.loads(str(mapper.writeValueAsString(value)))


def java_class(jvm: Any, name: str) -> Any:
    """The Java class `name` (e.g. "org.apache.iceberg.spark.Spark3Util"), looked up once per
    view of a JVM: each dotted step of `jvm.org.apache...` is a py4j round trip."""
    return _once(jvm, name, lambda: functools.reduce(getattr, name.split("."), jvm))


# What _once looked up, by (id of the JVM view, what), kept with the view so that its id is never
# another view's.
_LOOKED_UP: dict[tuple[int, str], tuple[Any, Any]] = {}


def _once(jvm: Any, what: str, look_up: Callable[[], Any]) -> Any:
    found = _LOOKED_UP.get((id(jvm), what))
    if found is None:
        found = _LOOKED_UP[(id(jvm), what)] = (jvm, look_up())
    return found[1]


def _utc(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
