"""insert-only (dlt's semantics): insert the rows whose primary key the table does not hold yet,
in ONE MERGE; rows already there are never updated or deleted, merge_key is ignored, and a
hard-delete tombstone is only left out of the insert."""

from __future__ import annotations

from collections.abc import Sequence

from dagster_incremental.spark.merge.sql import DELETED, Params, col, conj, insert_clause, keys_equal, merge, prune_condition
from dagster_incremental.spark.merge.strategy import Prune
from dagster_incremental.spark.merge.upsert import Upsert
from dagster_incremental.spark.write_spec import WriteSpec


class InsertOnly(Upsert):
    """The MergeStrategy "insert-only": upsert's batch (one row per primary key, a key new to
    the table gets the row upsert would keep), its own statement."""

    def statement(self, spec, target, view, columns, prune, params, run_started_at) -> str:
        return statement(spec, target, view, columns, prune, params)


def statement(spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune, params: Params) -> str:
    """`WHEN NOT MATCHED THEN INSERT` only: Spark plans it as an anti join and an append, so no
    data file of the table is rewritten."""
    pk = list(spec.primary_key)
    on = conj(keys_equal("t", pk, "s", pk), prune_condition("t", prune, params))
    not_deleted = f"NOT {col('s', DELETED)}" if spec.hard_delete_column else ""
    return merge(target, f"SELECT * FROM {view}", on, [insert_clause(columns, condition=not_deleted)])
