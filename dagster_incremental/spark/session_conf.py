"""The flat Spark conf of a session that can write our tables, from config.toml's `[spark]` and
`[destination]` sections.

Why here and not in dagster-pyspark alone: the table format's jars must fit the running PySpark
(spark_line; on Spark 3.5 Iceberg's is found inside the installed `snowpark-connect-deps-iceberg`
wheel, nothing is downloaded at run time), and the catalog settings follow from `[destination]`.
The flat conf dict is what `dagster_pyspark.PySparkResource(spark_config=...)` takes, so both
paths build the same session (spark/session.py starts it)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster_incremental.spark.destination import FORMATS
from dagster_incremental.spark.spark_line import running_line


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
    out.update(FORMATS[table_format].session_conf(user, catalog, warehouse))  # jars, extensions, catalog
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
