"""Delta Lake as a table format: what only Delta has (its commit log, RESTORE, its idempotent
writes as the compare-and-set) and what it lacks (partition transforms). The end-to-end suites
run on Delta through the `delta` catalog kind (tests/catalogs.py)."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

import dagster as dg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.errors import DataShapeError, IncrementalConfigError
from dagster_incremental.spark.run_commit import BaseMoved, CursorGuard, StaleCursor
from dagster_incremental.spark.delta import commit as delta_commit
from dagster_incremental.spark.delta.log import DeltaLog
from dagster_incremental.spark.delta.writer import DeltaWriter
from dagster_incremental.spark.delta.table_ref import DeltaTableRef
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec
from catalogs import assert_delta_rs_agrees, delta_by_spark_only, delta_catalog, delta_rs_rows

pytestmark = pytest.mark.spark

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def iso(day: int) -> str:
    return (datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=day - 1)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def delta_table(spark_warehouse):
    name = "t_" + uuid.uuid4().hex[:8]
    return DeltaTableRef.at(TableRef("lake", ("direct",), name), f"{spark_warehouse}/delta/direct/{name}")


def rows(spark, table) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(table.sql).collect())


def test_a_commit_another_cursor_commit_overtook_writes_nothing(spark, delta_table, monkeypatch):
    """Two runs that read the same cursor: the first commits; the second, whose check saw the
    counter before the first moved it, is skipped by Delta itself and refused; its rows are not
    in the table, its cursor is not the table's."""
    delta_by_spark_only(monkeypatch)  # the Spark path's statement and its idempotent write
    spec = WriteSpec(table=delta_table, disposition="append")
    writer = DeltaWriter(spark)
    first = writer.write(spec, pa.Table.from_pylist([{"id": 1}]), commit=CommitInfo(state={"last_value": 1}, run_id="r1"))
    guard = CursorGuard(first.snapshot_id, None)
    writer.write(spec, pa.Table.from_pylist([{"id": 2}]), commit=CommitInfo(state={"last_value": 2}, run_id="r2"), guard=guard)
    with pytest.raises(StaleCursor):  # the check sees the newer cursor
        writer.write(spec, pa.Table.from_pylist([{"id": 3}]), commit=CommitInfo(state={"last_value": 3}, run_id="r3"), guard=guard)
    # the same run had its check pass just before r2 committed: Delta skips its write
    overtaken = DeltaLog(delta_table.location).app_version(delta_commit.APP_ID) - 1
    monkeypatch.setattr(delta_commit.DeltaCommit, "checked_count", lambda self: overtaken)
    with pytest.raises(BaseMoved):
        writer.write(spec, pa.Table.from_pylist([{"id": 3}]), commit=CommitInfo(state={"last_value": 3}, run_id="r3"), guard=guard)
    assert rows(spark, delta_table) == [(1,), (2,)]
    assert DeltaLog(delta_table.location).committed_cursor(None).state == {"last_value": 2}


def test_a_run_whose_check_passed_before_a_full_refresh_cannot_commit_after_it(spark, delta_table, monkeypatch):
    """A full refresh replaces the cursor unchecked, but moves the counter: a run that checked
    the old cursor just before it is skipped by Delta and refused; the table is the refresh's."""
    delta_by_spark_only(monkeypatch)  # the Spark path's statement and its idempotent write
    spec = WriteSpec(table=delta_table, disposition="append")
    writer = DeltaWriter(spark)
    created = writer.write(spec, pa.Table.from_pylist([{"id": 0}]), commit=CommitInfo(state={"last_value": 0}, run_id="r0"))
    first = writer.write(spec, pa.Table.from_pylist([{"id": 1}]), commit=CommitInfo(state={"last_value": 1}, run_id="r1"),
                         guard=CursorGuard(created.snapshot_id, None))
    checked = DeltaLog(delta_table.location).app_version(delta_commit.APP_ID)
    writer.write(spec, pa.Table.from_pylist([{"id": 10}]), commit=CommitInfo(state={"last_value": 10}, run_id="refresh"),
                 full_refresh=True)
    assert DeltaLog(delta_table.location).app_version(delta_commit.APP_ID) == checked + 1
    monkeypatch.setattr(delta_commit.DeltaCommit, "checked_count", lambda self: checked)  # its check passed before
    with pytest.raises(BaseMoved):
        writer.write(spec, pa.Table.from_pylist([{"id": 2}]), commit=CommitInfo(state={"last_value": 2}, run_id="r2"),
                     guard=CursorGuard(first.snapshot_id, None))
    monkeypatch.undo()
    assert rows(spark, delta_table) == [(10,)]
    assert DeltaLog(delta_table.location).committed_cursor(None).state == {"last_value": 10}


def test_a_full_refresh_overtaken_by_a_cursor_commit_is_written_again_on_top(spark, delta_table, monkeypatch):
    """A full refresh whose counter another run took first writes nothing that time (BaseMoved);
    written again, it replaces the table and the cursor as a full refresh does."""
    delta_by_spark_only(monkeypatch)  # the Spark path's statement and its idempotent write
    spec = WriteSpec(table=delta_table, disposition="append")
    writer = DeltaWriter(spark)
    created = writer.write(spec, pa.Table.from_pylist([{"id": 0}]), commit=CommitInfo(state={"last_value": 0}, run_id="r0"))
    writer.write(spec, pa.Table.from_pylist([{"id": 1}]), commit=CommitInfo(state={"last_value": 1}, run_id="r1"),
                 guard=CursorGuard(created.snapshot_id, None))
    stale = DeltaLog(delta_table.location).app_version(delta_commit.APP_ID) - 1
    monkeypatch.setattr(delta_commit.DeltaCommit, "checked_count", lambda self: stale)
    with pytest.raises(BaseMoved):
        writer.write(spec, pa.Table.from_pylist([{"id": 10}]), commit=CommitInfo(state={"last_value": 10}, run_id="f"),
                     full_refresh=True)
    assert rows(spark, delta_table) == [(0,), (1,)]
    monkeypatch.undo()
    writer.write(spec, pa.Table.from_pylist([{"id": 10}]), commit=CommitInfo(state={"last_value": 10}, run_id="f"),
                 full_refresh=True)
    assert rows(spark, delta_table) == [(10,)]
    assert DeltaLog(delta_table.location).committed_cursor(None).state == {"last_value": 10}


def test_a_partition_transform_is_refused_naming_the_table(spark, delta_table):
    spec = WriteSpec(table=delta_table, disposition="append", partition_by=("days(updated_at)",))
    with pytest.raises(IncrementalConfigError, match=r"direct\..*partition_by \['days\(updated_at\)'\].*transform"):
        DeltaWriter(spark).write(spec, pa.Table.from_pylist([{"id": 1, "updated_at": datetime(2024, 1, 1)}]), commit=CommitInfo(state=None))
    assert DeltaLog(delta_table.location).current_version() is None


def test_a_type_change_is_refused_naming_column_and_types_and_writes_nothing(spark, delta_table):
    spec = WriteSpec(table=delta_table, disposition="append")
    writer = DeltaWriter(spark)
    writer.write(spec, pa.table({"id": pa.array([1], pa.int32())}), commit=CommitInfo(state={"v": 1}))
    version = DeltaLog(delta_table.location).current_version()
    with pytest.raises(DataShapeError, match=r"'id' is int in the table but bigint in the batch.*Cast the column"):
        writer.write(spec, pa.table({"id": pa.array([2], pa.int64())}), commit=CommitInfo(state={"v": 2}))
    assert DeltaLog(delta_table.location).current_version() == version
    assert rows(spark, delta_table) == [(1,)]


def test_a_restored_table_is_reloaded_from_its_own_cursor(spark, spark_warehouse, instance, tmp_path):
    """RESTORE takes the table back to an older version: the cursor in force is the one that
    version carries, so the next run reloads what the restore took away, once; delta-rs reads
    the same rows and cursor."""
    catalog = delta_catalog(spark_warehouse)
    namespace = "t_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    io = catalog.io_manager(namespace)
    source = [{"id": i, "updated_at": iso(i)} for i in range(1, 4)]

    @incremental_asset(primary_key="id", write_disposition="append", config_path=str(config))
    def restored(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    def run():
        return dg.materialize([restored], instance=instance, resources={"io_manager": io}, run_config=QUIET)

    run()
    table = io.table_name(dg.AssetKey("restored"))
    kept = DeltaLog(table.location).current_version()
    source.extend({"id": i, "updated_at": iso(i)} for i in range(4, 6))
    run()
    spark.sql(f"RESTORE TABLE {table.sql} TO VERSION AS OF {kept}")
    assert DeltaLog(table.location).committed_cursor(None).state["last_value"] == iso(3)
    run()
    assert sorted(r.id for r in spark.table(table.sql).collect()) == [1, 2, 3, 4, 5]
    assert_delta_rs_agrees(spark, table)


def test_delta_on_a_storage_other_than_a_folder_or_s3_is_refused_naming_the_key():
    from dagster_incremental.spark.delta.tables import DeltaTables

    with pytest.raises(IncrementalConfigError, match=r'warehouse = "gs://bucket/lake" with format = "delta".*s3://'):
        DeltaTables(dict, "gs://bucket/lake")


@pytest.mark.parametrize("warehouse", ["s3://bucket/lake", "s3a://bucket/lake/", "s3n://bucket/lake"])
def test_a_delta_warehouse_on_s3_is_read_by_s3a_with_the_sessions_s3a_keys(warehouse):
    from dagster_incremental.spark.delta.storage import S3Settings, s3_settings, use_s3_settings
    from dagster_incremental.spark.delta.tables import DeltaTables

    previous = s3_settings()
    conf = {"spark.hadoop.fs.s3a.endpoint": "minio.local:9000", "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.path.style.access": "true", "spark.hadoop.fs.s3a.access.key": "id"}
    try:
        table = DeltaTables(lambda: conf, warehouse).table("lake", "ns", ["orders"])
        assert table.location == "s3a://bucket/lake/ns/orders"
        assert s3_settings() == S3Settings(endpoint="http://minio.local:9000", path_style=True, access_key="id")
    finally:
        use_s3_settings(previous)


# -- Changes of a Delta upstream: any history, read in any steps, nets to the table's rows ------

UPSTREAM_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=3)),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("optimize"), st.none()),
        st.tuples(st.just("restore"), st.integers(0, 99)),
        st.tuples(st.just("overwrite"), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), max_size=3)),
        st.tuples(st.just("read"), st.none()),
    ),
    min_size=2, max_size=6,
)


@settings(max_examples=int(os.environ.get("DI_PROPERTY_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=UPSTREAM_OPS)
def test_a_delta_upstreams_changes_applied_in_any_steps_give_its_rows(spark, spark_warehouse, ops):
    """A downstream that applies each read's DELETEs and INSERTs to its copy holds exactly the
    upstream's rows at the version it read up to, whatever the upstream did in between
    (MERGE, DELETE, OPTIMIZE, RESTORE, overwrite) and wherever the reads fall."""
    from dagster_incremental.cursor.upstream import plan_read
    from dagster_incremental.spark.delta import changes as delta_changes
    from dagster_incremental.spark.upstream_changes import read_changes

    name = "c_" + uuid.uuid4().hex[:8]
    table = DeltaTableRef.at(TableRef("lake", ("direct",), name), f"{spark_warehouse}/delta/direct/{name}")
    spark.createDataFrame([(0, 0)], "id bigint, amount bigint").write.format("delta").save(table.location)
    copy: Counter = Counter()
    cursor = None
    for op, arg in [*ops, ("read", None)]:
        if op in ("upsert", "overwrite"):
            batch = spark.createDataFrame(list(dict(arg or []).items()) if op == "upsert" else list(arg), "id bigint, amount bigint")
            if op == "overwrite":
                batch.write.format("delta").mode("overwrite").save(table.location)
            else:
                batch.createOrReplaceTempView("batch")
                spark.sql(f"MERGE INTO {table.sql} t USING batch s ON t.id = s.id "
                          "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        elif op == "delete":
            spark.sql(f"DELETE FROM {table.sql} WHERE id = {arg}")
        elif op == "optimize":
            spark.sql(f"OPTIMIZE {table.sql}")
        elif op == "restore":
            versions = DeltaLog(table.location).versions()
            spark.sql(f"RESTORE TABLE {table.sql} TO VERSION AS OF {versions[arg % len(versions)]}")
        else:
            history, current = delta_changes.snapshot_history(spark, table)
            read = plan_read(table.display, history, current, cursor)
            for row in read_changes(delta_changes, spark, table, read).collect():
                copy[(row["id"], row["amount"])] += 1 if row["_change_type"] == "INSERT" else -1
            copy = +copy
            cursor = current
            at = spark.read.format("delta").option("versionAsOf", current).load(table.location)
            assert copy == Counter((r["id"], r["amount"]) for r in at.collect()), f"after {ops}"


ODD = ("order id", "a,b", "x(y)", "k=v")  # names Delta takes only with column mapping


@pytest.mark.parametrize("path", ["delta-rs", "spark"])
def test_columns_with_spaces_and_punctuation_load_change_and_evolve_under_column_mapping(
        spark, spark_warehouse, instance, tmp_path, monkeypatch, path):
    """Column names with a space or `,;{}()=` (Iceberg and delta-rs take them, sources have them):
    the table is created with Delta's column mapping (name mode), so the first load, an upsert
    of changes and a new odd column all land, with the cursor, and Spark and delta-rs read the
    same rows under the source's names."""
    if path == "spark":
        delta_by_spark_only(monkeypatch)
    catalog = delta_catalog(spark_warehouse)
    namespace = "t_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    io = catalog.io_manager(namespace)
    source = [{"id": i, **{c: f"{c}{i}" for c in ODD}, "updated_at": iso(i)} for i in range(1, 4)]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=str(config))
    def odd_names(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    def run() -> dict:
        result = dg.materialize([odd_names], instance=instance, resources={"io_manager": io}, run_config=QUIET)
        meta = result.asset_materializations_for_node("odd_names")[0].metadata
        return {k: meta[k].value for k in ("dagster/row_count", "dagster_incremental/rows_inserted",
                                            "dagster_incremental/rows_updated")}

    assert run() == {"dagster/row_count": 3, "dagster_incremental/rows_inserted": 3, "dagster_incremental/rows_updated": 0}
    table = io.table_name(dg.AssetKey("odd_names"))
    source[:] = [{"id": 2, **{c: "changed" for c in ODD}, "updated_at": iso(5)},
                 {"id": 4, **{c: f"{c}4" for c in ODD}, "updated_at": iso(6)}]
    assert run() == {"dagster/row_count": 4, "dagster_incremental/rows_inserted": 1, "dagster_incremental/rows_updated": 1}
    source[:] = [{"id": 5, "order id": "o5", "new (col)": "n5", "updated_at": iso(7)}]
    assert run() == {"dagster/row_count": 5, "dagster_incremental/rows_inserted": 1, "dagster_incremental/rows_updated": 0}

    frame = spark.table(table.sql)
    assert frame.columns == ["id", *ODD, "updated_at", "new (col)"]
    got = {r["id"]: (r["order id"], r["a,b"], r["x(y)"], r["k=v"], r["new (col)"]) for r in frame.collect()}
    assert got == {1: ("order id1", "a,b1", "x(y)1", "k=v1", None), 2: ("changed",) * 4 + (None,),
                   3: ("order id3", "a,b3", "x(y)3", "k=v3", None), 4: ("order id4", "a,b4", "x(y)4", "k=v4", None),
                   5: ("o5", None, None, None, "n5")}
    log = DeltaLog(table.location)
    assert log.committed_cursor(None).state["last_value"] == iso(7)
    assert [name for name, _ in log.schema(log.current_version())] == frame.columns
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {table.sql}").collect()}
    assert properties["delta.columnMapping.mode"] == "name"
    # delta-rs reads it through its query engine (deltalake 1.6's to_pyarrow_table does not map names)
    from deltalake import DeltaTable

    read = delta_rs_rows(table.location)
    assert {r["id"]: (r["order id"], r["a,b"], r["x(y)"], r["k=v"], r["new (col)"]) for r in read.to_pylist()} == got
    assert DeltaTable(table.location).history(1)[0]["userMetadata"] == \
        spark.sql(f"DESCRIBE HISTORY {table.sql} LIMIT 1").first().userMetadata


def test_a_changes_chain_and_a_full_refresh_of_a_table_with_odd_column_names(spark, spark_warehouse, instance, tmp_path):
    """An upstream whose columns need column mapping: its downstream reads only the changed rows
    (the change read picks the files, Spark maps the names), and a full refresh of the upstream
    (an overwrite of the mapped table) reaches the downstream as the rows it changed."""
    from dagster_incremental import Changes

    catalog = delta_catalog(spark_warehouse)
    namespace = "t_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    io = catalog.io_manager(namespace)
    source = [{"id": i, "order id": f"o{i}", "x(y)": i * 10, "updated_at": iso(i)} for i in range(1, 4)]
    received = []

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=str(config))
    def odd_orders(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=str(config))
    def odd_mirror(odd_orders: Changes):
        received.append((odd_orders.kind, sorted((r["id"], r["order id"], r["_change_type"]) for r in odd_orders.df.collect())))
        return odd_orders.upserts()

    def run(**refresh) -> None:
        run_config = {**QUIET, "ops": {"odd_orders": {"config": {"full_refresh": True}}}} if refresh else QUIET
        assert dg.materialize([odd_orders, odd_mirror], instance=instance, resources={"io_manager": io},
                              run_config=run_config).success

    def mirror() -> list[tuple]:
        return sorted((r["id"], r["order id"], r["x(y)"]) for r in spark.table(io.table_name(dg.AssetKey("odd_mirror")).sql).collect())

    run()
    source[:] = [{"id": 2, "order id": "o2b", "x(y)": 21, "updated_at": iso(5)}, {"id": 4, "order id": "o4", "x(y)": 40, "updated_at": iso(6)}]
    run()
    assert received[-1][0] == "changes"
    assert [(i, name) for i, name, kind in received[-1][1] if kind != "DELETE"] == [(2, "o2b"), (4, "o4")]
    assert mirror() == [(1, "o1", 10), (2, "o2b", 21), (3, "o3", 30), (4, "o4", 40)]
    source[:] = [{"id": 1, "order id": "o1", "x(y)": 11, "updated_at": iso(1)}, {"id": 2, "order id": "o2b", "x(y)": 21, "updated_at": iso(5)},
                 {"id": 3, "order id": "o3", "x(y)": 30, "updated_at": iso(3)}, {"id": 4, "order id": "o4", "x(y)": 40, "updated_at": iso(6)}]
    run(refresh=True)
    assert sorted((r["id"], r["x(y)"]) for r in spark.table(io.table_name(dg.AssetKey("odd_orders")).sql).collect()) == \
        [(1, 11), (2, 21), (3, 30), (4, 40)]
    assert mirror() == [(1, "o1", 11), (2, "o2b", 21), (3, "o3", 30), (4, "o4", 40)]


@pytest.mark.parametrize("disposition, strategy, window, expected", [
    ("merge", "delete-insert", False, {1: "o1", 2: "o2b", 3: "o3"}),
    ("merge", "insert-only", False, {1: "o1", 2: "o2", 3: "o3"}),
    ("merge", "scd2", False, {2: "o2b", 3: "o3"}),  # the active versions
    ("replace", None, False, {2: "o2b", 3: "o3"}),
    ("append", None, True, {1: "o1", 2: "o2b", 3: "o3"}),  # the window [2, 4) of x(y) replaced
], ids=["delete-insert", "insert-only", "scd2", "replace", "window-replace"])
def test_every_spark_write_of_a_table_with_odd_column_names(spark, delta_table, disposition, strategy, window, expected):
    """Each of Spark's Delta statements (the strategies' MERGE, INSERT OVERWRITE, the window
    replace on a column named `x(y)`) writes a column-mapped table under the batch's names."""
    from dagster_incremental.spark.write_spec import WindowReplace

    spec = WriteSpec(table=delta_table, disposition=disposition, strategy=strategy,
                     primary_key=("id",) if strategy else (), table_format="delta")
    writer = DeltaWriter(spark)

    def batch(*rows: tuple[int, str]) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, "order id": name, "x(y)": i} for i, name in rows])

    writer.write(spec, batch((1, "o1"), (2, "o2")), commit=CommitInfo(state={"last_value": 1}))
    writer.write(spec, batch((2, "o2b"), (3, "o3")), commit=CommitInfo(state={"last_value": 2}),
                 window=WindowReplace("x(y)", 2, 4) if window else None)
    frame = spark.table(delta_table.sql)
    if strategy == "scd2":
        assert frame.count() == 4  # o1 and o2 retired, o2b and o3 active
        frame = frame.where("_valid_to IS NULL")
    assert {r["id"]: r["order id"] for r in frame.collect()} == expected
    assert DeltaLog(delta_table.location).committed_cursor(None).state == {"last_value": 2}
    assert DeltaLog(delta_table.location).configuration(DeltaLog(delta_table.location).current_version())[
        "delta.columnMapping.mode"] == "name"


@pytest.mark.parametrize("full_refresh", [False, True], ids=["new-column", "full-refresh"])
def test_a_plain_table_is_switched_to_column_mapping_before_an_odd_column_arrives(spark, delta_table, full_refresh):
    """A table created with plain names, then a batch bringing `new col`: the table is switched to
    column mapping (its own commit, no rows changed) and the column added, its rows and cursor
    committed; the rows written before read as they were."""
    spec = WriteSpec(table=delta_table, disposition="append", table_format="delta")
    writer = DeltaWriter(spark)
    writer.write(spec, pa.Table.from_pylist([{"id": 1, "name": "a"}]), commit=CommitInfo(state={"last_value": 1}))
    assert "delta.columnMapping.mode" not in DeltaLog(delta_table.location).configuration(0)
    writer.write(spec, pa.Table.from_pylist([{"id": 2, "name": "b", "new col": "n"}]),
                 commit=CommitInfo(state={"last_value": 2}), full_refresh=full_refresh)
    got = sorted((r["id"], r["name"], r["new col"]) for r in spark.table(delta_table.sql).collect())
    assert got == ([(2, "b", "n")] if full_refresh else [(1, "a", None), (2, "b", "n")])
    log = DeltaLog(delta_table.location)
    assert log.configuration(log.current_version())["delta.columnMapping.mode"] == "name"
    assert log.committed_cursor(None).state == {"last_value": 2}
