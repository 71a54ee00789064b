"""Where a run finds its cursor: Dagster's materialization metadata, reconciled with the table.

The table commit carries the cursor atomically with the data, so the table is the truth about
what was loaded; the materialization event is the visible mirror in Dagster. They disagree only
when something went wrong or was done on purpose:
- the table is newer: a run committed but its Dagster event was lost (crash, kill) -> the table
  wins, or the next run would load the same rows again;
- Dagster is newer and the event has no run: a user reset or seeded the cursor with a runless
  materialization (`instance.report_runless_asset_event`) -> Dagster wins;
- Dagster is newer and a run made it: the table was rolled back or restored from an older copy
  -> the table wins (the rows it lost are loaded again) and the run says so;
- the table holds no cursor (dropped, deleted, destination moved) while a run made Dagster's,
  over a table with rows -> nothing to resume from: the caller fails or reloads a window.
Backfill materializations never count: they record the state that was in force, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from dagster_incremental.cursor.state import AssetState, resumable, state_json
from dagster_incremental.dagster import metadata as md

SCAN_LIMIT = 200  # materializations scanned back for the newest incremental one


@dataclass(frozen=True)
class StoredState:
    """A cursor state and where it came from."""

    state: dict[str, Any] | None  # as stored (JSON); typed() reads it
    source: str  # "dagster", "table" or "none"
    run_id: str | None = None
    timestamp: float | None = None  # unix seconds
    snapshot_id: int | None = None  # source "table": the snapshot that holds the state
    row_count: int | None = None  # source "dagster": the table's rows the materialization reported
    overrules: StoredState | None = None  # a run's newer Dagster state the table did not confirm

    def typed(self, names: Sequence[str]) -> AssetState:
        """The state as typed values, for an asset whose incremental arguments are `names`
        (raises CursorStateMismatch naming what is malformed). The stored JSON itself is what
        reconcile compares and a backfill reports unchanged."""
        return AssetState.from_dict(self.state, names)


def latest_dagster_state(instance, asset_key, partition: str | None = None) -> StoredState | None:
    """The state of the newest *incremental* materialization (of `partition`, if given)."""
    import dagster as dg

    flt = dg.AssetRecordsFilter(
        asset_key=asset_key, asset_partitions=[partition] if partition is not None else None
    )
    cursor = None
    scanned = 0
    while scanned < SCAN_LIMIT:
        result = instance.fetch_materializations(flt, limit=50, cursor=cursor)
        for record in result.records:
            scanned += 1
            meta = record.asset_materialization.metadata if record.asset_materialization else {}
            mode = meta.get(md.MODE)
            state = meta.get(md.STATE)
            if state is None or (mode is not None and mode.value == "backfill"):
                continue
            value = state.value
            if isinstance(value, str):  # a scalar rendered as JSON text
                import json

                value = json.loads(value)
            rows = meta.get(md.ROW_COUNT)
            return StoredState(
                state=value,
                source="dagster",
                run_id=record.run_id or None,
                timestamp=record.timestamp,
                row_count=rows.value if rows is not None else None,
            )
        if not result.has_more:
            return None
        cursor = result.cursor
    return None


def reconcile(dagster: StoredState | None, table: Any | None) -> StoredState:
    """Pick the cursor a run continues from (see the module docstring for why).

    `table` is the writer's CommittedState (state, run_id, snapshot_id, committed_at) or None.
    A run's Dagster state that the table does not hold is kept as `overrules` of the answer:
    with source "table" the table was rolled back; with source "none" it lost every cursor.
    """
    if table is None or table.state is None:
        if dagster is None or dagster.run_id is None or dagster.row_count == 0:
            # nothing anywhere, a seed, or a run that saw no rows: resuming loses nothing
            return dagster or StoredState(state=None, source="none")
        return StoredState(state=None, source="none", overrules=dagster)
    table_ts = _unix(table.committed_at)
    table_state = StoredState(
        state=dict(table.state), source="table", run_id=table.run_id, timestamp=table_ts,
        snapshot_id=table.snapshot_id,
    )
    if dagster is None:
        return table_state
    if same_cursor(dagster.state, table_state.state):
        return dagster  # they agree (a run that found nothing new committed nothing)
    if dagster.timestamp is None or table_ts is None or dagster.timestamp <= table_ts:
        return table_state  # the table is ahead: a lost Dagster event
    if dagster.run_id is None:
        return dagster  # a reset/seed recorded after the last commit
    return replace(table_state, overrules=dagster)  # rolled back or restored: the table is the truth


def same_cursor(a: Any, b: Any) -> bool:
    """Whether two stored states resume the next run at the same place."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a == b
    return state_json(resumable(a)) == state_json(resumable(b))


def _unix(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    return None
