"""TableWriter: one run's batch into its Spark table as ONE commit that also carries the cursor."""

# The order of things is every format's (spark/batch_writer.py); this module supplies Iceberg's
# steps: the namespace, CREATE [OR REPLACE] ... AS SELECT, the data commit (append | overwrite-all |
# strategy MERGE) on a branch carrying the cursor, and what that commit did, read from its snapshot.

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.batch_writer import BatchWriter
from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.iceberg.commit import PendingCommit, read_committed_state, snapshots_of
from dagster_incremental.spark.iceberg.figures import commit_result, unchanged
from dagster_incremental.spark.iceberg.over_connect import CatalogTables
from dagster_incremental.spark.iceberg.snapshots import Snapshots
from dagster_incremental.spark.iceberg.local.write import write_local
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.merge import upsert
from dagster_incremental.spark.run_commit import CursorGuard
from dagster_incremental.spark.statements import run_merge
from dagster_incremental.spark.statistics import batch_rows, pairing_key
from dagster_incremental.spark.iceberg.table_create import create_as_select, create_table, ensure_namespace
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, WindowReplace, WriteResult, WriteSpec

__all__ = ["TableWriter"]


class TableWriter(BatchWriter[PendingCommit]):
    """Writes one run's batch to its table in one atomic commit that carries the cursor.

    Args:
        spark: the session whose catalog holds the table (`spec.table`).
        catalog: over Spark Connect, the table's catalog as pyiceberg reaches it from this process
            (the run's branch and the figures go through it); None: the Spark driver is here.

    Examples:
        .. code-block:: python

            writer = TableWriter(spark)
            spec = WriteSpec(table=TableRef.for_asset("lake", "sales", ["orders"]),
                             disposition="merge", strategy="upsert", primary_key=("id",))
            result = writer.write(spec, batch, commit=CommitInfo(state={"last_value": "..."},
                                                                 run_id=context.run_id))
            writer.read_committed_state(spec.table)  # -> CommittedState(state={...}, ...)
    """

    def __init__(self, spark: SparkSession, catalog: CatalogTables | None = None) -> None:
        self._spark = spark
        self._catalog = catalog

    @property
    def spark(self) -> SparkSession:
        return self._spark

    # -- reading ---------------------------------------------------------------------------------

    def table_exists(self, table: TableRef) -> bool:
        """Catalog lookup; real errors (catalog down, bad name) propagate instead of reading as False."""
        return bool(self.spark.catalog.tableExists(table.sql))

    def read_committed_state(self, table: TableRef, scope: str | None = None) -> CommittedState | None:
        """The newest cursor committed with the table (see commit.read_committed_state)."""
        return read_committed_state(self.spark, table, scope)

    def unchanged(self, table: TableRef) -> WriteResult:
        """The WriteResult of a run that commits nothing: the table as it is."""
        return unchanged(self.spark, table, self.snapshots(table))

    def snapshots(self, table: TableRef) -> Snapshots:
        """The table's snapshots, read where this process can (see spark/iceberg/snapshots.py)."""
        return snapshots_of(self.spark, table, self._catalog)

    # -- writing ---------------------------------------------------------------------------------

    def write(
        self,
        spec: WriteSpec,
        batch: DataFrame | None,
        *,
        commit: CommitInfo,
        window: WindowReplace | None = None,
        full_refresh: bool = False,
        run_started_at: datetime | None = None,
        deduplicated: bool = False,
        guard: CursorGuard | None = None,
    ) -> WriteResult:
        """Apply spec's disposition to `batch` in ONE table commit whose snapshot carries `commit`.

        - append: add the rows; replace: the table holds exactly the batch afterwards;
          merge: the MERGE of spec.strategy.
        - window: (any disposition) replace exactly the rows with window.column in
          [start, end) by the batch (for merge: the deduplicated batch), whatever the layout.
        - full_refresh: replace the table, schema and all, by the batch.
        - batch None means "no rows and no schema": the cursor is still committed when the table
          exists (an empty commit); without a table there is nothing to create and no commit.

        Schema changes (new columns, type promotions) are applied before the data commit; a
        batch that can't fit raises DataShapeError before anything changes. deduplicated: a
        merge batch is already one non-NULL row per primary key (see spark/local/dedup.py).
        guard: the cursor the run read; the data commit then happens only if the table still
        holds it (compare-and-set, see commit.RunBranch; raises StaleCursor or BaseMoved).
        """
        pending = PendingCommit.open(self.spark, spec, commit, run_started_at, guard, self._catalog)
        return self._write_batch(pending, batch, window, full_refresh, deduplicated)

    # -- the steps of the shared order (spark/batch_writer.py) -------------------------------------

    def _in_process(self, pending: PendingCommit, local: LocalRows, deduplicated: bool) -> WriteResult | None:
        """Local rows appended or merged by Iceberg's Java API, without a Spark job (not over
        Spark Connect: no Java API here, and the server does not see this machine's files)."""
        if pending.catalog is not None:
            return None
        exists = pending.iceberg is not None
        return write_local(self.spark, pending, local, exists=exists, deduplicated=deduplicated)

    def _exists(self, pending: PendingCommit) -> bool:
        return self.table_exists(pending.spec.table)

    def _before_create(self, pending: PendingCommit) -> None:
        """A table lives in a namespace of its catalog, which may not exist yet."""
        ensure_namespace(self.spark, pending.spec.table)

    def _create_as_select(self, pending: PendingCommit, batch: DataFrame | None, data_schema: T.StructType | None,
                          helpers: Sequence[str], *, replace: bool) -> WriteResult:
        return create_as_select(self.spark, pending, batch, data_schema, helpers, exists=replace)

    def _create_empty(self, pending: PendingCommit, schema: T.StructType) -> bool:
        return create_table(self.spark, pending, schema)

    # -- dispositions ------------------------------------------------------------------------------

    def _commit(
        self, pending: PendingCommit, aligned: DataFrame | None, table_schema: T.StructType, local_count: int | None
    ) -> WriteResult:
        """The data commit of spec's disposition (no window)."""
        spark, spec = self.spark, pending.spec
        rows = aligned if aligned is not None else spark.createDataFrame([], table_schema)
        if spec.disposition == "append" or (spec.disposition == "merge" and aligned is None):
            pending.append(spark, rows)
            return commit_result(spark, pending, kind="summary")
        if spec.disposition == "replace":
            pending.overwrite_all(spark, rows)
            return commit_result(spark, pending, kind="summary")
        if spec.disposition == "merge":
            return self._merge(pending, rows, table_schema, local_count)
        raise IncrementalConfigError(
            f"table {spec.table}: unknown write disposition {spec.disposition!r}; "
            "use append, replace or merge."
        )

    def _merge(
        self, pending: PendingCommit, aligned: DataFrame, table_schema: T.StructType, local_count: int | None
    ) -> WriteResult:
        """The strategy's ONE MERGE (spark/statements.py), counted by the batch's keys where the
        merge replaces by key."""
        spark, spec = self.spark, pending.spec
        counted = batch_rows(aligned, spec, local_count) if spec.replaces_by_key else None
        if counted is not None:
            spec = upsert.for_extract(spec, counted.rows + counted.tombstones)
        run_merge(spark, pending, spec, aligned, table_schema.fieldNames())
        if counted is not None:
            return commit_result(spark, pending, kind="keyed", batch_rows=counted, aligned=aligned)
        return commit_result(spark, pending, kind="changes", keys=pairing_key(spec))

    def _window_result(self, pending: PendingCommit, window: WindowReplace) -> WriteResult:
        return commit_result(self.spark, pending, kind="window", keys=pairing_key(pending.spec), window=window)
