"""delete-insert (the default strategy, dlt's semantics): delete the rows whose primary key OR
merge_key is in the batch, insert the deduplicated batch minus tombstones, in ONE MERGE."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame

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
from dagster_incremental.spark.sql import column_list
from dagster_incremental.spark.write_spec import WriteSpec


class DeleteInsert(SqlMergeStrategy):
    """The MergeStrategy "delete-insert"."""

    def prepare_batch(
        self, spec: WriteSpec, batch: DataFrame, *, run_started_at: datetime, deduplicated: bool = False
    ) -> DataFrame:
        """One row per primary key; with both primary_key and merge_key the losing duplicates stay
        (flagged `__di_survivor = false`): their merge_key values still select rows to delete."""
        rules = BatchRules(
            keys={"primary_key": spec.primary_key, "merge_key": spec.merge_key},
            dedup_key=spec.primary_key,
            keep_losers=bool(spec.primary_key and spec.merge_key),
        )
        return prepare_batch(spec, batch, rules, run_started_at=run_started_at, deduplicated=deduplicated)

    def statement(self, spec, target, view, columns, prune, params, run_started_at) -> str:
        return statement(spec, target, view, columns, prune, params)


def statement(spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune, params: Params) -> str:
    """The MERGE: its source is (rows to insert, join key NULL) UNION ALL (keys to delete);
    matched rows are deleted, unmatched insert rows inserted. Each target row matches at most one
    delete row (distinct keys), so no cardinality check can fail. No keys at all: an insert-only
    MERGE (an append)."""
    to_insert = f"{col('b', SURVIVOR)} AND NOT {col('b', DELETED)}"
    groups = key_groups(spec)
    if not groups:
        source = f"SELECT * FROM {view} AS b WHERE {to_insert}"
        return merge(target, source, "FALSE", [insert_clause(columns)])
    key = list(dict.fromkeys(k for group in groups for k in group))
    insert_select = branch_columns(columns, rows_from="b", keys=["NULL"] * len(key), insert=True)
    insert_rows = f"SELECT {insert_select}\nFROM {view} AS b WHERE {to_insert}"
    delete_from, on = _delete_rows_source(target, view, groups, key, prune, params)
    delete_select = branch_columns(columns, rows_from=None, keys=[col("d", k) for k in key], insert=False)
    delete_rows = f"SELECT DISTINCT {delete_select}\nFROM {delete_from}"
    source = f"{insert_rows}\nUNION ALL\n{delete_rows}"
    clauses = ["WHEN MATCHED THEN DELETE", insert_clause(columns, condition=col("s", INSERT))]
    return merge(target, source, on, clauses)


def _delete_rows_source(
    target: str, view: str, groups: list[list[str]], key: list[str], prune: Prune, params: Params
) -> tuple[str, str]:
    """(FROM of the delete rows, aliased `d`; the MERGE's ON condition)."""
    if len(groups) == 1:
        # The batch's distinct keys; they are non-NULL (checked), so insert rows never match.
        on = conj(keys_equal("t", key, "s", join_keys(len(key))), prune_condition("t", prune, params))
        return f"{view} AS d", on
    # pk OR merge_key: find the target's (pk, merge_key) tuples matched either way with two
    # semi-joins (hash joins, not an OR join), then match them back null-safely.
    pruned = prune_condition("d", prune, params)
    matched_by = [
        f"SELECT {column_list(key, 'd')} FROM {target} AS d LEFT SEMI JOIN {view} AS b "
        f"ON {keys_equal('d', group, 'b', group)} WHERE {conj(pruned)}"
        for group in groups
    ]
    on = conj(
        keys_equal("t", key, "s", join_keys(len(key)), null_safe=True),
        f"NOT {col('s', INSERT)}",
        prune_condition("t", prune, params),
    )
    return "(" + "\nUNION ALL\n".join(matched_by) + ") AS d", on


def key_groups(spec: WriteSpec) -> list[list[str]]:
    """The key groups a target row is deleted by; a group implied by another is dropped.

    (If merge_key's columns are a subset of primary_key's, every pk match is an mk match, so
    the mk group alone selects the same rows, and vice versa.)
    """
    pk, mk = list(spec.primary_key), list(spec.merge_key)
    if pk and mk:
        if set(mk) <= set(pk):
            return [mk]
        if set(pk) <= set(mk):
            return [pk]
    return [group for group in (pk, mk) if group]
