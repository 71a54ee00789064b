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

# The S3 server's identity, in the AWS SDKs' own variables before any JVM starts: Spark's
# S3FileIO, pyarrow's S3 and the runner subprocesses read it there, as a user's process would.
from catalogs import CATALOG_KINDS, s3_identity_env, s3_secret  # noqa: E402

os.environ.update(s3_identity_env())

# The suite runs on two workers (README): a property's examples may take longer than Hypothesis's
# 200 ms deadline on a busy machine, and their speed is not what any property asserts.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Modules of a minute or more (processes racing, a cluster, the example, long model runs): they
# start first, longest first, so that the two workers finish together instead of one running them
# at the end. test_connect_delta (PySpark 4 only) is the second line's longest, about 9 minutes.
SLOW_FIRST = ("test_connect_delta", "test_connect_iceberg", "test_race_without_pool", "test_cluster", "test_example_model",
              "test_model_based", "test_exactly_once", "test_faults", "test_concurrency", "test_code_location",
              "test_lake")

# What `.ci/run` proves on the second Spark line too (`pytest -m every_line`, after the whole suite
# on the first): the commit, race and fault paths on every catalog kind and format, the keyed
# merges (Spark's MERGE and the local keyed merge, whose Iceberg JSON changed spelling in 1.11),
# `Changes` chains, the cursor on every input kind, Spark's errors told by class, Delta's own
# reads and writes through Delta's jars of that line (test_delta: checkpoints, restores, column
# mapping, which a Delta jar built for another patch of the line broke), Delta written over a
# Spark Connect server with no JVM in the run's process (test_connect_delta), Iceberg's in a JDBC
# and a REST catalog too (test_connect_iceberg), and the
# example code location's README runs (test_code_location: `python -m definitions`, `dagster asset
# materialize` twice). Not test_example_model: it checks the example's partition plan and column
# docs, the same on every line, and its one Spark run (about 100 s on 4.1) is a delete-insert by
# merge_key that test_merge_strategies and test_faults already prove there.
EVERY_LINE = ("test_faults", "test_concurrency", "test_exactly_once", "test_race_without_pool", "test_commit",
              "test_commit_lock", "test_branch_commit", "test_merge_strategies", "test_changes",
              "test_errors", "test_incremental", "test_code_location", "test_local_merge", "test_spark_connect",
              "test_delta", "test_connect_delta", "test_connect_iceberg")

# Modules whose tests check planning, metadata and messages through a table: on every catalog
# kind they would repeat the commit, race and fault paths that EVERY_LINE modules already prove on
# each kind, so they run on one kind per format (ONE_KIND_PER_FORMAT), but for a test marked
# `every_kind`; DI_EVERY_KIND=1 runs them all on every kind.
ONE_KIND_PER_FORMAT_MODULES = ("test_assets", "test_checks")
ONE_KIND_PER_FORMAT = ("hadoop", "delta")
EVERY_KIND_ENV = "DI_EVERY_KIND"

# Tests against a real Spark Connect server (the `connect_server` fixture) are `connect` tests:
# PySpark 4's wheel ships the server, 3.5's does not (nor does Maven Central serve 3.5's), so on
# the 3.5 line they are deselected, and the run's header says why.
CONNECT_LINES_FROM = (4, 0)


@pytest.fixture(scope="session")
def spark_warehouse():
    """A throw-away Iceberg warehouse folder for the whole test session."""
    path = tempfile.mkdtemp(prefix="di_warehouse_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(spark_warehouse):
    """The one SparkSession of the test run: local, loopback only, UI off, Iceberg catalog `lake`,
    and Delta's extension and catalog beside Iceberg's (as `format = "delta"` configures them)."""
    from catalogs import shared_session_conf
    from dagster_incremental.spark.session import build_spark_session

    session = build_spark_session(shared_session_conf(spark_warehouse, app_name="dagster-incremental-tests"))
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
    from s3_server import s3_server

    with s3_server(s3_secret()) as server:
        yield server


@pytest.fixture(scope="session")
def s3_jars():
    """The Iceberg runtime and AWS bundle jars the S3 catalogs need. Not skipped when they are
    missing: a failure that says how to fetch them."""
    from maven_jars import ARTIFACTS, s3_jars

    jars = s3_jars()
    if jars is None:
        pytest.fail("the Iceberg runtime and AWS bundle jars are not in the local Maven repository: "
                    + "; ".join(f"mvn dependency:get -Dartifact={':'.join(a)}" for a in ARTIFACTS), pytrace=False)
    return jars


@pytest.fixture(scope="session")
def rest_catalog(s3, s3_jars):
    """The REST catalog over S3 (tests/catalogs.py)."""
    from catalogs import rest_catalog

    return rest_catalog(s3, s3_jars)


@pytest.fixture(scope="session")
def jdbc_catalog(postgres, s3, s3_jars):
    """The JDBC catalog on PostgreSQL, its warehouse on S3 (tests/catalogs.py)."""
    from catalogs import jdbc_catalog
    from postgres_server import driver_jar

    return jdbc_catalog(postgres, s3, [*s3_jars, driver_jar()])


@pytest.fixture(scope="session")
def delta_s3_catalog(s3):
    """Delta tables on the S3 server (tests/catalogs.py)."""
    from catalogs import delta_s3_catalog
    from maven_jars import delta_jars

    jars = delta_jars(on_s3=True)
    if jars is None:
        pytest.fail("Delta's and S3A's jars are not in the local Maven repository: run `python3 tests/maven_jars.py` "
                    "and `mvn dependency:get -Dartifact=<each>`", pytrace=False)
    return delta_s3_catalog(s3, jars)


@pytest.fixture(scope="session", params=CATALOG_KINDS)
def catalog(request, spark, spark_warehouse):
    """Each Iceberg catalog kind the suites run against (tests/catalogs.py), known to `spark`:
    its keys set on the shared session, its secrets in the environment as a user's process has them."""
    from catalogs import delta_catalog, hadoop_catalog

    if request.param == "hadoop":
        return hadoop_catalog(spark_warehouse)
    if request.param == "delta":
        return delta_catalog(spark_warehouse)
    if request.param == "sqlite":
        from catalogs import sqlite_catalog

        found = sqlite_catalog(spark_warehouse)
        for key, value in found.spark_config.items():
            spark.conf.set(key, value)
        return found
    found = request.getfixturevalue(f"{request.param.replace('-', '_')}_catalog")
    os.environ.update(found.environment())
    for key, value in {**found.spark_config, **found.secrets}.items():
        if key != "spark.jars":
            spark.conf.set(key, value)
        if key.startswith("spark.hadoop."):  # a running session's filesystems read the bare key
            spark.conf.set(key.removeprefix("spark.hadoop."), value)
    return found


@pytest.fixture(autouse=True)
def catalog_secrets_only_where_a_catalog_is(request, monkeypatch):
    """`catalog` puts its secrets in this process's environment, as a user's process has them;
    a test that takes no catalog sees the environment without them (one that reads secrets
    from the environment would otherwise find another test's)."""
    if "catalog" in request.fixturenames:
        return
    from dagster_incremental.settings.environment import SECRETS_ENV_PREFIX

    for key in [k for k in os.environ if k.startswith(f"{SECRETS_ENV_PREFIX}SPARK__CONF__SPARK_SQL_CATALOG_")]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def connect_server(spark_warehouse, s3, rest_catalog, jdbc_catalog):
    """A Spark Connect server (tests/connect_server.py) on 127.0.0.1 serving the tests' warehouse
    (catalog `lake`, Delta beside it), the S3 server's buckets (S3A's endpoint in its own conf,
    the keys from its environment's AWS_* variables) and the REST and JDBC Iceberg catalogs
    (their keys and secrets the server's own), started once per test session (per worker: its
    port picked free), stopped with its JVM at the end."""
    from catalogs import s3a_settings
    from connect_server import connect_server

    catalogs = {k: v for c in (rest_catalog, jdbc_catalog) for k, v in {**c.spark_config, **c.secrets}.items()
                if k != "spark.jars"}
    with connect_server(spark_warehouse, {**s3a_settings(s3), **catalogs}) as server:
        yield server


@pytest.fixture
def instance():
    """A throwaway Dagster instance (its own temp storage) for one test."""
    from instances import fresh_instance

    with fresh_instance() as inst:
        yield inst


def _connect_server_shipped() -> bool:
    """Whether the installed PySpark's line ships a Spark Connect server (4.0 and later)."""
    import pyspark

    major, minor = pyspark.__version__.split(".")[:2]
    return (int(major), int(minor)) >= CONNECT_LINES_FROM


def pytest_report_header(config):
    lines = []
    if not _connect_server_shipped():
        lines.append("Spark Connect tests (marker `connect`) deselected: this PySpark line ships no Connect server")
    if os.environ.get(EVERY_KIND_ENV) != "1":
        lines.append(f"{', '.join(ONE_KIND_PER_FORMAT_MODULES)}: on catalog kinds {', '.join(ONE_KIND_PER_FORMAT)} "
                     f"only ({EVERY_KIND_ENV}=1: on every kind)")
    return lines


def _deselect(config, items, drop) -> None:
    deselected = [item for item in items if drop(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not drop(item)]


def _beyond_one_kind_per_format(item) -> bool:
    """A ONE_KIND_PER_FORMAT_MODULES test on a catalog kind beyond ONE_KIND_PER_FORMAT, unless
    marked `every_kind` (a commit path no EVERY_LINE module runs on each kind)."""
    kind = getattr(item, "callspec", None) and item.callspec.params.get("catalog")
    return (item.module.__name__.rsplit(".", 1)[-1] in ONE_KIND_PER_FORMAT_MODULES
            and kind is not None and kind not in ONE_KIND_PER_FORMAT and not item.get_closest_marker("every_kind"))


def pytest_collection_modifyitems(config, items):
    """A test that uses the shared session or its warehouse (an IO manager there starts a JVM),
    directly or through a fixture, is a `spark` test, so `pytest -m "not spark"` is the fast
    suite without anyone having to remember the marker. EVERY_LINE modules' tests are
    `every_line` tests. A test of the Connect server is a `connect` test, deselected on a line
    without one. ONE_KIND_PER_FORMAT_MODULES run on one catalog kind per format unless
    DI_EVERY_KIND=1. SLOW_FIRST modules go first."""
    for item in items:
        if {"spark", "spark_warehouse"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
        if item.module.__name__.rsplit(".", 1)[-1] in EVERY_LINE:
            item.add_marker(pytest.mark.every_line)
        if "connect_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.connect)
    if not _connect_server_shipped():
        _deselect(config, items, lambda item: item.get_closest_marker("connect"))
    if os.environ.get(EVERY_KIND_ENV) != "1":
        _deselect(config, items, _beyond_one_kind_per_format)
    slow = {name: rank for rank, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: slow.get(item.module.__name__.rsplit(".", 1)[-1], len(slow)))
