"""A run with nothing new to write never starts Spark: the cursor, the row count and the schema
come from the table's metadata files (Dagster launches every run in a fresh process, where a
JVM costs seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import dagster as dg
import pytest

from attack_support import table_exists
from catalogs import PYICEBERG_COMMITS, WITHOUT_JVM, delta_rs_rows
from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

pytestmark = pytest.mark.spark

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
ROWS = [{"id": i, "updated_at": f"2024-01-0{i}T00:00:00Z"} for i in range(1, 4)]


@pytest.fixture
def setup(tmp_path, catalog):
    """On the catalogs whose metadata Python reads (WITHOUT_JVM: the Hadoop folder, the REST
    catalog's answer, a Delta table's commit log)."""
    namespace = "nospark_" + uuid.uuid4().hex[:6]
    config = tmp_path / "config.toml"
    config.write_text(
        catalog.config_toml(namespace) + '\n'
        '[assets.orders]\nprimary_key = ["id"]\n'
        'write_disposition = { disposition = "merge", strategy = "upsert" }\n'
        '[assets.orders.updated_at]\ncursor_path = "updated_at"\ninitial_value = "2024-01-01T00:00:00Z"\n'
    )
    source: dict[str, list] = {"rows": ROWS}

    @incremental_asset(config_path=str(config))
    def orders(updated_at: Incremental):
        yield from source["rows"]

    def io() -> SparkTableIOManager:
        return catalog.io_manager(namespace)

    return orders, source, io


def no_spark(monkeypatch):
    def refuse(conf):
        raise AssertionError("this run started Spark")

    monkeypatch.setattr("dagster_incremental.spark.session.build_spark_session", refuse)


def metadata(result):
    return {k: v.value for k, v in result.get_asset_materialization_events()[-1].materialization.metadata.items()}


@WITHOUT_JVM
@pytest.mark.parametrize("second_source", [[], ROWS[-1:]], ids=["source-empty", "source-repeats-last-row"])
def test_nothing_new_is_reported_from_the_table_files(spark, instance, setup, monkeypatch, second_source):
    orders, source, io = setup
    first = dg.materialize([orders], instance=instance, resources={"io_manager": io()}, run_config=QUIET)
    assert first.success
    source["rows"] = second_source
    no_spark(monkeypatch)
    second = dg.materialize([orders], instance=instance, resources={"io_manager": io()}, run_config=QUIET)
    assert second.success
    before, after = metadata(first), metadata(second)
    assert after["dagster/row_count"] == 3 and after["dagster_incremental/rows_inserted"] == 0
    assert after["dagster_incremental/state"]["last_value"] == before["dagster_incremental/state"]["last_value"]
    assert after["dagster/column_schema"] == before["dagster/column_schema"]


@WITHOUT_JVM
def test_a_first_run_with_no_rows_creates_nothing_and_starts_nothing(spark, instance, setup, monkeypatch):
    orders, source, io = setup
    source["rows"] = []
    no_spark(monkeypatch)
    result = dg.materialize([orders], instance=instance, resources={"io_manager": io()}, run_config=QUIET)
    assert result.success
    assert metadata(result)["dagster/row_count"] == 0
    monkeypatch.undo()
    assert not table_exists(spark, io(), "orders")


@PYICEBERG_COMMITS
def test_a_change_run_starts_no_jvm(spark, instance, setup, monkeypatch):
    """Local rows into an existing table of the embedded default (a Hadoop folder), a JDBC
    catalog or a REST catalog: pyiceberg commits them, with the cursor, and Spark is never
    started (a fresh process's run then costs no JVM)."""
    orders, source, io = setup
    assert dg.materialize([orders], instance=instance, resources={"io_manager": io()}, run_config=QUIET).success
    source["rows"] = [{"id": 2, "updated_at": "2024-01-05T00:00:00Z"}, {"id": 4, "updated_at": "2024-01-06T00:00:00Z"}]
    no_spark(monkeypatch)
    second = dg.materialize([orders], instance=instance, resources={"io_manager": io()}, run_config=QUIET)
    assert second.success
    after = metadata(second)
    assert (after["dagster_incremental/rows_inserted"], after["dagster_incremental/rows_updated"]) == (1, 1)
    assert after["dagster/row_count"] == 4
    assert after["dagster_incremental/state"]["last_value"] == "2024-01-06T00:00:00Z"
    monkeypatch.undo()
    table = io().table_name(dg.AssetKey("orders"))
    rows = spark.sql(f"SELECT id, updated_at FROM {table.sql} ORDER BY id").collect()
    assert [(r.id, r.updated_at.isoformat()) for r in rows] == [
        (1, "2024-01-01T00:00:00"), (2, "2024-01-05T00:00:00"), (3, "2024-01-03T00:00:00"), (4, "2024-01-06T00:00:00")]


SCD2_WARNING = "no merge_key retires every current row whose key is missing from a batch"


def test_scd2_on_an_incremental_cursor_without_merge_key_warns_at_definition_and_in_each_run(
        instance, tmp_path, spark_warehouse, monkeypatch):
    """An incremental batch is not a snapshot: scd2 would retire every key the batch lacks."""
    from dagster_incremental.errors import IncrementalSettingsWarning

    config = tmp_path / "config.toml"
    config.write_text(f'[destination]\nnamespace = "scd2warn"\nwarehouse = "{spark_warehouse}"\n'
                      '[assets.people]\nprimary_key = ["id"]\n'
                      'write_disposition = { disposition = "merge", strategy = "scd2" }\n'
                      '[assets.people.updated_at]\ncursor_path = "updated_at"\n')
    with pytest.warns(IncrementalSettingsWarning, match=SCD2_WARNING) as caught:
        @incremental_asset(config_path=str(config))
        def people(updated_at: Incremental):
            return []
    assert "set merge_key" in str(caught[0].message) and "full snapshot" in str(caught[0].message)
    no_spark(monkeypatch)
    io = SparkTableIOManager(catalog="lake", namespace="scd2warn", warehouse=spark_warehouse)
    result = dg.materialize([people], instance=instance, resources={"io_manager": io}, run_config=QUIET)
    assert result.success
    logged = [e.message for e in instance.all_logs(result.run_id) if e.level == 30]
    assert any(SCD2_WARNING in m for m in logged)


@pytest.mark.parametrize("cursor, merge_key", [(False, None), (True, "region")], ids=["snapshot", "merge_key"])
def test_scd2_on_a_snapshot_or_with_merge_key_does_not_warn(tmp_path, recwarn, cursor, merge_key):
    from dagster_incremental.dagster.decorator import incremental_settings
    from dagster_incremental.errors import IncrementalSettingsWarning

    config = tmp_path / "config.toml"
    config.write_text("")
    scd2 = {"disposition": "merge", "strategy": "scd2"}
    if cursor:
        def people(updated_at: Incremental = incremental("updated_at")):
            return []
    else:
        def people():
            return []
    asset = incremental_asset(primary_key="id", merge_key=merge_key, write_disposition=scd2,
                              config_path=str(config))(people)
    assert not [w for w in recwarn if issubclass(w.category, IncrementalSettingsWarning)]
    assert incremental_settings(asset).warnings() == []


def test_the_example_scd2_asset_reads_a_snapshot_and_does_not_warn():
    from dagster_incremental.dagster.decorator import incremental_settings
    from definitions.assets import customers

    settings = incremental_settings(customers)
    assert settings.strategy == "scd2" and not settings.cursors and settings.warnings() == []


# A fresh process, as Dagster's run launcher starts one: a Delta table's first load and a change
# run of local rows, both committed by delta-rs. Neither may start Spark, not even "in the
# background" while the function extracts: a JVM nobody uses costs the run seconds and memory.
DELTA_RUNS = textwrap.dedent(
    """
    import json, os, sys
    import dagster as dg
    import dagster_incremental.spark.session as session
    from dagster_incremental import Incremental, SparkTableIOManager, incremental_asset

    built = []
    real_build = session.build_spark_session
    session.build_spark_session = lambda conf: built.append(1) or real_build(conf)
    config = sys.argv[1]
    source = {"rows": [{"id": i, "updated_at": f"2024-01-0{i}T00:00:00Z"} for i in range(1, 4)]}

    @incremental_asset(config_path=config)
    def orders(updated_at: Incremental):
        yield from source["rows"]

    def java_descendants():
        children, found = {}, []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append((int(pid), cmd))
        todo = [os.getpid()]
        while todo:
            for pid, cmd in children.get(todo.pop(), []):
                todo.append(pid)
                found += [cmd] if "java" in cmd else []
        return found

    out = []
    instance = dg.DagsterInstance.ephemeral()
    for rows in (None, [{"id": 2, "updated_at": "2024-01-05T00:00:00Z"}, {"id": 4, "updated_at": "2024-01-06T00:00:00Z"}]):
        source["rows"] = rows or source["rows"]
        io = SparkTableIOManager.from_config(config)
        result = dg.materialize([orders], instance=instance, resources={"io_manager": io})
        meta = result.asset_materializations_for_node("orders")[0].metadata
        out.append({k: meta[k].value for k in ("dagster/row_count", "dagster_incremental/rows_inserted",
                                                 "dagster_incremental/rows_updated")}
                   | {"last_value": meta["dagster_incremental/state"].value["last_value"]})
    from pyspark import SparkContext
    print(json.dumps({"runs": out, "built": len(built), "context": SparkContext._active_spark_context is not None,
                      "java": java_descendants(), "pyspark_threads": [t.name for t in __import__("threading").enumerate()
                                                                       if "spark" in t.name]}))
    """
)


def test_a_delta_change_run_committed_by_delta_rs_starts_no_jvm_in_a_fresh_process(tmp_path):
    import deltalake  # noqa: F401  (the dev extra has it; a missing one fails here, not silently)
    config = tmp_path / "config.toml"
    config.write_text(
        f'[destination]\nformat = "delta"\nnamespace = "fresh"\nwarehouse = "{tmp_path / "delta"}"\n\n'
        '[assets.orders]\nprimary_key = ["id"]\n'
        'write_disposition = { disposition = "merge", strategy = "upsert" }\n'
        '[assets.orders.updated_at]\ncursor_path = "updated_at"\ninitial_value = "2024-01-01T00:00:00Z"\n'
    )
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", DELTA_RUNS, str(config)], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["runs"] == [
        {"dagster/row_count": 3, "dagster_incremental/rows_inserted": 3, "dagster_incremental/rows_updated": 0,
         "last_value": "2024-01-03T00:00:00Z"},
        {"dagster/row_count": 4, "dagster_incremental/rows_inserted": 1, "dagster_incremental/rows_updated": 1,
         "last_value": "2024-01-06T00:00:00Z"},
    ]
    assert (seen["built"], seen["context"], seen["java"], seen["pyspark_threads"]) == (0, False, [], [])
    assert "starting Spark" not in proc.stderr
    rows = delta_rs_rows(str(tmp_path / "delta" / "fresh" / "orders")).sort_by("id").to_pylist()
    assert [(r["id"], r["updated_at"].isoformat()) for r in rows] == [
        (1, "2024-01-01T00:00:00+00:00"), (2, "2024-01-05T00:00:00+00:00"), (3, "2024-01-03T00:00:00+00:00"),
        (4, "2024-01-06T00:00:00+00:00")]
