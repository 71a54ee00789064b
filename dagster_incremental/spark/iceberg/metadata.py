"""Read an Iceberg table's current metadata straight from a local Hadoop-catalog warehouse."""

# Why: a run whose source returns nothing only needs the committed cursor, the current snapshot's
# summary and the table schema. Asking Spark for them means starting a JVM (~10 s in a fresh
# process); a Hadoop catalog keeps all three in one JSON file on disk, which takes milliseconds
# to parse. This module is pure Python (stdlib json/gzip): importing it loads neither pyspark nor
# a JVM.
#
# It answers only when it can be sure: a conf it does not fully understand, a table it cannot
# read consistently (a concurrent writer, a damaged file, a type Spark would not map) gives None,
# and the caller falls back to Spark. A None from the module-level helpers therefore means
# "no table, or not readable here: ask Spark"; `read_metadata` plus the `TableMetadata` methods
# give definitive answers (no cursor, no snapshot) once a metadata file was read.
#
# Resolution follows Iceberg's HadoopTableOperations: `metadata/version-hint.text` names a
# version N (when it is missing or unreadable, the highest `v<N>.metadata.json` present), then
# newer versions that exist win (N+1, N+2, ...). Each version may be stored as
# `v<N>.metadata.json`, `v<N>.gz.metadata.json` or the old `v<N>.metadata.json.gz`, looked up in
# that order. A commit renames a complete file into place, so a version file is either absent or
# whole; a file that vanishes or fails to parse while we read it means the table is changing under
# us: we retry a few times, then give up with None.

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from dagster_incremental.spark.committed_state import CommittedState, cursor_of

VERSION_HINT = "version-hint.text"
# A version's file names in Iceberg's lookup order: plain, gzip, legacy gzip.
_SUFFIXES = (".metadata.json", ".gz.metadata.json", ".metadata.json.gz")
_VERSION_FILE = re.compile(r"v([^.]*)\..*")  # HadoopTableOperations.VERSION_PATTERN
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]")
_ATTEMPTS = 3

# Iceberg primitive -> Spark simpleString, as Iceberg's TypeToSparkType maps them
# (uuid is read as string, fixed as binary; `time` and nanosecond timestamps have no Spark type).
_PRIMITIVES = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "string": "string",
    "uuid": "string",
    "binary": "binary",
}


class _Changing(Exception):
    """The metadata changed while we read it (a file vanished or was not whole): try again."""


# -- which metadata file is current --------------------------------------------------------------


def read_metadata(table_dir: str | os.PathLike[str]) -> TableMetadata | None:
    """The table's current metadata, or None: no table there, or not readable consistently.

    Retries when a concurrent commit makes a file vanish or look damaged mid-read; after a few
    attempts it gives up (None) rather than risk returning an older or wrong version.
    """
    metadata_dir = Path(table_dir) / "metadata"
    for _ in range(_ATTEMPTS):
        try:
            found = _current_file(metadata_dir)
            if found is None:
                return None
            version, path = found
            return TableMetadata(version=version, path=path, raw=_load_json(path))
        except _Changing:
            continue
    return None


def _current_file(metadata_dir: Path) -> tuple[int, Path] | None:
    """(version, file) of the current metadata as HadoopTableOperations.refresh picks it;
    None when the table does not exist. A hint naming a missing version is a table we can't
    trust right now: _Changing (Iceberg itself fails that read)."""
    version = _hinted_version(metadata_dir)
    if version is None:
        version = _highest_listed_version(metadata_dir)
    path = _version_file(metadata_dir, version)
    if path is None:
        if version == 0:
            return None  # no v0 (or nothing at all): the table does not exist
        raise _Changing(f"metadata version {version} is missing")
    while (newer := _version_file(metadata_dir, version + 1)) is not None:
        version, path = version + 1, newer
    return version, path


def _hinted_version(metadata_dir: Path) -> int | None:
    """The version in version-hint.text (first line, an integer), None when absent or unusable."""
    try:
        text = (metadata_dir / VERSION_HINT).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    if not lines or not _INTEGER.fullmatch(lines[0]):
        return None
    return int(lines[0])


def _highest_listed_version(metadata_dir: Path) -> int:
    """Iceberg's recovery when the hint is missing (a commit deletes it while it runs): the
    highest version whose metadata file exists; 0 when there is none."""
    try:
        names = os.listdir(metadata_dir)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise _Changing(str(exc)) from exc
    highest = 0
    for name in names:
        match = _VERSION_FILE.fullmatch(name)
        if match is None or not _INTEGER.fullmatch(match.group(1)):
            continue
        version = int(match.group(1))
        if version > highest and _version_file(metadata_dir, version) is not None:
            highest = version
    return highest


def _version_file(metadata_dir: Path, version: int) -> Path | None:
    """The file holding `version`, in Iceberg's codec lookup order."""
    for suffix in _SUFFIXES:
        path = metadata_dir / f"v{version}{suffix}"
        if path.is_file():
            return path
    return None


def _load_json(path: Path) -> dict[str, Any]:
    """Parse one metadata file (gzip by name, as Iceberg decides). Vanished or not parseable:
    _Changing, so the caller re-resolves the current version."""
    try:
        if path.name.endswith(".gz.metadata.json") or path.name.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            data = path.read_bytes()
        raw = json.loads(data)
    except (OSError, EOFError, zlib.error, ValueError) as exc:  # JSON/Unicode errors are ValueErrors
        raise _Changing(f"{path.name}: {exc}") from exc
    if not isinstance(raw, dict):
        raise _Changing(f"{path.name}: not a JSON object")
    return raw


# -- what the metadata says ----------------------------------------------------------------------


@dataclass(frozen=True)
class TableMetadata:
    """One parsed metadata version. Its answers are definitive for that version: read once and
    ask several questions to get a consistent picture (cursor, summary and schema together)."""

    version: int
    path: Path
    raw: Mapping[str, Any]

    def current_snapshot_id(self) -> int | None:
        """`current-snapshot-id` (-1/absent: no snapshot), else the `main` branch ref."""
        current = self.raw.get("current-snapshot-id")
        if isinstance(current, int) and current != -1:
            return current
        main = (self.raw.get("refs") or {}).get("main") or {}
        ref = main.get("snapshot-id")
        return ref if isinstance(ref, int) and ref != -1 else None

    def snapshots(self) -> dict[int, Mapping[str, Any]]:
        return {s["snapshot-id"]: s for s in self.raw.get("snapshots") or () if "snapshot-id" in s}

    def lineage(self) -> Iterator[Mapping[str, Any]]:
        """The current snapshot, then its parents, newest first (a rolled-back history or an
        expired parent is not in it). Stops on a cycle rather than looping."""
        by_id = self.snapshots()
        seen: set[int] = set()
        snapshot_id = self.current_snapshot_id()
        while snapshot_id is not None and snapshot_id in by_id and snapshot_id not in seen:
            seen.add(snapshot_id)
            snapshot = by_id[snapshot_id]
            yield snapshot
            snapshot_id = snapshot.get("parent-snapshot-id")

    def row_count(self) -> int | None:
        """Live rows of the current snapshot when its lineage's summaries prove them (see
        provable_row_count), else None: count with Spark."""
        return provable_row_count(
            LineageEntry(
                (s.get("summary") or {}).get("operation", ""), _summary(s), s.get("parent-snapshot-id") is None
            )
            for s in self.lineage()
        )

    def commits_since(self, snapshot_id: int | None) -> list[tuple[str, dict[str, str]]] | None:
        """(operation, summary) of each commit after `snapshot_id` (None: every commit since the
        table was created), newest first; None when that snapshot is not an ancestor of the
        current one (rolled back, expired, replaced) or the history is cut (expired parents)."""
        commits: list[tuple[str, dict[str, str]]] = []
        for snapshot in self.lineage():
            if snapshot["snapshot-id"] == snapshot_id:
                return commits
            commits.append(((snapshot.get("summary") or {}).get("operation", ""), _summary(snapshot)))
            if snapshot_id is None and snapshot.get("parent-snapshot-id") is None:
                return commits
        return None

    def committed_cursor(self, scope: str | None = None) -> CommittedState | None:
        """What commit._walk_lineage returns: the newest snapshot of the lineage carrying a
        cursor (of `scope`, when given); None: no such commit."""
        for snapshot in self.lineage():
            fields = cursor_of(_summary(snapshot), snapshot["snapshot-id"], snapshot["timestamp-ms"], scope)
            if fields is not None:
                return fields
        return None

    def current_summary(self) -> tuple[int | None, dict[str, str]]:
        """(current snapshot id, its summary as Snapshot.summary() has it: without `operation`);
        (None, {}) for a table without snapshots."""
        snapshot_id = self.current_snapshot_id()
        snapshot = self.snapshots().get(snapshot_id) if snapshot_id is not None else None
        if snapshot is None:
            return None, {}
        return snapshot_id, _summary(snapshot)

    def schema(self) -> Mapping[str, Any] | None:
        """The current schema's JSON (format v2 `schemas` + `current-schema-id`, v1 `schema`)."""
        schemas = self.raw.get("schemas")
        if schemas:
            wanted = self.raw.get("current-schema-id")
            return next((s for s in schemas if s.get("schema-id") == wanted), None)
        return self.raw.get("schema")

    def spark_schema(self) -> tuple[tuple[str, str], ...] | None:
        """((column, Spark simpleString type), ...) as `spark.table(t).schema` reports it;
        None when a type has no Spark mapping we are sure of."""
        schema = self.schema()
        if schema is None:
            return None
        try:
            return tuple((f["name"], spark_type(f["type"])) for f in schema.get("fields", ()))
        except (KeyError, TypeError, ValueError):
            return None


def metadata_version(location: Any) -> int:
    """A metadata file's version from its name (`00003-<uuid>.metadata.json`, `v3.metadata.json`); -1 if none."""
    name = str(location or "").rsplit("/", 1)[-1]
    head = name.split("-", 1)[0].split(".", 1)[0].removeprefix("v")
    return int(head) if head.isdigit() else -1


def pyiceberg_metadata(table: Any) -> TableMetadata:
    """A pyiceberg table's current metadata as this module reads a metadata file (the same JSON)."""
    location = str(table.metadata_location)
    return TableMetadata(metadata_version(location), location, json.loads(table.metadata.model_dump_json()))  # type: ignore[arg-type]


def _summary(snapshot: Mapping[str, Any]) -> dict[str, str]:
    """A snapshot's summary without `operation`, which Iceberg keeps apart from the map."""
    return {k: v for k, v in (snapshot.get("summary") or {}).items() if k != "operation"}


def spark_type(iceberg_type: Any) -> str:
    """Iceberg's JSON type -> the Spark simpleString Iceberg's TypeToSparkType gives it (pyspark
    renders struct fields as `name:type`, unquoted and untruncated). ValueError: no mapping."""
    if isinstance(iceberg_type, str):
        name = iceberg_type.strip().lower()
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        if decimal := _DECIMAL.fullmatch(name):
            return f"decimal({int(decimal.group(1))},{int(decimal.group(2))})"
        if _FIXED.fullmatch(name):
            return "binary"
        raise ValueError(f"no Spark type for Iceberg type {iceberg_type!r}")
    kind = iceberg_type.get("type")
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{spark_type(f['type'])}" for f in iceberg_type["fields"]) + ">"
    if kind == "list":
        return f"array<{spark_type(iceberg_type['element'])}>"
    if kind == "map":
        return f"map<{spark_type(iceberg_type['key'])},{spark_type(iceberg_type['value'])}>"
    raise ValueError(f"no Spark type for Iceberg type {iceberg_type!r}")


def live_row_count(summary: Mapping[str, str]) -> int | None:
    """Live rows of a snapshot from its summary: data-file records minus position deletes (each
    removes exactly one row). None when equality deletes exist (they match any number of rows:
    only a count can tell)."""
    if int(summary.get("total-equality-deletes", 0) or 0):
        return None
    return int(summary.get("total-records", 0) or 0) - int(summary.get("total-position-deletes", 0) or 0)


class LineageEntry(NamedTuple):
    """One snapshot of a lineage as provable_row_count needs it."""

    operation: str
    summary: Mapping[str, str]
    is_root: bool  # no parent: the table's first snapshot


def provable_row_count(lineage: Iterable[LineageEntry]) -> int | None:
    """live_row_count of the newest snapshot of `lineage` (newest first) when the summaries
    prove it, else None (count the table).

    Why: a compaction ("replace" that removes data files) can leave position delete files behind
    that point at the removed files; they stay in total-position-deletes but delete no row. So
    while the position-delete total is non-zero, going back, a replace that removed data files
    means the total may include such dangling deletes. A snapshot with no position deletes (or
    the table's first one) ends the search; a history cut by expiry proves nothing.
    """
    rows: int | None = None
    for index, entry in enumerate(lineage):
        if index == 0:
            rows = live_row_count(entry.summary)
            if rows is None:
                return None
        if not int(entry.summary.get("total-position-deletes", 0) or 0):
            return rows
        if entry.operation == "replace" and int(entry.summary.get("deleted-data-files", 0) or 0):
            return None
        if entry.is_root:
            return rows
    return 0 if rows is None else None  # no snapshot: empty; a cut history: unproven
