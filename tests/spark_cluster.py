"""A throw-away Spark standalone cluster on loopback, and the driver the cluster test runs on it.

Used by tests/test_cluster.py. Two parts:

- `StandaloneCluster`: one master and one worker started from pyspark's own `bin/spark-class`
  (no Spark download), bound to 127.0.0.1, with every folder (logs, work, scratch, conf) under
  a test folder. Each daemon is its own process group, so `stop()` also ends the executors the
  worker launched.
- `python tests/spark_cluster.py OUT.json`: the driver. It runs the example code location
  (`definitions`) in this process, on whatever `[spark] master` the environment says
  (`DAGSTER_INCREMENTAL__SPARK__MASTER`), and dumps every table, sorted, plus each run's
  materialization metadata to OUT.json. The pytest process already holds a SparkContext (one
  per process), so cluster-mode runs need a process of their own.

The example data is made deterministic by the test (fixed dates and seeds), so the same
driver in local mode and on the cluster must give the same tables.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from catalogs import SMALL_JOBS_JAVA_OPTIONS

ROOT = Path(__file__).resolve().parent.parent

#: The fixed example data: shop history starts here (its clock ends 14 days later) ...
SHOP_START = "2025-03-01T00:00:00Z"
#: ... one simulated step of changes happens at this instant (after the shop's clock) ...
STEP_NOW = "2025-03-16T12:00:00Z"
STEP_SEED = 99
#: ... and these whole days of event files exist; the backfill loads three of them.
EVENT_FIRST_DAY = "2025-03-01"
EVENT_DAYS = 14
BACKFILL = ("2025-03-03", "2025-03-05")
TABLES = ("orders", "customers", "api_events", "customer_revenue", "daily_events")

# No proxy from the environment may see (or break) requests to the master on loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class _PortTaken(RuntimeError):
    """A daemon could not bind its port: another process took it after free_port() chose it."""


@dataclass
class StandaloneCluster:
    """A master and one worker (`cores` cores, `memory` of executor memory) on 127.0.0.1."""

    base: Path
    cores: int = 1
    memory: str = "1g"
    start_timeout: float = 120.0
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    worker_webui_port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    @property
    def work_dir(self) -> Path:
        return self.base / "work"

    def log(self, name: str) -> Path:
        return self.base / "logs" / f"{name}.out"

    def env(self) -> dict[str, str]:
        """The daemons' environment: loopback only, every folder under `base`, no user conf."""
        env = dict(os.environ)
        for name in ("SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_CONF_DIR"):
            env.pop(name, None)
        folders = {
            "SPARK_LOG_DIR": self.base / "logs",
            "SPARK_WORKER_DIR": self.work_dir,
            "SPARK_LOCAL_DIRS": self.base / "local",
            "SPARK_PID_DIR": self.base / "pids",
            "SPARK_CONF_DIR": self.base / "conf",  # empty: no spark-defaults.conf or log4j2 of the machine
        }
        for path in folders.values():
            path.mkdir(parents=True, exist_ok=True)
        env.update({k: str(v) for k, v in folders.items()})
        env.update(
            SPARK_HOME=str(spark_home()),
            # Every socket of master, worker and executors (RPC and web UIs) binds to loopback;
            # the web UIs cannot be switched off, SPARK_LOCAL_IP keeps them on 127.0.0.1 too.
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_MASTER_HOST="127.0.0.1",
            SPARK_PUBLIC_DNS="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            # No REST submission server (off by default; said explicitly), no worker cleanup
            # thread; a taken port is an error, not a silent move to the next one.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
            SPARK_DAEMON_JAVA_OPTS=f"-Dspark.port.maxRetries=0 {SMALL_JOBS_JAVA_OPTIONS}",
            PYSPARK_PYTHON=sys.executable,
            # The library "installed on the worker": executors' Python workers inherit the
            # worker's environment, and the cursor filter's pandas UDF imports dagster_incremental.
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        )
        return env

    def _spawn(self, name: str, *args: str) -> None:
        env = self.env()  # creates the folders, the log folder among them
        out = open(self.log(name), "wb")
        try:
            self.processes[name] = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=env, cwd=self.base, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,  # own process group: killpg
            )
        finally:
            out.close()

    def state(self) -> dict:
        """The master's JSON status page (workers, apps)."""
        with _OPENER.open(f"{self.web_url}/json/", timeout=5) as response:
            return json.loads(response.read())

    def _wait(self, what: str, ready) -> dict:
        deadline = time.monotonic() + self.start_timeout
        while True:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    if "Address already in use" in self.tail(name, 20000):
                        raise _PortTaken(name)
                    raise RuntimeError(f"the Spark {name} exited with code {proc.returncode} while waiting "
                                       f"for {what}:\n{self.tail(name)}")
            try:
                state = self.state()
                if ready(state):
                    return state
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{self.tail(n)}" for n in self.processes)
                raise RuntimeError(f"the Spark standalone cluster did not come up within "
                                   f"{self.start_timeout:.0f} s ({what}); logs:\n{logs}")
            time.sleep(0.5)

    def start(self, attempts: int = 3) -> StandaloneCluster:
        """Start the master, then the worker; return once the worker is registered and ALIVE.

        The ports are picked free beforehand; should another process take one in between, the
        daemon exits (no silent move to the next port) and the cluster starts again on new ports.
        """
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once()
            except _PortTaken:
                self.stop()
                if attempt == attempts:
                    raise
                self.port, self.webui_port, self.worker_webui_port = free_port(), free_port(), free_port()
                self.processes = {}
        raise AssertionError("unreachable")

    def _start_once(self) -> StandaloneCluster:
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui_port))
        self._wait("the master to be ALIVE", lambda s: s.get("status") == "ALIVE")
        self._spawn("worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--webui-port", str(self.worker_webui_port), "--work-dir", str(self.work_dir),
                    self.master_url)
        self._wait("the worker to register", lambda s: any(w.get("state") == "ALIVE" for w in s.get("workers", [])))
        return self

    def completed_apps(self, timeout: float = 30.0) -> list[dict]:
        """The master's finished applications, once none is still active (it moves them shortly
        after the driver stops)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if not state["activeapps"] or time.monotonic() > deadline:
                return state["completedapps"]
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM each daemon's process group (executors included), SIGKILL what is left."""
        for name in ("worker", "master"):
            proc = self.processes.get(name)
            if proc is None:
                continue
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            # The group can outlive its leader (an executor still shutting down): end it too.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def tail(self, name: str, chars: int = 4000) -> str:
        try:
            return self.log(name).read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values()]


def listening_addresses(pid: int) -> list[str]:
    """The local addresses of the TCP sockets process `pid` listens on (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = cols[1].split(":")
            raw = bytes.fromhex(address)
            # /proc prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(words)
            if getattr(ip, "ipv4_mapped", None):
                ip = ip.ipv4_mapped
            found.append(f"{ip}:{int(port, 16)}")
    return found


# ------------------------------------------------------------------------------------ driver


def make_sources(data_dir: str | Path) -> None:
    """The example's sources with fixed dates and seeds (the same bytes whenever they are made)."""
    sys.path.insert(0, str(ROOT))
    from definitions.sources import event_files, events_root, shop_db, shop_db_path

    shop_db.create_shop(shop_db_path(data_dir), start=SHOP_START)
    event_files.write_event_days(events_root(data_dir), EVENT_FIRST_DAY, EVENT_DAYS)


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # not Dagster's tuple-based records (TableSchema): str()
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # timestamps, dates, decimals: their canonical text


def _metadata(result) -> list[dict]:
    out = []
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        meta = {k: _jsonable(v.value) for k, v in mat.metadata.items()}
        out.append({"asset": mat.asset_key.to_user_string(), "partition": mat.partition, "metadata": meta})
    return sorted(out, key=lambda m: (m["asset"], m["partition"] or ""))


def drive(out_path: Path) -> None:
    """Run main, one source step, orders again and a three-day backfill; dump tables and metadata."""
    sys.path.insert(0, str(ROOT))
    import dagster as dg
    from pyspark.sql import SparkSession

    from definitions import defs
    from definitions.sources import shop_db, shop_db_path

    started = time.monotonic()
    instance = dg.DagsterInstance.get()
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    main = defs.resolve_job_def("main")
    runs: dict[str, list] = {}
    timings: dict[str, float] = {}

    def run(label: str, job, **kwargs) -> None:
        started = time.monotonic()
        result = job.execute_in_process(instance=instance, run_config=quiet, raise_on_error=True, **kwargs)
        timings[label] = round(time.monotonic() - started, 1)
        runs[label] = _metadata(result)

    run("first", main)
    shop_db.simulate_step(shop_db_path(), seed=STEP_SEED, now=STEP_NOW)
    run("second", main, asset_selection=[dg.AssetKey("orders")])  # only the changes of orders
    run("backfill", defs.resolve_job_def("daily_events_job"), tags={
        "dagster/asset_partition_range_start": BACKFILL[0],
        "dagster/asset_partition_range_end": BACKFILL[1],
    })

    spark = SparkSession.getActiveSession()
    sc = spark.sparkContext
    catalog = os.environ.get("DAGSTER_INCREMENTAL__DESTINATION__CATALOG", "lake")
    namespace = os.environ.get("DAGSTER_INCREMENTAL__DESTINATION__NAMESPACE", "incremental")
    tables, files = {}, {}
    for name in TABLES:
        frame = spark.table(f"{catalog}.{namespace}.{name}")
        files[name] = [r.file_path for r in spark.sql(f"SELECT file_path FROM {catalog}.{namespace}.{name}.files").collect()]
        rows = [_jsonable(r.asDict(recursive=True)) for r in frame.collect()]
        tables[name] = {
            "schema": frame.schema.simpleString(),
            "rows": sorted(rows, key=lambda r: json.dumps(r, sort_keys=True)),
        }
    # Where the work ran: executors besides the driver, the Python that ran on them, and the
    # library's own pandas UDF (boundary dedup keys) evaluated there through Arrow.
    from dagster_incremental.cursor.spark_filter import dedup_key_udf

    python_on_executors = sorted(set(sc.parallelize(range(2), 2).map(lambda _: sys.executable).collect()))
    probe = spark.createDataFrame([("e1", 1), ("e2", 2)], "event_id string, n int").repartition(2)
    udf_keys = sorted(r[0] for r in probe.select(dedup_key_udf(["event_id", "n"], ("event_id", "n"), "UTC")).collect())
    timings["total"] = round(time.monotonic() - started, 1)
    out = {
        "master": sc.master,
        "executors": sc._jsc.sc().getExecutorMemoryStatus().size() - 1,
        "python_on_executors": python_on_executors,
        "udf_keys": udf_keys,
        "timings": timings,
        "runs": runs,
        "tables": tables,
        "files": files,
        "namespace": namespace,
        "executor_output_bytes": _executor_output_bytes(sc),
    }
    out_path.write_text(json.dumps(out, indent=1, sort_keys=True))


def _executor_output_bytes(sc) -> int:
    """Bytes written as task output by the application's stages (Spark's status store): on a
    cluster the driver runs no task, so this is what the executors wrote."""
    jvm = sc._jvm
    empty = jvm.java.util.ArrayList()
    stages = sc._jsc.sc().statusStore().stageList(None, False, False, sc._gateway.new_array(jvm.double, 0), empty)
    return sum(stages.apply(i).outputBytes() for i in range(stages.size()))


if __name__ == "__main__":
    drive(Path(sys.argv[1]))
