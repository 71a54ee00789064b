"""insert-only (dlt's semantics): insert the rows whose primary key the table does not hold yet,
in ONE MERGE; rows already there are never updated or deleted, merge_key is ignored, and a
hard-delete tombstone is only left out of the insert."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame

from dagster_incremental.spark.merge.prepare import BatchRules, prepare_batch
from dagster_incremental.spark.merge.sql import DELETED, Params, col, conj, insert_clause, keys_equal, merge, prune_condition
from dagster_incremental.spark.merge.strategy import Prune, SqlMergeStrategy
from dagster_incremental.spark.write_spec import WriteSpec


class InsertOnly(SqlMergeStrategy):
    """The MergeStrategy "insert-only"."""

    def prepare_batch(
        self, spec: WriteSpec, batch: DataFrame, *, run_started_at: datetime, deduplicated: bool = False
    ) -> DataFrame:
        """One row per primary key, chosen as for upsert (a key new to the table gets that row)."""
        rules = BatchRules(keys={"primary_key": spec.primary_key}, dedup_key=spec.primary_key)
        return prepare_batch(spec, batch, rules, run_started_at=run_started_at, deduplicated=deduplicated)

    def statement(self, spec, target, view, columns, prune, params, run_started_at) -> str:
        return statement(spec, target, view, columns, prune, params)


def statement(spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune, params: Params) -> str:
    """`WHEN NOT MATCHED THEN INSERT` only: Spark plans it as an anti join and an append, so no
    data file of the table is rewritten."""
    pk = list(spec.primary_key)
    on = conj(keys_equal("t", pk, "s", pk), prune_condition("t", prune, params))
    not_deleted = f"NOT {col('s', DELETED)}" if spec.hard_delete_column else ""
    return merge(target, f"SELECT * FROM {view}", on, [insert_clause(columns, condition=not_deleted)])
