"""A run in a new process, as Dagster's run launcher starts one: pyspark is not imported yet when
the asset function yields its first rows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import sys
    import dagster as dg
    from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

    assert "pyspark" not in sys.modules
    config = sys.argv[1]

    @incremental_asset(config_path=config, primary_key="id",
                       write_disposition={"disposition": "merge", "strategy": "upsert"})
    def fresh_orders(context: dg.AssetExecutionContext,
                     updated_at: Incremental = incremental("updated_at", initial_value="2025-01-01T00:00:00Z")):
        # returns at once: the run reaches the IO manager while the JVM is still starting
        yield [{"id": i, "updated_at": "2026-01-01T00:00:00Z"} for i in range(10)]

    io = SparkTableIOManager.from_config(config)
    result = dg.materialize([fresh_orders], resources={"io_manager": io}, instance=dg.DagsterInstance.ephemeral())
    meta = result.asset_materializations_for_node("fresh_orders")[0].metadata
    print(meta["dagster/row_count"].value)
    """
)


def test_a_first_run_in_a_new_process_while_spark_starts_in_the_background(tmp_path: Path):
    """The JVM starts on a thread while the function extracts; the run thread imports pyspark
    too. Both importing it at once used to half-initialise it ("partially initialized module
    'pyspark.sql'") and fail the run."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'[destination]\ncatalog = "lake"\nnamespace = "fresh"\nwarehouse = "{tmp_path / "warehouse"}"\n\n'
        '[spark.conf]\n"spark.ui.enabled" = "false"\n"spark.driver.host" = "127.0.0.1"\n'
        '"spark.driver.bindAddress" = "127.0.0.1"\n'
    )
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "partially initialized" not in proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "10"


CHANGE_RUN = textwrap.dedent(
    """
    import json, os, sys
    import dagster as dg
    import dagster_incremental.spark.session as session
    from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

    config, rows = sys.argv[1], json.loads(sys.argv[2])
    started = []
    build = session.build_spark_session
    session.build_spark_session = lambda conf: started.append(1) or build(conf)

    @incremental_asset(config_path=config, primary_key="id")
    def appended(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")):
        yield rows

    io = SparkTableIOManager.from_config(config)
    result = dg.materialize([appended], resources={"io_manager": io}, instance=dg.DagsterInstance.ephemeral(),
                            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    check = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"][0]

    def child_name(pid):  # the command name of process pid when it is a child of this one (a JVM would be)
        try:
            with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/comm") as comm:
                parent = stat.read().rsplit(")", 1)[1].split()[1]
                return comm.read().strip() if parent == str(os.getpid()) else None
        except OSError:  # gone meanwhile
            return None

    children = [name for pid in os.listdir("/proc") if pid.isdigit() and (name := child_name(pid))]
    print(json.dumps({"success": result.success, "spark_started": bool(started), "children": children,
                      "check": check.check_name, "passed": check.passed, "description": check.description,
                      "metadata": {k: v.value for k, v in check.metadata.items()}}))
    """
)


def change_run(config: str, rows: list, tmp_path: Path) -> dict:
    """One run of asset `appended` in a new process; what it reported of its primary_key_unique check."""
    import json

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", CHANGE_RUN, config, json.dumps(rows)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def appended(tmp_path, spark_warehouse, spark, instance):
    """An append asset with a primary key whose table exists (a first run, with the shared Spark)."""
    import uuid

    import dagster as dg

    from attack_support import io_manager_for, write_config
    from dagster_incremental import Incremental, incremental, incremental_asset

    namespace = "fresh_" + uuid.uuid4().hex[:8]
    config = write_config(tmp_path / "config.toml", spark_warehouse, namespace)

    @incremental_asset(config_path=config, primary_key="id")
    def appended(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")):
        yield [{"id": i, "updated_at": f"2024-01-0{i}T00:00:00Z"} for i in range(1, 4)]

    io = io_manager_for(spark_warehouse, namespace)
    assert dg.materialize([appended], resources={"io_manager": io}, instance=instance).success
    return config


def test_a_change_run_checks_its_primary_key_without_a_jvm(appended, tmp_path):
    """A change run pyiceberg commits used to start Spark for its primary_key_unique check (a
    whole-table aggregation, 20 - 55 s in a fresh process): the keys are counted in the process."""
    seen = change_run(appended, [{"id": 4, "updated_at": "2024-01-05T00:00:00Z"}], tmp_path)
    assert seen["success"] and not seen["spark_started"] and "java" not in seen["children"]
    assert seen["check"] == "primary_key_unique" and seen["passed"]
    assert seen["metadata"]["duplicated_keys"] == 0 and seen["metadata"]["scope"] == "whole table"
    assert seen["description"] == "No primary key occurs twice (whole table)."


def test_a_change_run_that_appends_a_key_twice_fails_its_check_without_a_jvm(appended, tmp_path):
    seen = change_run(appended, [{"id": 2, "updated_at": "2024-01-05T00:00:00Z"}], tmp_path)
    assert seen["success"] and not seen["spark_started"] and "java" not in seen["children"]
    assert not seen["passed"]
    assert seen["metadata"]["duplicated_keys"] == 1 and seen["metadata"]["example_keys"] == [2]
    assert seen["description"] == "1 primary keys occur more than once (whole table), e.g. 2."
