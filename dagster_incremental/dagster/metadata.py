"""Materialization metadata keys (the README's "What you see" lists them) and how values are rendered.

One place for the key names, so the asset, the IO manager, the state store and the sensor agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

STATE = "dagster_incremental/state"
MODE = "dagster_incremental/mode"
WINDOW = "dagster_incremental/window"
ROWS_INSERTED = "dagster_incremental/rows_inserted"
ROWS_UPDATED = "dagster_incremental/rows_updated"
ROWS_DELETED = "dagster_incremental/rows_deleted"
SLICES = "dagster_incremental/slices"  # [committed, planned] of a run cut into slices by step
SLICES_TEXT = "dagster_incremental/slices_committed"  # the same in words, for the UI ("3 of 3 slices")
LAST_VALUE = "dagster_incremental/last_value"  # the cursor's last_value as text; several cursors: LAST_VALUE/<name>
REPLACED = "dagster_incremental/replaced"  # a commit that replaced the whole table, in words
UPSTREAM_READ = "dagster_incremental/upstream"  # a Changes asset: per parameter, the upstream snapshot read up to
COUNTS_SCOPE = "dagster_incremental/counts_scope"  # partitioned runs: what the row figures count
ROW_COUNT = "dagster/row_count"
TABLE_NAME = "dagster/table_name"
COLUMN_SCHEMA = "dagster/column_schema"

# Definition metadata (static, shown on the asset's page in the UI).
DEF_WRITE_DISPOSITION = "dagster_incremental/write_disposition"
DEF_PRIMARY_KEY = "dagster_incremental/primary_key"
DEF_MERGE_KEY = "dagster_incremental/merge_key"
DEF_CURSORS = "dagster_incremental/cursors"
DEF_WINDOW_COLUMN = "dagster_incremental/window_column"
DEF_PARTITION_COLUMN = "dagster_incremental/partition_column"  # static partitions: a row's tenant
DEF_WRITE_SETTINGS = "dagster_incremental/write_settings"


def json_safe(value: Any) -> Any:
    """Dagster refuses datetimes inside JSON metadata: render them as ISO-8601 strings."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, datetime):
        from dagster_incremental.cursor.values import format_instant

        return format_instant(value)  # with a Z, as the cursor state and the window write instants
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def shown(value: Any) -> str:
    """A cursor value as a log line shows it: ISO-8601 (instants in UTC with a Z), else repr."""
    safe = json_safe(value)
    return safe if isinstance(safe, str) and safe is not value else repr(value)


def json_value(value: Any):
    """A JSON metadata value (dict/list) or, for scalars, the JSON text."""
    import dagster as dg

    safe = json_safe(value)
    if isinstance(safe, (dict, list)):
        return dg.MetadataValue.json(safe)
    return dg.MetadataValue.text(json.dumps(safe))


def state_metadata(state: Any, cursor_names: Sequence[str]) -> dict[str, Any]:
    """STATE, and each cursor's last_value as its own text entry beside it: in the state's JSON
    it is one line of twenty-odd. One cursor: LAST_VALUE; several: LAST_VALUE/<name> each. Text,
    because the UI rounds a 64-bit number (a snapshot id) and shows an instant as it was stored."""
    import dagster as dg

    out = {STATE: json_value(state)}
    names = list(cursor_names)
    if len(names) > 1:
        cursors = state if isinstance(state, Mapping) else {}
        out.update({f"{LAST_VALUE}/{n}": dg.MetadataValue.text(_last_value_text(cursors.get(n))) for n in names})
    elif names or (isinstance(state, Mapping) and state.get("last_value") is not None):  # a Changes asset's snapshot
        out[LAST_VALUE] = dg.MetadataValue.text(_last_value_text(state))
    return out


def _last_value_text(cursor: Any) -> str:
    last = cursor.get("last_value") if isinstance(cursor, Mapping) else None
    if last is None:
        return "none yet: no run has loaded a row"
    safe = json_safe(last)
    return safe if isinstance(safe, str) else json.dumps(safe)


def window_value(window: Sequence[Any]):
    """A window [start, end] as JSON: instants as ISO-8601 UTC with a Z, like the cursor state."""
    import dagster as dg

    from dagster_incremental.cursor.values import format_instant

    return dg.MetadataValue.json([format_instant(v) if isinstance(v, datetime) else json_safe(v) for v in window])


def table_schema(columns: Sequence[tuple[str, str]], descriptions: Mapping[str, str] | None = None):
    """Dagster's standard column schema from (name, type) pairs, with the columns' descriptions."""
    import dagster as dg

    described = descriptions or {}
    return dg.TableSchema(columns=[dg.TableColumn(name=n, type=t, description=described.get(n)) for n, t in columns])


def result_metadata(table: Any, result: Any, descriptions: Mapping[str, str] | None = None,
                    replaced: bool = False) -> dict[str, Any]:
    """What a commit did (a spark WriteResult on `table`, a TableRef), as materialization
    metadata; a sliced run reports its totals with it. `replaced`: the commit replaced the whole
    table (write disposition replace, no partition window), said in words beside the figures."""
    import dagster as dg

    out: dict[str, Any] = {
        ROWS_INSERTED: dg.MetadataValue.int(result.rows_inserted),
        ROWS_UPDATED: dg.MetadataValue.int(result.rows_updated),
        ROWS_DELETED: dg.MetadataValue.int(result.rows_deleted),
    }
    if replaced and (result.rows_inserted or result.rows_deleted):
        out[REPLACED] = dg.MetadataValue.text(replaced_text(result.rows_deleted, result.rows_inserted))
    return {
        **out,
        ROW_COUNT: dg.MetadataValue.int(result.row_count),
        TABLE_NAME: dg.MetadataValue.text(table.display),
        COLUMN_SCHEMA: dg.MetadataValue.table_schema(table_schema(result.schema, descriptions)),
    }


def replaced_text(removed: int, written: int) -> str:
    """A whole-table replace in words: rows_inserted/rows_deleted alone (+23 -23 on a run where
    nothing changed) read as if every row had changed."""
    return (f"replaced the whole table: {removed:,} rows removed, {written:,} rows written "
            "(a replace rewrites every row, changed or not: rows_inserted and rows_deleted count "
            "the rows written and removed, not what changed)")
