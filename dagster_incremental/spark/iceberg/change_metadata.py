"""What an upstream Iceberg table's metadata says about its commits, for a `Changes` read
(spark/iceberg/changes.py): its snapshots and their summaries, the files each commit added or
removed, and the rows its position-delete files delete. No Spark job reads any of it.

Why two sources: in classic mode the Spark driver of this process holds the table's Java
object (py4j); over Spark Connect this process has no driver, so pyiceberg reads the same
metadata from the table's catalog (the JDBC or REST catalog the server writes through).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster_incremental.cursor.upstream import Snapshot
from dagster_incremental.spark.iceberg.snapshots import CatalogSnapshots, JavaSnapshots, Snapshots

POSITION_DELETES = "position_deletes"
POSITIONS = ["file_path", "pos"]  # a position-delete file's columns: the data file and the row's position


@dataclass(frozen=True)
class CommitFiles:
    """The files one commit added and removed (their locations), and its delete files'
    (location, file format, content: "position_deletes" or "equality_deletes")."""

    added: list[str]
    removed: list[str]
    deletes: list[tuple[str, str, str]]


class ChangeMetadata(ABC):
    """One upstream table's metadata, as loaded when this object was made; `snapshots` answers
    for one snapshot (its summary, parent and commit time: snapshots.py, as a commit's figures
    read them)."""

    snapshots: Snapshots

    @abstractmethod
    def history(self) -> tuple[list[Snapshot], int | None]:
        """Every snapshot, and the current one (None: no commit yet)."""

    @abstractmethod
    def commit_files(self, snapshot_id: int) -> CommitFiles:
        """What the commit that made `snapshot_id` added and removed, from its own manifests."""

    @abstractmethod
    def positions(self, delete_files: Sequence[str]) -> Any | None:
        """The (file_path, pos) of `delete_files` (Parquet) as an Arrow table, read by this
        process; None where it cannot reach them (Spark's reader then reads them)."""


class JavaChangeMetadata(ChangeMetadata):
    """Through the org.apache.iceberg.Table of the session's catalog (py4j calls only)."""

    def __init__(self, spark: Any, table: Any) -> None:
        self.jvm, self.table = spark._jvm, table
        table.refresh()  # another process may have committed since this session cached it
        self.snapshots = JavaSnapshots(self.jvm, table)

    def history(self) -> tuple[list[Snapshot], int | None]:
        history = [Snapshot(s.snapshotId(), s.parentId(), s.operation()) for s in self._list(self.table.snapshots())]
        current = self.table.currentSnapshot()
        return history, current.snapshotId() if current is not None else None

    def commit_files(self, snapshot_id: int) -> CommitFiles:
        snapshot, io = self.table.snapshot(int(snapshot_id)), self.table.io()
        return CommitFiles(
            added=[f.location() for f in self._list(snapshot.addedDataFiles(io))],
            removed=[f.location() for f in self._list(snapshot.removedDataFiles(io))],
            deletes=[(f.location(), f.format().name().lower(), f.content().name().lower())
                     for f in self._list(snapshot.addedDeleteFiles(io))],
        )

    def _list(self, iterable: Any) -> list:
        """A Java Iterable's items, copied into a java.util.List and taken by index: py4j's own
        iteration ends in a Java exception that PySpark converts in about 70 round trips (20-55 ms
        a list)."""
        lists = self.jvm.org.apache.iceberg.relocated.com.google.common.collect.Lists
        items = self.jvm.java.util.ArrayList(lists.newArrayList(iterable))
        return [items.get(i) for i in range(items.size())]

    def positions(self, delete_files: Sequence[str]) -> Any | None:
        """Through the table's own storage where this process reaches it (a local folder, or S3
        as the table's S3FileIO reaches it); else None (HDFS, S3A: Spark's reader reaches those)."""
        from dagster_incremental.spark.iceberg.storage import TableStorage

        storage = TableStorage.of_table(self.jvm, self.table)
        if storage is None:
            return None
        import pyarrow as pa
        import pyarrow.parquet as pq

        return pa.concat_tables(pq.read_table(storage.path(path), filesystem=storage.filesystem, columns=POSITIONS)
                                for path in delete_files)


class CatalogChangeMetadata(ChangeMetadata):
    """Through pyiceberg's table, loaded from the catalog (`metadata`: its TableMetadata)."""

    def __init__(self, table: Any, metadata: Any) -> None:
        self.table, self.metadata = table, metadata
        self.snapshots = CatalogSnapshots(lambda: (table, metadata))

    def history(self) -> tuple[list[Snapshot], int | None]:
        found = (self.snapshots.get(snapshot_id) for snapshot_id in self.metadata.snapshots())
        history = [Snapshot(s.snapshot_id, s.parent_id, s.operation) for s in found if s is not None]
        return history, self.metadata.current_snapshot_id()

    def commit_files(self, snapshot_id: int) -> CommitFiles:
        from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

        added, removed, deletes = [], [], []
        for manifest in self.table.snapshot_by_id(int(snapshot_id)).manifests(self.table.io):
            if manifest.added_snapshot_id != int(snapshot_id):
                continue  # carried over from an earlier commit
            for entry in manifest.fetch_manifest_entry(self.table.io, discard_deleted=False):
                data = entry.data_file
                if data.content != DataFileContent.DATA:
                    if entry.status == ManifestEntryStatus.ADDED:
                        deletes.append((data.file_path, data.file_format.name.lower(), data.content.name.lower()))
                elif entry.status == ManifestEntryStatus.ADDED:
                    added.append(data.file_path)
                elif entry.status == ManifestEntryStatus.DELETED:
                    removed.append(data.file_path)
        return CommitFiles(added, removed, deletes)

    def positions(self, delete_files: Sequence[str]) -> Any | None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        return pa.concat_tables(pq.read_table(self.table.io.new_input(path).open(), columns=POSITIONS)
                                for path in delete_files)
