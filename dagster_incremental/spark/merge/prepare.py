"""The prepared batch every strategy merges from: checked, one row per key, helper columns added,
computed once. Shared so that the strategies differ only in what they declare (`BatchRules`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_incremental.spark.merge.dedup import (
    add_deleted,
    c,
    check_no_null_keys,
    mark_survivors,
    require_columns,
    survivor_order,
    with_sequence,
)
from dagster_incremental.spark.merge.sql import DELETED, SURVIVOR
from dagster_incremental.spark.write_spec import WriteSpec

# (batch with sequence and tombstone flag, user columns, run start) -> (batch, added columns)
AddColumns = Callable[[DataFrame, Sequence[str], datetime], tuple[DataFrame, list[str]]]


@dataclass(frozen=True)
class BatchRules:
    """What a strategy asks of its batch.

    keys: role -> columns that must be present and non-NULL (primary_key, merge_key, ...);
    dedup_key: one surviving row per value of these columns;
    check: extra checks of the batch before any Spark work;
    add_columns: columns the strategy writes itself (scd2's validity columns and row hash);
    keep_losers: keep the dedup losers (flagged `__di_survivor = false`) in the source.
    """

    keys: dict[str, Sequence[str]]
    dedup_key: Sequence[str]
    check: Callable[[DataFrame], None] = lambda batch: None
    add_columns: AddColumns | None = None
    keep_losers: bool = False


def column_roles(spec: WriteSpec) -> dict[str, Sequence[str]]:
    """The non-key columns every strategy needs present: hard_delete and dedup_sort."""
    return {
        "hard_delete": [spec.hard_delete_column] if spec.hard_delete_column else [],
        "dedup_sort": [spec.dedup_sort[0]] if spec.dedup_sort else [],
    }


def prepare_batch(
    spec: WriteSpec, batch: DataFrame, rules: BatchRules, *, run_started_at: datetime, deduplicated: bool
) -> DataFrame:
    """Validate and deduplicate a merge batch; the result is the MERGE's source view.

    Columns: the batch's columns in batch order, then the strategy's own (scd2), then
    `__di_deleted` (a hard-delete tombstone) and `__di_survivor` (the row won its key's dedup).
    Rows: one per dedup key, the survivor chosen by dedup_sort, else the newest cursor_column
    value, else the last row seen (unless `rules.keep_losers`).

    Runs two Spark jobs: a local checkpoint (the arrival order is non-deterministic to Spark,
    and MERGE refuses a non-deterministic source; later reads hit the checkpoint), and the
    NULL-key aggregate over it. `deduplicated`: the batch is already one non-NULL row per
    primary key (deduplicated in Arrow): no sequence, window or checkpoint.
    """
    user_columns = list(batch.columns)
    require_columns(spec, batch, {**rules.keys, **column_roles(spec)})
    rules.check(batch)
    if deduplicated:
        frame = add_deleted(batch, spec.hard_delete_column).withColumn(SURVIVOR, F.lit(True))
        return frame.select(*(c(name) for name in [*user_columns, DELETED, SURVIVOR]))
    frame = add_deleted(with_sequence(batch), spec.hard_delete_column)
    added: list[str] = []
    if rules.add_columns is not None:
        frame, added = rules.add_columns(frame, user_columns, run_started_at)
    frame = mark_survivors(frame, list(rules.dedup_key), survivor_order(spec, batch))
    frame = frame.select(*(c(name) for name in [*user_columns, *added, DELETED, SURVIVOR]))
    frame = frame.localCheckpoint(eager=True)
    check_no_null_keys(spec, frame, rules.keys, user_columns)
    return frame if rules.keep_losers else frame.where(F.col(SURVIVOR))
