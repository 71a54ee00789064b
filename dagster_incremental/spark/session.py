"""Start the SparkSession that spark/session_conf.py's flat conf describes: quietly, from the
class archive, without a credential on the JVM's command line, ending with this process."""

from __future__ import annotations

import atexit
import multiprocessing.util
import subprocess
import threading
from collections.abc import Mapping
from typing import Any

# Spark Connect's session and refusals (`refuse_connect` is imported from here too, as it was defined here).
from dagster_incremental.spark.connect import NOT_SUPPORTED, connect_session, refuse_connect, refuse_connect_session, remote_url
# The Iceberg runtime jar's path, where recipes and earlier releases import it from (each
# format's session conf is its own: spark/iceberg/session_setup.py, spark/delta/session_setup.py).

__all__ = ["build_spark_session", "note_destination", "refuse_connect"]


def build_spark_session(conf: Mapping[str, str], connect_refusal: str | None = NOT_SUPPORTED):
    """getOrCreate a SparkSession with `conf` (as dagster-pyspark's resource does); a driver JVM
    this call launches starts from the class archive, quietly (see jvm_startup), without any
    credential on its command line (`withheld_at_start`), and ends with this process. When
    Spark Connect is asked for ([spark] remote, SPARK_REMOTE) and the destination's format runs
    over it (`connect_refusal` None), a Connect session instead: no JVM here.

    Raises:
        IncrementalConfigError: the process's session already has a catalog of this name with
            other settings (`check_catalogs`); or Spark Connect is asked for and refused (for
            `connect_refusal`), or this process already has a Connect session (spark/connect.py);
            nothing was changed then.
    """
    url = remote_url(conf)
    if url is not None and connect_refusal is None:
        return connect_session(url, conf)
    refuse_connect(conf, connect_refusal or NOT_SUPPORTED)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from dagster_incremental.spark.java_check import require_java
    from dagster_incremental.spark.jvm_startup import driver_java_options

    start = {k: v for k, v in conf.items() if not withheld_at_start(k)}
    later = {k: v for k, v in conf.items() if withheld_at_start(k)}
    with _BUILD_LOCK:  # two destinations starting at once: the second sees the first's catalogs
        launching = SparkContext._jvm is None  # only options of a JVM not started yet take effect
        if launching:
            require_java()
            start["spark.driver.extraJavaOptions"] = driver_java_options(start)
        else:
            check_catalogs(SparkSession.getActiveSession() or SparkSession._instantiatedSession, conf)
        builder = SparkSession.builder
        for key, value in start.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        refuse_connect_session(session)  # a Connect session the checks above could not foresee
        set_while_running(session, later)
        if launching:
            _end_with_this_process(getattr(SparkContext._gateway, "proc", None), start)
    return session


_BUILD_LOCK = threading.Lock()


# ---------------------------------------------------------------- credentials off the command line

# PySpark launches the driver JVM with every conf entry as `--conf key=value` on its command line,
# which any local user reads (`ps`, /proc/<pid>/cmdline). A catalog's properties (its
# credential, token, S3 keys) and Hadoop's keys (S3A's access and secret keys) are only read when
# a catalog or a filesystem is first used, so they are set on the running session instead, before
# this module hands it out: in its SQL conf (Iceberg reads `spark.sql.catalog.<name>.*` there
# when it loads the catalog) and in the SparkContext's Hadoop configuration (every filesystem and
# Iceberg's Hadoop catalogs start from it).

def withheld_at_start(key: str) -> bool:
    """`spark.sql.catalog.<name>.<property>` and `spark.hadoop.*`: set on the running session."""
    return key.startswith("spark.hadoop.") or (key.startswith("spark.sql.catalog.") and key.count(".") >= 4)


def set_while_running(session: Any, conf: Mapping[str, str]) -> None:
    """Set `withheld_at_start` keys on a running session (Hadoop's without their prefix)."""
    if not conf:
        return
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key[len("spark.hadoop."):], value)
        else:
            session.conf.set(key, value)


# ---------------------------------------------------------------- the JVM ends with the process

JVM_EXIT_SECONDS = 120  # a JVM recording the class archive writes it at exit (~30 s)


def _end_with_this_process(proc: Any, start: Mapping[str, str]) -> None:
    """At this process's exit, stop the JVM it launched and wait for it, so no JVM of a run
    (writing the class archive, shutting Spark down) outlives the run's process."""
    from dagster_incremental.spark.jvm_startup import recorder_started

    if proc is None:
        return
    if "ArchiveClassesAtExit" in start.get("spark.driver.extraJavaOptions", ""):
        recorder_started(proc.pid)
    atexit.register(_stop_jvm, proc)
    # A multiprocessing child (Dagster's multiprocess executor forks its steps) ends with
    # os._exit, skipping atexit; it runs multiprocessing's finalizers first.
    multiprocessing.util.Finalize(None, _stop_jvm, args=(proc,), exitpriority=0)


def _stop_jvm(proc: Any) -> None:
    """The driver exits when its stdin closes (PySpark's gateway watches it); past the bound it
    is killed, and a recording it left half-written is discarded."""
    from dagster_incremental.spark.jvm_startup import discard_recording

    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=JVM_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        discard_recording()
    except Exception:  # noqa: BLE001 - exiting anyway; nothing to tell
        pass


# ---------------------------------------------------------------- one catalog name, one setting

_CATALOG_ORIGINS: dict[tuple[str, str], str] = {}  # (catalog, warehouse) -> where it is configured


def note_destination(catalog: str, warehouse: str, origin: str) -> None:
    """Say where a destination's catalog comes from (`config/silver.toml [destination]`), for
    the message when two destinations of one process want one catalog name."""
    _CATALOG_ORIGINS.setdefault((catalog, _normal(warehouse)), origin)


def check_catalogs(session: Any, conf: Mapping[str, str]) -> None:
    """Refuse a conf whose catalog the running session already has with other settings.

    Spark's catalogs are process-wide and loaded once: a second destination naming the same
    catalog with another warehouse would write into the first one's. Nothing is set before this.
    """
    if session is None:
        return
    for name, wanted in _catalogs(conf).items():
        if session.conf.get(f"spark.sql.catalog.{name}", None) is None:
            continue  # a new catalog: nothing to clash with
        for key, value in wanted.items():
            current = session.conf.get(key, None)
            if current is None or _normal(current) != _normal(value):
                raise _catalog_clash(name, key, value, current, conf)


def _catalogs(conf: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """{catalog name: its keys} of the Spark catalogs `conf` configures (spark_catalog aside:
    the session catalog holds no warehouse, and Delta destinations share it)."""
    out: dict[str, dict[str, str]] = {}
    for key, value in conf.items():
        parts = key.split(".")
        if key.startswith("spark.sql.catalog.") and len(parts) >= 4 and parts[3] != "spark_catalog":
            out.setdefault(parts[3], {})[key] = value
    return out


def _catalog_clash(name: str, key: str, value: str, current: str | None, conf: Mapping[str, str]) -> Exception:
    from dagster_incremental.errors import IncrementalConfigError

    prefix = f"spark.sql.catalog.{name}"
    where = _CATALOG_ORIGINS.get((name, _normal(conf.get(f"{prefix}.warehouse", ""))), f"catalog {name!r}")
    if key == f"{prefix}.warehouse":
        before = _CATALOG_ORIGINS.get((name, _normal(current or "")))
        said = (f"{where} warehouse = {value!r}, but this process's Spark session already has catalog "
                f"{name!r} at {current!r}" + (f" from {before} warehouse" if before else ""))
    else:  # another property: its values may be credentials, so they are not shown
        said = (f"{where}: catalog {name!r} sets {key} differently from the catalog of that name this "
                "process's Spark session already has")
    return IncrementalConfigError(
        f"{said}. Spark holds one catalog of a name per process and would write this destination's "
        f"tables into the other one's; give this destination another catalog name ([destination] "
        f"catalog = \"{name}_2\", or SparkTableIOManager(catalog=...)). Nothing was written.")


def _normal(value: str) -> str:
    return value.rstrip("/") if len(value) > 1 else value
