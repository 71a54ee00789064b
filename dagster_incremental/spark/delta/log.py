"""A Delta table's commit log read without a JVM: its versions, each commit's information
(operation, metrics, the `userMetadata` that carries the cursor) and the cursor in force.

Why here and not through Spark: a run that has nothing to write asks only for the cursor, and
the log is plain JSON files (`_delta_log/<version>.json`), one per commit, in a local folder or
on S3 (storage.py)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from dagster_incremental.spark.delta.checkpoints import Checkpoints
from dagster_incremental.spark.delta.storage import filesystem_and_path
from dagster_incremental.spark.committed_state import CommittedState, cursor_of

_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True)
class Commit:
    """One version's commit information."""

    version: int
    operation: str
    timestamp_ms: int
    properties: dict[str, str]  # the library's commit properties (its `userMetadata`), or {}
    parameters: dict[str, Any]
    metrics: dict[str, str]

    def count(self, *names: str) -> int:
        """The sum of the operation metrics `names` (absent: 0)."""
        return sum(int(self.metrics.get(name, 0) or 0) for name in names)


class DeltaLog:
    """The commit log of the Delta table at `location` (a folder, or a prefix on S3)."""

    def __init__(self, location: str) -> None:
        self.fs, table = filesystem_and_path(str(location))
        self.folder = f"{table.rstrip('/')}/_delta_log"
        self.checkpoints = Checkpoints(self.fs, self.folder, self._names)

    def _names(self) -> list[str]:
        """The names of the log's files ([]: no log)."""
        from pyarrow import fs

        found = self.fs.get_file_info(fs.FileSelector(self.folder, allow_not_found=True))
        return [f.base_name for f in found if f.type == fs.FileType.File]

    def versions(self) -> list[int]:
        """The versions whose commit file is still in the log, oldest first ([]: no table)."""
        found = (_COMMIT_FILE.match(name) for name in self._names())
        return sorted(int(m.group(1)) for m in found if m)

    def current_version(self) -> int | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def has_commit_within(self, seconds: float) -> bool:
        """Whether the table has a commit now, or gets one within `seconds` (another creator's:
        Spark calls a path taken as soon as that creator's data files are in it, before its commit)."""
        deadline = time.monotonic() + seconds
        while self.current_version() is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def commit(self, version: int) -> Commit | None:
        """The commit information of `version` (None: its file is gone)."""
        actions = self.actions(version)
        if actions is None:
            return None
        return _commit(version, next((a["commitInfo"] for a in actions if "commitInfo" in a), {}))

    def app_version(self, app_id: str) -> int | None:
        """The newest idempotent-write version the table recorded for `app_id` (None: none):
        from the newest commit file that has one, else from the newest checkpoint."""
        versions = self.versions()
        for version in reversed(versions):
            for action in self.actions(version) or ():
                txn = action.get("txn")
                if txn is not None and txn.get("appId") == app_id:
                    return int(txn["version"])
        return self.checkpoints.app_version(app_id, versions[0] if versions else None)

    def row_count(self, version: int) -> int | None:
        """Live rows at `version`, from the files' own statistics (Delta records each data file's
        row count when it adds it). None when a live file has no row count (then only a scan
        can tell), or the log no longer reaches `version`."""
        live = self.live_files(version)
        counts = [_live_rows(add) for add in live.values()] if live is not None else [None]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def live_files(self, version: int) -> dict[str, dict[str, Any]] | None:
        """{path: add action} of the data files live at `version`: the newest checkpoint at or
        before it, then the commits after (None: a commit file was cleaned without a checkpoint
        covering it)."""
        live, start = self.checkpoints.live_files(version)
        for v in range(start, version + 1):
            actions = self.actions(v)
            if actions is None:
                return None
            for action in actions:
                if "add" in action:
                    live[action["add"]["path"]] = action["add"]
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
        return live

    def table_id(self) -> str | None:
        """The table's identity (its metaData id, new when the table is created again at the
        same place), from the first commit still in the log or the newest checkpoint."""
        for version in self.versions():
            found = next((a["metaData"].get("id") for a in self.actions(version) or () if "metaData" in a), None)
            if found is not None:
                return str(found)
        return self.checkpoints.table_id()

    def schema(self, version: int) -> tuple[tuple[str, str], ...] | None:
        """(column, Spark type) of the table at `version`, from its newest metaData action (None:
        only in a checkpoint, which Spark reads)."""
        from pyspark.sql.types import StructType  # the type classes only: no JVM

        found = newest_metadata(self, version)
        if found is None:
            return None
        fields = StructType.fromJson(json.loads(found["schemaString"])).fields
        return tuple((f.name, f.dataType.simpleString()) for f in fields)

    def configuration(self, version: int) -> dict[str, str] | None:
        """The table's properties at `version` (its newest metaData action's configuration);
        None when only a checkpoint holds it or the log no longer reaches it."""
        found = newest_metadata(self, version)
        if found is None:
            return None
        return {str(k): str(v) for k, v in (found.get("configuration") or {}).items()}

    def actions(self, version: int) -> list[dict[str, Any]] | None:
        try:
            with self.fs.open_input_stream(f"{self.folder}/{version:020d}.json") as stream:
                text = stream.read().decode()
        except FileNotFoundError:
            return None
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def committed_cursor(self, scope: str | None) -> CommittedState | None:
        """The newest cursor (of `scope`) in the table's current history: newest commit first;
        a RESTORE continues at the version it restored, so a rolled-back cursor no longer counts."""
        versions = self.versions()
        version = versions[-1] if versions else None
        while version is not None and version >= 0:
            commit = self.commit(version)
            if commit is None:
                return None  # older commits were cleaned from the log
            found = cursor_of(commit.properties, commit.version, commit.timestamp_ms, scope)
            if found is not None:
                return found
            if commit.operation == "RESTORE" and "version" in commit.parameters:
                version = int(commit.parameters["version"])
                continue
            version -= 1
        return None

    def commits_since(self, version: int | None) -> list[Commit]:
        """The commits after `version` (all when None), oldest first."""
        return [c for v in self.versions() if version is None or v > version if (c := self.commit(v)) is not None]


def newest_metadata(log: DeltaLog, version: int) -> dict[str, Any] | None:
    """The newest metaData action at or before `version` (None: only a checkpoint holds it, or
    the log no longer reaches it): the table's schema and properties as they stood then."""
    for v in range(version, -1, -1):
        actions = log.actions(v)
        if actions is None:
            return None
        found = next((a["metaData"] for a in actions if "metaData" in a), None)
        if found is not None:
            return dict(found)
    return None


def _commit(version: int, info: dict[str, Any]) -> Commit:
    parameters = info.get("operationParameters") or {}
    return Commit(
        version=version,
        operation=str(info.get("operation", "")),
        timestamp_ms=int(info.get("timestamp", 0) or 0),
        properties=_properties(info.get("userMetadata")),
        parameters={k: _json_or_text(v) for k, v in parameters.items()},
        metrics={k: str(v) for k, v in (info.get("operationMetrics") or {}).items()},
    )


def file_rows(entry: dict[str, Any]) -> int | None:
    """The rows a data file's add or remove action records in its statistics (None: none)."""
    stats = entry.get("stats")
    rows = json.loads(stats).get("numRecords") if isinstance(stats, str) and stats else None
    return int(rows) if rows is not None else None


def _live_rows(add: dict[str, Any]) -> int | None:
    """A data file's live rows: its recorded count less its deletion vector's (None: no count)."""
    rows = file_rows(add)
    if rows is None:
        return None
    vector = add.get("deletionVector") or {}
    return rows - int(vector.get("cardinality") or 0)


def _properties(user_metadata: Any) -> dict[str, str]:
    """The library's commit properties from a commit's `userMetadata` ({} when it is someone
    else's text)."""
    if not isinstance(user_metadata, str):
        return {}
    try:
        found = json.loads(user_metadata)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _json_or_text(value: Any) -> Any:
    """Delta writes operation parameters as JSON text ("3", "[\"id\"]")."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
