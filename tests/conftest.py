"""Shared fixtures: one Spark session per test session (starting one costs seconds)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest
from hypothesis import settings

# Keep Spark on loopback: no UI, no binding to the machine's public interface.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use the test interpreter

TEST_CATALOG = "lake"

# The suites' run on the REST catalog over S3: tests/test_lake.py starts an S3 server, then runs
# the catalog-parametrized tests it lists in a pytest process of its own with this variable set
# (the server, as s3_server.S3Server.to_env). There `catalog` is the REST catalog only, and the
# shared session carries the Iceberg runtime and AWS bundle jars of one version
# (tests/maven_jars.py) instead of the PyPI runtime, which has no AWS bundle of its version.
from catalogs import ON_REST, S3_SERVER_ENV  # noqa: E402

# The suite runs on two workers (README): a property's examples may take longer than Hypothesis's
# 200 ms deadline on a busy machine, and their speed is not what any property asserts.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Modules of a minute or more (processes racing, a cluster, the example, long model runs): they
# start first, so that the two workers finish together instead of one running them at the end.
SLOW_FIRST = ("test_race_without_pool", "test_cluster", "test_example_model", "test_model_based",
              "test_exactly_once", "test_faults", "test_concurrency", "test_code_location", "test_lake")


@pytest.fixture(scope="session")
def spark_warehouse():
    """A throw-away Iceberg warehouse folder for the whole test session."""
    path = tempfile.mkdtemp(prefix="di_warehouse_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(spark_warehouse):
    """The one SparkSession of the test run: local, loopback only, UI off, Iceberg catalog `lake`."""
    from dagster_incremental.spark.session import build_spark_session, iceberg_runtime_jar, spark_conf
    from postgres_server import driver_jar

    jars = [iceberg_runtime_jar()] + ([driver_jar()] if driver_jar() else [])  # + the JDBC catalog's driver
    if ON_REST:
        from maven_jars import s3_jars

        jars = (s3_jars() or []) + jars[1:]
    conf = spark_conf(
        master="local[2]",
        app_name="dagster-incremental-tests",
        catalog=TEST_CATALOG,
        warehouse=spark_warehouse,
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.showConsoleProgress": "false",
            "spark.jars": ",".join(jars),
        },
    )
    session = build_spark_session(conf)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the JDBC catalog, started once per test session."""
    from postgres_server import postgres_server

    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def s3():
    """An S3 server with an Iceberg REST catalog (SeaweedFS, tests/s3_server.py) on 127.0.0.1,
    started once per test session (per worker: ports picked free), stopped at the end."""
    from s3_server import S3Server, s3_server

    if ON_REST:  # the server of the test that started this process
        server = S3Server.from_env(os.environ[S3_SERVER_ENV])
        os.environ.update(server.aws_env())
        yield server
        return
    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def rest_catalog(s3):
    """The REST catalog over S3 (tests/catalogs.py). Its Spark runs in a process of its own: the
    shared session has no AWS bundle. Not skipped when the jars are missing: a failure."""
    from catalogs import rest_catalog
    from maven_jars import ARTIFACTS, s3_jars

    jars = s3_jars()
    if jars is None:
        pytest.fail("the Iceberg runtime and AWS bundle jars are not in the local Maven repository: "
                    + "; ".join(f"mvn dependency:get -Dartifact={':'.join(a)}" for a in ARTIFACTS), pytrace=False)
    return rest_catalog(s3, jars)


@pytest.fixture(scope="session", params=["rest"] if ON_REST else ["hadoop", "jdbc"])
def catalog(request, spark, spark_warehouse):
    """Each Iceberg catalog kind the suites run against (tests/catalogs.py), known to `spark`."""
    from catalogs import hadoop_catalog, jdbc_catalog

    if request.param == "hadoop":
        return hadoop_catalog(spark_warehouse)
    if request.param == "rest":
        found = request.getfixturevalue("rest_catalog")
        os.environ.update(found.environment())  # the secrets as a user's process gets them
        for key, value in {**found.spark_config, **found.secrets}.items():
            if key != "spark.jars":
                spark.conf.set(key, value)
        return found
    found = jdbc_catalog(request.getfixturevalue("postgres"), os.path.join(spark_warehouse, "jdbc"))
    for key, value in found.spark_config.items():
        spark.conf.set(key, value)
    return found


@pytest.fixture
def instance():
    """A throwaway Dagster instance (its own temp storage) for one test."""
    import dagster as dg

    with dg.instance_for_test() as inst:
        yield inst


def pytest_collection_modifyitems(config, items):
    """A test that uses the shared session or its warehouse (an IO manager there starts a JVM),
    directly or through a fixture, is a `spark` test, so `pytest -m "not spark"` is the fast
    suite without anyone having to remember the marker. SLOW_FIRST modules go first. In the
    REST run (ON_REST) only the tests on the `rest` catalog are collected."""
    if ON_REST:
        on_rest = [i for i in items if getattr(getattr(i, "callspec", None), "params", {}).get("catalog") == "rest"]
        config.hook.pytest_deselected(items=[i for i in items if i not in on_rest])
        items[:] = on_rest
    for item in items:
        if {"spark", "spark_warehouse"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
    slow = {name: rank for rank, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: slow.get(item.module.__name__.rsplit(".", 1)[-1], len(slow)))
