"""The one place a destination's table format is chosen: each format is a sibling folder whose
tables implement spark/table_format.py's `Tables`; adding a format is one line in FORMATS."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dagster_incremental.spark.table_format import Tables


def _iceberg(conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables:
    from dagster_incremental.spark.iceberg.tables import IcebergTables

    return IcebergTables(conf)  # the catalog's conf says where its warehouse is


def _delta(conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables:
    from dagster_incremental.spark.delta.tables import DeltaTables

    return DeltaTables(conf, warehouse)


FORMATS: dict[str, Callable[[Callable[[], Mapping[str, str]], str], Tables]] = {"iceberg": _iceberg, "delta": _delta}


def tables_for(conf: Callable[[], Mapping[str, str]], table_format: str, warehouse: str) -> Tables:
    """Iceberg tables in the destination's catalog, or Delta tables under its warehouse."""
    return FORMATS.get(table_format, _iceberg)(conf, warehouse)
