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

`CursorInForce` makes the decision for one run (dagster/run.py asks it before binding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from dagster_incremental.cursor.state import AssetState, resumable, state_json
from dagster_incremental.dagster import metadata as md
from dagster_incremental.errors import CursorStateMismatch, TableCursorMissing

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


# -- the cursor in force: one run's decision ------------------------------------------------------


@dataclass(frozen=True)
class CursorInForce:
    """Which stored cursor a run of one asset continues, per scope (None: the asset's own
    cursor; else a partition key): Dagster's newest state reconciled with the table's, said
    aloud when the table overrules Dagster, refused when the table lost every cursor, and read
    as typed values for the asset's incremental arguments `cursors`."""

    asset_name: str  # the asset's op name, as the full-refresh instructions give it
    cursors: tuple[str, ...]  # the asset's incremental arguments

    def stored_states(self, context, io, advanced: str | None, restart: bool,
                      mode: str) -> tuple[dict[str | None, StoredState], int | None]:
        """The cursor in force per scope (None = the asset's own cursor), and the table snapshot
        that holds the cursor of `advanced`, the scope this run advances (for the stale-writer check)."""
        key = context.asset_key
        if restart:
            table_state = io.committed_state(key, scope=advanced)
            return {advanced: StoredState(state=None, source="none")}, _snapshot_id(table_state)
        scopes: list[str | None]
        if context.has_partition_key or context.has_partition_key_range:
            scopes = list(context.partition_keys)
        else:
            scopes = [None]
        out: dict[str | None, StoredState] = {}
        table_snapshot = None
        for scope in scopes:
            dagster_state = latest_dagster_state(context.instance, key, partition=scope)
            if scope != advanced:  # a backfilled partition: its state is only reported
                out[scope] = dagster_state or StoredState(state=None, source="none")
                continue
            table_state = io.committed_state(key, scope=scope)
            table_snapshot = _snapshot_id(table_state)
            out[scope] = self._trusted(context, io, reconcile(dagster_state, table_state), mode, scope)
        return out, table_snapshot

    def _trusted(self, context, io, stored: StoredState, mode: str, scope: str | None) -> StoredState:
        """The reconciled state, said aloud when the table overruled a run's Dagster cursor (the
        table is the truth about what was loaded). An open window whose table lost its cursor
        reloads the whole window; an unpartitioned asset's run fails (_check_table_kept) unless the
        table holds only compaction snapshots (maintenance expired its cursor's: Dagster's is kept). A
        backfill resumes nothing: it only reports the state, as before."""
        lost = stored.overrules
        if lost is None:
            return stored
        if mode != "incremental":
            return stored if stored.state is not None else lost
        asset, table = context.asset_key.to_user_string(), io.table_name(context.asset_key).display
        told = f"Dagster's cursor {self._cursor_text(lost)} (run {lost.run_id})"
        if stored.state is not None:
            context.log.warning(
                f"asset {asset}: table {table} holds cursor {self._cursor_text(stored)} (snapshot "
                f"{stored.snapshot_id}), older than {told}: the table was rolled back or restored from an "
                "older copy. This run resumes from the table's cursor and loads again the rows it lost."
            )
        elif scope is not None:
            context.log.warning(
                f"asset {asset}: table {table} holds no cursor of partition {scope} but Dagster has "
                f"{told}: the table was dropped, deleted or replaced. This run reloads the whole "
                "partition window (a window replace)."
            )
            return StoredState(state=None, source="none")
        elif io.tables.only_rewrites_left(io.table_name(context.asset_key)):
            context.log.warning(
                f"asset {asset}: table {table} holds only compaction snapshots, none with a cursor (the "
                f"snapshots that carried it were expired); this run resumes from {told}."
            )
            return lost
        return stored

    def _cursor_text(self, stored: StoredState) -> str:
        """A stored state's cursor value(s) as a message shows them (a malformed one as stored:
        the run reports that itself, with what to do)."""
        names = list(self.cursors)
        try:
            typed = stored.typed(names)
        except CursorStateMismatch:
            return repr(stored.state)
        values = {name: getattr(typed.cursor(name), "last_value", None) for name in names}
        return repr(next(iter(values.values()))) if len(values) == 1 else repr(values)

    def check_table_kept(self, context, io, stored: Mapping[str | None, StoredState], scope: str | None) -> None:
        """An unpartitioned asset whose table lost every cursor a run committed must not resume
        from Dagster's cursor (the lost rows would silently stay lost) nor reload from
        initial_value unasked (a missing table may be a misconfigured destination)."""
        chosen = stored.get(scope)
        if chosen is None or chosen.overrules is None or chosen.state is not None:
            return
        lost, table = chosen.overrules, io.table_name(context.asset_key).display
        raise TableCursorMissing(
            f"table {table} holds no cursor of this asset (it was dropped, "
            f"deleted or replaced, or [destination] points elsewhere now), but Dagster has cursor "
            f"{self._cursor_text(lost)} committed by run {lost.run_id}. Nothing was written. To "
            f"reload everything from initial_value, {full_refresh_instructions(self.asset_name)} If the "
            "destination moved, point [destination] (catalog, namespace, warehouse) in config.toml back.",
            asset=context.asset_key.to_user_string(), table=table, run_id=lost.run_id,
        )

    def state_in_force(self, context, stored: Mapping[str | None, StoredState], scope: str | None) -> AssetState:
        """The stored state of the scope this run continues, read (and checked) as typed values."""
        chosen = stored.get(scope) or StoredState(state=None, source="none")
        state = chosen.typed(list(self.cursors))
        if chosen.state is not None:
            only = state.cursor(None)
            context.log.info(f"cursor state from {chosen.source}: {only.last_value if only else None!r}")
        return state


def full_refresh_instructions(op_name: str) -> str:
    """How a user launches a full refresh of the asset, as error messages tell it."""
    return (
        "run a full refresh: launch the asset with run config "
        "`{ops: {" + op_name + ": {config: {full_refresh: true}}}}` (Launchpad) or "
        "`dagster asset materialize ... --config-json` with the same."
    )


def _snapshot_id(committed: Any) -> int | None:
    return committed.snapshot_id if committed is not None else None


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
