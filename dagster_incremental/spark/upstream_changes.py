"""The rows an upstream table changed between two of its snapshots, as one DataFrame, whatever
its format: the format (spark/table_format.py's `UpstreamChanges`: spark/iceberg/changes.py,
spark/delta/changes.py) says which rows were inserted and which are gone; this module nets them.

Every row carries `_change_type`: "INSERT" (a new row, or the new version of an updated one) or
"DELETE" (a row the upstream no longer holds, or the old version of an updated one). Three reads:

- full: the table as of the end snapshot, every row an INSERT (first run, full refresh);
- append: only rows appended since the start, every row an INSERT;
- changes: any commit may have updated or deleted rows: the rows inserted and the rows gone,
  less a row on both sides (a file rewritten by copy-on-write or compaction, the row itself
  unchanged): what remains is the net change.
"""

from __future__ import annotations

from typing import Any

from dagster_incremental.cursor.upstream import UpstreamRead
from dagster_incremental.errors import DataShapeError, UpstreamRewritten
from dagster_incremental.spark.table_format import UpstreamChanges
from dagster_incremental.spark.table_ref import TableRef

CHANGE_TYPE = "_change_type"
INSERT, DELETE = "INSERT", "DELETE"
_SIGN = "__di_sign"  # +1 a row live at the end, -1 a row live at the start


def check_same_table(table: TableRef, identity: str | None, recorded: str | None, snapshot_id: int | None) -> None:
    """UpstreamRewritten when the cursor was taken on another table at the same place (a Delta
    table created again: its versions count from 0 again and mean other rows)."""
    if identity is None or recorded is None or snapshot_id is None or identity == recorded:
        return
    raise UpstreamRewritten(
        f"upstream table {table.display} was created again (table id {identity}, the cursor's was {recorded}): "
        f"the changes since its snapshot {snapshot_id} can't be read; nothing was written. Run a full refresh "
        "of this asset to recompute it from the whole upstream table.",
        upstream=table.display, snapshot_id=snapshot_id,
    )


def read_changes(changes: UpstreamChanges, spark, table: TableRef, read: UpstreamRead):
    """The rows `read` covers, with `_change_type` (see the module docstring)."""
    from pyspark.sql import functions as F

    if read.kind == "none":
        return _empty(changes, spark, table, read.end)
    if read.kind == "full":
        return changes.table_at(spark, table, read.end).withColumn(CHANGE_TYPE, F.lit(INSERT))
    inserted, gone = changes.changed_rows(spark, table, read)
    return inserted.withColumn(CHANGE_TYPE, F.lit(INSERT)) if gone is None else net_rows(inserted, gone)


def rows_in_window(frame, table: TableRef, start: Any, end: Any, column: str):
    """The rows of `frame` whose `column` lies in [start, end) (a partition's share of the
    upstream's changes); DataShapeError when the upstream has no such column."""
    from pyspark.sql import functions as F

    from dagster_incremental.spark.sql import in_window, quote

    if column not in frame.columns:
        raise DataShapeError(
            f"upstream table {table.display} has no column {column!r} (the window_column that places its "
            f"rows in this asset's partitions); its columns: {', '.join(frame.columns)}"
        )
    return frame.where(in_window(F.col(quote(column)), start, end))


def _empty(changes: UpstreamChanges, spark, table: TableRef, snapshot_id: int | None):
    from pyspark.sql import functions as F

    if snapshot_id is None and changes.missing(spark, table):
        raise ValueError(f"table {table.display} does not exist")
    return changes.table_at(spark, table, snapshot_id).limit(0).withColumn(CHANGE_TYPE, F.lit(INSERT))


def net_rows(inserted, gone):
    """`inserted` as INSERTs and `gone` (the same columns) as DELETEs, less the rows on both
    sides: those were only rewritten (copy-on-write, compaction), not changed. One shuffle nets
    the two sides (each read once), and the small result is kept, so the function can use it
    several times without reading the upstream's files again."""
    from pyspark.sql import functions as F

    columns = inserted.columns
    signed = inserted.withColumn(_SIGN, F.lit(1)).unionByName(gone.withColumn(_SIGN, F.lit(-1)))
    net = signed.groupBy(*columns).agg(F.sum(_SIGN).alias(_SIGN)).where(F.col(_SIGN) != 0)
    net = net.select(
        *columns,
        F.when(F.col(_SIGN) > 0, F.lit(INSERT)).otherwise(F.lit(DELETE)).alias(CHANGE_TYPE),
        F.explode(F.array_repeat(F.lit(1), F.abs(F.col(_SIGN)).cast("int"))).alias(_SIGN),
    ).drop(_SIGN)
    return net.localCheckpoint(eager=True)


def change_columns(frame: Any) -> list[str]:
    """The upstream's own columns of a change frame (without `_change_type`)."""
    return [c for c in frame.columns if c != CHANGE_TYPE]
