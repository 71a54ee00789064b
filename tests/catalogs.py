"""The catalogs and formats the end-to-end suites run against, each where such tables live:
- `hadoop`: the default Hadoop catalog, a folder on the local disk;
- `jdbc`: a JDBC catalog on a PostgreSQL server the tests start (tests/postgres_server.py), its
  warehouse in a bucket of the S3 server the tests start (SeaweedFS, tests/s3_server.py);
- `rest`: that S3 server's own Iceberg REST catalog, its tables in the server's table bucket;
- `delta`: Delta Lake tables (`format = "delta"`) in folders of the local disk, read back by
  delta-rs as well;
- `delta-s3`: Delta Lake tables in a bucket of that S3 server, written through Hadoop's S3A,
  each write under the table's commit lease.
Spark writes S3 through Iceberg's S3FileIO, whose AWS SDK comes from the AWS bundle jar of the
runtime jar's Iceberg version (tests/maven_jars.py); the S3 keys reach it, pyarrow and pyiceberg
through the AWS SDKs' own variables (`s3_identity_env`), the REST catalog's credential as a secret."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from dagster_incremental.spark.jvm_startup import C1_CODE_CACHE

CATALOG_KINDS = ("hadoop", "jdbc", "rest", "delta", "delta-s3")
# For a test whose subject does not depend on the catalog (planning, counting, metadata): the
# Hadoop catalog only. The commit paths (faults, races, exactly-once, branch commits, killed
# runs) run on every kind.
HADOOP_ONLY = pytest.mark.parametrize("catalog", ["hadoop"], indirect=True)
# For a feature whose commits differ on a catalog service over object storage (a `Changes` read
# of the upstream's snapshots, tenant-scoped cursors, the model-based sequences): the local
# Hadoop catalog and the REST catalog over S3.
LOCAL_AND_LAKE = pytest.mark.parametrize("catalog", ["hadoop", "rest"], indirect=True)
# The same with Delta beside them (the tenant-scoped cursors and replaces, the model-based
# sequences of one partitioned asset).
LOCAL_LAKE_AND_DELTA = pytest.mark.parametrize("catalog", ["hadoop", "rest", "delta"], indirect=True)
# For a write whose statement the two formats share but whose commit differs (delete_missing's
# MERGE, a tenant's scoped replace, the range edges, an empty batch): one catalog of each format.
EACH_FORMAT = pytest.mark.parametrize("catalog", ["hadoop", "delta"], indirect=True)
# For pyiceberg's commits without a JVM (spark/test_python_write.py, the change run that starts
# no JVM): every Iceberg catalog kind, and a JDBC catalog on a SQLite file beside the warehouse.
PYICEBERG_COMMITS = pytest.mark.parametrize("catalog", ["hadoop", "jdbc", "sqlite", "rest"], indirect=True)
# For a test of what a run does without a JVM: the catalogs whose table metadata Python reads
# itself (a Hadoop folder, a JDBC catalog's database, a REST catalog's answer, a Delta table's
# commit log on a disk or on S3): all of them.
WITHOUT_JVM = pytest.mark.parametrize("catalog", CATALOG_KINDS, indirect=True)
# For what only Iceberg has (merge-on-read delete files and their compaction, snapshot ids):
# every Iceberg catalog, not Delta.
ICEBERG_ONLY = pytest.mark.parametrize("catalog", ["hadoop", "jdbc", "rest"], indirect=True)
JDBC_CATALOG = "pg"  # the JDBC catalog's Spark name (the shared session's `lake` stays Hadoop)
REST_CATALOG = "rest"  # the REST catalog's Spark name
SQLITE_CATALOG = "sq"  # the SQLite JDBC catalog's Spark name

# The tests' S3 identity: set in the test process's environment before its JVM starts (conftest.py),
# so that Spark's S3FileIO, pyarrow's S3 and every runner subprocess find it where a user's would.
_S3_SECRET = os.urandom(12).hex()


def s3_identity_env() -> dict[str, str]:
    """AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION of the S3 server the tests start."""
    from s3_server import ACCESS_KEY_ID, REGION

    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": _S3_SECRET, "AWS_REGION": REGION}


def s3_secret() -> str:
    return _S3_SECRET


@dataclass(frozen=True)
class Catalog:
    """One catalog as a user configures it: the Spark catalog name and its `[spark.conf]` keys."""

    kind: str
    name: str
    warehouse: str
    spark_config: Mapping[str, str] = field(default_factory=dict)
    server: Any = None  # the PostgreSQL server of a JDBC catalog, the S3 server of a REST one
    s3: Any = None  # the S3 server its tables are in (None: a local folder)
    secrets: Mapping[str, str] = field(default_factory=dict)  # [spark.conf] keys of secrets.toml
    table_format: str = "iceberg"

    def io_manager(self, namespace: str, **kwargs: Any):
        from dagster_incremental import SparkTableIOManager

        conf = {**self.spark_config, **kwargs.pop("spark_config", {})}
        kwargs.setdefault("master", "local[2]")
        return SparkTableIOManager(catalog=self.name, namespace=namespace, warehouse=self.warehouse,
                                   spark_config=conf, table_format=self.table_format, **kwargs)

    def config_toml(self, namespace: str) -> str:
        """config.toml's `[destination]` and `[spark.conf]` sections for this catalog (its
        secrets come from the environment: `environment()`)."""
        text = (f'[destination]\nformat = "{self.table_format}"\ncatalog = "{self.name}"\n'
                f'namespace = "{namespace}"\nwarehouse = "{self.warehouse}"\n')
        if self.spark_config:
            text += "\n[spark.conf]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in self.spark_config.items())
        return text

    def environment(self) -> dict[str, str]:
        """The variables a user's process gets for this catalog's secrets (as
        DAGSTER_INCREMENTAL_SECRETS__SPARK__CONF__<KEY>; S3's keys are the AWS_* variables that
        S3FileIO's default credentials chain reads: `s3_identity_env`)."""
        from dagster_incremental.settings.environment import SECRETS_ENV_PREFIX

        return {f"{SECRETS_ENV_PREFIX}SPARK__CONF__{k.upper().replace('.', '_')}": v for k, v in self.secrets.items()}

    def commit_count(self, spark: Any, table: Any) -> int:
        """How many commits the table's history holds (Iceberg snapshots, Delta versions)."""
        if self.table_format == "delta":
            return spark.sql(f"DESCRIBE HISTORY {table.sql}").count()
        return spark.sql(f"SELECT count(*) FROM {table.sql}.`snapshots`").first()[0]

    def pyiceberg(self):
        """The same catalog read by pyiceberg (no Spark, no JVM): SqlCatalog on the JDBC
        catalog's database, RestCatalog on the REST catalog (its files through pyarrow's S3)."""
        s3 = {} if self.s3 is None else {
            "s3.endpoint": self.s3.s3_endpoint, "s3.path-style-access": "true", "s3.region": self.s3.region,
            "s3.access-key-id": self.s3.access_key_id, "s3.secret-access-key": self.s3.secret_access_key}
        if self.kind == "rest":
            from pyiceberg.catalog.rest import RestCatalog

            return RestCatalog(self.name, uri=self.server.catalog_uri, warehouse=self.warehouse,
                               credential=self.server.credential, **s3)
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(self.name, uri=self.server.sqlalchemy_uri, warehouse=self.warehouse, **s3)

    def delta_rs_options(self) -> dict[str, str]:
        """delta-rs's storage options for this catalog's tables ({}: a local folder)."""
        if self.s3 is None:
            return {}
        return {"AWS_ENDPOINT_URL": self.s3.s3_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": self.s3.region,
                "AWS_ACCESS_KEY_ID": self.s3.access_key_id, "AWS_SECRET_ACCESS_KEY": self.s3.secret_access_key,
                "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}

    def files_under(self, location: str) -> set[str]:
        """Every file under `location` (a table's folder or prefix): listed from the disk or the
        bucket itself, not from any table metadata (`plain` paths: s3://... or /...)."""
        from pyarrow import fs

        if self.s3 is None:
            selector = fs.FileSelector(plain(location), recursive=True, allow_not_found=True)
            return {f.path for f in fs.LocalFileSystem().get_file_info(selector) if f.type == fs.FileType.File}
        s3 = fs.S3FileSystem(endpoint_override=self.s3.s3_endpoint.removeprefix("http://"), scheme="http",
                             access_key=self.s3.access_key_id, secret_key=self.s3.secret_access_key,
                             region=self.s3.region, force_virtual_addressing=False)
        scheme, path = location.split("://", 1)
        selector = fs.FileSelector(path, recursive=True, allow_not_found=True)
        return {f"{scheme}://{f.path}" for f in s3.get_file_info(selector) if f.type == fs.FileType.File}


def plain(location: str) -> str:
    """A file's location as one spelling: Iceberg records a local file as file:/... or /..."""
    return location.removeprefix("file:")


def to_env(catalog: Catalog | None) -> str:
    """The catalog for a runner subprocess (tests/race_runner.py, tests/fault_runner.py)."""
    if catalog is None:
        return ""
    return json.dumps({"name": catalog.name, "warehouse": catalog.warehouse, "spark_config": dict(catalog.spark_config),
                       "format": catalog.table_format})


# The tests' tables hold a handful of rows: compiling each query to Java (whole-stage and
# expression code generation) costs more than running it interpreted; the shared session and the
# runner processes run them interpreted. Measured on tests/spark/test_scd2.py: about a third less
# CPU (bench/README.md, Session 24). Their heaps stay small, so the JVM's serial collector does
# without the default one's concurrent threads, which compete with the other worker for the two
# cores (Session 29: 1-5 % less time; C2, the optimising compiler, 4-9 % more).
SMALL_DATA_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
}

# Java options for the JVMs whose JIT the library does not choose: the Spark Connect server the
# tests start, and a standalone cluster's daemons, executor and driver (on a spark:// master the
# library leaves the JIT alone). The serial collector, and C1 alone as the library gives a local
# driver: on the tests' short statements C2 costs more CPU in compiling than it saves. And C1's
# code cache at the tiered JIT's 240 MB, as the library gives it (spark/jvm_startup.py).
# test_cluster: 0.58-0.59 of the CPU seconds and 0.60-0.62 of the time; test_connect_iceberg's
# JDBC tests: 0.71-0.77 of the CPU in the same time on one worker (bench/README.md, Session 41).
SMALL_JOBS_JAVA_OPTIONS = f"-XX:TieredStopAtLevel=1 {C1_CODE_CACHE} -XX:+UseSerialGC"


def session_jars() -> list[str]:
    """The shared session's jars: the Iceberg runtime and AWS bundle of one version from the
    local Maven repository (tests/maven_jars.py; without them, the PyPI runtime, and the S3
    catalogs' tests fail saying how to fetch them), Delta's two jars with S3A's two, then the JDBC
    catalog's driver."""
    from dagster_incremental.spark.iceberg.session_setup import iceberg_runtime_jar
    from maven_jars import delta_jars, s3_jars, sqlite_jar
    from postgres_server import driver_jar

    return (s3_jars() or [iceberg_runtime_jar()]) + (delta_jars(on_s3=True) or delta_jars() or []) + (
        [driver_jar()] if driver_jar() else []) + ([sqlite_jar()] if sqlite_jar() else [])


def shared_session_conf(warehouse: str, *, app_name: str = "dagster-incremental-tests") -> dict[str, str]:
    """The conf of a session that knows every catalog kind at once (the tests' shared session, a
    race runner's): every kind's jars, the Iceberg catalog `lake` (Hadoop, in `warehouse`), and
    Delta's extension and catalog beside Iceberg's; each other catalog's keys are set on it
    when it is first used (the `catalog` fixture, an IO manager's session).

    One task thread and one partition: the suite's two workers already keep both cores busy, so a
    second thread per JVM only adds tasks and files (bench/README.md, Session 29: 4 % less time)."""
    from dagster_incremental.spark.delta.session_setup import DELTA_CATALOG, DELTA_EXTENSIONS
    from dagster_incremental.spark.iceberg.session_setup import ICEBERG_EXTENSIONS
    from dagster_incremental.spark.session_conf import spark_conf

    return spark_conf(master="local[1]", app_name=app_name, catalog="lake", warehouse=warehouse, conf={
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        "spark.ui.showConsoleProgress": "false",
        "spark.jars": ",".join(session_jars()),
        "spark.sql.extensions": f"{ICEBERG_EXTENSIONS},{DELTA_EXTENSIONS}",
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.databricks.delta.snapshotPartitions": "1",
        **SMALL_DATA_CONF,
    })


def runner_spark_config(text: str) -> tuple[str | None, dict[str, str]]:
    """(catalog name, Spark conf) of a runner from `to_env`'s text ("": the default catalog)."""
    if not text:
        return None, {}
    found = json.loads(text)
    return found["name"], dict(found["spark_config"])


def runner_table_format(text: str) -> str:
    """The table format of a runner's catalog (`to_env`'s text; "": Iceberg)."""
    return json.loads(text).get("format", "iceberg") if text else "iceberg"


def hadoop_catalog(warehouse: str) -> Catalog:
    return Catalog(kind="hadoop", name="lake", warehouse=warehouse)


def sqlite_catalog(warehouse: str) -> Catalog:
    """An Iceberg JDBC catalog on a SQLite file (xerial's driver: maven_jars.SQLITE_JDBC), its
    tables in <warehouse>/sqlite on the local disk; pyiceberg's SqlCatalog reads the same file."""
    prefix = f"spark.sql.catalog.{SQLITE_CATALOG}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc",
            f"{prefix}.uri": f"jdbc:sqlite:{warehouse}/sqlite-catalog.db", f"{prefix}.warehouse": f"{warehouse}/sqlite"}
    return Catalog(kind="sqlite", name=SQLITE_CATALOG, warehouse=f"{warehouse}/sqlite", spark_config=conf,
                   server=_SqliteFile(f"sqlite:///{warehouse}/sqlite-catalog.db"))


@dataclass(frozen=True)
class _SqliteFile:
    """What Catalog.pyiceberg asks of a JDBC catalog's server: its SQLAlchemy URL."""

    sqlalchemy_uri: str


def delta_catalog(warehouse: str) -> Catalog:
    """Delta tables at <warehouse>/delta/<namespace>/<table>, on the local disk."""
    return Catalog(kind="delta", name="lake", warehouse=f"{warehouse}/delta", table_format="delta")


def s3a_settings(s3: Any) -> dict[str, str]:
    """Hadoop S3A's keys for the tests' S3 server (path-style; the keys come from the AWS_* variables)."""
    return {"spark.hadoop.fs.s3a.endpoint": s3.s3_endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": s3.region}


def delta_s3_catalog(s3: Any, jars: list[str]) -> Catalog:
    """Delta tables at s3a://<bucket>/delta/<namespace>/<table> on the tests' S3 server, through
    S3A (s3a_settings)."""
    conf = {**s3a_settings(s3), "spark.jars": ",".join(jars)}
    return Catalog(kind="delta-s3", name="lake", warehouse=s3.bucket.replace("s3://", "s3a://") + "/delta", spark_config=conf, s3=s3,
                   table_format="delta")


def s3_file_io(catalog: str, s3: Any) -> dict[str, str]:
    """A catalog's `[spark.conf]` keys for Iceberg's S3FileIO on the tests' S3 server (path-style
    addressing, as most S3-compatible servers want; the keys come from the AWS_* variables)."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO", f"{prefix}.s3.endpoint": s3.s3_endpoint,
            f"{prefix}.s3.path-style-access": "true", f"{prefix}.client.region": s3.region}


def spark4_jdbc_views(catalog: str) -> dict[str, str]:
    """What a JDBC catalog's user sets on Spark 4.1 (Iceberg 1.12), whose Spark looks up views
    too: Iceberg's view-capable catalog tables (`jdbc.schema-version = V1`, migrated in place),
    else every table lookup fails ("JDBC catalog is initialized without view support")."""
    from dagster_incremental.spark.spark_line import running_line

    return {} if running_line().name == "3.5" else {f"spark.sql.catalog.{catalog}.jdbc.schema-version": "V1"}


def jdbc_catalog(server: Any, s3: Any, jars: list[str]) -> Catalog:
    """A JDBC catalog on the PostgreSQL `server`, its warehouse in the S3 server's plain bucket.
    `jars`: the Iceberg runtime and AWS bundle of one version, then PostgreSQL's JDBC driver."""
    from postgres_server import jdbc_catalog_conf

    warehouse = f"{s3.bucket}/jdbc"
    conf = {**jdbc_catalog_conf(JDBC_CATALOG, server, warehouse), **s3_file_io(JDBC_CATALOG, s3),
            "spark.jars": ",".join(jars), **spark4_jdbc_views(JDBC_CATALOG)}
    return Catalog(kind="jdbc", name=JDBC_CATALOG, warehouse=warehouse, spark_config=conf, server=server, s3=s3)


def rest_catalog(server: Any, jars: list[str]) -> Catalog:
    """SeaweedFS's Iceberg REST catalog, its tables in the server's S3 table bucket through
    Iceberg's S3FileIO. `jars`: the Iceberg runtime and AWS bundle of one version
    (maven_jars.s3_jars()). The OAuth2 client credentials are a secret (`environment()`)."""
    prefix = f"spark.sql.catalog.{REST_CATALOG}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": server.catalog_uri,
        **s3_file_io(REST_CATALOG, server),
        f"{prefix}.warehouse": server.warehouse,
        "spark.jars": ",".join(jars),
    }
    return Catalog(kind="rest", name=REST_CATALOG, warehouse=server.warehouse, spark_config=conf, server=server, s3=server,
                   secrets={f"{prefix}.credential": server.credential})


def _naive(value: Any) -> Any:
    """pyiceberg's timestamptz as Spark's collect() gives it: naive, in UTC (the tests' zone)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def assert_other_readers_agree(catalog: Catalog, spark: Any, table: Any) -> None:
    """On a JDBC catalog (SQLAlchemy on the same PostgreSQL) and a REST catalog (the same
    server, the files read from S3), pyiceberg reads the table Spark wrote: the same rows, and
    the current snapshot's summary carries the same cursor. A Delta table is read by delta-rs
    (`deltalake`, no JVM) the same way: its rows, and the cursor in its commit history."""
    from dagster_incremental.spark.write_spec import STATE_PROPERTY

    if catalog.table_format == "delta":
        assert_delta_rs_agrees(spark, table, catalog.delta_rs_options())
        return
    if catalog.kind not in ("jdbc", "rest"):
        return
    spark.sql(f"REFRESH TABLE {table.sql}")
    frame = spark.table(table.sql)
    expected = sorted((tuple(r) for r in frame.collect()), key=repr)
    read = catalog.pyiceberg().load_table((*table.namespace, table.name))
    arrow = read.scan(selected_fields=tuple(frame.columns)).to_arrow().select(frame.columns)
    got = sorted((tuple(map(_naive, r)) for r in zip(*(arrow.column(c).to_pylist() for c in frame.columns))), key=repr)
    assert got == expected, f"pyiceberg reads {len(got)} rows of {table.display}, Spark {len(expected)}"
    spark_summary = main_lineage_summaries(spark, table.sql)[-1]
    current = read.current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.additional_properties.get(STATE_PROPERTY) == spark_summary.get(STATE_PROPERTY)


def main_lineage_summaries(spark: Any, table_sql: str) -> list[dict[str, str]]:
    """The summaries of the snapshots of an Iceberg table's main branch, oldest first: from main's
    current snapshot back through its parents (as far as they are kept). Not the `snapshots`
    table by commit time: that also holds the snapshots a run staged on its own branch and never
    published (a run that lost a race), until they are expired."""
    current = spark.sql(f"SELECT snapshot_id FROM {table_sql}.`refs` WHERE name = 'main'").first()
    if current is None:
        return []
    found = {r.snapshot_id: r for r in spark.sql(f"SELECT snapshot_id, parent_id, summary FROM {table_sql}.`snapshots`").collect()}
    lineage, at = [], current.snapshot_id
    while at in found:
        lineage.append(dict(found[at].summary or {}))
        at = found[at].parent_id
    return lineage[::-1]


def delta_by_spark_only(monkeypatch) -> None:
    """Every Delta write takes the Spark path (its statements and idempotent write), not delta-rs's."""
    from dagster_incremental.spark.delta import writer

    monkeypatch.setattr(writer, "write_in_process", lambda *args, **kwargs: None)


def delta_rs_rows(location: str, storage_options: Mapping[str, str] | None = None) -> Any:
    """The Delta table's rows as delta-rs's query engine reads them, as a pyarrow Table.
    Not `to_pyarrow_table()`: with pyarrow 25/26 it can abort the process as it exits."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(location, storage_options=dict(storage_options or {}))
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())


def assert_delta_rs_agrees(spark: Any, table: Any, storage_options: Mapping[str, str] | None = None) -> None:
    """delta-rs reads the Delta table Spark wrote: the same rows, and the newest cursor Spark's
    history shows is in delta-rs's history of the same version."""
    from deltalake import DeltaTable

    from dagster_incremental.spark.write_spec import STATE_PROPERTY

    frame = spark.table(table.sql)
    expected = sorted((tuple(r) for r in frame.collect()), key=repr)
    read = DeltaTable(table.location, storage_options=dict(storage_options or {}))
    arrow = delta_rs_rows(table.location, storage_options).select(frame.columns)
    got = sorted((tuple(map(_naive, r)) for r in zip(*(arrow.column(c).to_pylist() for c in frame.columns))), key=repr)
    assert got == expected, f"delta-rs reads {len(got)} rows of {table.display}, Spark {len(expected)}"
    spark_history = spark.sql(f"DESCRIBE HISTORY {table.sql}").where("userMetadata LIKE '%dagster_incremental.state%'")
    newest = spark_history.orderBy("version", ascending=False).first()
    if newest is None:
        return
    by_version = {h["version"]: h for h in read.history()}
    carried = json.loads(by_version[newest.version]["userMetadata"])
    assert carried[STATE_PROPERTY] == json.loads(newest.userMetadata)[STATE_PROPERTY]
