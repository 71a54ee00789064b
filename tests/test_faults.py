"""Fault injection: a run dies at each point where it can die; the next normal run heals exactly.

Points (issue 5): inside the user function mid-stream (an exception; a killed process), after
staging (before the IO manager writes), during the table commit (the MERGE/append raises; a
process killed while it runs), after the commit but before Dagster records the event (an
exception; a killed process), and while Dagster records the materialization (an exception; a
killed process).

After every fault, the next normal run must leave the table equal to a reference computed in plain
Python from the same source history (`History`), with the cursor (Dagster's and the table's) at
the source's high-water mark: for append, delete-insert, upsert and scd2. Commit-adjacent points
are also killed for real with SIGKILL in a subprocess (tests/fault_runner.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance import DagsterInstance
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

import preloaded
from attack_support import (
    committed_states,
    dagster_state,
    failure_text,
    materialize,
    rows,
    scd2_rows,
    snapshots,
    source_asset,
)
from catalogs import ICEBERG_ONLY, assert_other_readers_agree, plain, to_env
from instances import RUNNER_HOME_YAML
from dagster_incremental import SparkTableIOManager
from dagster_incremental.spark.iceberg import commit as spark_commit, writer as table_writer
from dagster_incremental.spark.delta import in_process as delta_in_process, s3_lease
from dagster_incremental.spark.delta.commit import DeltaCommit
from dagster_incremental.spark.delta.writer import DeltaWriter
from dagster_incremental.spark.iceberg.local import python_write
from dagster_incremental.spark.iceberg.local.hadoop_commit import HadoopFolderCatalog

pytestmark = pytest.mark.spark

COLUMNS = ["id", "amount", "updated"]
ROOT = Path(__file__).resolve().parent.parent


class History:
    """A source that changes between runs, and what each disposition's table must hold.

    Each step updates some existing keys and inserts new ones, all with the step's cursor value
    (so many rows share a cursor value: boundary dedup matters). `loaded` collects every row
    version present in the source when a run committed: append must hold exactly those (each
    once); scd2 must hold them as versions (active = the current source, retired = the rest).
    """

    def __init__(self) -> None:
        self.current: dict[int, tuple] = {}
        self.clock = 0
        self.next_id = 1
        self.loaded: set[tuple] = set()
        self.step(inserts=4, updates=0)

    def step(self, inserts: int = 2, updates: int = 1) -> None:
        self.clock += 1
        for key in sorted(self.current)[:updates]:
            _, amount, _ = self.current[key]
            self.current[key] = (key, amount + 1, self.clock)
        for _ in range(inserts):
            self.current[self.next_id] = (self.next_id, self.next_id * 10, self.clock)
            self.next_id += 1

    def source(self) -> list[dict]:
        return [dict(zip(COLUMNS, r)) for r in self.current.values()]

    def committed(self) -> None:
        self.loaded |= set(self.current.values())

    def check(self, spark, io, instance, name: str, strategy: str) -> None:
        current = sorted(self.current.values(), key=repr)
        if strategy == "append":
            assert rows(spark, io, name, COLUMNS) == sorted(self.loaded, key=repr), "append lost or doubled a row"
        elif strategy == "scd2":
            active, retired = scd2_rows(spark, io, name, COLUMNS)
            assert active == current
            assert retired == sorted(self.loaded - set(current), key=repr), "scd2 lost or doubled a version"
        else:
            assert rows(spark, io, name, COLUMNS) == current
        assert dagster_state(instance, name)["last_value"] == self.clock
        assert committed_states(spark, io, name)[-1]["last_value"] == self.clock


# -- in-process faults ------------------------------------------------------------------------------


class Injected(RuntimeError):
    pass


@contextlib.contextmanager
def fault(point: str, monkeypatch, history: History, feed: dict):
    """Arm one fault for the duration of one run; yields whether the fault lets a commit happen."""
    committed = False
    if point == "mid-stream-exception":
        rows_now = history.source()

        def broken():
            yield from rows_now[: len(rows_now) // 2]
            raise Injected("injected: source connection dropped")

        feed["source"] = broken
    elif point == "after-staging":
        def refuse(self, context, obj):
            raise Injected("injected: died after staging, before the write")

        monkeypatch.setattr(SparkTableIOManager, "handle_output", refuse)
    elif point == "commit-raises":
        def refuse_statement(spark, properties, fn):
            raise Injected("injected: the MERGE failed")

        def refuse_append(self, *args, **kwargs):
            raise Injected("injected: the append failed")

        from pyspark.sql.readwriter import DataFrameWriterV2

        from dagster_incremental.spark.iceberg.local import merge as local_merge
        from dagster_incremental.spark.iceberg.local.append import LocalAppend

        monkeypatch.setattr(spark_commit, "with_commit_properties", refuse_statement)
        monkeypatch.setattr(LocalAppend, "commit", refuse_append)  # local rows: pyarrow files + Java API commit
        monkeypatch.setattr(local_merge, "_commit", refuse_append)  # local keyed merge: one RowDelta
        monkeypatch.setattr(DataFrameWriterV2, "append", refuse_append)
        monkeypatch.setattr(DataFrameWriterV2, "overwrite", refuse_append)
        monkeypatch.setattr(DeltaCommit, "run", refuse_append)  # every Delta statement's commit
        monkeypatch.setattr(delta_in_process, "_commit", refuse_append)  # local rows into Delta: delta-rs's commit
        for pyiceberg_catalog in (HadoopFolderCatalog, SqlCatalog, RestCatalog):  # pyiceberg's commits (no JVM)
            monkeypatch.setattr(pyiceberg_catalog, "commit_table", refuse_append)
    elif point == "after-commit":
        for writer in (table_writer.TableWriter, DeltaWriter):
            monkeypatch.setattr(writer, "write", _then_fail(writer.write))
        monkeypatch.setattr(python_write, "write_in_python", _fail_after_python_commit(python_write.write_in_python))
        committed = True
    elif point == "event-recording":
        original_handle = DagsterInstance.handle_new_event

        def handle(self, event, *args, **kwargs):
            dagster_event = getattr(event, "dagster_event", None)
            if dagster_event is not None and dagster_event.event_type_value == "ASSET_MATERIALIZATION":
                raise Injected("injected: the event store failed")
            return original_handle(self, event, *args, **kwargs)

        monkeypatch.setattr(DagsterInstance, "handle_new_event", handle)
        committed = True
    else:  # pragma: no cover
        raise ValueError(point)
    try:
        yield committed
    finally:
        monkeypatch.undo()
        feed["source"] = history.source


def _then_fail(write):
    def write_then_fail(self, *args, **kwargs):
        write(self, *args, **kwargs)
        raise Injected("injected: died after the commit, before Dagster's event")

    return write_then_fail


def _fail_after_python_commit(write):
    """pyiceberg's commit made (None: it left the batch to the writer, patched too), then a failure."""
    def write_then_fail(*args, **kwargs):
        result = write(*args, **kwargs)
        if result is not None:
            raise Injected("injected: died after the commit, before Dagster's event")
        return result

    return write_then_fail


POINTS = ["mid-stream-exception", "after-staging", "commit-raises", "after-commit", "event-recording"]
# The pre-commit faults leave nothing behind, so they run back to back (the source moving on
# between them) before one healing run; each commit-adjacent fault gets its own healing run.
HEAL_AFTER = {"commit-raises", "after-commit", "event-recording"}


# Every strategy on the Hadoop catalog; on the JDBC and REST catalogs (over S3) and on Delta (local and S3) each
# commit kind once (the local append, the local merge's RowDelta, a Spark MERGE; Delta's INSERT
# and MERGE): scd2 commits as delete-insert does.
IN_PROCESS = [("hadoop", s) for s in ("append", "delete-insert", "upsert", "scd2")] + [
    (c, s) for c in ("jdbc", "rest", "delta", "delta-s3") for s in ("append", "delete-insert", "upsert")]


@pytest.mark.parametrize("catalog, strategy", IN_PROCESS, indirect=["catalog"], ids=[f"{c}-{s}" for c, s in IN_PROCESS])
def test_every_in_process_fault_is_healed_by_the_next_run(strategy, spark, catalog, instance, tmp_path, monkeypatch):
    namespace = "fault_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    io = catalog.io_manager(namespace)
    name = "f_" + strategy.replace("-", "_")
    history = History()
    feed = {"source": history.source}
    asset = source_asset(name, config, strategy, lambda: feed["source"](), merge_key="id" if strategy == "scd2" else None)

    assert materialize(asset, instance, io).success
    history.committed()
    history.check(spark, io, instance, name, strategy)

    for point in POINTS:
        history.step()
        before = snapshots(spark, io, name)
        with fault(point, monkeypatch, history, feed) as commits:
            try:
                result = materialize(asset, instance, io)
                assert not result.success, f"{point}: the faulty run succeeded"
                assert "injected" in failure_text(result)
            except Injected:
                pass  # a fault in Dagster's own event handling may escape execute_in_process
        after = snapshots(spark, io, name)
        assert (len(after) > len(before)) == commits, f"{point}: unexpected commit behaviour"
        if commits:
            history.committed()
        else:
            assert after == before
        history.step()  # the source moves on before the next run
        if point not in HEAL_AFTER:
            continue
        healed = materialize(asset, instance, io)
        assert healed.success, failure_text(healed)
        history.committed()
        history.check(spark, io, instance, name, strategy)
    assert_other_readers_agree(catalog, spark, io.table_name(dg.AssetKey(name)))


# -- SIGKILL in a subprocess ------------------------------------------------------------------------

KILLS = [
    ("append", "after-commit"),
    ("upsert", "event-recording"),
    ("delete-insert", "during-commit"),
    ("scd2", "mid-stream"),
]


@pytest.fixture(scope="module")
def kill_env(catalog, tmp_path_factory):
    base = tmp_path_factory.mktemp("kills")
    home = base / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(RUNNER_HOME_YAML)
    namespace = "kill_" + uuid.uuid4().hex[:8]
    config = base / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    return base, home, namespace, str(config)


def run_in_subprocess(kill_env, catalog, name: str, strategy: str, point: str, source: list[dict]):
    base, home, namespace, config = kill_env
    src = base / f"{name}.json"
    src.write_text(json.dumps(source))
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home), FAULT_CONFIG=config, FAULT_SOURCE=str(src), FAULT_ASSET=name,
        FAULT_STRATEGY=strategy, FAULT_POINT=point, FAULT_WAREHOUSE=catalog.warehouse, FAULT_NAMESPACE=namespace,
        FAULT_CATALOG=to_env(catalog),
        SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT),
    )
    return preloaded.run([str(ROOT / "tests" / "fault_runner.py")], env, ROOT, timeout=300)


@pytest.mark.parametrize("strategy, point", KILLS, ids=[f"{s}-{p}" for s, p in KILLS])
def test_sigkill_at_each_point_is_healed_by_the_next_run(strategy, point, spark, catalog, kill_env, monkeypatch):
    # A Delta table on S3: the killed run's commit lease is taken over once it expires, as in
    # production, only after 5 s instead of 60 (the healing run waits for it).
    monkeypatch.setattr(s3_lease, "LEASE_SECONDS", 5.0)
    base, home, namespace, config = kill_env
    io = catalog.io_manager(namespace)
    name = f"k_{strategy}_{point}".replace("-", "_")  # one table per case: two cases share a strategy
    history = History()
    feed = {"source": history.source}
    asset = source_asset(name, config, strategy, lambda: feed["source"](), merge_key="id" if strategy == "scd2" else None)
    with DagsterInstance.from_ref(dg._core.instance.InstanceRef.from_dir(str(home))) as instance:  # type: ignore[attr-defined]
        assert materialize(asset, instance, io).success
        history.committed()
        history.step()
        before = snapshots(spark, io, name)

        at_kill = set(history.current.values())
        proc = run_in_subprocess(kill_env, catalog, name, strategy, point, history.source())
        assert proc.returncode == -9, f"the process was not killed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        # the killed run never recorded a materialization: Dagster's cursor is the old one
        assert dagster_state(instance, name)["last_value"] == history.clock - 1

        # No REFRESH TABLE here on purpose: this long-lived session cached the table before the
        # other process committed, and the next run must still see that commit.
        history.step()
        healed = materialize(asset, instance, io)
        assert healed.success, failure_text(healed)
        after = snapshots(spark, io, name)  # fresh: this session just committed
        killed_commits = len(after) - len(before) - 1
        expected = {"mid-stream": [0], "after-commit": [1], "event-recording": [1]}.get(point, [0, 1])
        assert killed_commits in expected, f"{point}: {killed_commits} commits by the killed run"
        if killed_commits:
            history.loaded |= at_kill
        history.committed()
        history.check(spark, io, instance, name, strategy)
        assert_other_readers_agree(catalog, spark, io.table_name(dg.AssetKey(name)))


def _table_files(spark, table: str) -> set[str]:
    """The data and delete files any snapshot of `table` references."""
    return {plain(r.file_path) for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()}


@ICEBERG_ONLY  # Delta's counterpart is VACUUM, which keeps files younger than a week by default
def test_files_a_killed_run_left_are_never_read_and_orphan_removal_deletes_them(spark, catalog, kill_env):
    """A run killed as its commit starts has written its Parquet files (the local write path; and
    its manifests, when pyiceberg commits): they stay out of the table, the next run does not pick them up, and Iceberg's orphan-file
    removal (docs/performance.md, Iceberg settings), listing the table's location through its FileIO,
    deletes exactly them."""
    base, home, namespace, config = kill_env
    io = catalog.io_manager(namespace)
    name = "orphans_upsert"
    history = History()
    feed = {"source": history.source}
    asset = source_asset(name, config, "upsert", lambda: feed["source"]())
    table = io.table_name(dg.AssetKey(name)).sql
    with DagsterInstance.from_ref(dg._core.instance.InstanceRef.from_dir(str(home))) as instance:  # type: ignore[attr-defined]
        assert materialize(asset, instance, io).success
        history.committed()
        location = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first().data_type
        def written() -> set[str]:  # data files, and the manifests pyiceberg writes before its commit
            return {f for f in catalog.files_under(location) if "/data/" in f or f.endswith(".avro")}

        data_before = written()
        history.step()
        proc = run_in_subprocess(kill_env, catalog, name, "upsert", "before-commit", history.source())
        assert proc.returncode == -9, f"the process was not killed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        left = written() - data_before
        assert left and not left & _table_files(spark, table), "the killed run left no file, or its files are in the table"

        healed = materialize(asset, instance, io)
        assert healed.success, failure_text(healed)
        history.committed()
        history.check(spark, io, instance, name, "upsert")
        assert not left & _table_files(spark, table)

        removed = remove_orphan_files(spark, table)
        assert removed == left, (sorted(removed), sorted(left))
        assert not left & catalog.files_under(location)
        history.check(spark, io, instance, name, "upsert")
        assert_other_readers_agree(catalog, spark, io.table_name(dg.AssetKey(name)))


def remove_orphan_files(spark, table: str) -> set[str]:
    """docs/performance.md's maintenance recipe (`remove_orphan_files` with `prefix_listing => true`: the
    table's location listed through its FileIO, so S3 needs no Hadoop S3 file system), as
    Iceberg's action it calls, with the age limit at now instead of the procedure's 24 hours
    at least: nothing else writes to this table now, and the test cannot wait a day."""
    jvm, session = spark._jvm, spark._jsparkSession
    iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(session).deleteOrphanFiles(iceberg)
    now = jvm.java.lang.System.currentTimeMillis() + 1000
    result = action.olderThan(now).usePrefixListing(True).execute()
    return {plain(location) for location in result.orphanFileLocations()}
