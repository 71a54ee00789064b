"""Merge batches that are still Arrow: key checks and dedup decided in-process, before Spark."""

# Why: rows a function yields (dicts, pages, Arrow, pandas) are local until staging hands them to
# Spark. Deduplicating them there needs a window over a random arrival sequence, which Spark
# only accepts from a materialised copy (localCheckpoint): three passes over the batch. Arrow
# does the same decision in one sort of the key columns (a hash check when keys are already
# unique, the common case), and the batch then enters Spark deterministic, read once by the
# MERGE. The rules are merge.dedup's, so both paths keep the same row per key:
# dedup_sort (NULL never wins), then the newest cursor value (NULL never wins), then the last row
# seen; a NULL in a key column is an error naming the column and a sample row.
#
# Only strategies whose batch is exactly one row per primary key are covered (upsert,
# insert-only; delete-insert without merge_key). scd2 and delete-insert with merge_key keep the Spark path.

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.write_spec import HELPER_PREFIX, WriteSpec, null_key_message

_ARRIVAL = "__di_arrival"


def covers(spec: WriteSpec, columns: list[str]) -> bool:
    """Whether this module can prepare the batch (else the merge strategy does it in Spark).

    A batch with a missing key/dedup column or a reserved name goes the Spark way, which
    reports those errors.
    """
    if not spec.keyed:
        return False
    needed = list(spec.primary_key) + ([spec.dedup_sort[0]] if spec.dedup_sort else [])
    if spec.dedup_sort is not None and spec.dedup_sort[1] not in ("asc", "desc"):
        return False
    return all(name in columns for name in needed) and not any(c.startswith(HELPER_PREFIX) for c in columns)


def decisive_columns(spec: WriteSpec, columns: list[str]) -> list[str]:
    """The columns the dedup decision reads: keys, dedup_sort, the cursor."""
    names = list(spec.primary_key) + ([spec.dedup_sort[0]] if spec.dedup_sort else [])
    if spec.cursor_column in columns:
        names.append(spec.cursor_column)
    return list(dict.fromkeys(names))


# A batch past this many rows whose keys are not already unique and ascending is deduplicated by
# Spark: the sort in `survivors` holds its decisive columns, their order and the arrival numbers
# in this process (about 40 bytes a row), and Python's memory is bounded at any volume.
MAX_SORTED_ROWS = 5_000_000


def decide(rows: LocalRows, spec: WriteSpec) -> tuple[np.ndarray | None, bool]:
    """(the survivors mask or None for every row, whether this module decided): a single integer
    key already ascending (a first load's ids) is checked one stored chunk at a time; other
    batches are sorted here up to MAX_SORTED_ROWS rows, and past that, or for a key type Arrow
    can't sort, left to Spark's dedup (False). `covers(spec, rows.column_names)` must hold."""
    if _ascending_single_key(rows, spec.primary_key):
        return None, True
    if rows.num_rows > MAX_SORTED_ROWS:
        return None, False
    try:
        return survivors(rows.columns(decisive_columns(spec, rows.column_names)), spec), True
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None, False  # a key type Arrow can't sort or group (e.g. a map)


def _ascending_single_key(rows: LocalRows, keys: tuple[str, ...]) -> bool:
    """Whether the one integer key column strictly ascends over the whole batch, without NULLs
    (then every key is unique): one pass, one chunk's column in memory at a time."""
    if len(keys) != 1 or not pa.types.is_integer(rows.schema.field(keys[0]).type):
        return False
    last = None
    for column in rows.column_chunks(keys[0]):
        if column is None or column.null_count:
            return False
        for part in column.chunks:
            values = part.to_numpy()
            if not len(values):
                continue
            if (last is not None and values[0] <= last) or not np.all(values[1:] > values[:-1]):
                return False
            last = values[-1]
    return True


def deduplicate(table: pa.Table, spec: WriteSpec) -> pa.Table:
    """One row per primary key, chosen as merge.dedup.survivor_order does; raises DataShapeError
    for a NULL key. `covers(spec, table.column_names)` must hold."""
    keep = survivors(table, spec)
    return table if keep is None else table.filter(pa.array(keep))


def survivors(table: pa.Table, spec: WriteSpec) -> np.ndarray | None:
    """Which rows survive the dedup (a mask in arrival order); None when every key is unique
    (the common case: one hash pass). `table` needs only the decisive_columns."""
    keys = list(spec.primary_key)
    for name in keys:
        nulls = table[name].null_count
        if nulls:
            first = int(pc.indices_nonzero(table[name].is_null())[0].as_py())
            sample = f"row {first} of the batch, key {table.select(keys).slice(first, 1).to_pylist()[0]}"
            raise DataShapeError(null_key_message(spec.table, nulls, "primary_key", name, sample))
    if table.num_rows < 2 or _unique(table, keys):
        return None
    with_arrival = table.append_column(_ARRIVAL, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    sort_keys = [(k, "ascending") for k in keys]
    if spec.dedup_sort is not None:
        name, direction = spec.dedup_sort
        sort_keys.append((name, "descending" if direction == "desc" else "ascending"))
    if spec.cursor_column is not None and spec.cursor_column in table.column_names and (
        spec.dedup_sort is None or spec.cursor_column != spec.dedup_sort[0]
    ):
        sort_keys.append((spec.cursor_column, "descending"))
    sort_keys.append((_ARRIVAL, "descending"))
    # Keys are non-NULL, so "NULLs at the end" only concerns the tie-breakers: NULL never wins.
    with warnings.catch_warnings():  # pyarrow >= 25 prefers it per key; older ones only take this
        warnings.simplefilter("ignore", FutureWarning)
        order = pc.sort_indices(with_arrival, sort_keys=sort_keys, null_placement="at_end")
    ordered = with_arrival.select(keys).take(order)
    first_of_key = np.zeros(ordered.num_rows, dtype=bool)
    first_of_key[0] = True
    for name in keys:
        column = ordered[name].combine_chunks()
        differs = pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))
        first_of_key[1:] |= differs.to_numpy(zero_copy_only=False)
    if first_of_key.all():
        return None  # every key once after all
    # Back to arrival order: the batch keeps the order the source gave (as the Spark path does).
    keep = np.zeros(table.num_rows, dtype=bool)
    keep[order.to_numpy()[first_of_key]] = True
    return keep


def _unique(table: pa.Table, keys: list[str]) -> bool:
    """Whether no key value repeats, in little memory (a hash set of 10M keys costs ~1 GB): one
    integer key is checked ascending (a first load's ids usually are), else sorted; other keys
    answer False and the sort in `survivors` decides."""
    if len(keys) != 1 or not pa.types.is_integer(table[keys[0]].type):
        return False
    values = table[keys[0]].to_numpy()
    if np.all(values[1:] > values[:-1]):
        return True
    values = np.sort(values)
    return not np.any(values[1:] == values[:-1])
