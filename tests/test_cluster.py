"""Scale-out: the example code location on a Spark standalone cluster gives the local tables.

A module fixture starts a master and one worker (1 core, 1 GB) from pyspark's own
`bin/spark-class` on 127.0.0.1 and always stops them. The same driver
(`tests/spark_cluster.py`) runs twice, each in its own process (this one already has a
SparkContext): once with `[spark] master = "spark://127.0.0.1:<port>"`, once with `local[1]`,
each with its own namespace, Dagster instance and copy of the (deterministic) example data. The
tables are where a cluster's are: on the REST catalog over S3 (tests/catalogs.py), set through
the environment over the example's config.toml; driver, executors and S3 server share no folder
that holds a table, so every file the executors write goes to the bucket. Each
run loads the main job (upsert, scd2, append, a Spark rollup), then one step of changes to the
orders incrementally, then a three-day ranged backfill of `daily_events`; both must end in the
same tables and the same cursors.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from catalogs import SMALL_JOBS_JAVA_OPTIONS, Catalog
from spark_cluster import BACKFILL, ROOT, TABLES, StandaloneCluster, listening_addresses, make_sources

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).resolve().parent / "spark_cluster.py"
DRIVER_TIMEOUT = 420

# Columns whose values are the load's wall-clock time, not data: they differ between any two runs.
LOAD_TIME_COLUMNS = {"customers": {"_valid_from", "_valid_to"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and one worker (1 core, 1 GB) on 127.0.0.1; stopped at the end whatever happened.

    Not skipped when Java or Spark is missing: a cluster that cannot start is a failure.
    """
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark_cluster"), cores=1, memory="1g")
    try:
        problem = None
        try:
            cluster.start()
        except Exception as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(f"could not start a Spark standalone cluster on 127.0.0.1 with "
                        f"{cluster.env()['SPARK_HOME']}/bin/spark-class: {problem}", pytrace=False)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cluster_sources")
    make_sources(path)
    return path


class Driver:
    """The driver in a subprocess on `master`, with its own namespace, instance and data copy, on
    the `lake` catalog (its keys and secrets in the environment, as a deployment sets them)."""

    def __init__(self, base: Path, sources: Path, master: str, lake: Catalog):
        self.base, self.master = base, master
        home = base / "dagster_home"
        home.mkdir(parents=True)
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        data = base / "sources"
        shutil.copytree(sources, data)
        conf = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.executor.memory": "512m",
            "spark.cores.max": "1",
            "spark.driver.extraJavaOptions": SMALL_JOBS_JAVA_OPTIONS,
            "spark.executor.extraJavaOptions": SMALL_JOBS_JAVA_OPTIONS,
            **lake.spark_config,
        }
        env = {**os.environ, **lake.environment()}
        env.update(
            DAGSTER_HOME=str(home),
            DAGSTER_INCREMENTAL_EXAMPLE_DATA=str(data),
            DAGSTER_INCREMENTAL__DESTINATION__CATALOG=lake.name,
            DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE=lake.warehouse,
            DAGSTER_INCREMENTAL__DESTINATION__NAMESPACE=f"cluster_{base.name}_{uuid.uuid4().hex[:6]}",
            DAGSTER_INCREMENTAL__SPARK__MASTER=master,
            DAGSTER_INCREMENTAL__SPARK__CONF="{" + ", ".join(f'"{k}" = "{v}"' for k, v in conf.items()) + "}",
            SPARK_LOCAL_IP="127.0.0.1",
            PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        )
        env.pop("EVENTS_API_URL", None)  # the driver serves the example API itself (deterministic)
        self.out = base / "result.json"
        self.log = base / "driver.log"
        self.started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, str(DRIVER), str(self.out)], cwd=base, env=env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def result(self) -> dict:
        try:
            code = self.proc.wait(timeout=max(1.0, self.started + DRIVER_TIMEOUT - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the driver on {self.master} took over {DRIVER_TIMEOUT} s:\n{self.tail()}", pytrace=False)
        assert code == 0, f"the driver on {self.master} failed:\n{self.tail()}"
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-8000:]


@pytest.fixture(scope="module")
def runs(cluster, sources, rest_catalog, tmp_path_factory):
    """Both drivers at once (each mostly waits on its own JVM): the cluster one and a local one."""
    drivers = {}
    try:
        drivers["cluster"] = Driver(tmp_path_factory.mktemp("on_cluster"), sources, cluster.master_url, rest_catalog)
        drivers["local"] = Driver(tmp_path_factory.mktemp("on_local"), sources, "local[1]", rest_catalog)
        return {name: driver.result() for name, driver in drivers.items()}
    finally:
        for driver in drivers.values():
            driver.kill()


@pytest.fixture(scope="module")
def on_cluster(runs):
    return runs["cluster"]


@pytest.fixture(scope="module")
def on_local(runs):
    return runs["local"]


def comparable(result: dict) -> dict:
    tables = {}
    for name, table in result["tables"].items():
        drop = LOAD_TIME_COLUMNS.get(name, set())
        tables[name] = {
            "schema": table["schema"],
            "rows": sorted((json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True)
                            for r in table["rows"])),
        }
    return tables


def test_the_runs_used_the_cluster(cluster, on_cluster):
    assert on_cluster["master"] == cluster.master_url
    assert on_cluster["executors"] == 1
    # spark.pyspark.python reached the executors: they ran this interpreter, and the library's
    # pandas UDF (Arrow, dagster_incremental imported on the executor) gave the local keys
    assert on_cluster["python_on_executors"] == [sys.executable]
    assert on_cluster["udf_keys"] == ['["e1",1]', '["e2",2]']
    apps = cluster.completed_apps()
    assert [a["name"] for a in apps] == ["dagster-incremental-example"]
    assert apps[0]["cores"] == 1 and apps[0]["memoryperexecutor"] == 512
    # the worker launched the executor, which fetched the Iceberg runtime jar from the driver
    jars = list(cluster.work_dir.glob("app-*/*/iceberg-spark-runtime-*.jar"))
    assert jars, sorted(str(p) for p in cluster.work_dir.rglob("*"))


def test_the_executors_wrote_the_tables_to_the_bucket(rest_catalog, on_cluster):
    """Every file of every table is an object in the S3 server's table bucket (the warehouse is no
    folder anyone shares), and the executors wrote some: the tasks of the driver's Spark writes."""
    assert on_cluster["files"] and set(on_cluster["files"]) == set(TABLES)
    for name, paths in on_cluster["files"].items():
        assert paths and all(p.startswith(rest_catalog.warehouse + "/") for p in paths), (name, paths[:3])
    assert on_cluster["executor_output_bytes"] > 0


def test_the_cluster_listens_on_loopback_only(cluster, on_cluster):
    for pid in cluster.pids():
        addresses = listening_addresses(pid)
        assert addresses, f"no listening socket found for pid {pid}"
        assert all(a.startswith("127.") for a in addresses), addresses


def test_cluster_and_local_mode_give_the_same_tables_and_cursors(on_cluster, on_local):
    print(f"driver seconds: cluster {on_cluster['timings']}, local {on_local['timings']}")
    assert sorted(on_cluster["tables"]) == sorted(TABLES)
    cluster_tables, local_tables = comparable(on_cluster), comparable(on_local)
    for name in TABLES:
        assert cluster_tables[name]["rows"], f"{name} is empty"
        assert cluster_tables[name] == local_tables[name], f"{name} differs between cluster and local mode"
    assert _metadata_differences(_in_any_namespace(on_cluster), _in_any_namespace(on_local)) == []
    assert on_cluster["udf_keys"] == on_local["udf_keys"]


def _metadata_differences(cluster_runs: dict, local_runs: dict) -> list:
    """(run, asset, partition, key, cluster value, local value) for each metadata value that differs."""
    found = []
    for label in sorted(set(cluster_runs) | set(local_runs)):
        cluster = {(m["asset"], m["partition"]): m["metadata"] for m in cluster_runs.get(label, [])}
        local = {(m["asset"], m["partition"]): m["metadata"] for m in local_runs.get(label, [])}
        for where in sorted(set(cluster) | set(local), key=str):
            a, b = (_snapshot_ids_masked(runs.get(where, {})) for runs in (cluster, local))
            found += [(label, *where, k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return found


def _in_any_namespace(result: dict) -> dict:
    """The runs' metadata with the driver's own namespace (in table names) written as <ns>."""
    text = json.dumps(result["runs"]).replace(f'.{result["namespace"]}.', ".<ns>.")
    return json.loads(text)


def _snapshot_ids_masked(metadata: dict) -> dict:
    """The metadata with the upstream snapshot ids (and their commit times) a chained asset's state
    and upstream reads hold masked: Iceberg draws them at random, so two sessions never share them (the rows they lead to are compared)."""
    reads = metadata.get("dagster_incremental/upstream")  # the same reads, shown: ids and commit times
    if isinstance(reads, dict):
        masked = {name: {**read, "snapshot_id": "<id>", "snapshot_committed_at": "<time>"} for name, read in reads.items()}
        metadata = {**metadata, "dagster_incremental/upstream": masked}
    state = metadata.get("dagster_incremental/state")
    if not isinstance(state, dict) or "upstream" not in state:
        return metadata
    upstream = {name: {**read, "snapshot_id": "<id>"} for name, read in state["upstream"].items()}
    shown = {key: "<id>" for key in metadata if key.startswith("dagster_incremental/last_value")}  # the same id, as text
    return {**metadata, **shown, "dagster_incremental/state": {**state, "last_value": "<id>", "upstream": upstream}}


def test_the_runs_loaded_increments_and_a_three_day_backfill(on_cluster):
    runs = {label: {(m["asset"], m["partition"]): m["metadata"] for m in mats} for label, mats in on_cluster["runs"].items()}
    first, second = runs["first"][("orders", None)], runs["second"][("orders", None)]
    assert first["dagster_incremental/mode"] == second["dagster_incremental/mode"] == "incremental"
    # the second run loaded only the simulated step (20 inserts, 15 updates, 3 soft deletes)
    assert (second["dagster_incremental/rows_inserted"], second["dagster_incremental/rows_updated"],
            second["dagster_incremental/rows_deleted"]) == (20, 15, 3)
    assert second["dagster_incremental/state"]["last_value"] > first["dagster_incremental/state"]["last_value"]
    days = sorted(p for (asset, p) in runs["backfill"] if asset == "daily_events")
    assert days == ["2025-03-03", "2025-03-04", "2025-03-05"] and (days[0], days[-1]) == BACKFILL
    assert all(runs["backfill"][("daily_events", d)]["dagster_incremental/mode"] == "backfill" for d in days)
    events = on_cluster["tables"]["daily_events"]["rows"]
    assert {r["event_time"][:10] for r in events} == set(days)
