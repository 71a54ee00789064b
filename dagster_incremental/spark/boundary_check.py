"""Append without duplicates when the boundary dedup state overflowed."""

# The cursor engine keeps at most a bounded number of keys of the rows at the high-water mark.
# When more rows shared that value, the next run keeps every row at it (never losing one) and
# flags `boundary_unverified`. For merge dispositions that is harmless (the merge is idempotent);
# for append, the rows at the boundary value that the table already holds are dropped here, with
# an anti-join against only the table rows at that value.

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any

from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_ref import TableRef


def drop_rows_already_loaded(io: Any, frame: Any, runs: Mapping[str, Any], spec: Any) -> Any:
    """`frame` minus the rows at an unverified boundary value that the table already has."""
    if frame is None or spec.disposition != "append":
        return frame
    if not any(getattr(run, "boundary_unverified", False) for run in runs.values()):
        return frame
    from dagster_incremental.spark.local.stage import arrow_to_spark, is_spark_frame

    if not is_spark_frame(frame):  # local rows still in Arrow: the anti-join needs Spark
        frame = arrow_to_spark(io.spark, frame)
    for run in runs.values():
        if not getattr(run, "boundary_unverified", False):
            continue
        column = run.spec.cursor_path
        if not column or any(c in column for c in ".$[") or column not in frame.columns:
            continue
        if not io.tables.writer.table_exists(spec.table):
            continue
        frame = _anti_join_boundary(io.spark, frame, spec.table, column, run.boundary_value, run.dedup_key)
    return frame


def _anti_join_boundary(spark, frame, table: TableRef, column: str, value: Any, dedup_key: Any):
    from pyspark.sql import functions as F

    existing = spark.table(table.sql)
    if isinstance(dedup_key, (tuple, list)) and dedup_key:
        keys = [k for k in dedup_key if k in frame.columns and k in existing.columns]
    else:  # content dedup: every column both sides share
        keys = [c for c in frame.columns if c in existing.columns]
    at_value = F.col(quote(column)) == F.lit(value)
    at_boundary = frame.where(at_value)
    rest = frame.where(~at_value | F.col(quote(column)).isNull())
    seen = existing.where(at_value).select(*(F.col(quote(k)).alias(f"__seen_{i}") for i, k in enumerate(keys)))
    same = reduce(
        lambda acc, cond: acc & cond,
        (F.col(quote(k)).eqNullSafe(F.col(f"__seen_{i}")) for i, k in enumerate(keys)),
    )
    fresh = at_boundary.join(seen, on=same, how="left_anti")
    return rest.unionByName(fresh)
