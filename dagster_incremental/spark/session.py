"""Build the SparkSession from config.toml's `[spark]` and `[destination]` sections."""

# Why here and not in dagster-pyspark alone: the table format's jars must fit the running
# PySpark (spark_line; on Spark 3.5 Iceberg's is found inside the installed
# `snowpark-connect-deps-iceberg` wheel, nothing is downloaded at run time), and the catalog
# settings follow from `[destination]`. The resulting flat conf dict is what
# `dagster_pyspark.PySparkResource(spark_config=...)` takes, so both paths build the same session.

from __future__ import annotations

import atexit
import multiprocessing.util
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster_incremental.spark.spark_line import (
    Coordinates,
    coordinates_text,
    maven_jar,
    running_hadoop,
    running_line,
    s3a_artifacts,
)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_jars(on_s3: bool = False) -> str:
    """`spark.jars` of Delta's two jars (with S3A's two when the tables are on S3) when the local
    Maven repository has them (`mvn dependency:get -Dartifact=<each of delta_artifacts()>` puts
    them there), else "": then `spark.jars.packages` names them and Spark resolves them when the
    session starts. The jars are those of the running PySpark's line (spark_line)."""
    paths = [maven_jar(a) for a in delta_artifacts(on_s3)]
    return ",".join(str(p) for p in paths) if all(p.is_file() for p in paths) else ""


def delta_artifacts(on_s3: bool = False) -> tuple[Coordinates, ...]:
    """Delta's coordinates for the running PySpark (Maven Central only, no wheel carries them),
    with S3A's (hadoop-aws of pyspark's own Hadoop and its AWS SDK bundle) for tables on S3."""
    line = running_line()
    return line.delta + (s3a_artifacts(running_hadoop()) if on_s3 else ())


def delta_conf(user: Mapping[str, str], on_s3: bool = False) -> dict[str, str]:
    """Delta's jars (unless the user brings their own), session extension and catalog."""
    out = {
        "spark.sql.extensions": DELTA_EXTENSIONS,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        # A table's state is rebuilt from its log in this many tasks (Delta's default, 50, makes
        # every small table's first read and each time travel cost seconds; measured 5x here).
        "spark.databricks.delta.snapshotPartitions": "4",
    }
    if "spark.jars" not in user and "spark.jars.packages" not in user:
        jars = delta_jars(on_s3)
        if jars:
            out["spark.jars"] = jars
        else:
            out["spark.jars.packages"] = coordinates_text(delta_artifacts(on_s3))
    return out


def iceberg_runtime_jar() -> str:
    """Path of the Iceberg Spark runtime jar of the running PySpark's line: on Spark 3.5 the one
    the `snowpark-connect-deps-iceberg` wheel ships, else the local Maven repository's."""
    line = running_line()
    if line.iceberg_wheel_jar is None:
        path = maven_jar(line.iceberg_runtime)
        if not path.is_file():
            fetch = f"mvn dependency:get -Dartifact={coordinates_text((line.iceberg_runtime,))}"
            raise FileNotFoundError(f"{path.name} (Iceberg's runtime for Spark {line.name}) is not in "
                                    f"the local Maven repository; fetch it with `{fetch}`.")
        return str(path)
    import snowpark_connect_deps_iceberg as deps

    path = Path(deps.get_jar_path(line.iceberg_wheel_jar))
    if not path.is_file():  # pragma: no cover - only with a broken install
        raise FileNotFoundError(
            f"{line.iceberg_wheel_jar} is not in the installed snowpark-connect-deps-iceberg package; "
            "reinstall it with `pip install snowpark-connect-deps-iceberg==1.0.2`."
        )
    return str(path)


def iceberg_jar_conf() -> dict[str, str]:
    """Iceberg's runtime for the running PySpark: the wheel's jar on Spark 3.5; on Spark 4 (no
    wheel ships it) its coordinates, which Spark resolves from the local Maven repository first."""
    line = running_line()
    if line.iceberg_wheel_jar is None:
        return {"spark.jars.packages": coordinates_text((line.iceberg_runtime,))}
    return {"spark.jars": iceberg_runtime_jar()}


def iceberg_catalog_conf(catalog: str, warehouse: str | Path) -> dict[str, str]:
    """Spark conf for an Iceberg Hadoop catalog named `catalog` in the `warehouse` folder."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "hadoop",
        f"{prefix}.warehouse": str(warehouse),
    }


def spark_conf(
    *,
    master: str = "local[*]",
    app_name: str = "dagster-incremental",
    conf: Mapping[str, Any] | None = None,
    table_format: str = "iceberg",
    catalog: str | None = "lake",
    warehouse: str | Path | None = None,
) -> dict[str, str]:
    """The flat Spark conf for a session that can write our tables.

    User settings in `conf` win over every default here, including the jar: a user who sets
    `spark.jars` or `spark.jars.packages` provides the table-format jars themselves.
    """
    out: dict[str, str] = {
        "spark.master": master,
        "spark.app.name": app_name,
        # Instants are compared and rendered in UTC whatever the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        # Small batches dominate incremental runs: 200 shuffle partitions is pure overhead.
        "spark.sql.shuffle.partitions": "8",
        # pandas/Arrow <-> Spark conversions go through Arrow, not row by row.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Quiet by default: no [Stage N:>] bars in run logs ("true" in [spark.conf] brings them back).
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local") or _standalone_on_loopback(master):
        out.update(_this_machine_conf(out["spark.sql.shuffle.partitions"]))
    out.update(_line_conf())
    user = {k: str(v) for k, v in (conf or {}).items()}
    out.update(_table_format_conf(table_format, user, catalog, warehouse))
    out.update(user)
    return out


def _line_conf() -> dict[str, str]:
    """What the running PySpark's line needs set (spark_line); none on a line without known jars,
    whose refusal, or the user's own jars, comes with the table format's conf."""
    from dagster_incremental.errors import IncrementalConfigError

    try:
        return dict(running_line().session_conf)
    except IncrementalConfigError:
        return {}


def _standalone_on_loopback(master: str) -> bool:
    """A standalone master on loopback (spark://127.0.0.1:7077, localhost, [::1]; every host of
    an HA list): its workers and executors run on this machine."""
    hosts = master[len("spark://"):].split(",") if master.startswith("spark://") else []
    return bool(hosts) and all(h.rsplit(":", 1)[0] in ("localhost", "[::1]") or h.startswith("127.") for h in hosts)


def _this_machine_conf(shuffle_partitions: str) -> dict[str, str]:
    """An embedded session, or a standalone cluster on this machine's loopback (tests, a laptop
    cluster): the executors reach the driver on loopback, and nobody else can."""
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        # Python workers run in this interpreter's environment (pyarrow, pandas for the cursor
        # filter's pandas UDF), even when a virtualenv was not activated. Only on this machine:
        # a remote cluster's executors need their own Python (spark.pyspark.python or
        # PYSPARK_PYTHON); this interpreter's path means nothing there.
        "spark.pyspark.python": sys.executable,
        # Listing a folder (Delta's VACUUM, file-source reads) fans out to 10,000 tasks by
        # default, a cluster's figure: on one machine VACUUM of a 20-file table took 88 s, 7.5 s
        # with a listing spread as wide as the shuffles.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": shuffle_partitions,
    }


def _table_format_conf(table_format: str, user: Mapping[str, str], catalog: str | None,
                       warehouse: str | Path | None) -> dict[str, str]:
    """The jars, extensions and catalog of the table format (the user's keys win after this)."""
    out: dict[str, str] = {}
    if table_format == "iceberg":
        if "spark.jars" not in user and "spark.jars.packages" not in user:
            out.update(iceberg_jar_conf())
        out["spark.sql.extensions"] = ICEBERG_EXTENSIONS
        if catalog and warehouse is not None:
            defaults = iceberg_catalog_conf(catalog, warehouse)
            if f"spark.sql.catalog.{catalog}.catalog-impl" in user:
                # A custom catalog class (Glue, Nessie, JDBC...): Iceberg refuses it next to a
                # `type`, so the default hadoop type steps aside.
                defaults.pop(f"spark.sql.catalog.{catalog}.type")
            out.update(defaults)
    elif table_format == "delta":
        from dagster_incremental.spark.delta.storage import on_s3

        out.update(delta_conf(user, on_s3=warehouse is not None and on_s3(str(warehouse))))
    return out


def build_spark_session(conf: Mapping[str, str]):
    """getOrCreate a SparkSession with `conf` (as dagster-pyspark's resource does); a driver JVM
    this call launches starts from the class archive, quietly (see jvm_startup), without any
    credential on its command line (`withheld_at_start`), and ends with this process.

    Raises:
        IncrementalConfigError: the process's session already has a catalog of this name with
            other settings (`check_catalogs`); nothing was changed then.
    """
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
