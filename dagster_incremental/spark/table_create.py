"""What creating a table asks alike of every format: the rows a CREATE ... AS SELECT writes, the
replace's rows to insert, a string literal for DDL, and the race lost to another creator. Each
format's own DDL is its package's (spark/iceberg/table_create.py; Delta's in spark/delta/writer.py)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.schema_evolution import creatable_schema
from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_ref import TableRef


class TableAlreadyExists(Exception):
    """CREATE TABLE lost a race with another creator (nothing was written)."""


def rows_to_create(
    spark: SparkSession, table: TableRef, batch: DataFrame | None, data_schema: T.StructType | None, helpers: Sequence[str]
) -> tuple[T.StructType, DataFrame]:
    """(schema, rows) a CREATE ... AS SELECT writes: the batch's rows to insert in the creatable
    schema, or (no batch: a full refresh that empties the table) none in the table's schema."""
    if batch is None:
        schema = spark.table(table.sql).schema
        return schema, spark.createDataFrame([], schema)
    assert data_schema is not None, "a batch always has its data schema"
    schema, _ = creatable_schema(table, data_schema)
    rows = rows_to_insert(batch, helpers) if helpers else batch
    return schema, rows.select(*(F.col(quote(f.name)).cast(f.dataType).alias(f.name) for f in schema.fields))


def rows_to_insert(prepared: DataFrame, helpers: Sequence[str]) -> DataFrame:
    """The prepared merge rows a replace inserts: dedup survivors that aren't tombstones."""
    from dagster_incremental.spark.merge.sql import DELETED, SURVIVOR

    if SURVIVOR in helpers:
        prepared = prepared.where(F.col(quote(SURVIVOR)))
    if DELETED in helpers:
        prepared = prepared.where(~F.col(quote(DELETED)))
    return prepared.select(*(F.col(quote(c)) for c in prepared.columns if c not in helpers))


def string_literal(spark: SparkSession, value: str) -> str:
    """A Spark SQL string literal, for DDL table properties only (DDL takes no parameters)."""
    escaped_mode = str(spark.conf.get("spark.sql.parser.escapedStringLiterals", "false")).lower() == "true"
    if escaped_mode:
        if "'" in value or "\\" in value:
            raise IncrementalConfigError(
                f"table property {value!r} contains a quote or backslash, which can't be written "
                "while spark.sql.parser.escapedStringLiterals is on."
            )
        return f"'{value}'"
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
