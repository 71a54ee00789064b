"""Which live rows of an Iceberg table hold a batch's primary keys, found without a Spark job."""

# Why: a keyed merge of a small batch into a large table only needs the table's key column. The
# table's own metadata (Iceberg scan planning over the manifests' column bounds) names the data
# files whose key range overlaps the batch's, with the position delete files that apply to each;
# pyarrow then reads only the key column of those files, drops the rows the deletes already
# removed and joins the rest with the batch's keys in Arrow (or, when a file's single integer
# key ascends, finds them by binary search). The result is what a MERGE's join finds: for each
# touched data file, the positions of the rows the batch replaces or deletes.
#
# Where it applies (`plan_target` says None otherwise, in a debug log, and the writer uses Spark's
# MERGE): every delete file a candidate file has is a file-scoped position delete file (no
# equality deletes, no deletion vectors), and every key column has a type whose equality Arrow
# and Spark agree on.
#
# The scan tasks are read as Iceberg's JSON (one py4j call a task). Its enums changed spelling in
# Iceberg 1.11 (apache/iceberg pull request 14739, to match the REST spec): 1.10 writes the Java
# names ("POSITION_DELETES", "PARQUET"), 1.11 and later the spec's ("position-deletes",
# "parquet"). `json_enum` reads both; comparing with one spelling declined every table on 1.12.

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dagster_incremental.spark.iceberg.storage import TableStorage

PARQUET_FIELD_ID = b"PARQUET:field_id"  # where a Parquet field keeps its Iceberg field id
# Iceberg's reserved field ids of a position delete file's columns.
DELETE_FILE_PATH_ID, DELETE_POS_ID = 2147483546, 2147483545
_POS = "__di_pos"
_DEAD = "__di_dead"
_ROW = "__di_row"
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class TargetFile:
    """A data file that may hold batch keys, and the position delete files that apply to it."""

    location: str  # as the table's metadata spells it (what a position delete must name)
    delete_locations: tuple[str, ...]  # its delete files, all file-scoped positional
    task: Any  # the org.apache.iceberg.FileScanTask that planned it

    def java_deletes(self) -> list[Any]:
        """Its delete files as org.apache.iceberg.DeleteFile objects (what a commit removes)."""
        listed = self.task.deletes()  # by index: a py4j iteration ends in an exception pyspark converts slowly
        return [listed.get(i) for i in range(listed.size())]


@dataclass(frozen=True)
class TargetPlan:
    """The scan the merge is decided on: its snapshot, filter and candidate files."""

    snapshot_id: int | None
    filter: Any  # org.apache.iceberg.expressions.Expression: the conflict-detection filter
    files: tuple[TargetFile, ...]
    storage: TableStorage  # where the files are read from


@dataclass(frozen=True)
class FileMatch:
    """One touched data file: the rows the batch removes and the positions deleted before."""

    file: TargetFile
    positions: np.ndarray  # new deleted row positions, sorted
    previous: np.ndarray  # positions its existing delete files removed, sorted


def exact_key_type(arrow_type: pa.DataType) -> bool:
    """Types whose equality is the same in Arrow and Spark SQL (floats are not: NaN, -0.0)."""
    checks = (pa.types.is_integer, pa.types.is_string, pa.types.is_date, pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_binary, pa.types.is_boolean)
    return any(check(arrow_type) for check in checks)


def match_target(
    jvm: Any, iceberg: Any, key_fields: Sequence[pa.Field], keys: pa.Table, dead: pa.Array, case_sensitive: bool,
    storage: TableStorage | None = None,
) -> tuple[TargetPlan, list[FileMatch], pa.Table] | None:
    """The plan (see plan_target) and the rows it finds holding the batch's keys (see
    match_keys); None when a file carries deletes this module can't apply."""
    plan = plan_target(jvm, iceberg, key_fields, keys, case_sensitive, storage)
    if plan is None:
        return None
    return (plan, *match_keys(plan, key_fields, keys, dead))


def plan_target(jvm: Any, iceberg: Any, key_fields: Sequence[pa.Field], keys: pa.Table, case_sensitive: bool,
                storage: TableStorage | None = None) -> TargetPlan | None:
    """The data files of the current snapshot whose key bounds overlap `keys` (the batch's key
    columns, named as the table's); None when a file carries deletes this module can't apply."""
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    both = getattr(expressions, "and")
    row_filter = expressions.alwaysTrue()
    for field in key_fields:
        if pa.types.is_integer(field.type) or pa.types.is_string(field.type):
            column = keys[field.name]
            low, high = pc.min(column).as_py(), pc.max(column).as_py()
            bounds = both(expressions.greaterThanOrEqual(field.name, low), expressions.lessThanOrEqual(field.name, high))
            row_filter = both(row_filter, bounds)
    iceberg.refresh()
    current = iceberg.currentSnapshot()
    storage = storage or TableStorage.local()
    if current is None:
        return TargetPlan(None, row_filter, (), storage)
    scan = iceberg.newScan().useSnapshot(current.snapshotId()).filter(row_filter).caseSensitive(case_sensitive)
    describe = jvm.org.apache.iceberg.ScanTaskParser.toJson  # one py4j call a task, not ten
    files = []
    for task in _java_iter(scan.planFiles()):
        described = json.loads(describe(task))
        data, deletes = described["data-file"], described.get("delete-files", [])
        unusable = unusable_file(data, deletes)
        if unusable:
            _LOG.debug("local keyed merge declined for %s (Spark's MERGE writes it): %s", iceberg.name(), unusable)
            return None
        files.append(TargetFile(data["file-path"], tuple(d["file-path"] for d in deletes), task))
    return TargetPlan(current.snapshotId(), row_filter, tuple(files), storage)


def json_enum(value: Any) -> str:
    """An enum of Iceberg's JSON in the REST spec's spelling, whichever Iceberg wrote it:
    "POSITION_DELETES" (1.10) and "position-deletes" (1.11+) both read "position-deletes"."""
    return str(value or "").lower().replace("_", "-")


def unusable_file(data: Mapping[str, Any], deletes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why this module can't merge into a data file with these delete files (their JSON), or None."""
    if json_enum(data.get("file-format")) != "parquet":
        return f"data file {data.get('file-path')} is {json_enum(data.get('file-format'))}, not Parquet"
    for delete in deletes:
        if not file_scoped_position_delete(delete):
            kind = f"{json_enum(delete.get('content'))} file ({json_enum(delete.get('file-format'))})"
            return (f"data file {data.get('file-path')} has a {kind} that is not a file-scoped position "
                    "delete file (equality deletes, deletion vectors and partition-scoped deletes are Spark's)")
    return None


def file_scoped_position_delete(delete_file: Mapping[str, Any]) -> bool:
    """Whether a delete file (as Iceberg's ContentFileParser writes it to JSON) is a Parquet
    position delete file naming one data file: Iceberg's ContentFileUtil.isFileScoped, not a
    deletion vector. One data file: its referenced data file is set, or its file_path column's
    lower and upper bounds are equal."""
    if json_enum(delete_file.get("content")) != "position-deletes" or json_enum(delete_file.get("file-format")) != "parquet":
        return False
    if delete_file.get("referenced-data-file"):
        return True
    lower = _bound(delete_file.get("lower-bounds"), DELETE_FILE_PATH_ID)
    return lower is not None and lower == _bound(delete_file.get("upper-bounds"), DELETE_FILE_PATH_ID)


def _bound(bounds: Mapping[str, list[Any]] | None, field_id: int) -> str | None:
    """One field's bound from ContentFileParser's {"keys": [...], "values": [hex, ...]}."""
    if not bounds:
        return None
    for key, value in zip(bounds.get("keys", []), bounds.get("values", [])):
        if key == field_id:
            return str(value)
    return None


def match_keys(plan: TargetPlan, key_fields: Sequence[pa.Field], keys: pa.Table, dead: pa.Array) -> tuple[list[FileMatch], pa.Table]:
    """(the touched files with the positions of the live rows holding a batch key; the matched
    rows' keys with their batch row's tombstone flag in `__di_dead`), read in parallel threads."""
    batch = keys.append_column(_DEAD, dead).append_column(_ROW, pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    ordered = _ordered_single_key(batch, key_fields)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        found = list(pool.map(lambda f: _match_file(f, plan.storage, key_fields, batch, ordered), plan.files))
    touched = [match for match, _ in found if match is not None]
    rows = [batch_rows for _, batch_rows in found if batch_rows is not None]
    matched = batch.select([*keys.column_names, _DEAD])
    return touched, matched.take(np.concatenate(rows)) if rows else matched.schema.empty_table()


def _match_file(
    file: TargetFile, storage: TableStorage, key_fields: Sequence[pa.Field], batch: pa.Table,
    ordered: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[FileMatch | None, np.ndarray | None]:
    """The file's match, and the batch rows of its matched keys (one per matched row)."""
    with storage.open_input(file.location) as source:
        stored = _key_columns(source, key_fields)
    if stored is None:  # a key column added after this file was written: all NULL, no match
        return None, None
    previous = _deleted_positions(file, storage)
    found = _match_ascending(stored.column(0), ordered, previous) if ordered is not None else None
    positions, batch_rows = found if found is not None else _match_joined(stored, batch, previous)
    if not positions.size:
        return None, None
    return FileMatch(file, positions, previous), batch_rows


def _ordered_single_key(batch: pa.Table, key_fields: Sequence[pa.Field]) -> tuple[np.ndarray, np.ndarray] | None:
    """For one integer key: its non-NULL batch values ascending, with their batch rows."""
    if len(key_fields) != 1 or not pa.types.is_integer(key_fields[0].type):
        return None
    values = batch.column(0)
    rows = pc.indices_nonzero(values.is_valid()).to_numpy().astype(np.int64)
    present = values.take(rows).to_numpy()
    order = np.argsort(present, kind="stable")
    return present[order], rows[order]


def _match_ascending(
    column: pa.ChunkedArray, ordered: tuple[np.ndarray, np.ndarray], previous: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The match by binary search when the file's key column ascends (files loaded in key
    order: about 5 ms a 1.1M-row file less than the join); None when it does not, or has NULLs."""
    if column.null_count:
        return None
    stored = column.to_numpy()
    if stored.size > 1 and not np.all(stored[1:] >= stored[:-1]):
        return None
    keys, rows = ordered
    low, high = np.searchsorted(stored, keys, "left"), np.searchsorted(stored, keys, "right")
    counts = high - low
    before = np.cumsum(counts) - counts  # matches of the keys before each key
    positions = np.repeat(low - before, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    batch_rows = np.repeat(rows, counts)
    if previous.size:
        live = ~np.isin(positions, previous)
        positions, batch_rows = positions[live], batch_rows[live]
    order = np.argsort(positions, kind="stable")
    return positions[order].astype(np.int64), batch_rows[order]


def _match_joined(stored: pa.Table, batch: pa.Table, previous: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The match by Arrow's hash join of the file's live rows with the batch."""
    names = stored.column_names
    stored = stored.append_column(_POS, pa.array(np.arange(stored.num_rows, dtype=np.int64)))
    if previous.size:
        live = np.ones(stored.num_rows, dtype=bool)
        live[previous] = False
        stored = stored.filter(pa.array(live))
    joined = stored.join(batch.select([*names, _ROW]), keys=names, join_type="inner", use_threads=False)
    positions = joined[_POS].to_numpy()
    order = np.argsort(positions, kind="stable")
    return positions[order], joined[_ROW].to_numpy()[order]


def _key_columns(source: Any, key_fields: Sequence[pa.Field]) -> pa.Table | None:
    """The key columns of one data file (an open file), found by Iceberg field id (names may
    have changed since it was written), as the table's names and types."""
    parquet = pq.ParquetFile(source)
    by_id = {f.metadata.get(PARQUET_FIELD_ID): f.name for f in parquet.schema_arrow if f.metadata}
    stored = [by_id.get(f.metadata[PARQUET_FIELD_ID]) for f in key_fields]
    if None in stored:
        return None
    table = parquet.read(columns=stored, use_threads=False)
    columns = [table.column(i).cast(f.type) for i, f in enumerate(key_fields)]
    return pa.Table.from_arrays(columns, names=[f.name for f in key_fields])


def _deleted_positions(file: TargetFile, storage: TableStorage) -> np.ndarray:
    """Positions of `file` its (file-scoped) position delete files remove, sorted, unique."""
    if not file.delete_locations:
        return np.empty(0, dtype=np.int64)
    parts = []
    for location in file.delete_locations:
        with storage.open_input(location) as source:
            parts.append(pq.read_table(source, columns=["pos"]).column("pos").to_numpy())
    return np.unique(np.concatenate(parts))


def local_path(location: str) -> str:
    """A `file:` location as a path pyarrow opens."""
    if location.startswith("file://"):
        return location[len("file://") :]
    return location.removeprefix("file:")


def _java_iter(iterable: Any) -> Iterator[Any]:
    iterator = iterable.iterator()
    try:
        while iterator.hasNext():
            yield iterator.next()
    finally:
        iterable.close()
