"""A Spark batch made ready for its table, whatever the format: the strategy's helper columns,
the table created or its schema fitted (ALTERs before any data commit), the batch aligned to it,
and which partition columns may narrow a MERGE."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dagster_incremental.errors import DataShapeError
from dagster_incremental.settings.vocabulary import PRIMARY_KEY_STRATEGIES
from dagster_incremental.spark import merge
from dagster_incremental.spark.merge.sql import HELPER_PREFIX
from dagster_incremental.spark.partitioning import parse_partition_spec
from dagster_incremental.spark.schema_evolution import (
    SchemaPlan,
    align_to_table,
    apply_schema_change,
    creatable_schema,
    plan_schema_change,
)
from dagster_incremental.spark.data_commit import DataCommit
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteSpec


def prepared_batch(pending: DataCommit, batch: DataFrame | None, deduplicated: bool) -> tuple[DataFrame | None, list[str]]:
    """(the batch as its disposition writes it, the `__di_*` helper columns it carries)."""
    spec = pending.spec
    if batch is None:
        return None, []
    if spec.disposition != "merge":
        _reject_helper_columns(spec.table, batch.columns)
        return batch, []
    strategy = merge.strategy_for(spec)
    batch = strategy.prepare_batch(spec, batch, run_started_at=pending.started, deduplicated=deduplicated)
    return batch, [c for c in batch.columns if c.startswith(HELPER_PREFIX)]


def fitted_batch(
    spark: SparkSession,
    pending: DataCommit,
    batch: DataFrame | None,
    data_schema: T.StructType | None,
    helpers: Sequence[str],
    *,
    create: Callable[[T.StructType], object] | None,
    check: Callable[[SchemaPlan, T.StructType], None] | None = None,
) -> tuple[T.StructType, DataFrame | None]:
    """Create the table (`create`, when there is none) or fit its schema to the batch (ALTERs,
    before any data commit; `check` may refuse the plan first); (the table's schema, the batch
    aligned to it)."""
    table = pending.table
    if create is not None:
        assert data_schema is not None, "a table is created only from a batch"
        create(creatable_schema(table, data_schema)[0])
    table_schema = spark.table(table.sql).schema
    if batch is None or data_schema is None:
        return table_schema, None
    plan = plan_schema_change(table, table_schema, data_schema, case_sensitive=pending.case_sensitive)
    if check is not None:
        check(plan, table_schema)
    if not plan.is_empty:
        apply_schema_change(spark, plan)
        table_schema = spark.table(table.sql).schema
    return table_schema, align_to_table(batch, table_schema, case_sensitive=pending.case_sensitive, keep=helpers)


def prunable_partition_by(spec: WriteSpec, columns: Sequence[str]) -> list[str]:
    """The partition_by items whose batch bounds may narrow a MERGE without changing its result.

    Bounds on a partition column are only sound when every target row the MERGE must touch has
    a value of that column that some batch row has too, i.e. the column is part of every key
    the strategy matches rows by. A table partitioned by days(updated_at) and upserted on `id`
    is the counter-example: the old version of an updated row lives in an older day, outside
    the batch's bounds, and would be duplicated instead of updated. So: upsert prunes on
    primary-key columns; delete-insert and scd2 on columns in both primary_key and merge_key
    (whichever are set); scd2 without merge_key (a full snapshot: absent rows are retired
    anywhere) never prunes.
    """
    if not spec.partition_by or spec.delete_missing:  # deleting what the batch lacks reads every file
        return []
    strategy = spec.merge_strategy
    groups: list[set[str]]
    if strategy in PRIMARY_KEY_STRATEGIES:
        groups = [set(spec.primary_key)]
    elif strategy == "scd2" and not spec.merge_key:
        return []
    else:
        groups = [set(g) for g in (spec.primary_key, spec.merge_key) if g]
    if not groups:
        return []
    safe = set.intersection(*groups)
    fields = parse_partition_spec(spec.partition_by, columns, table=str(spec.table))
    return [item for item, field in zip(spec.partition_by, fields) if field.column in safe]


def _reject_helper_columns(table: TableRef, columns: Sequence[str]) -> None:
    reserved = [c for c in columns if c.startswith(HELPER_PREFIX)]
    if reserved:
        raise DataShapeError(
            f"table {table}: the batch has column(s) {', '.join(map(repr, reserved))}; names "
            f"starting with {HELPER_PREFIX!r} are reserved for dagster_incremental. Rename them."
        )
