"""Spark Connect for an Iceberg destination is not supported yet (Delta's runs over it:
tests/dagster/test_connect_delta.py): a Connect DataFrame an asset gives (made on a Connect
server, as on Databricks serverless) is refused where it enters the library, naming the asset
and what to do, before anything is written; the table and the Dagster cursor stay as they were.
Against a real Connect server (tests/connect_server.py), on the Spark lines that ship one; the
advice it gives (the frame's rows as Arrow) is run too.
"""

from __future__ import annotations

import dagster as dg
import pytest

from attack_support import failure_text
from catalogs import HADOOP_ONLY
from connect_server import client_session
from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError

# The module needs PySpark 4's Connect client even without a server: deselected on 3.5 as the
# server's tests are (tests/conftest.py).
pytestmark = [pytest.mark.spark, pytest.mark.connect]

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
SCHEMA = "id BIGINT, amount BIGINT, updated_at TIMESTAMP"


def rows(*ids: int) -> list[dict]:
    from datetime import datetime, timezone

    return [{"id": i, "amount": i * 10, "updated_at": datetime(2024, 1, i, tzinfo=timezone.utc)} for i in ids]


@pytest.fixture
def connect(connect_server):
    """A Connect client session on the test server, as a user's code makes one beside Dagster."""
    session = client_session(connect_server.url)
    yield session
    session.stop()


def run(asset, instance, io) -> dg.ExecuteInProcessResult:
    return dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=QUIET,
                          raise_on_error=False)


def table_state(spark, catalog, io, name: str) -> tuple[list[int], int]:
    """The table's ids and its number of commits."""
    table = io.table_name(dg.AssetKey(name))
    ids = [r["id"] for r in spark.table(table.sql).orderBy("id").collect()]
    return ids, catalog.commit_count(spark, table)


def cursor_of(instance, name: str):
    event = instance.get_latest_materialization_event(dg.AssetKey(name))
    return event.asset_materialization.metadata["dagster_incremental/state"].value


def assert_refused(result: dg.ExecuteInProcessResult, asset: str) -> None:
    text = failure_text(result)
    assert f"asset {asset!r}" in text and "Spark Connect DataFrame" in text and "not supported" in text
    assert "[spark] master" in text and "frame.toArrow()" in text and "Nothing was written" in text
    assert "sc://" not in text and "127.0.0.1" not in text  # never the server's URL


@HADOOP_ONLY
@pytest.mark.parametrize("how", ["returned", "yielded after dict rows"])
def test_a_connect_dataframe_is_refused_and_the_table_and_cursor_are_untouched(
        how, spark, connect, instance, io_manager, config_file, catalog):
    given: list = [rows(1, 2)]

    @incremental_asset(primary_key="id", write_disposition="merge", config_path=config_file)
    def orders_c(updated_at: Incremental = incremental("updated_at")):
        return given[0]

    assert run(orders_c, instance, io_manager).success
    before, cursor = table_state(spark, catalog, io_manager, "orders_c"), cursor_of(instance, "orders_c")

    frame = connect.createDataFrame(rows(2, 3, 4), SCHEMA)
    given[0] = frame if how == "returned" else iter([*rows(5), frame])
    result = run(orders_c, instance, io_manager)
    assert_refused(result, "orders_c")
    assert table_state(spark, catalog, io_manager, "orders_c") == before
    assert cursor_of(instance, "orders_c") == cursor
    assert len(instance.fetch_materializations(dg.AssetKey("orders_c"), limit=10).records) == 1


@HADOOP_ONLY
def test_the_advice_works_the_connect_frames_rows_as_arrow_are_written(spark, connect, instance, io_manager, config_file, catalog):
    frame = connect.createDataFrame(rows(1, 2, 3), SCHEMA)

    @incremental_asset(primary_key="id", write_disposition="merge", config_path=config_file)
    def orders_arrow(updated_at: Incremental = incremental("updated_at")):
        return frame.toArrow()

    assert run(orders_arrow, instance, io_manager).success
    assert table_state(spark, catalog, io_manager, "orders_arrow")[0] == [1, 2, 3]
    assert cursor_of(instance, "orders_arrow")["last_value"] == "2024-01-03T00:00:00Z"


@HADOOP_ONLY
def test_a_plain_assets_connect_dataframe_is_refused_before_its_table_exists(spark, connect, instance, io_manager):
    @dg.asset
    def plain_c():
        return connect.createDataFrame(rows(1), SCHEMA)

    result = run(plain_c, instance, io_manager)
    assert_refused(result, "plain_c")
    assert not spark.catalog.tableExists(io_manager.table_name(dg.AssetKey("plain_c")).sql)


def test_the_intake_refuses_pysparks_own_connect_dataframe_class_without_a_server():
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

    from dagster_incremental.spark.local.stage import iterate_output

    frame = object.__new__(ConnectDataFrame)  # no session, no server: the class is what is refused
    for given in (frame, iter([{"id": 1}, frame])):
        with pytest.raises(IncrementalConfigError, match="asset 'orders': the function gave a Spark Connect DataFrame"):
            list(iterate_output(given, "orders"))


# A user's process that made its Connect session the way PySpark's docs show, which marks the
# whole process as Connect (SPARK_CONNECT_MODE_ENABLED): run in a process of its own, since the
# mark would reach every later test of this one.
MARKED_PROCESS = """
import json, os, sys
import dagster as dg
from pyspark import SparkContext
from pyspark.sql import SparkSession
from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

url, warehouse = sys.argv[1], sys.argv[2]
remote = SparkSession.builder.remote(url).getOrCreate()

@incremental_asset(primary_key="id", write_disposition="merge")
def orders_m(updated_at: Incremental = incremental("updated_at")):
    return [{"id": 1, "updated_at": "2024-01-01T00:00:00Z"}]

io = SparkTableIOManager(catalog="lake", namespace="marked", warehouse=warehouse, master="local[1]")
result = dg.materialize([orders_m], resources={"io_manager": io}, raise_on_error=False)
error = result.get_step_failure_events()[0].step_failure_data.error if not result.success else None
print(json.dumps({"success": result.success, "message": error.message if error else None,
                  "marked": "SPARK_CONNECT_MODE_ENABLED" in os.environ, "jvm": SparkContext._jvm is not None,
                  "remote_kind": type(remote).__module__}))
"""


def test_a_process_marked_as_connect_is_refused_before_a_jvm_starts_or_a_table_exists(connect_server, tmp_path):
    import json
    import os
    import subprocess
    import sys

    warehouse = tmp_path / "warehouse"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", MARKED_PROCESS, connect_server.url, str(warehouse)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["marked"] and seen["remote_kind"].startswith("pyspark.sql.connect")  # the scenario is real
    assert not seen["success"]
    assert "asset orders_m" in seen["message"] and "already has a Spark Connect session" in seen["message"]
    assert "[spark] master" in seen["message"] and "sc://" not in seen["message"]
    assert not seen["jvm"]  # refused before the library started a driver JVM
    assert not (warehouse / "marked" / "orders_m").exists()


@pytest.mark.parametrize("over_connect", [True, False], ids=["connect", "classic"])
def test_local_rows_of_several_arrow_batches_become_a_dataframe_without_a_row_by_row_fallback(over_connect, request):
    """Local rows reach PySpark 4 as Arrow: a string column of several Arrow batches (what a run's
    pages become) is sent whole, where pandas 3 would have kept it chunked, for PySpark's Connect
    serializer to refuse and its classic session to convert row by row (with a warning)."""
    import warnings

    import pyarrow as pa

    from dagster_incremental.spark.local.rows import LocalRows
    from dagster_incremental.spark.local.stage import arrow_to_spark

    pages = [pa.table({"id": pa.array(range(i, i + 3), pa.int64()), "name": [f"n{j}" for j in range(i, i + 3)]})
             for i in (0, 3, 6)]
    session = request.getfixturevalue("connect" if over_connect else "spark")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the classic session's row-by-row fallback warns
        frame = arrow_to_spark(session, LocalRows.of(pa.concat_tables(pages)))
        got = sorted((r["id"], r["name"]) for r in frame.collect())
    assert got == [(i, f"n{i}") for i in range(9)]
