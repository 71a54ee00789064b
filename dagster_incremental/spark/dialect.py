"""The table-format-specific part of a write (Iceberg today): DDL clauses, commit properties and
the conflict check, behind one seam so a Delta twin would replace this module alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dagster_incremental.errors import ConcurrentRunError, IncrementalConfigError
from dagster_incremental.spark import errors as spark_errors
from dagster_incremental.spark.branch_commit import CursorGuard, RunBranch, branch_ref
from dagster_incremental.spark.commit import iceberg_table, with_commit_properties, write_options
from dagster_incremental.spark.partitioning import parse_partition_spec
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteSpec

DEFAULT_TABLE_PROPERTIES: Mapping[str, str] = {
    # v2: row-level operations and sequence numbers; the baseline for MERGE on Iceberg.
    "format-version": "2",
    # Copy-on-write for MERGE/UPDATE/DELETE: a commit rewrites the data files it touches, and
    # readers never pay for delete files. Right for window replaces (they rewrite a window's
    # files anyway) and scd2 (retires few rows). Keyed merges (upsert, delete-insert on the
    # primary key) are switched to merge-on-read below: their updates hit old rows everywhere.
    "write.delete.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.merge.mode": "copy-on-write",
    # hash: rows are clustered by partition before writing, so a small commit writes one file
    # per touched partition instead of one per task per partition (fewer tiny files).
    "write.distribution-mode": "hash",
    # Every commit writes a new metadata.json; keep the newest 100 and delete older ones so
    # frequent small commits don't pile up files. Snapshots (and so cursors) are unaffected.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


class IcebergDialect:
    """The table-format-specific part, the seam for a Delta twin.

    - DDL: `USING iceberg`, transforms in PARTITIONED BY, TBLPROPERTIES (Delta: `USING delta`,
      identity partitions only, `delta.*` properties).
    - commit properties: writer options `snapshot-property.*` and, for SQL statements,
      CommitMetadata over py4j (Delta: the `userMetadata` writer option /
      `spark.databricks.delta.commitInfo.userMetadata`, read back from DESCRIBE HISTORY).
    - replace-by-predicate: the window MERGE of `window_replace` (Delta's `replaceWhere`
      accepts partial files, so it could use that instead).
    """

    def writer_options(self, properties: Mapping[str, str]) -> dict[str, str]:
        """DataFrameWriterV2 options that put `properties` on the commit."""
        return write_options(properties)

    def run_committing(self, spark: SparkSession, properties: Mapping[str, str], fn: Callable[[], Any]) -> Any:
        """Run a SQL statement (in `fn`) so its commit carries `properties`."""
        return with_commit_properties(spark, properties, fn)

    def ensure_namespace(self, spark: SparkSession, table: TableRef) -> None:
        """Create the namespace unless it exists. Two runs creating it at once on a catalog
        service (JDBC) race past IF NOT EXISTS and one fails on the catalog's unique key: the
        second attempt finds the namespace the other run created."""
        statement = f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql}"
        try:
            spark.sql(statement)
        except Exception:  # noqa: BLE001 - raised again below if the namespace still is not there
            spark.sql(statement)

    def table_clauses(self, spark: SparkSession, spec: WriteSpec, schema: T.StructType) -> str:
        """`USING iceberg PARTITIONED BY (...) TBLPROPERTIES (...)` for spec and schema."""
        fields = parse_partition_spec(spec.partition_by, schema.fieldNames(), table=str(spec.table))
        properties = {**DEFAULT_TABLE_PROPERTIES, **strategy_properties(spec), **dict(spec.table_properties)}
        text = "USING iceberg"
        if fields:
            text += f" PARTITIONED BY ({', '.join(f.sql() for f in fields)})"
        rendered = ", ".join(
            f"{string_literal(spark, str(k))} = {string_literal(spark, str(v))}"
            for k, v in properties.items()
        )
        return f"{text} TBLPROPERTIES ({rendered})"


@dataclass(frozen=True)
class PendingCommit:
    """The one commit a write makes: its id (to find its snapshot afterwards), the properties it
    carries (the cursor) and the format it is made in."""

    spec: WriteSpec
    dialect: IcebergDialect
    commit_id: str
    properties: Mapping[str, str]
    started: datetime  # the run's start: scd2's default boundary
    case_sensitive: bool
    guard: CursorGuard | None = None  # a cursor-carrying run: commit by compare-and-set (branch_commit)
    branch: str = ""  # the run's branch name under a guard

    @property
    def table(self) -> TableRef:
        return self.spec.table

    @property
    def target(self) -> TableRef:
        """What the data statement writes: the run's branch under a guard, else the table."""
        return branch_ref(self.table, self.branch) if self.guard is not None else self.table

    def unguarded(self) -> PendingCommit:
        """For CREATE [OR REPLACE] TABLE ... AS SELECT: a create is atomic in every catalog (it
        fails when the table exists), a full refresh replaces the table whatever it holds."""
        return dataclasses.replace(self, guard=None)

    def run(self, spark: SparkSession, fn: Callable[[], Any]) -> Any:
        """Run the SQL statement in `fn` (written against `target`) as this commit; conflicts
        become ConcurrentRunError."""
        with self.guarded(spark):
            return self.dialect.run_committing(spark, self.properties, fn)

    def append(self, spark: SparkSession, frame: DataFrame) -> None:
        """Append `frame`'s rows as this commit."""
        with self.guarded(spark):
            frame.writeTo(self.target.sql).options(**self.dialect.writer_options(self.properties)).append()

    def overwrite_all(self, spark: SparkSession, frame: DataFrame) -> None:
        """Replace every row of the table by `frame`'s, as this commit."""
        with self.guarded(spark):
            options = self.dialect.writer_options(self.properties)
            frame.writeTo(self.target.sql).options(**options).overwrite(F.lit(True))

    @contextmanager
    def guarded(self, spark: SparkSession) -> Iterator[None]:
        """Around the data commit (also the local append's): conflicts as ConcurrentRunError;
        under a guard, the branch is taken first and published after (raises StaleCursor or
        BaseMoved, nothing visible written)."""
        with conflicts_as_concurrent_run(self.table):
            if self.guard is None:
                yield
                return
            branch = RunBranch(iceberg_table(spark, self.table), spark._jvm, self.branch)
            branch.take(self.guard)
            try:
                yield
                branch.publish()
            except BaseException:
                branch.abandon()
                raise


def dialect_for(spec: WriteSpec) -> IcebergDialect:
    if spec.table_format == "iceberg":
        return IcebergDialect()
    if spec.table_format == "delta":
        raise IncrementalConfigError(
            f"table {spec.table}: format = \"delta\" is not supported by the table writer yet "
            "(no Delta jars ship with this package); use format = \"iceberg\"."
        )
    raise IncrementalConfigError(
        f"table {spec.table}: unknown table format {spec.table_format!r}; use \"iceberg\"."
    )


@contextmanager
def conflicts_as_concurrent_run(table: TableRef) -> Iterator[None]:
    """Re-raise Iceberg commit conflicts as ConcurrentRunError (the table is unchanged)."""
    try:
        yield
    except Exception as exc:
        if spark_errors.is_commit_conflict(exc):
            raise ConcurrentRunError(
                f"table {table}: another writer committed to the table while this run was "
                "writing, so this run's commit was rejected and nothing was written. Re-run it.",
                table=table.display,
            ) from exc
        raise


def string_literal(spark: SparkSession, value: str) -> str:
    """A Spark SQL string literal, for DDL table properties only (DDL takes no parameters)."""
    escaped_mode = spark.conf.get("spark.sql.parser.escapedStringLiterals", "false").lower() == "true"
    if escaped_mode:
        if "'" in value or "\\" in value:
            raise IncrementalConfigError(
                f"table property {value!r} contains a quote or backslash, which can't be written "
                "while spark.sql.parser.escapedStringLiterals is on."
            )
        return f"'{value}'"
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def strategy_properties(spec: WriteSpec) -> dict[str, str]:
    """Merge-on-read for keyed merges: a change batch whose updates are spread over the whole
    table (the usual case: ids don't follow updated_at) writes its rows plus one small delete
    file instead of rewriting every data file it touches (measured: 10k upserts into 1M rows,
    MERGE 4-5x faster). The IO manager compacts the delete files every few runs (maintenance)."""
    if spec.disposition == "merge" and counted_by_keys(spec):
        return {"write.merge.mode": "merge-on-read"}
    return {}


def counted_by_keys(spec: WriteSpec) -> bool:
    """Strategies whose MERGE touches exactly the batch's primary keys: upsert, and delete-insert
    on the primary key alone (merge_key widens the delete; scd2 retires and inserts versions)."""
    strategy = spec.strategy or "delete-insert"
    return bool(spec.primary_key) and (strategy == "upsert" or (strategy == "delete-insert" and not spec.merge_key))
