"""What the table writer calls on a merge strategy, typed: one prepared batch, then ONE MERGE
statement (the writer attaches the cursor to exactly one commit)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import WriteSpec

Prune = Sequence[tuple[str, Any, Any]]  # (partition column, min, max) of the batch


class MergeStrategy(Protocol):
    """One merge strategy (delete-insert, upsert, scd2).

    How the writer uses it::

        prepared = strategy.prepare_batch(spec, batch, run_started_at=started)
        # create / evolve the table from prepared's schema minus the `__di_*` columns; give the
        # view every table column (typed NULL where the batch has none) and keep the helpers
        aligned.createOrReplaceTempView(view)
        text, args = strategy.merge_statement(spec, target=spec.table, source_view=view,
                                              columns=table_schema.fieldNames(),
                                              run_started_at=started, prune=bounds)
        spark.sql(text, args=args)  # the one commit
    """

    def prepare_batch(
        self, spec: WriteSpec, batch: DataFrame, *, run_started_at: datetime, deduplicated: bool = False
    ) -> DataFrame:
        """The MERGE's source: the batch validated, deduplicated, with the `__di_*` helper columns
        (`__di_deleted`, `__di_survivor`) the writer keeps out of the table."""
        ...

    def merge_statement(
        self,
        spec: WriteSpec,
        *,
        target: TableRef,
        source_view: str,
        columns: Sequence[str],
        run_started_at: datetime,
        prune: Prune = (),
    ) -> tuple[str, dict[str, Any]]:
        """ONE `MERGE INTO target ...` and its named parameters (values never become SQL text).

        columns: the table's columns after schema evolution, each one a column of `source_view`;
        prune: ANDed into every target-side condition so Iceberg reads only those files (a None
        bound skips that column).
        """
        ...


class SqlMergeStrategy:
    """`merge_statement` written once: the view quoted, the helper columns left out, parameters
    collected; a strategy gives only its `statement` (the MERGE text)."""

    def statement(self, spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune,
                  params: Any, run_started_at: datetime) -> str:
        raise NotImplementedError

    def merge_statement(
        self,
        spec: WriteSpec,
        *,
        target: TableRef,
        source_view: str,
        columns: Sequence[str],
        run_started_at: datetime,
        prune: Prune = (),
    ) -> tuple[str, dict[str, Any]]:
        from dagster_incremental.spark.merge.sql import Params, written_columns
        from dagster_incremental.spark.sql import quote

        params = Params()
        text = self.statement(spec, target.sql, quote(source_view), written_columns(columns), prune, params,
                              run_started_at)
        return text, dict(params.values)
