"""The one place a destination's table format is chosen. Each format is a sibling folder whose
package offers `open_tables` (spark/table_format.py's `Tables`) and `upstream_changes`;
adding a format is that folder and one line in FORMATS."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dagster_incremental.spark import delta, iceberg
from dagster_incremental.spark.table_format import FormatPackage, Tables, UpstreamChanges

FORMATS: dict[str, FormatPackage] = {"iceberg": iceberg, "delta": delta}


def tables_for(conf: Callable[[], Mapping[str, str]], table_format: str, warehouse: str) -> Tables:
    """Iceberg tables in the destination's catalog, or Delta tables under its warehouse."""
    return FORMATS.get(table_format, iceberg).open_tables(conf, warehouse)


def changes_for(conf: Callable[[], Mapping[str, str]], table_format: str) -> UpstreamChanges:
    """How the destination's format reads an upstream table's changes."""
    return FORMATS.get(table_format, iceberg).upstream_changes(conf)
