"""The Iceberg catalogs the end-to-end suites run against: the default Hadoop catalog (a folder),
a JDBC catalog on a PostgreSQL server the tests start (tests/postgres_server.py), and a REST
catalog over S3 (SeaweedFS, tests/s3_server.py), whose Spark runs in its own process: it needs
the AWS bundle jar, of the Iceberg version of its runtime jar (tests/maven_jars.py)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

CATALOG_KINDS = ("hadoop", "jdbc")
# Set in the pytest process tests/test_lake.py starts (conftest.py): the catalog-parametrized
# tests run on the REST catalog over S3 there, and only there.
S3_SERVER_ENV = "DAGSTER_INCREMENTAL_TEST_S3_SERVER"
ON_REST = bool(os.environ.get(S3_SERVER_ENV))
# For a test whose subject does not depend on the catalog (planning, counting, metadata): the
# Hadoop catalog only. The commit paths (faults, races, exactly-once, branch commits, killed
# runs) run on both kinds.
HADOOP_ONLY = pytest.mark.parametrize("catalog", ["hadoop"], indirect=True)
# For a test of what a run does without a JVM: the catalogs whose table metadata Python reads
# itself (a Hadoop folder, a REST catalog's answer; a JDBC catalog's only Spark reads).
WITHOUT_JVM = pytest.mark.parametrize("catalog", ["rest"] if ON_REST else ["hadoop"], indirect=True)
JDBC_CATALOG = "pg"  # the JDBC catalog's Spark name (the shared session's `lake` stays Hadoop)
REST_CATALOG = "rest"  # the REST catalog's Spark name


@dataclass(frozen=True)
class Catalog:
    """One catalog as a user configures it: the Spark catalog name and its `[spark.conf]` keys."""

    kind: str
    name: str
    warehouse: str
    spark_config: Mapping[str, str] = field(default_factory=dict)
    server: Any = None  # the PostgreSQL server of a JDBC catalog, the S3 server of a REST one
    secrets: Mapping[str, str] = field(default_factory=dict)  # [spark.conf] keys of secrets.toml

    def io_manager(self, namespace: str, **kwargs: Any):
        from dagster_incremental import SparkTableIOManager

        conf = {**self.spark_config, **kwargs.pop("spark_config", {})}
        kwargs.setdefault("master", "local[2]")
        return SparkTableIOManager(catalog=self.name, namespace=namespace, warehouse=self.warehouse,
                                   spark_config=conf, **kwargs)

    def config_toml(self, namespace: str) -> str:
        """config.toml's `[destination]` and `[spark.conf]` sections for this catalog (its
        secrets come from the environment: `environment()`)."""
        text = f'[destination]\ncatalog = "{self.name}"\nnamespace = "{namespace}"\nwarehouse = "{self.warehouse}"\n'
        if self.spark_config:
            text += "\n[spark.conf]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in self.spark_config.items())
        return text

    def environment(self) -> dict[str, str]:
        """The variables a user's process gets for this catalog: the secrets (as
        DAGSTER_INCREMENTAL_SECRETS__SPARK__CONF__<KEY>) and the S3 credentials (the AWS SDK's
        own variables, which S3FileIO's default credentials chain reads)."""
        from dagster_incremental.settings.environment import SECRETS_ENV_PREFIX

        env = {f"{SECRETS_ENV_PREFIX}SPARK__CONF__{k.upper().replace('.', '_')}": v for k, v in self.secrets.items()}
        if self.kind == "rest":
            env.update(self.server.aws_env())
        return env

    def pyiceberg(self):
        """The same catalog read by pyiceberg (no Spark, no JVM): SqlCatalog on the JDBC
        catalog's database, RestCatalog on the REST catalog (its files through pyarrow's S3)."""
        if self.kind == "rest":
            from pyiceberg.catalog.rest import RestCatalog

            server = self.server
            return RestCatalog(self.name, uri=server.catalog_uri, warehouse=server.warehouse,
                               credential=server.credential,
                               **{"s3.endpoint": server.s3_endpoint, "s3.path-style-access": "true",
                                  "s3.region": server.region, "s3.access-key-id": server.access_key_id,
                                  "s3.secret-access-key": server.secret_access_key})
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


def rest_catalog(server: Any, jars: list[str]) -> Catalog:
    """SeaweedFS's Iceberg REST catalog, its tables in the server's S3 table bucket through
    Iceberg's S3FileIO. `jars`: the Iceberg runtime and AWS bundle of one version
    (maven_jars.s3_jars()). The OAuth2 client credentials are a secret; S3's come from the
    AWS_* variables (`environment()`)."""
    prefix = f"spark.sql.catalog.{REST_CATALOG}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": server.catalog_uri,
        f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{prefix}.s3.endpoint": server.s3_endpoint,
        f"{prefix}.s3.path-style-access": "true",
        f"{prefix}.client.region": server.region,
        f"{prefix}.warehouse": server.warehouse,
        "spark.jars": ",".join(jars),
    }
    return Catalog(kind="rest", name=REST_CATALOG, warehouse=server.warehouse, spark_config=conf, server=server,
                   secrets={f"{prefix}.credential": server.credential})


def _naive(value: Any) -> Any:
    """pyiceberg's timestamptz as Spark's collect() gives it: naive, in UTC (the tests' zone)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def assert_pyiceberg_agrees(catalog: Catalog, spark: Any, table: Any) -> None:
    """On a JDBC catalog (SQLAlchemy on the same PostgreSQL) and a REST catalog (the same
    server, the files read from S3), pyiceberg reads the table Spark wrote: the same rows, and
    the current snapshot's summary carries the same cursor."""
    from dagster_incremental.spark.write_spec import STATE_PROPERTY

    if catalog.kind not in ("jdbc", "rest"):
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
