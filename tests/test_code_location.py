"""The example code location as users run it: the dagster CLI across processes, and the webserver.

These tests start real processes (each `dagster asset materialize` starts its own Spark), on a
temporary DAGSTER_HOME, warehouse and source folder, with the webserver bound to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("location")
    home = base / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    out = dict(os.environ)
    out.update(
        DAGSTER_HOME=str(home),
        DAGSTER_INCREMENTAL_EXAMPLE_DATA=str(base / "sources"),
        DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE=str(base / "warehouse"),
        DAGSTER_INCREMENTAL__SPARK__MASTER="local[2]",
        DAGSTER_INCREMENTAL__SPARK__CONF__SPARK_UI_ENABLED="false",
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(ROOT),
    )
    return out


def dagster_cli(env: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "dagster", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def orders_states(env: dict) -> list[dict]:
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        instance = dg.DagsterInstance.get()
        records = instance.fetch_materializations(dg.AssetKey("orders"), limit=10, ascending=True).records
        return [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records]
    finally:
        os.environ.pop("DAGSTER_HOME", None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_cli_runs(env):
    """`dagster asset materialize` twice, with the shop changing in between."""
    sys.path.insert(0, str(ROOT))
    from definitions.sources import shop_db, shop_db_path

    first = dagster_cli(env, "asset", "materialize", "-m", "definitions", "--select", "orders")
    db = shop_db_path(env["DAGSTER_INCREMENTAL_EXAMPLE_DATA"])
    step = shop_db.simulate_step(db, seed=99)
    second = dagster_cli(env, "asset", "materialize", "-m", "definitions", "--select", "orders")
    return step, [first.stdout + first.stderr, second.stdout + second.stderr]


def test_spark_keeps_quiet_in_a_runs_output(two_cli_runs):
    """No start-up warnings, no [Stage N:> progress bars: a run's log shows the run."""
    for output in two_cli_runs[1]:
        assert "Setting default log level" not in output and "[Stage " not in output
        assert not [line for line in output.splitlines() if " WARN " in line and "dagster" not in line.lower()]


def test_cursor_advances_across_cli_processes(env, two_cli_runs):
    step = two_cli_runs[0]
    first, second = orders_states(env)
    assert first["dagster_incremental/mode"] == "incremental"
    assert second["dagster_incremental/state"]["last_value"] > first["dagster_incremental/state"]["last_value"]
    # the second process loaded exactly the simulated changes, nothing from before the cursor
    assert second["dagster_incremental/rows_inserted"] == len(step.inserted)
    assert second["dagster_incremental/rows_updated"] == len(step.updated)
    assert second["dagster_incremental/rows_deleted"] == len(step.soft_deleted)
    assert second["dagster/row_count"] == first["dagster/row_count"] + len(step.inserted) - len(step.soft_deleted)


def test_webserver_graphql_serves_the_latest_cursor(env, two_cli_runs):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-m", "definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/server_info", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None, "the webserver exited"
                assert time.time() < deadline, "the webserver did not come up"
                time.sleep(1)
        query = """
        query { assetOrError(assetKey: {path: ["orders"]}) {
            ... on Asset { assetMaterializations(limit: 1) {
                metadataEntries { label ... on JsonMetadataEntry { jsonString } } } } } }
        """
        request = urllib.request.Request(
            f"{base}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
        )
        body = json.loads(urllib.request.urlopen(request, timeout=30).read())
        entries = body["data"]["assetOrError"]["assetMaterializations"][0]["metadataEntries"]
        state = json.loads(next(e["jsonString"] for e in entries if e["label"] == "dagster_incremental/state"))
        assert state["last_value"] == orders_states(env)[-1]["dagster_incremental/state"]["last_value"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def test_every_run_of_the_example_shares_one_process_and_so_one_spark_session():
    """Jobs and assets picked in the UI run in-process: one JVM per run, not one per step."""
    from definitions import defs

    jobs = [defs.resolve_job_def("main"), defs.resolve_job_def("daily_events_job"), defs.resolve_implicit_global_asset_job_def()]
    assert all(job.executor_def is dg.in_process_executor for job in jobs)
