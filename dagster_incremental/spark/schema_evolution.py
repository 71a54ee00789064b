"""Reconcile a batch's schema with its table's BEFORE any data is written."""

# The table is the contract: the batch is fitted to it, and the table changes only in the ways
# Iceberg supports without rewriting data:
#
# - a batch column the table lacks is added (`ALTER TABLE ... ADD COLUMNS`, nullable, at the end);
# - a table column narrower than the batch's is widened where Iceberg allows a type promotion
#   (int -> bigint, float -> double, decimal(P,S) -> decimal(P',S) with P' > P);
# - a batch column narrower than its table column is cast when the cast is lossless (int into
#   bigint, float into double, date into timestamp, ...);
# - a table column the batch lacks is loaded as a typed NULL.
#
# Anything else (string into bigint, timestamp into date, timestamp vs timestamp_ntz, changed
# nested types) is a DataShapeError naming the table, the column and both types; it is raised
# after planning and before the first ALTER, so a rejected batch changes nothing.
#
# date -> timestamp is deliberately NOT a widening of the table: Iceberg has no such type
# promotion (a date column can never become a timestamp column in place). A batch with timestamps
# for a date column is rejected with a hint (cast in the asset, or run a full refresh).

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.table_ref import TableRef

# Integral types by width; Iceberg stores byte/short as int, so a table never holds them.
_INT_RANK: dict[type[T.DataType], int] = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 3, T.LongType: 4}
_INT_DIGITS: dict[type[T.DataType], int] = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 19}

Fit = Literal["same", "cast", "widen", "reject"]


@dataclass(frozen=True)
class TypeConflict:
    """One column whose batch type the table can't take."""

    column: str
    table_type: T.DataType
    batch_type: T.DataType
    hint: str = ""

    def describe(self) -> str:
        text = (
            f"column {self.column!r} is {self.table_type.simpleString()} in the table but "
            f"{self.batch_type.simpleString()} in the batch"
        )
        return f"{text} ({self.hint})" if self.hint else text


@dataclass(frozen=True)
class SchemaPlan:
    """What has to change in the table for the batch to fit, computed without touching it."""

    table: TableRef
    add: tuple[T.StructField, ...] = ()  # new nullable columns, appended in batch order
    widen: tuple[tuple[str, T.DataType], ...] = ()  # (table column, promoted type)
    dropped_void: tuple[str, ...] = ()  # batch columns with no type (all NULL): not added

    @property
    def is_empty(self) -> bool:
        return not self.add and not self.widen

    def statements(self) -> list[str]:
        """The ALTER TABLE statements, every identifier quoted, types rendered from Spark types."""
        out = [
            f"ALTER TABLE {self.table.sql} ALTER COLUMN {quote(name)} TYPE {sql_type(new)}"
            for name, new in self.widen
        ]
        if self.add:
            columns = ", ".join(f"{quote(f.name)} {sql_type(f.dataType)}" for f in self.add)
            out.append(f"ALTER TABLE {self.table.sql} ADD COLUMNS ({columns})")
        return out

    def target_schema(self, table_schema: T.StructType) -> T.StructType:
        """The table's schema after the plan is applied."""
        widened = dict(self.widen)
        fields = [T.StructField(f.name, widened.get(f.name, f.dataType), True) for f in table_schema]
        return T.StructType(fields + [T.StructField(f.name, f.dataType, True) for f in self.add])


def spark_ready_schema(schema):
    """The Arrow types Spark stores: timestamps in microseconds. Both ways of writing local rows
    (Spark, spark/local/) start from this.

    An untyped column (None in every row of the batch) stays untyped (Spark's void): it fits a
    table column of any type, and a table that lacks it gets it from the first batch that gives
    it a type (as the Spark path treats a void column).
    """
    import pyarrow as pa

    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.unit != "us":
            fields.append(pa.field(f.name, pa.timestamp("us", tz=f.type.tz)))
        else:
            fields.append(f)
    return pa.schema(fields)


def spark_schema_of_arrow(schema: Any) -> T.StructType:
    """The Spark schema of local rows with this Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_ready_schema(schema))


def fit_table_to_rows(spark: SparkSession, table: TableRef, arrow_schema: Any, *, case_sensitive: bool) -> None:
    """New columns and type promotions that local rows of `arrow_schema` need, applied to the
    table before the data commit (as the Spark path does before its MERGE)."""
    plan = plan_schema_change(table, spark.table(table.sql).schema, spark_schema_of_arrow(arrow_schema), case_sensitive=case_sensitive)
    if not plan.is_empty:
        apply_schema_change(spark, plan)


def sql_type(data_type: T.DataType) -> str:
    """A Spark SQL type for DDL; nested field names quoted (simpleString() doesn't quote them)."""
    if isinstance(data_type, T.StructType):
        inner = ", ".join(f"{quote(f.name)}: {sql_type(f.dataType)}" for f in data_type.fields)
        return f"struct<{inner}>"
    if isinstance(data_type, T.ArrayType):
        return f"array<{sql_type(data_type.elementType)}>"
    if isinstance(data_type, T.MapType):
        return f"map<{sql_type(data_type.keyType)}, {sql_type(data_type.valueType)}>"
    return data_type.simpleString()


def creatable_schema(table: TableRef, schema: T.StructType) -> tuple[T.StructType, tuple[str, ...]]:
    """The schema a new table gets from a batch: all columns nullable, untyped (void) ones left out.

    Why nullable: a NOT NULL column created from one batch's inferred schema would reject the
    next batch that happens to hold a NULL. Why drop void columns: Iceberg has no void type; the
    column is added by the first batch that gives it a type.
    """
    _check_unique(table, [f.name for f in schema.fields], case_sensitive=False)
    keep = [T.StructField(f.name, f.dataType, True) for f in schema.fields if not _is_void(f.dataType)]
    dropped = tuple(f.name for f in schema.fields if _is_void(f.dataType))
    if not keep:
        raise DataShapeError(
            f"table {table}: the batch has no typed column ({', '.join(dropped) or 'no columns'}); "
            "a table can't be created from it. Give the columns a type (e.g. a typed empty "
            "DataFrame or a pyarrow schema)."
        )
    return T.StructType(keep), dropped


def plan_schema_change(
    table: TableRef,
    table_schema: T.StructType,
    batch_schema: T.StructType,
    *,
    case_sensitive: bool = False,
) -> SchemaPlan:
    """Plan the table changes for `batch_schema`; raises DataShapeError listing every conflict.

    Pure: no Spark job, no catalog call, so it is cheap and unit-testable.
    """
    _check_unique(table, [f.name for f in batch_schema.fields], case_sensitive=case_sensitive)
    lookup = _lookup(table_schema, case_sensitive)
    add: list[T.StructField] = []
    widen: list[tuple[str, T.DataType]] = []
    void: list[str] = []
    conflicts: list[TypeConflict] = []
    for field in batch_schema.fields:
        existing = lookup.get(_key(field.name, case_sensitive))
        if existing is None:
            if _is_void(field.dataType):
                void.append(field.name)
            else:
                add.append(T.StructField(field.name, field.dataType, True))
            continue
        fit, new_type, hint = fit_type(existing.dataType, field.dataType)
        if fit == "reject":
            conflicts.append(TypeConflict(existing.name, existing.dataType, field.dataType, hint))
        elif fit == "widen":
            widen.append((existing.name, new_type))
    if conflicts:
        raise DataShapeError(
            f"table {table}: the batch doesn't fit the table's schema: "
            + "; ".join(c.describe() for c in conflicts)
            + ". Nothing was written. Cast the column(s) in the asset to the table's type, or run "
            "a full refresh to replace the table with the new schema."
        )
    return SchemaPlan(table=table, add=tuple(add), widen=tuple(widen), dropped_void=tuple(void))


def fit_type(table_type: T.DataType, batch_type: T.DataType) -> tuple[Fit, T.DataType, str]:
    """How a batch column of `batch_type` goes into a table column of `table_type`.

    Returns ("same" | "cast" | "widen" | "reject", the table type after the write, hint).
    """
    if _strip_nullability(table_type) == _strip_nullability(batch_type):
        return "same", table_type, ""
    if _is_void(batch_type):
        return "cast", table_type, ""
    tt, bt = type(table_type), type(batch_type)
    if tt in _INT_RANK and bt in _INT_RANK:
        if _INT_RANK[bt] <= _INT_RANK[tt]:
            return "cast", table_type, ""
        if tt is T.IntegerType and bt is T.LongType:
            return "widen", T.LongType(), ""  # Iceberg promotes int -> long in place
        return "reject", table_type, ""  # pragma: no cover - Iceberg tables hold no byte/short
    if tt is T.DoubleType and (bt is T.FloatType or _INT_RANK.get(bt, 99) <= 3):
        return "cast", table_type, ""  # float and ints up to 32 bits are exact in a double
    if tt is T.FloatType and bt is T.DoubleType:
        return "widen", T.DoubleType(), ""  # Iceberg promotes float -> double in place
    if tt is T.FloatType and _INT_RANK.get(bt, 99) <= 2:
        return "cast", table_type, ""
    if isinstance(table_type, T.DecimalType):
        if isinstance(batch_type, T.DecimalType):
            if batch_type.scale == table_type.scale:
                if batch_type.precision <= table_type.precision:
                    return "cast", table_type, ""
                # Iceberg promotes decimal(P,S) -> decimal(P',S), P' > P, in place.
                return "widen", T.DecimalType(batch_type.precision, table_type.scale), ""
            return "reject", table_type, "Iceberg can't change a decimal's scale"
        if bt in _INT_RANK and _INT_DIGITS[bt] <= table_type.precision - table_type.scale:
            return "cast", table_type, ""
    if tt is T.TimestampType and bt is T.DateType:
        return "cast", table_type, ""  # a date is exactly its midnight (session time zone)
    if tt is T.DateType and bt in (T.TimestampType, T.TimestampNTZType):
        return "reject", table_type, "Iceberg can't promote date to timestamp in place"
    if {tt, bt} == {T.TimestampType, T.TimestampNTZType}:
        return "reject", table_type, "instants and local date-times don't convert without a zone"
    return "reject", table_type, ""


def apply_schema_change(spark: SparkSession, plan: SchemaPlan) -> None:
    """Run the plan's ALTERs (metadata-only commits; they create no snapshot)."""
    for statement in plan.statements():
        spark.sql(statement)


def align_to_table(
    batch: DataFrame,
    table_schema: T.StructType,
    *,
    case_sensitive: bool = False,
    keep: Sequence[str] = (),
) -> DataFrame:
    """`batch` as exactly the table's columns, in table order, cast to the table's types.

    Table columns the batch lacks become typed NULLs; batch columns outside the table are left
    out, except those named in `keep` (helper columns a MERGE source needs), appended at the end.
    Casts are only the lossless ones `fit_type` allowed (call plan_schema_change first).
    """
    lookup = _lookup(T.StructType(batch.schema.fields), case_sensitive)
    columns: list[Column] = []
    for field in table_schema.fields:
        source = lookup.get(_key(field.name, case_sensitive))
        if source is None:
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
            continue
        ref = F.col(quote(source.name))
        if _strip_nullability(source.dataType) != _strip_nullability(field.dataType):
            ref = ref.cast(field.dataType)
        columns.append(ref.alias(field.name))
    table_keys = {_key(f.name, case_sensitive) for f in table_schema.fields}
    columns += [F.col(quote(name)) for name in keep if _key(name, case_sensitive) not in table_keys]
    return batch.select(*columns)


def _lookup(schema: T.StructType, case_sensitive: bool) -> dict[str, T.StructField]:
    return {_key(f.name, case_sensitive): f for f in schema.fields}


def _key(name: str, case_sensitive: bool) -> str:
    return name if case_sensitive else name.lower()


def _check_unique(table: TableRef, names: Sequence[str], *, case_sensitive: bool) -> None:
    seen: dict[str, str] = {}
    for name in names:
        key = _key(name, case_sensitive)
        if key in seen:
            raise DataShapeError(
                f"table {table}: the batch has the columns {seen[key]!r} and {name!r}, which are "
                "the same column to Spark (names compare case-insensitively unless "
                "spark.sql.caseSensitive is on); rename one."
            )
        seen[key] = name


def _is_void(data_type: T.DataType) -> bool:
    return isinstance(data_type, T.NullType)


def _strip_nullability(data_type: T.DataType) -> T.DataType:
    """The type with every nested nullability flag set, so only real type differences compare."""
    if isinstance(data_type, T.StructType):
        return T.StructType(
            [T.StructField(f.name, _strip_nullability(f.dataType), True) for f in data_type.fields]
        )
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_strip_nullability(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(
            _strip_nullability(data_type.keyType), _strip_nullability(data_type.valueType), True
        )
    return data_type
