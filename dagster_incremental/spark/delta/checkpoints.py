"""A Delta log's checkpoints: the table's state at a version in Parquet, which stands in for the
commit files the log has cleaned (log.py reads the commit files and asks here for the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Checkpoints:
    """The checkpoint files among a log folder's `names` (read on `fs`, pyarrow's)."""

    def __init__(self, fs: Any, folder: str, names: Callable[[], list[str]]) -> None:
        self.fs, self.folder, self._names = fs, folder, names

    def paths(self, ending: str = ".checkpoint.parquet") -> list[str]:
        """The checkpoint files whose names end in `ending`, oldest first, as paths (the default:
        single-file checkpoints; ".parquet": multi-part ones too)."""
        return sorted(f"{self.folder}/{n}" for n in self._names()
                      if ".checkpoint" in n and n.endswith(ending) and n[:20].isdigit())

    def app_version(self, app_id: str, oldest: int | None) -> int | None:
        """`app_id`'s idempotent-write version in the newest checkpoint at or before the oldest
        commit file still in the log (older commit files are cleaned; a checkpoint holds their state)."""
        import pyarrow.parquet as pq

        found = [p for p in self.paths(".parquet") if oldest is None or version_of(p) <= oldest]
        if not found:
            return None
        newest = version_of(found[-1])
        rows = pq.ParquetDataset([p for p in found if version_of(p) == newest],
                                 filesystem=self.fs).read(columns=["txn"])
        versions = [t["version"] for t in rows.column("txn").to_pylist() if t and t.get("appId") == app_id]
        return int(versions[0]) if versions else None

    def live_files(self, version: int) -> tuple[dict[str, dict[str, Any]], int]:
        """({file: add action} of the newest single-file checkpoint at or before `version`, the
        first version after it); ({}, 0) without one."""
        import pyarrow.parquet as pq

        found = [p for p in self.paths() if version_of(p) <= version]
        if not found:
            return {}, 0
        adds = pq.read_table(found[-1], columns=["add"], filesystem=self.fs).column("add").to_pylist()
        return {a["path"]: a for a in adds if a}, version_of(found[-1]) + 1

    def table_id(self) -> str | None:
        """The table's metaData id in the newest single-file checkpoint (None: no checkpoint)."""
        import pyarrow.parquet as pq

        found = self.paths()
        if not found:
            return None
        read = pq.read_table(found[-1], columns=["metaData"], filesystem=self.fs)
        metadata = [m for m in read.column("metaData").to_pylist() if m]
        return str(metadata[0]["id"]) if metadata else None


def version_of(path: str) -> int:
    """The version a log file's name starts with (twenty digits)."""
    return int(path.rsplit("/", 1)[-1][:20])
