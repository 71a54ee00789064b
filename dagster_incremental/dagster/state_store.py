"""Where a run finds its cursor: Dagster's materialization metadata, reconciled with the table.

The table commit carries the cursor atomically with the data; the materialization event is the
visible mirror in Dagster. They disagree only when something went wrong or was done on purpose:
- the table is newer: a run committed but its Dagster event was lost (crash, kill) -> the table
  wins, or the next run would load the same rows again;
- Dagster is newer: a user reset or seeded the cursor with a runless materialization
  (`instance.report_runless_asset_event`) -> Dagster wins.
Backfill materializations never count: they record the state that was in force, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dagster_incremental.dagster import metadata as md
SCAN_LIMIT = 200  # materializations scanned back for the newest incremental one


@dataclass(frozen=True)
class StoredState:
    """A cursor state and where it came from."""

    state: dict[str, Any] | None
    source: str  # "dagster", "table" or "none"
    run_id: str | None = None
    timestamp: float | None = None  # unix seconds


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
            return StoredState(
                state=value,
                source="dagster",
                run_id=record.run_id or None,
                timestamp=record.timestamp,
            )
        if not result.has_more:
            return None
        cursor = result.cursor
    return None


def reconcile(dagster: StoredState | None, table: Any | None) -> StoredState:
    """Pick the cursor a run continues from (see the module docstring for why).

    `table` is the writer's CommittedState (state, run_id, snapshot_id, committed_at) or None.
    """
    if table is None or table.state is None:
        return dagster or StoredState(state=None, source="none")
    table_ts = _unix(table.committed_at)
    table_state = StoredState(
        state=dict(table.state), source="table", run_id=table.run_id, timestamp=table_ts
    )
    if dagster is None:
        return table_state
    if dagster.run_id and dagster.run_id == table.run_id:
        return dagster  # the same run: both agree
    if dagster.timestamp is not None and table_ts is not None and dagster.timestamp > table_ts:
        return dagster  # a reset/seed recorded after the last commit
    return table_state


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
