"""Delta Lake, one of the table formats behind spark/table_format.py's seam: the same runs,
cursor and compare-and-set as Iceberg's, through Delta's own commit log (log.py reads it without
a JVM; commit.py makes the one commit; writer.py applies the dispositions; tables.py answers a
run's questions; changes.py reads an upstream's changes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_incremental.spark.table_format import Tables, UpstreamChanges


def open_tables(conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables:
    """The destination's Delta tables, folders under its warehouse."""
    from dagster_incremental.spark.delta.tables import DeltaTables

    return DeltaTables(conf, warehouse)


def upstream_changes() -> UpstreamChanges:
    from dagster_incremental.spark.delta import changes as delta_changes

    return delta_changes
