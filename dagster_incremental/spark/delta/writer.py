"""DeltaWriter: one run's batch into its Delta table as ONE commit that carries the cursor.

Every format's order (spark/batch_writer.py), on Delta's statements: fit the schema (ALTERs before
any data), then one data commit (INSERT | INSERT OVERWRITE | window MERGE | strategy MERGE | CREATE
[OR REPLACE] TABLE ... AS SELECT), then what it did from the commit's own operation metrics.
The strategies' MERGE statements and the window replace are the format-neutral ones of
spark/merge and spark/window_replace, written against the table's path."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dagster_incremental.errors import DataShapeError, IncrementalConfigError
from dagster_incremental.spark.batch_writer import BatchWriter, FitCheck
from dagster_incremental.spark.delta import figures
from dagster_incremental.spark.delta.column_mapping import PROPERTIES, mapped, needs_mapping, with_mapping
from dagster_incremental.spark.delta.commit import DeltaCommit
from dagster_incremental.spark.delta.in_process import write_in_process
from dagster_incremental.spark.delta.s3_lease import commit_lease
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.merge.delete_insert import key_groups
from dagster_incremental.spark.partitioning import parse_partition_spec
from dagster_incremental.spark.run_commit import CursorGuard, case_sensitive
from dagster_incremental.spark.schema_evolution import SchemaPlan
from dagster_incremental.spark.sql import column_list, quote
from dagster_incremental.spark.statements import run_merge
from dagster_incremental.spark.statistics import pairing_key
from dagster_incremental.spark.table_create import TableAlreadyExists, rows_to_create, string_literal
from dagster_incremental.spark.write_spec import CommitInfo, WindowReplace, WriteResult, WriteSpec

# How Delta says a path was taken by another creator, depending on how far its commit had got.
# (NON_EMPTY_LOCATION: the other creator's data files are in the folder, its first commit not yet.)
_CREATION_RACE = ("ALREADY_EXISTS", "already exists", "DELTA_TABLE_NOT_FOUND", "ProtocolChangedException",
                  "ConcurrentWriteException", "FileAlreadyExistsException", "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION")


def _lost_creation_race(error: BaseException) -> bool:
    """Whether a CREATE failed because another run was creating the same table."""
    return any(sign in str(error) for sign in _CREATION_RACE)


def _keeps_types(plan: SchemaPlan, table_schema: T.StructType) -> None:
    """Delta changes a column's type only with its type-widening table feature, which other
    readers (delta-rs) do not read yet: a plan that widens one is refused before anything is written."""
    if not plan.widen:
        return
    held = {f.name: f.dataType.simpleString() for f in table_schema.fields}
    changes = ", ".join(f"{name!r} is {held.get(name)} in the table but {new.simpleString()} in the batch"
                        for name, new in plan.widen)
    raise DataShapeError(
        f"table {plan.table.display}: {changes}; a Delta table keeps a column's type. Cast the column "
        f"to the table's type in the asset, or run a full refresh to recreate the table with the new type."
    )


def _properties_sql(spark: SparkSession, properties: Mapping[str, str]) -> str:
    """`'key' = 'value', ...` as TBLPROPERTIES takes them."""
    return ", ".join(f"{string_literal(spark, k)} = {string_literal(spark, v)}" for k, v in properties.items())


class DeltaWriter(BatchWriter[DeltaCommit]):
    """Writes one run's batch to its Delta table (`spec.table.location`) in one commit.

    Args:
        spark: the session, or a function building it: a batch delta-rs commits needs no JVM,
            so the session is built only when a Spark statement runs.
        settings: the flat conf the session is built from, read instead of the session's own
            (time zone, case sensitivity) so that no JVM starts for them.
    """

    def __init__(self, spark: SparkSession | Callable[[], SparkSession], settings: Mapping[str, str] | None = None) -> None:
        # A Spark Connect session is no pyspark.sql.SparkSession: a provider is told by being callable.
        self._provider = spark if callable(spark) else None
        self._spark = None if callable(spark) else spark
        self._settings = settings

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            assert self._provider is not None
            self._spark = self._provider()
        return self._spark

    def _setting(self, key: str, default: str) -> str:
        """A session setting, from the conf it is built from when given (no JVM started)."""
        if self._settings is not None:
            return str(self._settings.get(key, default))
        return str(self.spark.conf.get(key, default))

    def write(
        self,
        spec: WriteSpec,
        batch: Any,
        *,
        commit: CommitInfo,
        window: WindowReplace | None = None,
        full_refresh: bool = False,
        run_started_at: datetime | None = None,
        deduplicated: bool = False,
        guard: CursorGuard | None = None,
    ) -> WriteResult:
        """As TableWriter.write, on Delta (raises StaleCursor or BaseMoved under a guard). On S3
        the whole write holds the table's commit lease: its cursor check, schema change and commit."""
        assert spec.table.location is not None, "a Delta table has a location"
        pending = DeltaCommit.open(case_sensitive(self._setting), spec, commit, run_started_at, guard)
        with commit_lease(spec.table.location, spec.table.display):
            return self._write_batch(pending, batch, window, full_refresh, deduplicated)

    # -- the steps of the shared order (spark/batch_writer.py) -------------------------------------

    def _in_process(self, pending: DeltaCommit, local: LocalRows, deduplicated: bool) -> WriteResult | None:
        """Local rows appended or merged by delta-rs, without a JVM."""
        time_zone = self._setting("spark.sql.session.timeZone", "UTC")
        return write_in_process(pending, local, deduplicated=deduplicated, time_zone=time_zone)

    def _exists(self, pending: DeltaCommit) -> bool:
        return pending.log.current_version() is not None

    # -- creating ----------------------------------------------------------------------------------

    def _create_empty(self, pending: DeltaCommit, schema: T.StructType) -> None:
        """CREATE TABLE with no rows; a table another run created meanwhile is taken as it is."""
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
        try:
            self.spark.sql(f"CREATE TABLE {pending.table.sql} ({columns}) {self._clauses(pending.spec, schema)}")
        except Exception as exc:
            if not (_lost_creation_race(exc) and pending.created_by_another()):
                raise

    def _create_as_select(self, pending: DeltaCommit, batch: DataFrame | None, data_schema: T.StructType | None,
                          helpers: Sequence[str], *, replace: bool) -> WriteResult:
        """CREATE [OR REPLACE] TABLE ... AS SELECT: schema, rows and cursor in one commit."""
        spark, table = self.spark, pending.table
        previous = figures.row_count(spark, table, pending.log.current_version()) if replace else 0
        schema, rows = rows_to_create(spark, table, batch, data_schema, helpers)
        if replace:  # Delta replaces a table at a path through an overwrite that may change its schema
            write = rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            self._clauses(pending.spec, schema)  # refuses a partition transform before anything is written
            self._map_columns_for(pending, schema.fieldNames())
            parts = [f.column for f in parse_partition_spec(pending.spec.partition_by, schema.fieldNames())]
            made = pending.advancing().run(spark, lambda: write.partitionBy(*parts).save(table.location))
            return figures.result(spark, pending, made, deleted=previous)
        view = f"di_create_{pending.commit_id}"
        rows.createOrReplaceTempView(view)
        text = (f"CREATE TABLE {table.sql} {self._clauses(pending.spec, schema)} "
                f"AS SELECT {column_list(schema.fieldNames())} FROM {quote(view)}")
        try:
            made = pending.unguarded().run(spark, lambda: spark.sql(text))
        except Exception as exc:
            # Another run is creating the table (Delta says so in several ways, depending on how
            # far its commit had got): once it has, write into it as usual; the cursor check decides.
            if _lost_creation_race(exc) and pending.created_by_another():
                raise TableAlreadyExists(str(table)) from exc
            raise
        finally:
            spark.catalog.dropTempView(view)
        return figures.result(spark, pending, made, deleted=previous)

    def _clauses(self, spec: WriteSpec, schema: T.StructType) -> str:
        """`USING delta PARTITIONED BY (...) TBLPROPERTIES (...)`: Delta partitions by column
        values only (no transforms)."""
        fields = parse_partition_spec(spec.partition_by, schema.fieldNames(), table=str(spec.table))
        transformed = [item for item, f in zip(spec.partition_by, fields) if f.transform is not None]
        if transformed:
            raise IncrementalConfigError(
                f"table {spec.table.display}: partition_by {transformed} uses a transform, which Delta "
                "tables do not have (they partition by a column's values). Partition by a column "
                "the asset computes, e.g. a date column derived from the timestamp."
            )
        text = "USING delta"
        if fields:
            text += f" PARTITIONED BY ({', '.join(f.sql() for f in fields)})"
        properties = with_mapping({str(k): str(v) for k, v in spec.table_properties.items()}, schema.fieldNames())
        if properties:
            text += f" TBLPROPERTIES ({_properties_sql(self.spark, properties)})"
        return text

    def _map_columns_for(self, pending: DeltaCommit, names: Sequence[str]) -> None:
        """Turn on column mapping on the existing table before a change that brings a column
        name Delta takes only under it (its own commit, as an ALTER is; no rows change)."""
        version = pending.log.current_version()
        if not needs_mapping(names) or version is None or mapped(pending.log.configuration(version)):
            return
        self.spark.sql(f"ALTER TABLE {pending.table.sql} SET TBLPROPERTIES ({_properties_sql(self.spark, PROPERTIES)})")

    def _fit_check(self, pending: DeltaCommit) -> FitCheck:
        """Before the schema's ALTERs: refuse a type change, map columns a new name needs."""
        def check(plan: SchemaPlan, table_schema: T.StructType) -> None:
            _keeps_types(plan, table_schema)
            self._map_columns_for(pending, [f.name for f in plan.add])
        return check

    # -- dispositions ------------------------------------------------------------------------------

    def _commit(self, pending: DeltaCommit, aligned: DataFrame | None, table_schema: T.StructType,
                local_count: int | None) -> WriteResult:
        """The data commit of spec's disposition (no window); `local_count` is not needed: Delta's
        metrics count what the commit did."""
        spark, spec = self.spark, pending.spec
        rows = aligned if aligned is not None else spark.createDataFrame([], table_schema)
        if spec.disposition == "merge" and aligned is not None:
            return self._merge(pending, rows, table_schema)
        if spec.disposition not in ("append", "replace", "merge"):
            raise IncrementalConfigError(
                f"table {spec.table}: unknown write disposition {spec.disposition!r}; use append, replace or merge."
            )
        previous = figures.row_count(spark, spec.table, pending.log.current_version()) if spec.disposition == "replace" else 0
        verb = "INSERT OVERWRITE" if spec.disposition == "replace" else "INSERT INTO"
        view = f"di_rows_{pending.commit_id}"
        rows.createOrReplaceTempView(view)
        names = column_list(table_schema.fieldNames())
        try:
            made = pending.run(spark, lambda: spark.sql(f"{verb} {spec.table.sql} ({names}) SELECT {names} FROM {quote(view)}"))
        finally:
            spark.catalog.dropTempView(view)
        return figures.result(spark, pending, made, deleted=previous)

    def _merge(self, pending: DeltaCommit, aligned: DataFrame, table_schema: T.StructType) -> WriteResult:
        spark, spec = self.spark, pending.spec
        made = run_merge(spark, pending, spec, aligned, table_schema.fieldNames())
        netted = spec.merge_strategy == "delete-insert" and not spec.keyed
        touched = (key_groups(spec), aligned) if spec.merge_strategy == "delete-insert" else None
        return figures.result(spark, pending, made, net_by=pairing_key(spec) if netted else None, touched=touched)

    def _window_result(self, pending: DeltaCommit, window: WindowReplace) -> WriteResult:
        return figures.result(self.spark, pending, pending.made(), net_by=pairing_key(pending.spec), window=window)
