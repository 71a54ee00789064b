"""The merge dispositions (delete-insert, upsert, scd2) as one prepared batch + ONE MERGE each.

Why one statement per strategy: the writer attaches the cursor to the commit of exactly one SQL
statement (Iceberg snapshot properties), so data and cursor land together or not at all. dlt's
multi-statement delete-then-insert would need a transaction Iceberg doesn't have.

How the writer uses this module::

    prepared = prepare_batch(spark, spec, batch, run_started_at=started)   # 2 Spark jobs
    # create / evolve the table from prepared's schema minus the `__di_*` columns; give the
    # view every table column (typed NULL where the batch has none) and keep the helpers
    aligned.createOrReplaceTempView(view)
    text, args = merge_statement(spec, target=spec.table, source_view=view,
                                 columns=table_schema.fieldNames(), run_started_at=started,
                                 prune=bounds)  # [(partition column, min, max)] of the batch
    spark.sql(text, args=args)                                             # the one commit

Pruning by partition bounds assumes a key's rows never move to another partition (the partition
columns are part of the key): an old row outside the batch's range is not seen. The writer's
`table_writer.prunable_partition_by` picks only such columns.

Semantics are dlt's (see the strategy functions), minus its bugs: every strategy deduplicates
the batch by primary key (no MERGE_CARDINALITY_VIOLATION), tombstones are never inserted, NULL
keys are rejected before anything is written, compound keys compare column by column, and scd2
honours primary_key and hard_delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dagster_incremental.spark.merge import scd2
from dagster_incremental.spark.merge.dedup import (
    add_deleted,
    c,
    check_no_null_keys,
    mark_survivors,
    require_columns,
    resolve_strategy,
    survivor_order,
    with_sequence,
)
from dagster_incremental.spark.merge.sql import (
    DELETED,
    HELPER_PREFIX,
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
from dagster_incremental.spark.sql import column_list, quote
from dagster_incremental.spark.write_spec import WriteSpec

Prune = Sequence[tuple[str, Any, Any]]  # (partition column, min, max) of the batch

__all__ = [
    "DELETED",
    "HELPER_PREFIX",
    "SURVIVOR",
    "merge_statement",
    "prepare_batch",
    "table_columns",
]


def prepare_batch(
    spark: SparkSession,
    spec: WriteSpec,
    batch: DataFrame,
    *,
    run_started_at: datetime,
    deduplicated: bool = False,
) -> DataFrame:
    """Validate and deduplicate a merge batch; the result is the MERGE's source view.

    Columns: the batch's columns in batch order, then scd2's columns (`_valid_from`, `_valid_to`,
    `_row_hash` unless row_version_column_name), then helper columns prefixed `__di_`:
    `__di_deleted` (the row is a hard-delete tombstone) and `__di_survivor` (the row won its
    primary key's dedup). The writer must leave every `__di_*` column out of the table schema.

    Rows: one per primary key (scd2 without a primary key: one per row version, so identical
    duplicates collapse), the survivor chosen by dedup_sort, else the newest cursor_column value,
    else the last row seen. One exception: delete-insert with both primary_key and merge_key keeps
    the losing duplicates flagged `__di_survivor = false`, because their merge_key values still
    select rows to delete (dlt's semantics); only survivors are inserted.

    Raises IncrementalConfigError for a non-merge spec, an unknown strategy or upsert without a
    primary key; DataShapeError for missing/reserved columns or a NULL key. Runs two Spark jobs:
    one that computes the batch once into a local checkpoint (the arrival order that picks "the
    last row seen" is non-deterministic to Spark, and MERGE refuses a non-deterministic source),
    and the NULL-key aggregate over that checkpoint (skipped without keys). Later reads of the
    result (the MERGE, partition bounds) read the checkpoint, not the source.

    `deduplicated`: the batch is already one non-NULL row per primary key (local_batch did it in
    Arrow): no sequence, window or checkpoint; the deterministic source is read by the MERGE.
    """
    del spark  # part of the seam; the work runs on `batch`'s own session
    strategy = resolve_strategy(spec)
    user_columns = list(batch.columns)
    keys: dict[str, Sequence[str]] = {"primary_key": spec.primary_key}
    if strategy != "upsert":  # upsert ignores merge_key (dlt warns the same)
        keys["merge_key"] = spec.merge_key
    if strategy == "scd2" and spec.scd2.row_version_column_name:
        keys["row_version_column_name"] = [spec.scd2.row_version_column_name]
    others = {
        "hard_delete": [spec.hard_delete_column] if spec.hard_delete_column else [],
        "dedup_sort": [spec.dedup_sort[0]] if spec.dedup_sort else [],
    }
    require_columns(spec, batch, {**keys, **others})
    if strategy == "scd2":
        scd2.check_settings(spec, batch)

    if deduplicated:
        frame = add_deleted(batch, spec.hard_delete_column).withColumn(SURVIVOR, F.lit(True))
        return frame.select(*(c(name) for name in [*user_columns, DELETED, SURVIVOR]))
    frame = add_deleted(with_sequence(batch), spec.hard_delete_column)
    added: list[str] = []
    if strategy == "scd2":
        frame = scd2.add_columns(frame, spec, user_columns, run_started_at)
        added = scd2.added_columns(spec)
        dedup_key = scd2.entity_key(spec)
    else:
        dedup_key = list(spec.primary_key)
    frame = mark_survivors(frame, dedup_key, survivor_order(spec, batch))
    frame = frame.select(*(c(name) for name in [*user_columns, *added, DELETED, SURVIVOR]))
    # The arrival sequence is non-deterministic to Spark: MERGE refuses such a source, and a
    # re-read could pick other survivors. Materialising fixes both (and the source runs once).
    frame = frame.localCheckpoint(eager=True)
    check_no_null_keys(spec, frame, keys, user_columns)
    if not (strategy == "delete-insert" and spec.primary_key and spec.merge_key):
        frame = frame.where(F.col(SURVIVOR))
    return frame


def merge_statement(
    spec: WriteSpec,
    *,
    target: str,
    source_view: str,
    columns: Sequence[str],
    run_started_at: datetime,
    prune: Sequence[tuple[str, Any, Any]] = (),
) -> tuple[str, dict[str, Any]]:
    """ONE `MERGE INTO target ...` for spec's strategy, and its named parameters.

    Args:
        target: the table, already quoted (`spec.table`).
        source_view: the temp view of `prepare_batch`'s result (an unquoted name).
        columns: the insert/update column list: the table's columns after schema evolution.
            Every one must be a column of `source_view` (to reset a table column the batch lacks,
            add it to the view as a typed NULL; `__di_*` names are ignored).
        run_started_at: scd2's default boundary timestamp.
        prune: (partition column, min, max) of the batch; ANDed into every target-side condition
            so Iceberg reads only those files and rows outside the range are never touched. A
            None bound skips that column (a range can't cover NULL).

    Run it with `spark.sql(text, args=args)`: values are `:name` parameters, never SQL text.
    """
    strategy = resolve_strategy(spec)
    written = [name for name in columns if not name.startswith(HELPER_PREFIX)]
    params = Params()
    view = quote(source_view)
    if strategy == "scd2":
        text = scd2.statement(spec, target, view, written, prune, params, run_started_at=run_started_at)
    elif strategy == "upsert":
        text = _upsert(spec, target, view, written, prune, params)
    else:
        text = _delete_insert(spec, target, view, written, prune, params)
    return text, dict(params.values)


def table_columns(prepared: DataFrame) -> list[str]:
    """The prepared batch's columns that belong in the table (everything but `__di_*`)."""
    return [name for name in prepared.columns if not name.startswith(HELPER_PREFIX)]


# --- delete-insert ------------------------------------------------------------------------------


def _delete_insert(
    spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune, params: Params
) -> str:
    """dlt's delete-insert: delete rows whose primary key OR merge_key is in the batch, insert the
    deduplicated batch minus tombstones.

    One MERGE: the source is (rows to insert, join key NULL) UNION ALL (keys to delete); matched
    rows are deleted, unmatched insert rows inserted. Each target row matches at most one delete
    row (distinct keys), so no cardinality check can fail. No keys at all: an insert-only MERGE
    (append; dlt warns, the writer should too).
    """
    to_insert = f"{col('b', SURVIVOR)} AND NOT {col('b', DELETED)}"
    groups = _key_groups(spec)
    if not groups:
        source = f"SELECT * FROM {view} AS b WHERE {to_insert}"
        return merge(target, source, "FALSE", [insert_clause(columns)])

    key = list(dict.fromkeys(k for group in groups for k in group))
    insert_select = branch_columns(columns, rows_from="b", keys=["NULL"] * len(key), insert=True)
    insert_rows = (
        f"SELECT {insert_select}\n"
        f"FROM {view} AS b WHERE {to_insert}"
    )
    if len(groups) == 1:
        # The batch's distinct keys; they are non-NULL (checked), so insert rows never match.
        delete_from = f"{view} AS d"
        on = conj(keys_equal("t", key, "s", join_keys(len(key))), prune_condition("t", prune, params))
    else:
        # pk OR merge_key: find the target's (pk, merge_key) tuples matched either way with two
        # semi-joins (hash joins, not an OR join), then match them back null-safely.
        pruned = prune_condition("d", prune, params)
        matched_by = [
            f"SELECT {column_list(key, 'd')} FROM {target} AS d LEFT SEMI JOIN {view} AS b "
            f"ON {keys_equal('d', group, 'b', group)} WHERE {conj(pruned)}"
            for group in groups
        ]
        delete_from = "(" + "\nUNION ALL\n".join(matched_by) + ") AS d"
        on = conj(
            keys_equal("t", key, "s", join_keys(len(key)), null_safe=True),
            f"NOT {col('s', INSERT)}",
            prune_condition("t", prune, params),
        )
    delete_select = branch_columns(columns, rows_from=None, keys=[col("d", k) for k in key], insert=False)
    delete_rows = f"SELECT DISTINCT {delete_select}\nFROM {delete_from}"
    source = f"{insert_rows}\nUNION ALL\n{delete_rows}"
    clauses = ["WHEN MATCHED THEN DELETE", insert_clause(columns, condition=col("s", INSERT))]
    return merge(target, source, on, clauses)


def _key_groups(spec: WriteSpec) -> list[list[str]]:
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


# --- upsert -------------------------------------------------------------------------------------


def _upsert(spec: WriteSpec, target: str, view: str, columns: Sequence[str], prune: Prune, params: Params) -> str:
    """dlt's upsert on the primary key: update matched rows, insert new ones; merge_key is ignored.

    With hard_delete: a tombstone deletes its matched row and is never inserted when the key is
    unknown (dlt inserts it, MRG-17). The batch is already one row per key.
    """
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
    return merge(target, f"SELECT * FROM {view}", on, clauses)
