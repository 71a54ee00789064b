"""The Iceberg catalogs the end-to-end suites run against: the default Hadoop catalog (a folder)
and a JDBC catalog on a PostgreSQL server the tests start (tests/postgres_server.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

CATALOG_KINDS = ("hadoop", "jdbc")
# For a test whose subject does not depend on the catalog (planning, counting, metadata): the
# Hadoop catalog only. The commit paths (faults, races, exactly-once, branch commits, killed
# runs) run on both kinds.
HADOOP_ONLY = pytest.mark.parametrize("catalog", ["hadoop"], indirect=True)
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


def to_env(catalog: Catalog | None) -> str:
    """The catalog for a runner subprocess (tests/race_runner.py, tests/fault_runner.py)."""
    if catalog is None:
        return ""
    return json.dumps({"name": catalog.name, "warehouse": catalog.warehouse, "spark_config": dict(catalog.spark_config)})


def runner_spark_config(text: str) -> tuple[str | None, dict[str, str]]:
    """(catalog name, Spark conf) of a runner from `to_env`'s text ("": the default catalog):
    a JDBC catalog also needs its driver jar next to the Iceberg runtime (README recipe)."""
    from postgres_server import driver_jar

    from dagster_incremental.spark.session import iceberg_runtime_jar

    if not text:
        return None, {}
    found = json.loads(text)
    conf = dict(found["spark_config"])
    if any(k.endswith(".type") and v == "jdbc" for k, v in conf.items()):
        conf["spark.jars"] = f"{iceberg_runtime_jar()},{driver_jar()}"
    return found["name"], conf


def hadoop_catalog(warehouse: str) -> Catalog:
    return Catalog(kind="hadoop", name="lake", warehouse=warehouse)


def jdbc_catalog(server: Any, warehouse: str) -> Catalog:
    from postgres_server import jdbc_catalog_conf

    return Catalog(kind="jdbc", name=JDBC_CATALOG, warehouse=warehouse,
                   spark_config=jdbc_catalog_conf(JDBC_CATALOG, server, warehouse), server=server)


def _naive(value: Any) -> Any:
    """pyiceberg's timestamptz as Spark's collect() gives it: naive, in UTC (the tests' zone)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def assert_pyiceberg_agrees(catalog: Catalog, spark: Any, table: Any) -> None:
    """On a JDBC catalog, pyiceberg (SQLAlchemy on the same PostgreSQL) reads the table Spark
    wrote: the same rows, and the current snapshot's summary carries the same cursor."""
    from dagster_incremental.spark.write_spec import STATE_PROPERTY

    if catalog.kind != "jdbc":
        return
    spark.sql(f"REFRESH TABLE {table.sql}")
    frame = spark.table(table.sql)
    expected = sorted((tuple(r) for r in frame.collect()), key=repr)
    read = catalog.pyiceberg().load_table((*table.namespace, table.name))
    arrow = read.scan(selected_fields=tuple(frame.columns)).to_arrow().select(frame.columns)
    got = sorted((tuple(map(_naive, r)) for r in zip(*(arrow.column(c).to_pylist() for c in frame.columns))), key=repr)
    assert got == expected, f"pyiceberg reads {len(got)} rows of {table.display}, Spark {len(expected)}"
    spark_summary = spark.sql(
        f"SELECT summary FROM {table.sql}.`snapshots` ORDER BY committed_at DESC LIMIT 1").first().summary
    current = read.current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.additional_properties.get(STATE_PROPERTY) == spark_summary.get(STATE_PROPERTY)
