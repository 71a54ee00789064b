"""Duplicate primary keys counted in this process, for the `primary_key_unique` asset check.

Why: a run that committed without a JVM (pyiceberg, delta-rs) would otherwise start Spark for one
aggregation (20 - 55 s in a fresh process under load), and even with Spark running its job costs
5-50 times this read (bench.key_check). Only the key columns (and scd2's valid-to column) of the
pinned snapshot are read, by pyiceberg's Arrow scan or delta-rs's Arrow dataset, and grouped by
pyarrow: the same answer as spark/key_check.py (NULL keys group together), vectorised. Tables
above MAX_ROWS, a window's rows and a value pyarrow cannot compare are left to Spark (None), whose
aggregation spills to disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.spark.key_check import DuplicateKeys

# The keys of this many rows are held in memory at once (tens of bytes a row); larger tables are
# counted by Spark.
MAX_ROWS = 10_000_000
_ROWS = "count_all"


def duplicates_in(keys_table: pa.Table, keys: Sequence[str], examples: int) -> DuplicateKeys:
    """The keys of `keys_table` that occur more than once: how many, and the first `examples`."""
    counted = keys_table.group_by(list(keys), use_threads=False).aggregate([([], "count_all")])
    duplicated = counted.filter(pc.greater(counted[_ROWS], 1))
    if duplicated.num_rows == 0:
        return DuplicateKeys(0, ())
    shown = duplicated.slice(0, examples).select(list(keys)).to_pylist()
    return DuplicateKeys(duplicated.num_rows, tuple(tuple(row[k] for k in keys) for row in shown))


def iceberg_duplicates(table: Any, keys: Sequence[str], *, snapshot_id: int | None,
                       current: tuple[str, Any] | None, examples: int) -> DuplicateKeys | None:
    """`keys` duplicated in a pyiceberg table at `snapshot_id`; None: leave it to Spark."""
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    if snapshot is None:
        return DuplicateKeys(0, ())
    rows = int((snapshot.summary or {}).get("total-records", 0) or 0)
    names = [f.name for f in table.schema().fields]

    def read(columns: list[str]) -> pa.Table:
        return table.scan(selected_fields=tuple(columns), snapshot_id=snapshot.snapshot_id).to_arrow()

    return _count_keys(names, rows, read, keys, current, examples)


def delta_duplicates(location: str, keys: Sequence[str], *, snapshot_id: int | None, current: tuple[str, Any] | None,
                     examples: int, storage_options: dict[str, str] | None = None) -> DuplicateKeys | None:
    """`keys` duplicated in the Delta table at `location`, version `snapshot_id`; None: leave it to Spark."""
    from deltalake import DeltaTable

    table = DeltaTable(location, version=snapshot_id, storage_options=storage_options or None)
    dataset = table.to_pyarrow_dataset()
    actions = pa.table(table.get_add_actions(flatten=True))  # delta-rs answers in arro3: read it as Arrow
    rows = (pc.sum(actions["num_records"]).as_py() or 0) if "num_records" in actions.column_names else MAX_ROWS + 1
    return _count_keys(dataset.schema.names, rows, lambda columns: dataset.to_table(columns=columns), keys, current, examples)


def _count_keys(names: Sequence[str], rows: int, read: Callable[[list[str]], pa.Table], keys: Sequence[str],
                current: tuple[str, Any] | None, examples: int) -> DuplicateKeys | None:
    """Read the key columns (spelt as the table spells them: Spark matches names ignoring case)
    and count; scd2 (`current`: valid-to column and its current value) only current versions."""
    if rows > MAX_ROWS:
        return None
    spelt = {n.lower(): n for n in names}
    columns = [spelt.get(k.lower()) for k in keys]
    valid_to = spelt.get(current[0].lower()) if current is not None else None
    if None in columns or (current is not None and valid_to is None):
        return None  # a column the table lacks: Spark's error says which
    wanted = [c for c in columns if c is not None]
    data = read(list(dict.fromkeys([*wanted, *([valid_to] if valid_to else [])])))
    if current is not None and valid_to is not None:
        mask = _is_current(data[valid_to], current[1])
        if mask is None:
            return None
        data = data.filter(mask)
    return duplicates_in(data.select(wanted), wanted, examples)


def _is_current(column: Any, value: Any) -> Any:
    """Rows whose valid-to is NULL (value None) or equals `value` (active_record_timestamp)."""
    if value is None:
        return pc.is_null(column)
    try:
        return pc.fill_null(pc.equal(column, pa.scalar(value).cast(column.type)), False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
