"""The merge strategies (delete-insert, upsert, insert-only, scd2): one module each, one MERGE per run, found
by name in STRATEGIES."""

# Pruning by partition bounds assumes a key's rows never move to another partition (the partition
# columns are part of the key): the writer's `prunable_partition_by` picks only such columns.
# Semantics are dlt's, minus its bugs: every strategy deduplicates the batch by primary key (no
# MERGE_CARDINALITY_VIOLATION), tombstones are never inserted, NULL keys are rejected before
# anything is written, compound keys compare column by column, and scd2 honours primary_key and
# hard_delete.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.merge.delete_insert import DeleteInsert
from dagster_incremental.spark.merge.insert_only import InsertOnly
from dagster_incremental.spark.merge.scd2 import Scd2
from dagster_incremental.spark.merge.sql import DELETED, HELPER_PREFIX, SURVIVOR
from dagster_incremental.spark.merge.strategy import MergeStrategy, Prune
from dagster_incremental.spark.merge.upsert import Upsert

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import WriteSpec

__all__ = [
    "DELETED",
    "HELPER_PREFIX",
    "STRATEGIES",
    "SURVIVOR",
    "MergeStrategy",
    "merge_statement",
    "prepare_batch",
    "strategy_for",
    "table_columns",
]

STRATEGIES: Mapping[str, MergeStrategy] = {
    "delete-insert": DeleteInsert(),
    "upsert": Upsert(),
    "insert-only": InsertOnly(),
    "scd2": Scd2(),
}


def strategy_for(spec: WriteSpec) -> MergeStrategy:
    """spec's strategy (default delete-insert); IncrementalConfigError for a spec that can't merge."""
    name = spec.merge_strategy
    if name is None:
        raise IncrementalConfigError(
            f"{spec.table}: merge strategies apply to write_disposition='merge', "
            f"not {spec.disposition!r}; append and replace are written without a MERGE."
        )
    return STRATEGIES[name]


def prepare_batch(
    spec: WriteSpec, batch: DataFrame, *, run_started_at: datetime, deduplicated: bool = False
) -> DataFrame:
    """spec's strategy's prepared batch (see MergeStrategy.prepare_batch)."""
    return strategy_for(spec).prepare_batch(spec, batch, run_started_at=run_started_at, deduplicated=deduplicated)


def merge_statement(
    spec: WriteSpec,
    *,
    target: TableRef,
    source_view: str,
    columns: Sequence[str],
    run_started_at: datetime,
    prune: Prune = (),
) -> tuple[str, dict[str, Any]]:
    """spec's strategy's ONE MERGE and its parameters (see MergeStrategy.merge_statement)."""
    return strategy_for(spec).merge_statement(
        spec, target=target, source_view=source_view, columns=columns, run_started_at=run_started_at, prune=prune
    )


def table_columns(prepared: DataFrame) -> list[str]:
    """The prepared batch's columns that belong in the table (everything but `__di_*`)."""
    return [name for name in prepared.columns if not name.startswith(HELPER_PREFIX)]
