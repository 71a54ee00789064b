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
