"""Each partition's own row figures in a run over a range of partitions.

A range run commits once (or once per slice), but Dagster records one materialization per
partition: each must show what happened to its own window, not the range's totals.
"""

from __future__ import annotations

# A commit whose window lies within one partition (a slice of a step that divides the
# partitions) gives that partition its figures as they are; a commit over several partitions is
# split by one Spark aggregate grouped by partition window (a format's `window_counts`:
# spark/iceberg/figures.py, spark/delta/figures.py).

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timezone
from typing import Any

import dagster as dg

from dagster_incremental.dagster import metadata as md
from dagster_incremental.spark.write_spec import WriteResult, WriteSpec

Window = tuple[Any, Any]  # [start, end) of the window column; None: unbounded


@dataclasses.dataclass(frozen=True)
class RangeCommit:
    """One commit of a range run: the window it wrote and what it did."""

    window: Window
    spec: WriteSpec
    result: WriteResult


@dataclasses.dataclass(frozen=True)
class Figures:
    """Rows one partition gained, saw changed and lost in the run (as a commit's counts)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    @classmethod
    def of(cls, counts: Any) -> Figures:
        """From a WriteResult or the statistics' Counts."""
        if isinstance(counts, WriteResult):
            return cls(counts.rows_inserted, counts.rows_updated, counts.rows_deleted)
        return cls(counts.inserted, counts.updated, counts.deleted)

    def __add__(self, other: Figures) -> Figures:
        return Figures(self.inserted + other.inserted, self.updated + other.updated, self.deleted + other.deleted)


def partition_metadata(
    io: Any, partitions_def: Any, column: str | None, keys: Sequence[str], commits: Sequence[RangeCommit]
) -> dict[str, dict[str, Any]]:
    """Per partition of a run: its window, its own row figures and what they count. Without a
    plain window `column` the figures cannot be split: the run's totals stand, said plainly."""
    if len(keys) == 1:  # the run's own figures (the Output's) are this partition's
        return {keys[0]: {md.COUNTS_SCOPE: dg.MetadataValue.text(_counts_scope(keys, 1, own=True))}}
    windows = partition_windows(partitions_def, keys)
    if column is None:
        scope = dg.MetadataValue.text(_counts_scope(keys, len(commits), own=False))
        return {key: {md.WINDOW: md.window_value(windows[key]), md.COUNTS_SCOPE: scope} for key in keys}
    figures = partition_figures(io, column, windows, commits)
    scope = dg.MetadataValue.text(_counts_scope(keys, len(commits), own=True))
    return {
        key: {
            md.WINDOW: md.window_value(windows[key]),
            md.ROWS_INSERTED: dg.MetadataValue.int(figures[key].inserted),
            md.ROWS_UPDATED: dg.MetadataValue.int(figures[key].updated),
            md.ROWS_DELETED: dg.MetadataValue.int(figures[key].deleted),
            md.COUNTS_SCOPE: scope,
        }
        for key in keys
    }


def _counts_scope(keys: Sequence[str], commits: int, own: bool) -> str:
    """Says what the row figures of a partition's materialization count."""
    table = "dagster/row_count is the whole table's row count"
    if len(keys) == 1:
        return f"rows_inserted/rows_updated/rows_deleted are this partition's; {table}"
    run = f"a run over {keys[0]}...{keys[-1]} ({len(keys)} partitions, {commits} commit{'s' if commits != 1 else ''})"
    if own:
        return f"rows_inserted/rows_updated/rows_deleted are this partition's own, in {run}; {table}"
    return (
        f"rows_inserted/rows_updated/rows_deleted are for the whole range of {run}, not this partition "
        f"alone (its cursor is not a plain column to split them by); {table}"
    )


def partition_windows(partitions_def: Any, keys: Sequence[str]) -> dict[str, Window]:
    """Each partition key's time window [start, end)."""
    out = {}
    for key in keys:
        window = partitions_def.time_window_for_partition_key(key)
        out[key] = (window.start, window.end)
    return out


def partition_figures(
    io: Any, column: str, windows: Mapping[str, Window], commits: Sequence[RangeCommit]
) -> dict[str, Figures]:
    """Per partition, the sum of what each commit did inside its window."""
    totals = {key: Figures() for key in windows}
    for commit in commits:
        result = commit.result
        if not (result.rows_inserted or result.rows_updated or result.rows_deleted):
            continue  # nothing changed (or nothing was committed): nothing to share out
        touched = [key for key, window in windows.items() if _overlaps(window, commit.window)]
        if len(touched) == 1:
            totals[touched[0]] += Figures.of(result)
            continue
        counts = io.tables.window_counts(commit.spec, result.snapshot_id, column, [windows[key] for key in touched])
        for key, count in zip(touched, counts):
            totals[key] += Figures.of(count)
    return totals


def _overlaps(a: Window, b: Window) -> bool:
    """Whether two half-open windows share an instant (None: unbounded on that side)."""
    a_start, a_end, b_start, b_end = (_instant(v) for v in (*a, *b))
    return (a_end is None or b_start is None or b_start < a_end) and (b_end is None or a_start is None or a_start < b_end)


def _instant(value: Any) -> Any:
    """A window bound comparable with a partition's (a date is its midnight, UTC)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime.combine(value, time(), tzinfo=timezone.utc)
    return value
