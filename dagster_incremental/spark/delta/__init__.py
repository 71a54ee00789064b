"""Delta Lake, one of the table formats behind spark/table_format.py's seam: the same runs,
cursor and compare-and-set as Iceberg's, through Delta's own commit log (log.py reads it without
a JVM; commit.py makes the one commit; writer.py applies the dispositions; tables.py answers a
run's questions; changes.py reads an upstream's changes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_incremental.spark.table_format import Tables, UpstreamChanges


def open_tables(conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables:
    """The destination's Delta tables, folders under its warehouse."""
    from dagster_incremental.spark.delta.tables import DeltaTables

    return DeltaTables(conf, warehouse)


def session_conf(user: Mapping[str, str], catalog: str | None, warehouse: str | Path | None) -> dict[str, str]:
    """The jars, extensions and catalog a session needs for Delta tables."""
    from dagster_incremental.spark.delta.session_setup import delta_session_conf

    return delta_session_conf(user, catalog, warehouse)

def upstream_changes(conf: Callable[[], Mapping[str, str]]) -> UpstreamChanges:
    """How an upstream Delta table's changes are read (its log says all; `conf` is not needed)."""
    from dagster_incremental.spark.delta import changes as delta_changes

    return delta_changes


def catalog_kinds(conf: Mapping[str, str], catalog: str) -> set[str]:
    """Delta tables are folders under the warehouse: no catalog service to show."""
    return set()
