"""Run one materialization of a test asset in its own process and SIGKILL it at a chosen point.

Used by tests/test_faults.py. Everything comes from the environment:
    DAGSTER_HOME          a persistent Dagster instance folder (shared with the test)
    FAULT_CONFIG          the config.toml the asset is defined from
    FAULT_SOURCE          a JSON file with the source rows the asset's function returns
    FAULT_ASSET           the asset name; FAULT_STRATEGY its disposition (append, upsert, ...);
                          several assets: FAULT_ASSET="a:append,b:upsert" (FAULT_STRATEGY unused)
    FAULT_POINT           where to die (see POINTS); "none" runs normally
    FAULT_WAREHOUSE, FAULT_NAMESPACE   the destination; FAULT_CATALOG its catalog (catalogs.to_env)

The kill is applied by monkeypatching the library from here; the library has no fault hooks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

POINTS = ("none", "mid-stream", "before-commit", "during-commit", "after-commit", "event-recording")


def die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # never reached


def pyiceberg_catalogs() -> list:
    """The catalogs pyiceberg commits a run's rows through: a Hadoop folder, JDBC, REST."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    from dagster_incremental.spark.iceberg.local.hadoop_commit import HadoopFolderCatalog

    return [HadoopFolderCatalog, SqlCatalog, RestCatalog]


def dying_commit(commit, die):
    def commit_while_dying(self, *args, **kwargs):
        threading.Timer(float(os.environ.get("FAULT_DELAY", "0.3")), die).start()
        return commit(self, *args, **kwargs)

    return commit_while_dying


def _then_die(write):
    def write_then_die(self, *args, **kwargs):
        write(self, *args, **kwargs)
        die()

    return write_then_die


def main() -> int:
    point = os.environ["FAULT_POINT"]
    assert point in POINTS, point
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import dagster as dg

    from attack_support import QUIET, source_asset
    from catalogs import SMALL_DATA_CONF, runner_spark_config, runner_table_format
    from dagster_incremental import SparkTableIOManager
    from dagster_incremental.spark.iceberg import commit as spark_commit, writer as table_writer
    from dagster_incremental.spark.delta.commit import DeltaCommit
    from dagster_incremental.spark.delta.writer import DeltaWriter
    rows = json.loads(Path(os.environ["FAULT_SOURCE"]).read_text())

    def source():
        for i, row in enumerate(rows):
            if point == "mid-stream" and i == len(rows) // 2:
                die()
            yield row

    named = [item.split(":") for item in os.environ["FAULT_ASSET"].split(",")]
    if len(named[0]) == 1:
        named = [[named[0][0], os.environ["FAULT_STRATEGY"]]]
    assets = [
        source_asset(name, os.environ["FAULT_CONFIG"], strategy, source, merge_key="id" if strategy == "scd2" else None)
        for name, strategy in named
    ]
    catalog, conf = runner_spark_config(os.environ.get("FAULT_CATALOG", ""))
    io = SparkTableIOManager(
        catalog=catalog or "lake", namespace=os.environ["FAULT_NAMESPACE"], warehouse=os.environ["FAULT_WAREHOUSE"],
        table_format=runner_table_format(os.environ.get("FAULT_CATALOG", "")), master="local[1]",
        spark_config={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                      "spark.driver.bindAddress": "127.0.0.1", "spark.sql.shuffle.partitions": "1", **SMALL_DATA_CONF, **conf},
    )

    if point == "before-commit":
        # Die between the local write path's files and its Iceberg commit (a merge's; an
        # append's): the files are in the table's location, and nobody's.
        from dagster_incremental.spark.iceberg.local import append as local_append, merge as local_merge

        def die_instead(*args, **kwargs):
            die()

        local_merge._commit = die_instead
        local_append.LocalAppend.commit = die_instead
        for pyiceberg_catalog in pyiceberg_catalogs():
            pyiceberg_catalog.commit_table = die_instead  # pyiceberg's commit (no JVM)
    elif point == "during-commit":
        # Die while the commit statement runs: a timer fires shortly after it starts (before,
        # during or after Iceberg's atomic metadata swap; every outcome must heal).
        original_cm = spark_commit.conflicts_as_concurrent_run

        def dying_cm(*args, **kwargs):
            threading.Timer(float(os.environ.get("FAULT_DELAY", "0.3")), die).start()
            return original_cm(*args, **kwargs)

        spark_commit.conflicts_as_concurrent_run = dying_cm  # every commit of a write enters it
        original_run = DeltaCommit.run

        def dying_run(self, *args, **kwargs):
            threading.Timer(float(os.environ.get("FAULT_DELAY", "0.3")), die).start()
            return original_run(self, *args, **kwargs)

        DeltaCommit.run = dying_run  # every Delta statement's commit
        from dagster_incremental.spark.delta import in_process as delta_in_process

        original_local = delta_in_process._commit

        def dying_local(*args, **kwargs):
            threading.Timer(float(os.environ.get("FAULT_DELAY", "0.3")), die).start()
            committed = original_local(*args, **kwargs)
            if committed:  # delta-rs often commits within the delay: then it dies as the commit returns
                die()
            return committed

        delta_in_process._commit = dying_local  # local rows into Delta: delta-rs's commit
        for pyiceberg_catalog in pyiceberg_catalogs():
            pyiceberg_catalog.commit_table = dying_commit(pyiceberg_catalog.commit_table, die)  # pyiceberg's commit
    elif point == "after-commit":
        for writer in (table_writer.TableWriter, DeltaWriter):
            writer.write = _then_die(writer.write)
        from dagster_incremental.spark.iceberg.local import python_write

        committed_by_pyiceberg = python_write.write_in_python

        def commit_then_die(*args, **kwargs):
            result = committed_by_pyiceberg(*args, **kwargs)
            if result is not None:  # None: nothing committed, the JVM's writer (patched above) goes on
                die()
            return result

        python_write.write_in_python = commit_then_die
    elif point == "event-recording":
        from dagster._core.instance import DagsterInstance

        original_handle = DagsterInstance.handle_new_event

        def handle(self, event, *args, **kwargs):
            dagster_event = getattr(event, "dagster_event", None)
            if dagster_event is not None and dagster_event.event_type_value == "ASSET_MATERIALIZATION":
                die()
            return original_handle(self, event, *args, **kwargs)

        DagsterInstance.handle_new_event = handle

    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(assets, instance=instance, resources={"io_manager": io}, run_config=QUIET,
                                raise_on_error=False)
    for event in result.all_events:
        if event.is_step_success:
            print(f"STEP_OK {event.step_key}", flush=True)
        elif event.is_step_failure:
            error = event.step_failure_data.error
            text = []
            while error is not None:
                text.append(error.message.replace("\n", " "))
                error = error.cause
            print(f"STEP_FAILED {event.step_key} " + " | ".join(text), flush=True)
    print("RUN_SUCCESS" if result.success else "RUN_FAILED", flush=True)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
