"""What the IO manager reads from Dagster's contexts beyond the table's name: a plain DataFrame
asset's WriteSpec and partition window (its definition metadata), and the WriteSpec an
incremental asset's settings describe (their JSON, kept in its definition metadata)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from dagster_incremental.dagster import metadata as md
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WindowReplace, WriteSpec


def frame_spec(context: dg.OutputContext, table: TableRef) -> WriteSpec:
    """A plain DataFrame asset's WriteSpec: its definition's write settings, replace by default."""
    settings = dict(meta_value(context.definition_metadata, md.DEF_WRITE_SETTINGS) or {})
    settings.setdefault("disposition", "replace")
    return write_spec_from_settings(table, settings)


def frame_window(context: dg.OutputContext, spec: WriteSpec) -> WindowReplace | None:
    """A partitioned DataFrame asset replaces its partition's window of `partition_expr`."""
    if not context.has_asset_partitions:
        return None
    column = meta_value(context.definition_metadata, "partition_expr") or spec.cursor_column
    if not column:
        raise IncrementalConfigError(
            f"asset {context.asset_key.to_user_string()} is partitioned, but SparkTableIOManager "
            "does not know which column holds the partition's time; add it to the asset, e.g. "
            '@asset(metadata={"partition_expr": "event_date"})'
        )
    tw = context.asset_partitions_time_window
    return WindowReplace(column=column, start=tw.start, end=tw.end)


def write_spec_from_settings(table: TableRef, settings: Mapping[str, Any]) -> WriteSpec:
    """A WriteSpec from the JSON-able settings kept in definition metadata."""
    from dagster_incremental.spark.write_spec import Scd2Options

    values = dict(settings)
    scd2 = values.pop("scd2", None) or {}
    for key in ("primary_key", "merge_key", "partition_by"):
        values[key] = tuple(values.get(key) or ())
    if values.get("dedup_sort"):
        values["dedup_sort"] = tuple(values["dedup_sort"])
    if "validity_column_names" in scd2:
        scd2["validity_column_names"] = tuple(scd2["validity_column_names"])
    return WriteSpec(table=table, scd2=Scd2Options(**scd2), **values)


def meta_value(metadata: Mapping[str, Any] | None, key: str) -> Any:
    """A definition metadata value, unwrapped from Dagster's MetadataValue."""
    value = (metadata or {}).get(key)
    return getattr(value, "value", value)


__all__ = ["frame_spec", "frame_window", "meta_value", "write_spec_from_settings"]
