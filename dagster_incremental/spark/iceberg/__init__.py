"""Iceberg, one of the table formats behind spark/table_format.py's seam: tables.py answers a
run's questions (files.py and metadata.py read a table without a JVM; commit.py makes the one
commit on a branch; writer.py applies the dispositions; changes.py reads an upstream's changes;
local/ commits local rows without a Spark job)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_incremental.spark.table_format import Tables, UpstreamChanges


def open_tables(conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables:
    """The destination's Iceberg tables (its catalog's conf says where the warehouse is)."""
    from dagster_incremental.spark.iceberg.tables import IcebergTables

    return IcebergTables(conf)


def upstream_changes() -> UpstreamChanges:
    from dagster_incremental.spark.iceberg import changes as iceberg_changes

    return iceberg_changes
