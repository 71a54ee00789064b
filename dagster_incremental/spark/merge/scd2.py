"""scd2: keep every version of a row, with validity timestamps, in one MERGE."""

# Why one MERGE and not dlt's UPDATE-then-INSERT: the writer attaches the cursor to exactly one
# table commit, and two statements would leave a window where versions are retired but their
# successors are missing. Why a precomputed source instead of `WHEN NOT MATCHED BY SOURCE`: a MERGE
# condition cannot hold a subquery, so "only retire rows whose merge_key is in the batch" has to be
# decided by joins inside the source query; the MERGE itself then only retires what the source
# names and inserts what the source carries.
#
# Differences from dlt, on purpose: the primary key (when given) identifies the entity, so a changed
# row retires its own old version; hard_delete retires without inserting; identical duplicates
# collapse to one version; compound keys compare column by column; the row hash is canonical and
# NULL-safe (no collisions between ("a", "bc") and ("ab", "c")).

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timezone
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from dagster_incremental.cursor.values import parse_iso
from dagster_incremental.errors import DataShapeError, IncrementalConfigError
from dagster_incremental.spark.merge.dedup import c
from dagster_incremental.spark.merge.prepare import BatchRules, prepare_batch
from dagster_incremental.spark.merge.sql import (
    DELETED,
    INSERT,
    SURVIVOR,
    Params,
    branch_columns,
    col,
    conj,
    insert_clause,
    join_keys,
    keys_equal,
    merge,
    prune_condition,
)
from dagster_incremental.spark.merge.strategy import Prune, SqlMergeStrategy
from dagster_incremental.spark.sql import column_list, quote
from dagster_incremental.spark.write_spec import WriteSpec

ROW_HASH = "_row_hash"
FOUND = "__di_found"  # marks a row that came out of a lookup join (vs. the join's NULL side)
_MICROS_JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "ignoreNullFields": "true"}


# --- settings -----------------------------------------------------------------------------------


def version_column(spec: WriteSpec) -> str:
    """The column whose change means "a new version": the user's row version, else `_row_hash`."""
    return spec.scd2.row_version_column_name or ROW_HASH


def entity_key(spec: WriteSpec) -> list[str]:
    """What identifies one entity's versions: the primary key, else the version itself."""
    return list(spec.primary_key) or [version_column(spec)]


def as_utc(value: Any, what: str) -> datetime:
    """A timestamp setting as an aware UTC datetime (naive means UTC; a date means its midnight)."""
    if isinstance(value, str):
        parsed = parse_iso(value)  # the cursor engine's dialect, as config.toml is read
        if parsed is None:
            raise IncrementalConfigError(
                f"scd2 {what} {value!r} is not an ISO-8601 date or timestamp, e.g. '9999-12-31' "
                "or '2024-01-01T00:00:00Z'."
            )
        value = parsed
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time())
    if not isinstance(value, datetime):
        raise IncrementalConfigError(
            f"scd2 {what} must be a datetime, a date or an ISO-8601 string, got {value!r}."
        )
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def boundary(spec: WriteSpec, run_started_at: datetime) -> datetime:
    """valid_from of new versions and valid_to of retired ones: the setting, else the run start."""
    setting = spec.scd2.boundary_timestamp
    return as_utc(run_started_at if setting is None else setting, "boundary_timestamp")


def active_to(spec: WriteSpec) -> datetime | None:
    """valid_to of active versions: NULL unless active_record_timestamp is set."""
    setting = spec.scd2.active_record_timestamp
    return None if setting is None else as_utc(setting, "active_record_timestamp")


def added_columns(spec: WriteSpec) -> list[str]:
    """The columns scd2 adds to the table, in table order."""
    valid_from, valid_to = spec.scd2.validity_column_names
    hashed = [] if spec.scd2.row_version_column_name else [ROW_HASH]
    return [valid_from, valid_to, *hashed]


def check_settings(spec: WriteSpec, batch: DataFrame) -> None:
    """The scd2 columns must be distinct and must not already be in the batch."""
    valid_from, valid_to = spec.scd2.validity_column_names
    if valid_from == valid_to:
        raise IncrementalConfigError(
            f"{spec.table}: scd2 validity_column_names must be two different names, got "
            f"{list(spec.scd2.validity_column_names)}."
        )
    clash = [name for name in added_columns(spec) if name in batch.columns]
    if clash:
        raise DataShapeError(
            f"{spec.table}: the batch has column(s) {clash}, which scd2 writes itself; rename them, "
            "or set validity_column_names (or row_version_column_name to use your own row version)."
        )
    active_to(spec)  # parse errors surface before any Spark work


# --- the row hash -------------------------------------------------------------------------------


def _canonical(value: Column, data_type: DataType) -> Column:
    """One value as a string that depends on the value only, not its width or the session zone."""
    if isinstance(data_type, StringType):
        return value
    if isinstance(data_type, TimestampType):
        return F.unix_micros(value).cast("string")  # an instant, whatever the session time zone
    if isinstance(data_type, TimestampNTZType):
        return value.cast("string")  # wall-clock text, zone-independent
    if isinstance(data_type, BinaryType):
        return F.hex(value)
    if isinstance(data_type, (StructType, ArrayType, MapType)):
        return F.to_json(value, _MICROS_JSON)
    return value.cast("string")  # numbers (int == bigint), booleans, dates, decimals


def row_hash(batch: DataFrame, columns: Sequence[str]) -> Column:
    """sha2-256 over `columns`, canonical and NULL-safe.

    Encoding: a JSON object {column name: canonical text} with keys sorted and NULLs omitted,
    so values can't run into each other, column order in the batch doesn't matter, and a
    column added later as NULL doesn't change old rows' hashes.
    """
    types = {f.name: f.dataType for f in batch.schema.fields}
    fields = [_canonical(c(name), types[name]).alias(name) for name in sorted(columns)]
    return F.sha2(F.to_json(F.struct(*fields), _MICROS_JSON), 256)


def add_columns(
    batch: DataFrame, spec: WriteSpec, user_columns: Sequence[str], run_started_at: datetime
) -> DataFrame:
    """Add the validity columns (values of a new version) and `_row_hash` unless the user versions."""
    valid_from, valid_to = spec.scd2.validity_column_names
    until = active_to(spec)
    out = batch.withColumn(valid_from, F.lit(boundary(spec, run_started_at)).cast("timestamp"))
    out = out.withColumn(valid_to, (F.lit(None) if until is None else F.lit(until)).cast("timestamp"))
    if spec.scd2.row_version_column_name is None:
        hashed = [name for name in user_columns if name != spec.hard_delete_column]
        out = out.withColumn(ROW_HASH, row_hash(batch, hashed))
    return out


# --- the strategy -------------------------------------------------------------------------------


class Scd2(SqlMergeStrategy):
    """The MergeStrategy "scd2"."""

    def prepare_batch(
        self, spec: WriteSpec, batch: DataFrame, *, run_started_at: datetime, deduplicated: bool = False
    ) -> DataFrame:
        """One row per entity (without a primary key: per row version, so identical duplicates
        collapse), plus the validity columns and the row hash."""
        keys: dict[str, Sequence[str]] = {"primary_key": spec.primary_key, "merge_key": spec.merge_key}
        if spec.scd2.row_version_column_name:
            keys["row_version_column_name"] = [spec.scd2.row_version_column_name]

        def with_columns(frame: DataFrame, user_columns: Sequence[str], started: datetime) -> tuple[DataFrame, list[str]]:
            return add_columns(frame, spec, user_columns, started), added_columns(spec)

        rules = BatchRules(
            keys=keys,
            dedup_key=entity_key(spec),
            check=lambda frame: check_settings(spec, frame),
            add_columns=with_columns,
        )
        return prepare_batch(spec, batch, rules, run_started_at=run_started_at, deduplicated=deduplicated)

    def statement(self, spec, target, view, columns, prune, params, run_started_at) -> str:
        return statement(spec, target, view, columns, prune, params, run_started_at=run_started_at)


# --- the statement ------------------------------------------------------------------------------


def statement(
    spec: WriteSpec,
    target: str,
    view: str,
    columns: Sequence[str],
    prune: Prune,
    params: Params,
    *,
    run_started_at: datetime,
) -> str:
    """The scd2 MERGE: retire what the source names, insert the new versions it carries.

    Source rows are of two kinds:
    - retire rows (join key set): active versions, within the pruned partitions, whose entity
      is in the batch with another version or a hard delete, or is absent from the batch while
      in scope (no merge_key: the whole table is the snapshot; with merge_key: only entities
      whose merge_key values appear in the batch);
    - insert rows (join key NULL, never match): batch rows that are not deletes and have no
      active version with the same row version.
    `view` is the quoted temp view of the prepared batch. A tombstone's merge_key values count
    as "in the batch", as in delete-insert (dlt): the batch reloads those merge_key groups.
    """
    valid_to = spec.scd2.validity_column_names[1]
    key = entity_key(spec)
    active = _active_condition(spec, params)
    active_versions = (
        f"SELECT DISTINCT {column_list(list(dict.fromkeys([*key, version_column(spec), *spec.merge_key])), 'd')}, "
        f"TRUE AS {quote(FOUND)} FROM {target} AS d WHERE {conj(active('d'), prune_condition('d', prune, params))}"
    )
    source = f"{_insert_rows(spec, view, columns, active_versions)}\nUNION ALL\n{_retire_rows(spec, view, columns, active_versions)}"
    on = conj(keys_equal("t", key, "s", join_keys(len(key))), active("t"), prune_condition("t", prune, params))
    retire_at = params.bind("boundary", boundary(spec, run_started_at))
    retire = f"WHEN MATCHED THEN UPDATE SET {col('t', valid_to)} = {retire_at}"
    return merge(target, source, on, [retire, insert_clause(columns, condition=col("s", INSERT))])


def _active_condition(spec: WriteSpec, params: Params) -> Callable[[str], str]:
    """`alias` -> the SQL condition "this row is an active version"."""
    valid_to = spec.scd2.validity_column_names[1]
    until = active_to(spec)

    def active(alias: str) -> str:
        if until is None:
            return f"{col(alias, valid_to)} IS NULL"
        return f"{col(alias, valid_to)} = {params.bind('active_to', until)}"

    return active


def _insert_rows(spec: WriteSpec, view: str, columns: Sequence[str], active_versions: str) -> str:
    """Batch rows that are not deletes and have no active version with the same row version."""
    key, version = entity_key(spec), version_column(spec)
    changed = f"NOT ({col('a', version)} <=> {col('b', version)})"
    insert_select = branch_columns(columns, rows_from="b", keys=["NULL"] * len(key), insert=True)
    return (
        f"SELECT {insert_select}\n"
        f"FROM {view} AS b LEFT JOIN ({active_versions}) AS a ON {keys_equal('b', key, 'a', key)}\n"
        f"WHERE NOT {col('b', DELETED)} AND ({col('a', FOUND)} IS NULL OR {changed})"
    )


def _retire_rows(spec: WriteSpec, view: str, columns: Sequence[str], active_versions: str) -> str:
    """Active versions whose entity has another version or a tombstone in the batch, or is
    absent from it while in scope (merge_key: only groups the batch names)."""
    key, version = entity_key(spec), version_column(spec)
    changed = f"NOT ({col('a', version)} <=> {col('b', version)})"
    if spec.merge_key:
        mk = list(spec.merge_key)
        scope_join = (
            f" LEFT JOIN (SELECT DISTINCT {column_list(mk)}, TRUE AS {quote(FOUND)} FROM {view}) AS m "
            f"ON {keys_equal('a', mk, 'm', mk)}"
        )
        in_scope = f"{col('m', FOUND)} IS NOT NULL"
    else:
        scope_join, in_scope = "", "TRUE"
    absent, present = f"{col('b', SURVIVOR)} IS NULL", f"{col('b', SURVIVOR)} IS NOT NULL"
    retire_select = branch_columns(columns, rows_from=None, keys=[col("a", k) for k in key], insert=False)
    return (
        f"SELECT DISTINCT {retire_select}\n"
        f"FROM ({active_versions}) AS a LEFT JOIN {view} AS b ON {keys_equal('a', key, 'b', key)}{scope_join}\n"
        f"WHERE ({absent} AND {in_scope}) OR ({present} AND ({col('b', DELETED)} OR {changed}))"
    )
