"""The order every format's writer follows for one run's batch, written once: rows held in the
process first go to the format's in-process commit; otherwise, on Spark,

    does the table exist -> CREATE ... AS SELECT (a new table, or a full refresh) -> fit the
    schema (ALTERs before any data, or an empty CREATE) -> window replace | the disposition's commit

Each format supplies the steps (spark/iceberg/writer.py, spark/delta/writer.py), and with them
its one commit (`C`, a `DataCommit`) and how it counts what that commit did. Nothing here asks
which format a table is."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dagster_incremental.spark.batch_fit import fitted_batch, prepared_batch
from dagster_incremental.spark.data_commit import DataCommit
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.local.stage import arrow_to_spark, as_local
from dagster_incremental.spark.schema_evolution import SchemaPlan
from dagster_incremental.spark.statements import window_rows
from dagster_incremental.spark.table_create import TableAlreadyExists
from dagster_incremental.spark.window_replace import replace_window
from dagster_incremental.spark.write_spec import WindowReplace, WriteResult

C = TypeVar("C", bound=DataCommit)

FitCheck = Callable[[SchemaPlan, T.StructType], None]  # may refuse a schema change before its ALTERs


class BatchWriter(ABC, Generic[C]):
    """A format's writer: the shared order of one batch's write (`_write_batch`), the format's
    steps abstract."""

    @property
    @abstractmethod
    def spark(self) -> SparkSession: ...

    def _write_batch(self, pending: C, batch: Any, window: WindowReplace | None, full_refresh: bool,
                     deduplicated: bool) -> WriteResult:
        """Write `batch` as `pending`: in the run's process when the format can, else on Spark."""
        local = as_local(batch)
        local_count = None  # rows of a local batch (deduplicated: what the MERGE gets), known without a job
        if local is not None:
            if window is None and not full_refresh:
                done = self._in_process(pending, local, deduplicated)
                if done is not None:
                    return done
            local_count = local.num_rows if deduplicated else None
            batch = arrow_to_spark(self.spark, local)
        return self._write_frame(pending, batch, window, full_refresh, deduplicated, local_count)

    def _write_frame(self, pending: C, batch: DataFrame | None, window: WindowReplace | None, full_refresh: bool,
                     deduplicated: bool, local_count: int | None) -> WriteResult:
        """The Spark path: the table created with the rows, or its schema fitted and then the
        window's or the disposition's commit."""
        batch, helpers = prepared_batch(pending, batch, deduplicated)
        data_schema = T.StructType([f for f in batch.schema.fields if f.name not in helpers]) if batch is not None else None
        exists = self._exists(pending)
        if batch is None and not exists:
            return WriteResult(0, 0, 0, 0, None, ())  # no rows, no schema, no table: nothing to create
        self._before_create(pending)
        if full_refresh or (not exists and window is None):
            # A new table: whatever the disposition, the result is the rows to insert, so one
            # CREATE ... AS SELECT writes schema, rows and cursor in one commit, without a MERGE
            # against nothing. Another creator may win the race: then write into its table as usual.
            try:
                return self._create_as_select(pending, batch, data_schema, helpers, replace=exists)
            except TableAlreadyExists:
                exists = True
        create = None if exists else (lambda schema: self._create_empty(pending, schema))
        table_schema, aligned = fitted_batch(self.spark, pending, batch, data_schema, helpers, create=create,
                                             check=self._fit_check(pending))
        if window is not None:
            return self._replace_window(pending, aligned, table_schema, helpers, window)
        return self._commit(pending, aligned, table_schema, local_count)

    def _replace_window(self, pending: C, aligned: DataFrame | None, table_schema: T.StructType,
                        helpers: Sequence[str], window: WindowReplace) -> WriteResult:
        """The window's rows replaced by the batch's (for merge: its deduplicated rows) in one MERGE."""
        rows, moved_keys = window_rows(pending.spec, aligned, helpers)
        replace_window(self.spark, pending, rows, table_schema, window, moved_keys=moved_keys)
        return self._window_result(pending, window)

    def _before_create(self, pending: C) -> None:
        """What the table's place needs before a CREATE or a write (nothing, unless the format says)."""

    def _fit_check(self, pending: C) -> FitCheck | None:
        """What the format refuses of a schema change before its ALTERs (None: nothing)."""
        return None

    # -- the format's steps --------------------------------------------------------------------------

    @abstractmethod
    def _in_process(self, pending: C, local: LocalRows, deduplicated: bool) -> WriteResult | None:
        """Commit local rows without a Spark statement (None: the format's in-process path declines)."""

    @abstractmethod
    def _exists(self, pending: C) -> bool:
        """Whether the table exists now."""

    @abstractmethod
    def _create_as_select(self, pending: C, batch: DataFrame | None, data_schema: T.StructType | None,
                          helpers: Sequence[str], *, replace: bool) -> WriteResult:
        """CREATE [OR REPLACE] ... AS SELECT: schema, rows and cursor in one commit; raises
        TableAlreadyExists when a plain CREATE lost the race to another creator."""

    @abstractmethod
    def _create_empty(self, pending: C, schema: T.StructType) -> object:
        """CREATE TABLE with `schema` and no rows (another creator's table is taken as it is)."""

    @abstractmethod
    def _commit(self, pending: C, aligned: DataFrame | None, table_schema: T.StructType,
                local_count: int | None) -> WriteResult:
        """The disposition's data commit (no window), and what it did."""

    @abstractmethod
    def _window_result(self, pending: C, window: WindowReplace) -> WriteResult:
        """What the window replace's commit did."""


__all__ = ["BatchWriter", "FitCheck"]
