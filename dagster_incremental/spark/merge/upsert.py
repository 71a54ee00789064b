"""upsert (dlt's semantics) on the primary key: update matched rows, insert new ones, in ONE
MERGE; merge_key is ignored, and a hard-delete tombstone deletes its row and is never inserted.
With delete_missing the batch is a full extract and the table's rows it lacks are deleted too."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame

from dagster_incremental.spark.merge.prepare import BatchRules, prepare_batch
from dagster_incremental.spark.merge.sql import (
    DELETED,
    Params,
    col,
    conj,
    insert_clause,
    keys_equal,
    merge,
    prune_condition,
)
from dagster_incremental.spark.merge.strategy import Prune, SqlMergeStrategy
from dagster_incremental.spark.write_spec import WriteSpec


class Upsert(SqlMergeStrategy):
    """The MergeStrategy "upsert"."""

    def prepare_batch(
        self, spec: WriteSpec, batch: DataFrame, *, run_started_at: datetime, deduplicated: bool = False
    ) -> DataFrame:
        """One row per primary key (merge_key is not checked: upsert ignores it)."""
        rules = BatchRules(keys={"primary_key": spec.primary_key}, dedup_key=spec.primary_key)
        return prepare_batch(spec, batch, rules, run_started_at=run_started_at, deduplicated=deduplicated)

    def statement(self, spec, target, view, columns, prune, params, run_started_at) -> str:
        return statement(spec, target, view, columns, prune, params)


def for_extract(spec: WriteSpec, rows: int) -> WriteSpec:
    """How a delete_missing upsert writes an extract of `rows` rows (tombstones included): an
    extract without rows is far more often a failed source than an emptied one, so it deletes
    nothing (a full refresh empties the table on purpose)."""
    return dataclasses.replace(spec, delete_missing=False) if spec.delete_missing and not rows else spec


def statement(spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune, params: Params) -> str:
    """The MERGE on the primary key; with hard_delete a tombstone deletes its matched row and is
    never inserted when the key is unknown (dlt inserts it). The batch is one row per key."""
    pk = list(spec.primary_key)
    on = conj(keys_equal("t", pk, "s", pk), prune_condition("t", prune, params))
    clauses = []
    if spec.hard_delete_column:
        clauses.append(f"WHEN MATCHED AND {col('s', DELETED)} THEN DELETE")
    updated = [name for name in columns if name not in pk]
    if updated:
        assignments = ", ".join(f"{col('t', n)} = {col('s', n)}" for n in updated)
        clauses.append(f"WHEN MATCHED THEN UPDATE SET {assignments}")
    not_deleted = f"NOT {col('s', DELETED)}" if spec.hard_delete_column else ""
    clauses.append(insert_clause(columns, condition=not_deleted))
    if spec.delete_missing:
        clauses.append("WHEN NOT MATCHED BY SOURCE THEN DELETE")  # the batch is the whole source
    return merge(target, f"SELECT * FROM {view}", on, clauses)
