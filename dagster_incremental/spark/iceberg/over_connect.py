"""Iceberg tables over Spark Connect: what the run's process does itself, having no Spark driver.

- It reaches the table's catalog with pyiceberg (`CatalogTables`): a JDBC or REST catalog that
  the destination's [spark.conf] names, the same service the Connect server writes through. The
  run's cursor check, its branch's compare-and-set (branch.CatalogBranch) and the figures read
  back from its commit go through it; a Hadoop catalog (a folder) is refused over Connect.
- It puts the commit's properties (the cursor) on the statement through the Connect session's
  conf (`session_commit_properties`): Iceberg 1.11 and later copy every
  `spark.sql.iceberg.snapshot-property.<key>` of the session into the summary of each commit the
  session makes. The branch checks that they are there before it publishes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_incremental.spark.iceberg.files import TableFiles
from dagster_incremental.spark.iceberg.metadata import TableMetadata
from dagster_incremental.spark.iceberg.rest_catalog import RestCatalogConf
from dagster_incremental.spark.iceberg.snapshots import CatalogSnapshots
from dagster_incremental.spark.iceberg.sql_catalog import SqlCatalogConf
from dagster_incremental.spark.table_ref import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SESSION_SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."


@dataclass(frozen=True)
class CatalogTables:
    """The destination's catalog as pyiceberg reaches it from this process (`conf`: the flat
    Spark conf of config.toml and secrets.toml)."""

    conf: Mapping[str, str]

    def reaches(self, catalog: str) -> bool:
        """Whether `catalog` is a JDBC or REST catalog pyiceberg reads and commits here."""
        return SqlCatalogConf.of(self.conf, catalog) is not None or RestCatalogConf.of(self.conf, catalog) is not None

    def load(self, table: TableRef) -> tuple[Any, TableMetadata] | None:
        """(pyiceberg's table, its metadata as loaded), None when there is no such table."""
        from dagster_incremental.spark.iceberg.local import catalog_table

        files = TableFiles.find(self.conf, table)
        return None if files.metadata is None else catalog_table.load(self.conf, files)

    def snapshots(self, table: TableRef) -> CatalogSnapshots:
        return CatalogSnapshots(lambda: self.load(table))


def refusal(catalog: str) -> str:
    """Why an Iceberg table of `catalog` cannot be written over Connect, and what to set."""
    prefix = f"spark.sql.catalog.{catalog}"
    return (f"which writes Iceberg tables only in a JDBC or REST catalog that this process reaches too (the "
            f"run checks its cursor and commits by compare-and-set through it); config.toml [spark.conf] does not "
            f"make catalog {catalog!r} one (a REST catalog over http(s), or a JDBC catalog on PostgreSQL or on a "
            f"SQLite file). Set \"{prefix}.type\" = \"jdbc\" or \"rest\" with \"{prefix}.uri\" and its "
            "credentials in secrets.toml, the catalog the Connect server is configured with "
            "(docs/clusters-and-catalogs.md)")


@contextmanager
def session_commit_properties(spark: SparkSession, properties: Mapping[str, str]) -> Iterator[None]:
    """Every commit the session makes inside carries `properties` (see the module's docstring);
    unset after, whatever happened, so no later statement carries them."""
    keys = [SESSION_SNAPSHOT_PROPERTY + key for key in properties]
    try:
        for key, value in zip(keys, properties.values()):
            spark.conf.set(key, str(value))
        yield
    finally:
        for key in keys:
            spark.conf.unset(key)
