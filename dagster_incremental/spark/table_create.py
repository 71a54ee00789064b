"""Creating a table: its schema, partitioning and properties from the first batch, either empty
(CREATE TABLE) or together with its rows and cursor in one commit (CREATE ... AS SELECT)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dagster_incremental.spark import errors as spark_errors
from dagster_incremental.spark.dialect import PendingCommit
from dagster_incremental.spark.schema_evolution import creatable_schema, sql_type
from dagster_incremental.spark.sql import column_list, quote
from dagster_incremental.spark.statistics import commit_result
from dagster_incremental.spark.write_spec import WriteResult


class TableAlreadyExists(Exception):
    """CREATE TABLE lost a race with another creator (nothing was written)."""


def create_table(spark: SparkSession, commit: PendingCommit, schema: T.StructType, *, if_not_exists: bool = True) -> bool:
    """CREATE TABLE [IF NOT EXISTS]; False when another writer created it first (then schema
    fitting follows)."""
    spec = commit.spec
    columns = ", ".join(f"{quote(f.name)} {sql_type(f.dataType)}" for f in schema.fields)
    verb = "CREATE TABLE IF NOT EXISTS" if if_not_exists else "CREATE TABLE"
    try:
        spark.sql(f"{verb} {spec.table.sql} ({columns}) {commit.dialect.table_clauses(spark, spec, schema)}")
    except Exception as exc:
        if spark_errors.is_table_already_exists(exc):
            return False
        raise
    return True


def create_as_select(
    spark: SparkSession,
    commit: PendingCommit,
    batch: DataFrame | None,
    data_schema: T.StructType | None,
    helpers: Sequence[str],
    *,
    exists: bool,
) -> WriteResult:
    """CREATE [OR REPLACE] TABLE ... AS SELECT: schema, partitioning and rows in one commit.

    `exists` (a full refresh of an existing table): OR REPLACE, and the rows it held count as
    deleted. Otherwise a plain CREATE, which raises TableAlreadyExists if another writer
    created the table first.
    """
    table = commit.table
    previous = spark.table(table.sql).count() if exists else 0  # Iceberg answers from metadata
    if batch is None:
        schema = spark.table(table.sql).schema
        rows = spark.createDataFrame([], schema)
    else:
        schema, _ = creatable_schema(table, data_schema)
        rows = rows_to_insert(batch, helpers) if helpers else batch
        rows = rows.select(*(F.col(quote(f.name)).cast(f.dataType).alias(f.name) for f in schema.fields))
    view = f"di_create_{commit.commit_id}"
    rows.createOrReplaceTempView(view)
    verb = "CREATE OR REPLACE TABLE" if exists else "CREATE TABLE"
    text = (
        f"{verb} {table.sql} {commit.dialect.table_clauses(spark, commit.spec, schema)} "
        f"AS SELECT {column_list(schema.fieldNames())} FROM {quote(view)}"
    )
    try:
        commit.unguarded().run(spark, lambda: spark.sql(text))
    except Exception as exc:
        if not exists and spark_errors.is_table_already_exists(exc):
            raise TableAlreadyExists(str(table)) from exc
        raise
    finally:
        spark.catalog.dropTempView(view)
    return commit_result(spark, commit, kind="refresh", previous_rows=previous)


def rows_to_insert(prepared: DataFrame, helpers: Sequence[str]) -> DataFrame:
    """The prepared merge rows a replace inserts: dedup survivors that aren't tombstones."""
    from dagster_incremental.spark.merge.sql import DELETED, SURVIVOR

    if SURVIVOR in helpers:
        prepared = prepared.where(F.col(quote(SURVIVOR)))
    if DELETED in helpers:
        prepared = prepared.where(~F.col(quote(DELETED)))
    return prepared.select(*(F.col(quote(c)) for c in prepared.columns if c not in helpers))
