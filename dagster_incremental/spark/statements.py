"""The shared statements a format's one commit runs, whatever the format: the strategy's MERGE
and the rows a window replace writes, each run as the format's `DataCommit`
(spark/data_commit.py). The two writers (spark/iceberg/writer.py, spark/delta/writer.py) differ
only in how they count what the statement did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_incremental.spark import merge
from dagster_incremental.spark.batch_fit import prunable_partition_by
from dagster_incremental.spark.data_commit import DataCommit
from dagster_incremental.spark.partitioning import partition_bounds
from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_create import rows_to_insert
from dagster_incremental.spark.write_spec import WriteSpec


def run_merge(spark: SparkSession, pending: DataCommit, spec: WriteSpec, aligned: DataFrame,
              columns: Sequence[str]) -> Any:
    """The strategy's ONE MERGE of `aligned` into the table, run as `pending`; its ON condition
    narrowed by the batch's partition bounds (only on partition columns where that is sound:
    see prunable_partition_by). Returns what `pending.run` returned."""
    view = f"di_source_{pending.commit_id}"
    aligned.createOrReplaceTempView(view)
    try:
        text, args = merge.strategy_for(spec).merge_statement(
            spec,
            target=pending.target,
            source_view=view,
            columns=columns,
            run_started_at=pending.started,
            prune=partition_bounds(aligned, prunable_partition_by(spec, aligned.columns)),
        )
        return pending.run(spark, lambda: spark.sql(text, args=dict(args)))
    finally:
        spark.catalog.dropTempView(view)


def window_rows(spec: WriteSpec, aligned: DataFrame | None,
                helpers: Sequence[str]) -> tuple[DataFrame | None, DataFrame | None]:
    """(the rows a window replace writes, the keys it deletes wherever they are): for merge, its
    deduplicated rows, whose keys' old versions may lie in another window; without the helper
    columns."""
    rows, moved_keys = aligned, None
    if rows is not None and spec.disposition == "merge" and spec.primary_key:
        moved_keys = rows.select(*(F.col(quote(k)) for k in spec.primary_key)).distinct()
    if rows is not None and helpers:
        rows = rows_to_insert(rows, helpers)
    return rows, moved_keys
