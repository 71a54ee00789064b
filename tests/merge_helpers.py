"""Test helpers for the merge strategies: play the writer's part in a few lines.

`run_merge` does what the table writer does around our two functions: prepare the batch, create
the table from the prepared schema minus `__di_*` columns (first run only), register the view,
build the one MERGE and run it with its parameters.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType, TimestampType, _parse_datatype_string

from dagster_incremental.spark.merge import merge_statement, prepare_batch, table_columns
from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import Scd2Options, WriteSpec

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
T1 = datetime(2024, 1, 2, tzinfo=timezone.utc)
T2 = datetime(2024, 1, 3, tzinfo=timezone.utc)
T3 = datetime(2024, 1, 4, tzinfo=timezone.utc)
S0, S1, S2, S3 = (t.strftime("%Y-%m-%d %H:%M:%S") for t in (T0, T1, T2, T3))  # as table_rows shows them

_tables = itertools.count()


def new_table(hint: str) -> TableRef:
    """A fresh table in the test catalog (each test and example its own table)."""
    name = re.sub(r"[^a-z0-9]+", "_", hint.lower()).strip("_")[:40]
    return TableRef("lake", ("merge_tests",), f"{name}_{next(_tables)}")


def spec_for(table: TableRef | str, strategy: str = "delete-insert", **kwargs: Any) -> WriteSpec:
    """A merge WriteSpec; tuples for keys, Scd2Options from plain keyword arguments."""
    scd2 = kwargs.pop("scd2", None)
    for key in ("primary_key", "merge_key"):
        if isinstance(kwargs.get(key), str):
            kwargs[key] = (kwargs[key],)
    if scd2 is not None and not isinstance(scd2, Scd2Options):
        scd2 = Scd2Options(**scd2)
    if scd2 is not None:
        kwargs["scd2"] = scd2
    if isinstance(table, str):  # a bare name: a table in the test namespace
        table = TableRef("lake", ("merge_tests",), table)
    return WriteSpec(table=table, disposition="merge", strategy=strategy, **kwargs)


def schema_of(fields: Sequence[tuple[str, str]]) -> StructType:
    """A StructType from (name, type) pairs: names are taken verbatim (no DDL parsing of names)."""
    schema = StructType()
    for name, type_name in fields:
        schema.add(name, _data_type(type_name), True)
    return schema


@functools.cache
def _data_type(type_name: str) -> DataType:
    """Parsed once per type: PySpark's parser tries the text as a schema first, a Java exception
    that costs about 6 ms to convert, for every field of every batch."""
    return _parse_datatype_string(type_name)


def batch(spark: SparkSession, fields: Sequence[tuple[str, str]], rows: Sequence[tuple]) -> DataFrame:
    """A small batch DataFrame in one partition order (the order rows are "seen")."""
    return spark.createDataFrame(list(rows), schema_of(fields))


def run_merge(
    spark: SparkSession,
    spec: WriteSpec,
    fields: Sequence[tuple[str, str]],
    rows: Sequence[tuple],
    run_started_at: datetime = T0,
    *,
    prune: bool = False,
    partition_by: Sequence[str] = (),
) -> tuple[str, dict[str, Any]]:
    """Prepare, create the table if needed, MERGE; returns the statement that ran."""
    prepared = prepare_batch(spec, batch(spark, fields, rows), run_started_at=run_started_at)
    columns = table_columns(prepared)
    if not spark.catalog.tableExists(spec.table.sql):
        types = {f.name: f.dataType.simpleString() for f in prepared.schema.fields}
        ddl = ", ".join(f"{quote(name)} {types[name]}" for name in columns)
        parts = f" PARTITIONED BY ({', '.join(quote(p) for p in partition_by)})" if partition_by else ""
        spark.sql(f"CREATE TABLE {spec.table} ({ddl}) USING iceberg{parts}")
    view = "di_test_source"
    prepared.createOrReplaceTempView(view)
    bounds = _bounds(prepared, partition_by) if prune else ()
    text, args = merge_statement(
        spec, target=spec.table, source_view=view, columns=columns, run_started_at=run_started_at, prune=bounds
    )
    spark.sql(text, args=args)
    return text, args


def table_rows(spark: SparkSession, table: TableRef, drop: Sequence[str] = ("_row_hash",)) -> list[tuple]:
    """The whole table as sorted tuples; timestamps as UTC text, `drop` columns left out."""
    frame = spark.table(table.sql)
    shown = []
    for field in frame.schema.fields:
        if field.name in drop:
            continue
        column = frame[quote(field.name)]
        if isinstance(field.dataType, TimestampType):
            column = column.cast("string")
        shown.append(column.alias(field.name))
    return sorted((tuple(row) for row in frame.select(*shown).collect()), key=_sort_key)


def rows_sorted(rows: Sequence[tuple]) -> list[tuple]:
    """Expected rows in table_rows' order."""
    return sorted(rows, key=_sort_key)


def _sort_key(row: tuple) -> tuple:
    return tuple((value is None, str(value)) for value in row)


def _bounds(prepared: DataFrame, partition_by: Sequence[str]) -> list[tuple[str, Any, Any]]:
    """(column, min, max) of the batch's partition columns (the writer's job; no NULLs in tests)."""
    aggregates = [f(F.col(quote(name))) for name in partition_by for f in (F.min, F.max)]
    row = prepared.agg(*aggregates).first()
    return [(name, row[2 * i], row[2 * i + 1]) for i, name in enumerate(partition_by)]
