"""Helpers shared by the benchmarks: a throw-away Dagster home + warehouse, a loopback-only Spark
conf, memory and machine-load readings, and the one-JSON-line output.

Nothing here talks to the network: Spark runs on local[*] bound to 127.0.0.1 with its UI off,
and the Dagster instance has telemetry disabled.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before pyspark starts a JVM: keep it on loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

CATALOG = "lake"
NAMESPACE = "bench"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def spark_extra_conf(master: str = "local[*]", shuffle_partitions: int = 4) -> dict[str, str]:
    """Spark settings every benchmark uses on top of the library's defaults."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.driver.memory": os.environ.get("BENCH_DRIVER_MEMORY", "4g"),
        # e.g. "-XX:TieredStopAtLevel=4" to compare the full JIT with the library's C1 default
        **({"spark.driver.extraJavaOptions": os.environ["BENCH_JAVA_OPTIONS"]} if os.environ.get("BENCH_JAVA_OPTIONS") else {}),
        # a folder: Spark writes its event log there (read back by spark_jobs)
        **({"spark.eventLog.enabled": "true", "spark.eventLog.dir": os.environ["BENCH_EVENT_LOG"]}
           if os.environ.get("BENCH_EVENT_LOG") else {}),
    }


@dataclass
class Workdir:
    root: Path
    dagster_home: Path
    warehouse: Path
    config: Path


@contextlib.contextmanager
def workdir(prefix: str, config_toml: str = "") -> Iterator[Workdir]:
    """A temp folder holding DAGSTER_HOME (telemetry off), the warehouse and a config.toml.

    `config_toml` is appended after the [destination] section pointing at the warehouse.
    Everything is removed afterwards, and DAGSTER_HOME is restored.
    """
    root = Path(tempfile.mkdtemp(prefix=prefix))
    home = root / "dagster_home"
    warehouse = root / "warehouse"
    home.mkdir()
    warehouse.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    config = root / "config.toml"
    config.write_text(
        f'[destination]\nformat = "iceberg"\ncatalog = "{CATALOG}"\nnamespace = "{NAMESPACE}"\n'
        f'warehouse = "{warehouse}"\n\n{config_toml}'
    )
    old_home = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        yield Workdir(root, home, warehouse, config)
    finally:
        if old_home is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = old_home
        shutil.rmtree(root, ignore_errors=True)


def io_manager(wd: Workdir, master: str = "local[*]", shuffle_partitions: int = 4, lake: dict | None = None,
               table_format: str = "iceberg", remote: str | None = None):
    """The SparkTableIOManager a user would configure, on this workdir's warehouse, or on `lake`'s
    catalog ({"catalog", "namespace", "warehouse", "spark_config"}: bench/lake.py's REST over S3);
    over the Spark Connect server at `remote` when given."""
    from dagster_incremental import SparkTableIOManager

    lake = lake or {}
    return SparkTableIOManager(
        master=master,
        table_format=table_format,
        app_name="dagster-incremental-bench",
        spark_config={**spark_extra_conf(master, shuffle_partitions), **lake.get("spark_config", {}),
                      **({"spark.remote": remote} if remote else {})},
        catalog=lake.get("catalog", CATALOG),
        namespace=lake.get("namespace", NAMESPACE),
        warehouse=lake.get("warehouse", str(wd.warehouse)),
    )


def start_spark(io) -> tuple[Any, float]:
    """Build the IO manager's session (quiet logs); returns it and the seconds it took."""
    from dagster_incremental.spark.connect import is_connect

    t = time.perf_counter()
    spark = io.spark
    if not is_connect(spark):  # a Connect session's logs are the server's
        spark.sparkContext.setLogLevel("ERROR")
    return spark, round(time.perf_counter() - t, 3)


def py_peak_rss_mb() -> float:
    """Peak resident set of THIS Python process so far (Linux ru_maxrss is in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def py_rss_mb() -> float:
    """Current resident set of this Python process."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:  # pragma: no cover - non-Linux
        return float("nan")


def _proc_status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def jvm_pid(spark) -> int | None:
    """The pid of Spark's driver JVM when it runs beside this process (None over Connect)."""
    from dagster_incremental.spark.connect import is_connect

    if is_connect(spark):
        return None
    try:
        return int(spark._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # noqa: BLE001 - reporting only
        return None


def jvm_peak_rss_mb(spark) -> float | None:
    """Peak resident set (VmHWM) of Spark's JVM, a separate process from this one."""
    pid = jvm_pid(spark)
    kb = _proc_status_kb(pid, "VmHWM") if pid else None
    return round(kb / 1024, 1) if kb else None


def workers_rss_mb(spark) -> float | None:
    """Current RSS summed over the JVM's child processes (pyspark Python workers), if any."""
    pid = jvm_pid(spark)
    if not pid:
        return None
    total = 0
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        kb = _proc_status_kb(int(child), "VmHWM")
        total += kb or 0
    return round(total / 1024, 1)


def machine() -> dict[str, Any]:
    """Load average and core count at the time of the measurement."""
    one, five, fifteen = os.getloadavg()
    return {
        "loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)],
        "cpus": os.cpu_count(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def emit(record: dict[str, Any]) -> None:
    """The benchmark's one line on stdout (everything else goes to stderr)."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def interleaved(ways: dict[str, Any], turn: int, seconds: dict[str, list[float]]) -> dict[str, Any]:
    """Each way's result (ways: name -> a function of no arguments), run in order on odd turns
    and in reverse on even ones, so that neither always runs first; its seconds go to `seconds`."""
    results = {}
    for name in (list(ways) if turn % 2 else list(reversed(list(ways)))):
        started = time.perf_counter()
        results[name] = ways[name]()
        seconds[name].append(time.perf_counter() - started)
    return results


# -- phase timers ---------------------------------------------------------------------------------
# Read-only instrumentation: wrap library functions in THIS process (no library file changes) and
# add up the wall time spent in each, per run. A name may be "module:function" or
# "module:Class.method"; every dagster_incremental module that imported the function by name gets
# the wrapper too.

PHASES = (
    "dagster_incremental.dagster.state_store:CursorInForce.stored_states",
    "dagster_incremental.spark.local.stage:stage_batches",
    "dagster_incremental.spark.local.stage:_page_to_arrow",
    "dagster_incremental.spark.local.stage:arrow_to_spark",
    "dagster_incremental.spark.boundary_check:drop_rows_already_loaded",
    "dagster_incremental.spark.tables:refuse_stale",
    "dagster_incremental.spark.iceberg.writer:TableWriter.write",
    "dagster_incremental.spark.merge.prepare:prepare_batch",
    "dagster_incremental.spark.iceberg.writer:TableWriter._merge",
    "dagster_incremental.spark.iceberg.local.merge:merge_local",
    "dagster_incremental.spark.iceberg.local.target:plan_target",
    "dagster_incremental.spark.iceberg.local.target:match_keys",
    "dagster_incremental.spark.iceberg.local.merge:_write_deletes",
    "dagster_incremental.spark.iceberg.local.merge:_commit",
    "dagster_incremental.spark.partitioning:partition_bounds",
    "dagster_incremental.spark.iceberg.commit:with_commit_properties",
    "dagster_incremental.spark.iceberg.figures:commit_result",
    "dagster_incremental.spark.iceberg.figures:_changed_rows",
    "dagster_incremental.spark.iceberg.snapshots:Snapshots.find",
    "dagster_incremental.spark.iceberg.commit:read_committed_state",
    # the rest of a run: the asset's compute up to its Output, the IO manager, the checks after it
    "dagster_incremental.dagster.run:Runner._run",
    "dagster_incremental.dagster.io_manager:SparkTableIOManager.handle_output",
    "dagster_incremental.spark.iceberg.tables:IcebergTables.after_commit",
    "dagster_incremental.dagster.checks:primary_key_unique",
    "dagster_incremental.spark.tables:SparkTables.duplicate_keys",
    "dagster_incremental.spark.local.dedup:decide",
    "dagster_incremental.spark.local.dedup:survivors",
    "dagster_incremental.spark.iceberg.local.append:LocalAppend.write_files",
    "dagster_incremental.spark.iceberg.figures:row_count",
    "dagster_incremental.spark.iceberg.figures:_schema",
    "dagster_incremental.spark.iceberg.commit:RunBranch.take",
    "dagster_incremental.spark.iceberg.commit:RunBranch.publish",
    "dagster_incremental.spark.iceberg.branch:CatalogBranch.take",
    "dagster_incremental.spark.iceberg.branch:CatalogBranch.publish",
    "dagster_incremental.spark.iceberg.metadata:read_metadata",
)


class PhaseTimer:
    """Wall seconds per phase, and by how many MB each phase raised the process's peak RSS
    (`ru_maxrss`) and Arrow's peak allocation: both peaks only grow, so a phase that raised one
    is where the peak was made (nested phases: the parent shows its children's growth too)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.peak_growth: dict[str, float] = {}

    def reset(self) -> dict[str, float]:
        out = {k: round(v, 3) for k, v in self.totals.items()}
        out.update({f"{k}#calls": n for k, n in self.calls.items() if n > 1})
        self.totals, self.calls = {}, {}
        return out

    def reset_peaks(self) -> dict[str, float]:
        """MB of peak growth per phase since the last call ("py:" the RSS, "arrow:" Arrow's pool)."""
        out = {k: round(v, 1) for k, v in sorted(self.peak_growth.items()) if v >= 1}
        self.peak_growth = {}
        return out

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def _grew(self, name: str, before: tuple[float, float]) -> None:
        for label, was, now in zip(("py", "arrow"), before, _peaks()):
            if now > was:
                key = f"{label}:{name}"
                self.peak_growth[key] = self.peak_growth.get(key, 0.0) + now - was

    def wrap(self, name: str, fn):
        import functools

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t, peaks = time.perf_counter(), _peaks()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t)
                self._grew(name, peaks)

        timed.__wrapped_by_bench__ = True
        return timed

    def timed_iter(self, name: str, iterator):
        """Time spent producing each item of `iterator` (e.g. the source generating pages)."""
        it = iter(iterator)
        while True:
            t, peaks = time.perf_counter(), _peaks()
            try:
                item = next(it)
            except StopIteration:
                self.add(name, time.perf_counter() - t)
                return
            self.add(name, time.perf_counter() - t)
            self._grew(name, peaks)
            yield item


def _peaks() -> tuple[float, float]:
    """(peak RSS of this process, peak bytes of Arrow's default memory pool), in MB."""
    import pyarrow as pa

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, pa.default_memory_pool().max_memory() / 2**20


def instrument(names=PHASES) -> PhaseTimer:
    import importlib

    timer = PhaseTimer()
    for target in names:
        module_name, _, qual = target.partition(":")
        short = qual.split(".")[-1]
        try:  # the library moves functions between modules; a phase it lost is reported, not fatal
            module = importlib.import_module(module_name)
            owner = getattr(module, qual.split(".")[0]) if "." in qual else module
            original = owner.__dict__[qual.split(".")[-1]] if "." in qual else getattr(module, qual)
        except (ImportError, AttributeError, KeyError):
            log(f"phase not timed (not found in the library): {target}")
            continue
        if "." in qual:
            setattr(owner, short, timer.wrap(short, original))
            continue
        wrapped = timer.wrap(short, original)
        for mod_name, mod in list(sys.modules.items()):
            if mod_name.startswith("dagster_incremental") and getattr(mod, qual, None) is original:
                setattr(mod, qual, wrapped)
    return timer


# -- reporting ------------------------------------------------------------------------------------


def seconds(x: float | None) -> str:
    return "" if x is None else f"{x:.2f} s"


def markdown(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table (for stderr, to paste into bench/README.md)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_json(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[dict, float]:
    """Run one benchmark process; returns its last JSON line and the process's wall seconds.
    The record gets `process_peak_mb`: the peak resident memory of the process and of the
    children it waited for, from the kernel's account of it (wait4); a Spark JVM the process
    does not wait for is not in it, so compare it between runs without a JVM.

    TMPDIR points at a folder removed afterwards, so the temp files of the peers (which clean up
    after themselves only on success) go away too.
    """
    import subprocess

    log("$", " ".join(cmd))
    tmp = tempfile.mkdtemp(prefix="bench_run_")
    try:
        with open(Path(tmp) / "out", "w+") as out, open(Path(tmp) / "err", "w+") as err:
            t = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True,
                                    env={**os.environ, **(env or {}), "TMPDIR": tmp})
            _, status, usage = os.wait4(proc.pid, 0)
            wall = round(time.perf_counter() - t, 3)
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        sys.stderr.write(stderr[-4000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    record = json.loads(lines[-1]) if lines else {}
    record.setdefault("loadavg", [round(x, 2) for x in os.getloadavg()])
    record["process_peak_mb"] = round(usage.ru_maxrss / 1024)  # Linux reports KiB
    log(f"  {wall} s  {record['process_peak_mb']} MB  {lines[-1][:300] if lines else ''}")
    return record, wall


# -- Spark's job list -----------------------------------------------------------------------------


def spark_jobs(log_dir: str | os.PathLike[str], windows: list[tuple[float, float]]) -> list[list[dict[str, Any]]]:
    """Per time window (epoch seconds: one per run), the Spark jobs submitted in it, read from
    the event log in `log_dir` (`BENCH_EVENT_LOG`): what started the job (its SQL or call site),
    seconds, tasks, and the rows it read and shuffled, which tell a job that reads the whole
    table from one that reads the change."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    sql: dict[int, str] = {}
    for path in sorted(Path(log_dir).iterdir()):
        with open(path) as fh:
            for line in fh:
                _event(json.loads(line), jobs, stage_job, sql)
    out: list[list[dict[str, Any]]] = [[] for _ in windows]
    for job in sorted(jobs.values(), key=lambda j: j["start"]):
        job["what"] = sql.get(job.pop("sql_id", None)) or job["what"]  # the plan says more than a call site
        for i, (start, end) in enumerate(windows):
            if start * 1000 <= job["start"] <= end * 1000:
                job["seconds"] = round((job.pop("end", job["start"]) - job.pop("start")) / 1000, 3)
                out[i].append(job)
                break
    return out


def _event(event: dict[str, Any], jobs: dict, stage_job: dict, sql: dict) -> None:
    kind = event.get("Event", "")
    if kind == "SparkListenerJobStart":
        props = event.get("Properties") or {}
        what = props.get("spark.job.description") or props.get("callSite.short") or ""
        sql_id = props.get("spark.sql.execution.id")
        jobs[event["Job ID"]] = {"job": event["Job ID"], "start": event["Submission Time"], "what": what[:160],
                                 "sql_id": int(sql_id) if sql_id else None,
                                 "tasks": sum(s.get("Number of Tasks", 0) for s in event.get("Stage Infos", [])),
                                 "rows_read": 0, "shuffle_rows_written": 0}
        for stage in event.get("Stage IDs", []):
            stage_job[stage] = event["Job ID"]
    elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
        jobs[event["Job ID"]]["end"] = event["Completion Time"]
    elif kind == "SparkListenerTaskEnd" and stage_job.get(event.get("Stage ID")) in jobs:
        metrics = event.get("Task Metrics") or {}
        job = jobs[stage_job[event["Stage ID"]]]
        job["rows_read"] += (metrics.get("Input Metrics") or {}).get("Records Read", 0)
        job["shuffle_rows_written"] += (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Records Written", 0)
    elif kind.endswith("SparkListenerSQLExecutionStart"):
        plan = event.get("sparkPlanInfo") or {}
        scans = [" ".join(n.split())[:90] for n in _plan_nodes(plan) if "Scan" in n]
        sql[event["executionId"]] = " | ".join([" ".join((plan.get("simpleString") or "").split())[:70], *scans])


def _plan_nodes(plan: dict[str, Any]) -> Iterator[str]:
    """Every node of a physical plan (as the event log keeps it), root first."""
    yield plan.get("simpleString") or plan.get("nodeName") or ""
    for child in plan.get("children") or []:
        yield from _plan_nodes(child)
