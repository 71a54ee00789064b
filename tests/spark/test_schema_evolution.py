"""Schema fitting: planned without Spark jobs, applied before any data, rejected with full context."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import types as T

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.schema_evolution import (
    align_to_table,
    creatable_schema,
    fit_type,
    plan_schema_change,
    sql_type,
)
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

T_REF = TableRef("lake", ("ns",), "t")


def schema(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t, True) for n, t in fields])


# -- pure planning (no Spark session) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("table_type", "batch_type", "fit"),
    [
        (T.LongType(), T.IntegerType(), "cast"),
        (T.LongType(), T.ShortType(), "cast"),
        (T.IntegerType(), T.LongType(), "widen"),
        (T.DoubleType(), T.FloatType(), "cast"),
        (T.DoubleType(), T.IntegerType(), "cast"),
        (T.FloatType(), T.DoubleType(), "widen"),
        (T.DecimalType(12, 2), T.DecimalType(10, 2), "cast"),
        (T.DecimalType(10, 2), T.DecimalType(14, 2), "widen"),
        (T.DecimalType(10, 2), T.DecimalType(10, 3), "reject"),
        (T.DecimalType(20, 0), T.LongType(), "cast"),
        (T.DecimalType(10, 2), T.LongType(), "reject"),
        (T.TimestampType(), T.DateType(), "cast"),
        (T.DateType(), T.TimestampType(), "reject"),
        (T.TimestampType(), T.TimestampNTZType(), "reject"),
        (T.LongType(), T.StringType(), "reject"),
        (T.StringType(), T.LongType(), "reject"),
        (T.LongType(), T.NullType(), "cast"),
        (T.LongType(), T.DoubleType(), "reject"),
        (
            T.StructType([T.StructField("a", T.LongType(), False)]),
            T.StructType([T.StructField("a", T.LongType(), True)]),
            "same",
        ),
    ],
)
def test_fit_type(table_type, batch_type, fit):
    assert fit_type(table_type, batch_type)[0] == fit


def test_plan_adds_new_columns_and_widens_int_to_bigint():
    table = schema(("id", T.IntegerType()), ("v", T.StringType()))
    batch = schema(("ID", T.LongType()), ("v", T.StringType()), ("new col", T.DoubleType()), ("nothing", T.NullType()))
    plan = plan_schema_change(TableRef("lake", ("ns",), "t"), table, batch)
    assert [f.name for f in plan.add] == ["new col"]
    assert plan.widen == (("id", T.LongType()),)
    assert plan.dropped_void == ("nothing",)
    assert plan.statements() == [
        "ALTER TABLE `lake`.`ns`.`t` ALTER COLUMN `id` TYPE bigint",
        "ALTER TABLE `lake`.`ns`.`t` ADD COLUMNS (`new col` double)",
    ]
    assert plan.target_schema(table).simpleString() == "struct<id:bigint,v:string,new col:double>"


def test_plan_rejects_with_table_column_and_both_types():
    table = schema(("id", T.LongType()), ("day", T.DateType()))
    batch = schema(("id", T.StringType()), ("day", T.TimestampType()))
    with pytest.raises(DataShapeError) as info:
        plan_schema_change(TableRef("lake", ("ns",), "orders"), table, batch)
    text = str(info.value)
    assert "`lake`.`ns`.`orders`" in text
    assert "'id' is bigint in the table but string in the batch" in text
    assert "'day' is date in the table but timestamp in the batch" in text
    assert "can't promote date to timestamp" in text


def test_plan_rejects_case_duplicates():
    with pytest.raises(DataShapeError, match="'a' and 'A'"):
        plan_schema_change(T_REF, schema(), schema(("a", T.LongType()), ("A", T.LongType())))


def test_sql_type_quotes_nested_names():
    nested = T.StructType([T.StructField("x y", T.IntegerType()), T.StructField("a`b", T.ArrayType(T.StringType()))])
    assert sql_type(nested) == "struct<`x y`: int, `a``b`: array<string>>"
    assert sql_type(T.MapType(T.StringType(), T.DecimalType(10, 2))) == "map<string, decimal(10,2)>"


def test_creatable_schema_drops_void_and_makes_nullable():
    created, dropped = creatable_schema(
        T_REF, T.StructType([T.StructField("id", T.LongType(), False), T.StructField("x", T.NullType())])
    )
    assert created == schema(("id", T.LongType()))
    assert dropped == ("x",)
    with pytest.raises(DataShapeError, match="no typed column"):
        creatable_schema(T_REF, schema(("x", T.NullType())))


# -- against the table (Spark) -------------------------------------------------------------------


def test_align_orders_casts_and_fills_nulls(spark):
    batch = spark.createDataFrame([(1, "a")], "id int, v string")
    table = schema(("v", T.StringType()), ("extra", T.TimestampType()), ("id", T.LongType()))
    aligned = align_to_table(batch, table)
    assert aligned.schema.simpleString() == "struct<v:string,extra:timestamp,id:bigint>"
    assert aligned.collect()[0].asDict() == {"v": "a", "extra": None, "id": 1}


@pytest.fixture
def table(spark, request):
    return TableRef("lake", ("evolve",), request.node.name.replace("[", "_").replace("]", ""))


def contents(spark, table):
    return sorted(tuple(r) for r in spark.table(table.sql).collect())


def test_evolution_through_the_writer(spark, table):
    writer = TableWriter(spark)
    spec = WriteSpec(table=table, disposition="append")
    writer.write(spec, spark.createDataFrame([(1, "a", 0.5)], "id int, v string, f float"), commit=CommitInfo(state=None))

    # run 2: id and f arrive wider (int -> bigint, float -> double: Iceberg promotes in place),
    # a new column, and `v` missing (loads as NULL)
    r2 = writer.write(
        spec,
        spark.createDataFrame([(2**40, 1.5, 0.1)], "id bigint, score double, f double"),
        commit=CommitInfo(state=None),
    )
    assert r2.schema == (("id", "bigint"), ("v", "string"), ("f", "double"), ("score", "double"))
    assert contents(spark, table) == [(1, "a", 0.5, None), (2**40, None, 0.1, 1.5)]

    # run 3: int into the (now) bigint column and float into double: narrowed losslessly
    writer.write(spec, spark.createDataFrame([(3, 2.5)], "id int, score float"), commit=CommitInfo(state=None))
    assert contents(spark, table) == [(1, "a", 0.5, None), (3, None, None, 2.5), (2**40, None, 0.1, 1.5)]
    assert len(spark.sql(f"SELECT * FROM {table}.`snapshots`").collect()) == 3  # ALTERs make no snapshot


def test_rejected_type_change_writes_nothing(spark, table):
    writer = TableWriter(spark)
    spec = WriteSpec(table=table, disposition="append")
    writer.write(spec, spark.createDataFrame([(1, dt.date(2024, 1, 1))], "id bigint, day date"), commit=CommitInfo(state=None))
    before_snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.`snapshots`").collect()
    before_schema = spark.table(table.sql).schema

    bad = spark.createDataFrame([("x", dt.date(2024, 1, 2), 1)], "id string, day date, extra int")
    with pytest.raises(DataShapeError) as info:
        writer.write(spec, bad, commit=CommitInfo(state={"last_value": 1}))
    assert table.sql in str(info.value)
    assert "'id' is bigint in the table but string in the batch" in str(info.value)
    # nothing changed: no new column (planning happens before the first ALTER), no snapshot
    assert spark.table(table.sql).schema == before_schema
    assert spark.sql(f"SELECT snapshot_id FROM {table}.`snapshots`").collect() == before_snapshots
    assert contents(spark, table) == [(1, dt.date(2024, 1, 1))]
