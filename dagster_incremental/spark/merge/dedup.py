"""Batch checks and deduplication shared by every merge strategy."""

# Why before the MERGE and not inside it: a MERGE with two source rows for one target row fails
# (MERGE_CARDINALITY_VIOLATION) after Spark has done all the work, and a NULL key silently never
# matches. Both are decided here, on the batch alone, before anything is written.

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.merge.sql import DELETED, HELPER_PREFIX, SURVIVOR
from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteSpec, null_key_message

SEQ = "__di_seq"  # arrival order, taken before any shuffle: "the last row seen wins"


def c(name: str) -> Column:
    """A column by its exact name (dots, backticks and spaces are not syntax here)."""
    return F.col(quote(name))


def require_columns(spec: WriteSpec, batch: DataFrame, roles: dict[str, Sequence[str]]) -> None:
    """Every configured column must be in the batch; no batch column may use our helper prefix."""
    present = set(batch.columns)
    reserved = [name for name in batch.columns if name.startswith(HELPER_PREFIX)]
    if reserved:
        raise DataShapeError(
            f"{spec.table}: column(s) {reserved} use the reserved prefix {HELPER_PREFIX!r}; "
            "rename them before yielding."
        )
    for role, names in roles.items():
        missing = [name for name in names if name not in present]
        if missing:
            raise DataShapeError(
                f"{spec.table}: {role} column(s) {missing} are not in the batch; the batch has "
                f"{batch.columns}. Yield rows with these columns or fix the asset's {role}."
            )


def check_no_null_keys(
    spec: WriteSpec, batch: DataFrame, roles: dict[str, Sequence[str]], shown: Sequence[str]
) -> None:
    """Raise DataShapeError for a NULL in any key column; one aggregate job for all columns.

    `shown` are the user's columns: of them, the sample row's key columns are put in the message
    (never its other columns: rows hold personal data).

    A NULL key never equals anything in SQL: the row would neither replace nor delete its old
    version, so the table would silently grow duplicates. dlt rejects it at normalize; so do we.
    """
    checked = list(dict.fromkeys(name for names in roles.values() for name in names))
    if not checked:
        return
    whole_row = F.struct(*(c(name) for name in checked if name in shown))
    aggregates = []
    for i, name in enumerate(checked):
        aggregates.append(F.sum(c(name).isNull().cast("long")).alias(f"n{i}"))
        aggregates.append(F.first(F.when(c(name).isNull(), whole_row), ignorenulls=True).alias(f"r{i}"))
    result = batch.agg(*aggregates).collect()[0]
    for i, name in enumerate(checked):
        nulls = result[f"n{i}"] or 0
        if nulls:
            role = next(r for r, names in roles.items() if name in names)
            sample = f"key {result[f'r{i}'].asDict(recursive=True)}"
            raise DataShapeError(null_key_message(spec.table, nulls, role, name, sample))


def hard_delete_flag(batch: DataFrame, column: str | None) -> Column:
    """dlt's rule: a boolean flag deletes on True only; any other type deletes when non-NULL."""
    if column is None:
        return F.lit(False)
    if isinstance(batch.schema[column].dataType, BooleanType):
        return F.coalesce(c(column), F.lit(False))
    return c(column).isNotNull()


def survivor_order(spec: WriteSpec, batch: DataFrame) -> list[Column]:
    """Which duplicate of a key wins: dedup_sort, then the newest cursor, then the last seen.

    NULL sort values never win over real ones; the arrival sequence makes the order total, so
    the survivor is deterministic.
    """
    order: list[Column] = []
    if spec.dedup_sort is not None:
        name, direction = spec.dedup_sort
        order.append(c(name).desc_nulls_last() if direction == "desc" else c(name).asc_nulls_last())
    if spec.cursor_column is not None and spec.cursor_column in batch.columns:
        order.append(c(spec.cursor_column).desc_nulls_last())
    order.append(F.col(SEQ).desc())
    return order


def with_sequence(batch: DataFrame) -> DataFrame:
    """Number rows in arrival order (before any shuffle), for "the last row seen wins"."""
    return batch.withColumn(SEQ, F.monotonically_increasing_id())


def mark_survivors(batch: DataFrame, key: Sequence[str], order: Sequence[Column]) -> DataFrame:
    """Add SURVIVOR: True for exactly one row per key (row_number over the key, by `order`)."""
    if not key:
        return batch.withColumn(SURVIVOR, F.lit(True))
    window = Window.partitionBy(*(c(k) for k in key)).orderBy(*order)
    return batch.withColumn(SURVIVOR, F.row_number().over(window) == 1)


def add_deleted(batch: DataFrame, column: str | None) -> DataFrame:
    """Add the DELETED helper column (non-NULL boolean) from the hard_delete column."""
    return batch.withColumn(DELETED, hard_delete_flag(batch, column))
