"""Iceberg, one of the table formats behind spark/table_format.py's seam: tables.py answers a
run's questions (files.py and metadata.py read a table without a JVM; commit.py makes the one
commit on a branch; writer.py applies the dispositions; changes.py reads an upstream's changes;
local/ commits local rows without a Spark job)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_incremental.spark.table_format import Tables, UpstreamChanges


def open_tables(conf: Callable[[], Mapping[str, str]], warehouse: str) -> Tables:
    """The destination's Iceberg tables (its catalog's conf says where the warehouse is)."""
    from dagster_incremental.spark.iceberg.tables import IcebergTables

    return IcebergTables(conf)


def session_conf(user: Mapping[str, str], catalog: str | None, warehouse: str | Path | None) -> dict[str, str]:
    """The jars, extensions and catalog a session needs for Iceberg tables."""
    from dagster_incremental.spark.iceberg.session_setup import iceberg_session_conf

    return iceberg_session_conf(user, catalog, warehouse)

def upstream_changes(conf: Callable[[], Mapping[str, str]]) -> UpstreamChanges:
    """How an upstream Iceberg table's changes are read (`conf`: the destination's, whose
    catalog pyiceberg reaches over Spark Connect)."""
    from dagster_incremental.spark.iceberg.changes import IcebergChanges

    return IcebergChanges(conf)


# jdbc:<database>:... -> the Dagster kind of that database
JDBC_DATABASES = {"postgresql": "postgres", "mysql": "mysql", "sqlite": "sqlite", "oracle": "oracle",
                  "sqlserver": "sqlserver"}


def catalog_kinds(conf: Mapping[str, str], catalog: str) -> set[str]:
    """The service an Iceberg catalog is, as a Dagster kind: its `type` (rest, jdbc's database,
    hive) or catalog-impl (glue); none for the default Hadoop catalog (a folder)."""
    prefix = f"spark.sql.catalog.{catalog}"
    kind = (conf.get(f"{prefix}.type") or "").lower()
    impl = conf.get(f"{prefix}.catalog-impl", "")
    if "Glue" in impl:
        return {"glue"}
    if "Rest" in impl or kind == "rest":
        return {"rest"}
    if kind == "jdbc" or "Jdbc" in impl:
        database = (conf.get(f"{prefix}.uri") or "").removeprefix("jdbc:").split(":", 1)[0].lower()
        return {JDBC_DATABASES.get(database, "jdbc")}
    return {"hive"} if kind == "hive" else set()
