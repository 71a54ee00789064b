"""The one place a destination's table format is chosen: its service answers every question the
IO manager asks, the same way for each format (spark/table_format.py: the seam between them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dagster_incremental.spark.iceberg.tables import TableService


def tables_for(conf: Callable[[], Mapping[str, str]], table_format: str, warehouse: str) -> TableService:
    """Iceberg tables in the destination's catalog, or Delta tables under its warehouse."""
    if table_format == "delta":
        from dagster_incremental.spark.delta.tables import DeltaTables

        return DeltaTables(conf, warehouse)
    return TableService(conf)
