"""The Iceberg catalogs the end-to-end suites run against: the default Hadoop catalog (a folder)
and a JDBC catalog on a PostgreSQL server the tests start (tests/postgres_server.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CATALOG_KINDS = ("hadoop", "jdbc")
JDBC_CATALOG = "pg"  # the JDBC catalog's Spark name (the shared session's `lake` stays Hadoop)


@dataclass(frozen=True)
class Catalog:
    """One catalog as a user configures it: the Spark catalog name and its `[spark.conf]` keys."""

    kind: str
    name: str
    warehouse: str
    spark_config: Mapping[str, str] = field(default_factory=dict)
    server: Any = None  # the PostgreSQL server of a JDBC catalog

    def io_manager(self, namespace: str, **kwargs: Any):
        from dagster_incremental import SparkTableIOManager

        conf = {**self.spark_config, **kwargs.pop("spark_config", {})}
        kwargs.setdefault("master", "local[2]")
        return SparkTableIOManager(catalog=self.name, namespace=namespace, warehouse=self.warehouse,
                                   spark_config=conf, **kwargs)

    def config_toml(self, namespace: str) -> str:
        """config.toml's `[destination]` and `[spark.conf]` sections for this catalog."""
        text = f'[destination]\ncatalog = "{self.name}"\nnamespace = "{namespace}"\nwarehouse = "{self.warehouse}"\n'
        if self.spark_config:
            text += "\n[spark.conf]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in self.spark_config.items())
        return text

    def pyiceberg(self):
        """The same catalog read by pyiceberg's SqlCatalog (JDBC only): no Spark, no JVM."""
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(self.name, uri=self.server.sqlalchemy_uri, warehouse=self.warehouse)


def hadoop_catalog(warehouse: str) -> Catalog:
    return Catalog(kind="hadoop", name="lake", warehouse=warehouse)


def jdbc_catalog(server: Any, warehouse: str) -> Catalog:
    from postgres_server import jdbc_catalog_conf

    return Catalog(kind="jdbc", name=JDBC_CATALOG, warehouse=warehouse,
                   spark_config=jdbc_catalog_conf(JDBC_CATALOG, server, warehouse), server=server)
