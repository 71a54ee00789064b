"""Duplicate primary keys in a table: the statistic behind the `primary_key_unique` asset check.

One aggregation over one pinned snapshot: the keys that occur more than once, counted with a
window over the (usually empty) duplicate set, so the count and a few example keys come back in
one Spark job without collecting every duplicate on the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WindowReplace

_ROWS = "__di_rows"
_DUPLICATED = "__di_duplicated"


@dataclass(frozen=True)
class DuplicateKeys:
    """How many keys occur more than once, and up to `examples` of them (each a tuple of values)."""

    count: int
    examples: tuple[tuple[Any, ...], ...]


def duplicate_keys(
    spark,
    table: TableRef,
    keys: Sequence[str],
    *,
    snapshot_id: int | None = None,
    current: tuple[str, Any] | None = None,
    window: WindowReplace | None = None,
    examples: int = 5,
) -> DuplicateKeys:
    """Count the keys that occur twice or more in `table` at `snapshot_id` (None: its current one).

    `current` (column, value): only rows holding that value count, NULL when the value is None
    (scd2's current versions); `window`: only rows of the window's column in [start, end) count
    (a run that replaced that window).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from dagster_incremental.spark.window_replace import window_rows  # pyspark: not at import (spark/local reads DuplicateKeys)

    frame = _pinned(spark, table, snapshot_id)
    if current is not None:
        column, value = F.col(quote(current[0])), current[1]
        frame = frame.where(column.isNull() if value is None else column == F.lit(value))
    if window is not None:
        frame = frame.where(window_rows(window))
    columns = [F.col(quote(k)) for k in keys]
    duplicated = frame.groupBy(*columns).agg(F.count(F.lit(1)).alias(_ROWS)).where(F.col(_ROWS) > 1)
    counted = duplicated.select(*columns, F.count(F.lit(1)).over(Window.partitionBy()).alias(_DUPLICATED))
    rows = counted.limit(examples).collect()
    if not rows:
        return DuplicateKeys(0, ())
    return DuplicateKeys(rows[0][_DUPLICATED], tuple(tuple(r[: len(keys)]) for r in rows))


def _pinned(spark, table: TableRef, snapshot_id: int | None):
    """The table as of one snapshot, so the count and the snapshot it reports agree even when
    another run commits meanwhile (the id is an int read from the table, never user text)."""
    if snapshot_id is None:
        return spark.table(table.sql)
    return spark.sql(f"SELECT * FROM {table.sql} VERSION AS OF {int(snapshot_id)}")


