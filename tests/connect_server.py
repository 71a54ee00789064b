"""A throw-away Spark Connect server on loopback, started and stopped by the tests.

The server is the one PySpark 4's own distribution ships (`SparkConnectServer` in the wheel's
`jars/spark-connect_2.13-*.jar`; the wheel has no `sbin/start-connect-server.sh`, which only wraps
`spark-submit --class` in a daemon): `bin/spark-submit --class ...SparkConnectServer` runs it in
the foreground, as a child of the test process in a process group of its own, so `stop()` ends
its JVM and everything the JVM started. It takes the tests' session conf (tests/catalogs.py:
Iceberg's catalog `lake` on the given warehouse, Delta's beside it, the line's jars from the local
Maven repository: nothing downloads), UI off, every socket on 127.0.0.1.

The gRPC port is picked free by the OS, and the server may not move to another
(`spark.connect.grpc.port.maxRetries=0`): the suite's two workers each start one, and should the
other take the port first, this one exits and starts again on a new port. Readiness is the
server's own JVM listening on 127.0.0.1:<port> (never the other worker's server on a reused
port) and a Connect client's `SELECT 1` answered through it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from spark_cluster import free_port, listening_addresses, spark_home

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 180.0  # seconds: a JVM with the Iceberg and Delta jars, on a busy 2-core machine


class _PortTaken(RuntimeError):
    """The server could not bind its port: another process took it after free_port() chose it."""


@dataclass
class ConnectServer:
    """One Spark Connect server (its folder `base`: log, conf, scratch) serving `warehouse`."""

    base: Path
    warehouse: str
    extra_conf: dict[str, str] = field(default_factory=dict)  # e.g. S3A's endpoint: the server's own settings
    session_conf: dict[str, str] | None = None  # instead of the tests' shared session conf (a benchmark's)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.base / "connect-server.log"

    def conf(self) -> dict[str, str]:
        from catalogs import SMALL_JOBS_JAVA_OPTIONS, shared_session_conf

        session = self.session_conf
        if session is None:
            session = shared_session_conf(self.warehouse, app_name="dagster-incremental-connect-server")
            session["spark.driver.extraJavaOptions"] = SMALL_JOBS_JAVA_OPTIONS
        return {**session,
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.connect.grpc.port.maxRetries": "0",
                "spark.port.maxRetries": "0", **self.extra_conf}

    def env(self) -> dict[str, str]:
        """Loopback only, no conf or log4j2 file of the machine, Python workers on this interpreter."""
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE")}
        (self.base / "conf").mkdir(parents=True, exist_ok=True)
        env.update(SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(self.base / "conf"),
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(self.base / "local"),
                   PYSPARK_PYTHON=sys.executable)
        return env

    def start(self, attempts: int = 3) -> ConnectServer:
        """Start the server and wait until it answers; on a port another process took in the
        meantime, start again on a new one."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once()
            except _PortTaken:
                self.stop()
                if attempt == attempts:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self) -> ConnectServer:
        args = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS,
                "--name", "dagster-incremental-connect-server"]
        for key, value in self.conf().items():
            args += ["--conf", f"{key}={value}"]
        env = self.env()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(args, env=env, cwd=self.base, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)  # own group: killpg
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        address = f"127.0.0.1:{self.port}"
        while address not in self._listening():
            if self.process.poll() is not None:
                if "java.net.BindException" in self.tail(20000):  # "Failed to bind to address ...: Service ... failed after 0 retries"
                    raise _PortTaken(address)
                raise RuntimeError(f"the Spark Connect server exited with code {self.process.returncode} before "
                                   f"listening on {address}; its log, {self.log}:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Spark Connect server did not listen on {address} within {START_TIMEOUT:.0f} s; "
                                   f"its log, {self.log}:\n{self.tail()}")
            time.sleep(0.5)
        self._answer_a_query()

    def _listening(self) -> list[str]:
        try:
            return listening_addresses(self.process.pid) if self.process is not None else []
        except OSError:  # the process is gone, or /proc/<pid> is being torn down
            return []

    def _answer_a_query(self) -> None:
        """A Connect client's `SELECT 1` through the server (its session released after)."""
        session = client_session(self.url)
        try:
            value = session.sql("SELECT 1 AS one").collect()[0]["one"]
        except Exception as exc:
            raise RuntimeError(f"the Spark Connect server at {self.url} listens but did not answer SELECT 1 "
                               f"({type(exc).__name__}); its log, {self.log}:\n{self.tail()}") from exc
        finally:
            session.stop()
        if value != 1:
            raise RuntimeError(f"the Spark Connect server at {self.url} answered SELECT 1 with {value!r}")

    def stop(self) -> None:
        """SIGTERM the server's process group (its JVM and whatever it started), SIGKILL what is left."""
        if self.process is None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the group can outlive its leader
        except ProcessLookupError:
            pass

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def client_session(url: str):
    """A Spark Connect client session on `url`, made as a user's code beside Dagster would make
    one: PySpark's Connect builder, which leaves this process's own Spark (the tests' shared
    classic session) as it is; `SparkSession.builder.remote(...)` would mark the whole process as
    Connect (SPARK_CONNECT_MODE_ENABLED), and every later test's Spark with it."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(url).create()


@contextmanager
def connect_server(warehouse: str, extra_conf: dict[str, str] | None = None) -> Iterator[ConnectServer]:
    """A started server serving `warehouse` (and whatever `extra_conf` lets it reach); stopped,
    and its folder removed, at the end. When it cannot start, the error names its log, which is kept."""
    base = Path(tempfile.mkdtemp(prefix="di_connect_"))
    server = ConnectServer(base=base, warehouse=warehouse, extra_conf=dict(extra_conf or {}))
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
