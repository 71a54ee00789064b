"""Nothing lost, nothing corrupted: full refreshes and tables that lost their history.

A full refresh must give exactly the table a first run gives on an empty table (scd2 keeps its
shape, merges deduplicate and drop tombstones, an open partition restarts its cursor). A table
that was dropped, deleted or rolled back is the truth about what was loaded: the run reloads
what the table lost, or fails (unpartitioned, table gone) instead of silently skipping rows.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset
from attack_support import failure_text

pytestmark = pytest.mark.spark

QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
SCD2 = {"disposition": "merge", "strategy": "scd2"}
REFRESH = {"config": {"full_refresh": True}}


def iso(day: int) -> str:
    return (datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=day - 1)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def config_file(tmp_path, spark_warehouse, namespace):
    """The Hadoop warehouse only (this module's rollbacks and drops act on its files)."""
    path = tmp_path / "config.toml"
    path.write_text(f'[destination]\ncatalog = "lake"\nnamespace = "{namespace}"\nwarehouse = "{spark_warehouse}"\n')
    return str(path)


@pytest.fixture
def io_manager(spark, spark_warehouse, namespace):
    return SparkTableIOManager(catalog="lake", namespace=namespace, warehouse=spark_warehouse, master="local[2]")


def run(asset, instance, io, ops: dict | None = None, **kwargs) -> dg.ExecuteInProcessResult:
    config = {**QUIET, "ops": {asset.op.name: ops}} if ops else QUIET
    return dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=config, **kwargs)


def table_of(io: SparkTableIOManager, name: str) -> str:
    return io.table_name(dg.AssetKey(name)).sql


def rows(spark, io, name: str, order_by: str = "id") -> list[dict]:
    return [r.asDict() for r in spark.table(table_of(io, name)).orderBy(order_by).collect()]


def state(result: dg.ExecuteInProcessResult, partition: str | None = None) -> dict:
    mats = [m.materialization for m in result.get_asset_materialization_events()]
    mats = [m for m in mats if partition is None or m.partition == partition]
    return mats[-1].metadata["dagster_incremental/state"].value


def warnings(instance, result: dg.ExecuteInProcessResult) -> list[str]:
    return [e.message for e in instance.all_logs(result.run_id) if e.level >= 30]


def current_snapshot_id(io, name: str) -> int:
    snapshot_id = io.tables.snapshot(io.table_name(dg.AssetKey(name)))
    assert snapshot_id is not None
    return snapshot_id


# -- full refresh: the table a first run gives -------------------------------------------------------


def test_full_refresh_of_scd2_keeps_its_history_shape(spark, instance, io_manager, config_file):
    source = {i: {"id": i, "v": "a", "updated_at": iso(i)} for i in (1, 2, 3)}

    def scd2_asset(name: str):
        @incremental_asset(name=name, primary_key="id", merge_key="id", write_disposition=SCD2, config_path=config_file)
        def body(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
            return list(source.values())

        return body

    dims = scd2_asset("dims")
    run(dims, instance, io_manager)
    source[2] = {"id": 2, "v": "b", "updated_at": iso(4)}
    run(dims, instance, io_manager)
    assert len(rows(spark, io_manager, "dims")) == 4  # id 2 has two versions

    refreshed = run(dims, instance, io_manager, REFRESH)
    assert state(refreshed)["last_value"] == iso(4)
    first = scd2_asset("dims_first")  # the same asset's first run on an empty table
    run(first, instance, io_manager)
    table, fresh = rows(spark, io_manager, "dims"), rows(spark, io_manager, "dims_first")
    assert spark.table(table_of(io_manager, "dims")).columns == spark.table(table_of(io_manager, "dims_first")).columns
    assert [{k: v for k, v in r.items() if k != "_valid_from"} for r in table] == [
        {k: v for k, v in r.items() if k != "_valid_from"} for r in fresh
    ]
    assert all(r["_valid_from"] is not None and r["_valid_to"] is None and r["_row_hash"] for r in table)

    source[3] = {"id": 3, "v": "c", "updated_at": iso(5)}
    run(dims, instance, io_manager)
    after = rows(spark, io_manager, "dims", "_valid_from")
    assert all(r["_valid_from"] is not None for r in after)
    versions = {i: [r for r in after if r["id"] == i] for i in (1, 2, 3)}
    assert [len(versions[i]) for i in (1, 2)] == [1, 1]  # unchanged keys: no new version
    assert [(r["v"], r["_valid_to"] is None) for r in versions[3]] == [("a", False), ("c", True)]


@pytest.mark.parametrize("strategy", ["upsert", "delete-insert"])
def test_full_refresh_of_a_merge_deduplicates_and_drops_tombstones(spark, instance, io_manager, config_file, strategy):
    source = [{"id": 1, "v": "a", "deleted": False, "updated_at": iso(1)}]

    def merge_asset(name: str):
        @incremental_asset(
            name=name, primary_key="id", write_disposition={"disposition": "merge", "strategy": strategy},
            columns={"deleted": {"hard_delete": True}}, config_path=config_file,
        )
        def body(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
            return list(source)

        return body

    orders = merge_asset("orders")
    run(orders, instance, io_manager)
    source[:] = [
        {"id": 1, "v": "a", "deleted": False, "updated_at": iso(1)},
        {"id": 2, "v": "old", "deleted": False, "updated_at": iso(2)},
        {"id": 2, "v": "new", "deleted": False, "updated_at": iso(3)},  # the newest cursor wins
        {"id": 3, "v": "gone", "deleted": True, "updated_at": iso(3)},  # a tombstone, never a row
    ]
    refreshed = run(orders, instance, io_manager, REFRESH)
    run(merge_asset("orders_first"), instance, io_manager)
    expected = [{"id": 1, "v": "a"}, {"id": 2, "v": "new"}]
    for name in ("orders", "orders_first"):
        assert [{"id": r["id"], "v": r["v"]} for r in rows(spark, io_manager, name)] == expected, name
    assert state(refreshed)["last_value"] == iso(3)


def _open_day_asset(config_file: str, source: list[dict], name: str):
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    parts = dg.DailyPartitionsDefinition(start_date=(today - timedelta(days=2)).strftime("%Y-%m-%d"), end_offset=1)

    @incremental_asset(name=name, partitions_def=parts, write_disposition="append", config_path=config_file)
    def body(event_time: Incremental = incremental("event_time")):
        return [r for r in source if event_time.start_value <= datetime.fromisoformat(r["event_time"]) < event_time.end_value]

    return body, today.strftime("%Y-%m-%d"), today


def test_full_refresh_of_the_open_partition_restarts_its_cursor(spark, instance, io_manager, config_file):
    source: list[dict] = []
    events, key, today = _open_day_asset(config_file, source, "events_fr")
    source.extend({"id": i, "event_time": (today + timedelta(minutes=i)).isoformat()} for i in (1, 2))
    run(events, instance, io_manager, partition_key=key)
    source.append({"id": 3, "event_time": (today + timedelta(minutes=3)).isoformat()})
    refreshed = run(events, instance, io_manager, REFRESH, partition_key=key)
    source.append({"id": 4, "event_time": (today + timedelta(minutes=4)).isoformat()})
    run(events, instance, io_manager, partition_key=key)
    assert [r["id"] for r in rows(spark, io_manager, "events_fr")] == [1, 2, 3, 4]  # id 3 once
    assert state(refreshed, key)["last_value"].startswith((today + timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M"))


# -- the table is the truth about what was loaded ------------------------------------------------------


def _append_asset(config_file: str, source: list[dict], name: str = "orders"):
    @incremental_asset(name=name, write_disposition="append", config_path=config_file)
    def body(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    return body


@pytest.mark.parametrize("how", ["drop table", "delete folder"])
def test_a_lost_table_fails_the_run_until_a_full_refresh(spark, instance, io_manager, config_file, spark_warehouse, namespace, how):
    source = [{"id": i, "updated_at": iso(i + 1)} for i in range(3)]
    orders = _append_asset(config_file, source)
    first = run(orders, instance, io_manager)
    if how == "drop table":
        spark.sql(f"DROP TABLE {table_of(io_manager, 'orders')}")
    else:
        shutil.rmtree(f"{spark_warehouse}/{namespace}/orders")
    source.append({"id": 3, "updated_at": iso(4)})

    failed = run(orders, instance, io_manager, raise_on_error=False)
    assert not failed.success
    message = failure_text(failed)
    for part in ("orders", f"lake.{namespace}.orders", iso(3), first.run_id,
                 "{ops: {orders: {config: {full_refresh: true}}}}", "[destination]"):
        assert part in message, part
    assert io_manager.tables.snapshot(io_manager.table_name(dg.AssetKey("orders"))) is None  # nothing written

    refreshed = run(orders, instance, io_manager, REFRESH)
    assert [r["id"] for r in rows(spark, io_manager, "orders")] == [0, 1, 2, 3]
    assert state(refreshed)["last_value"] == iso(4)
    assert run(orders, instance, io_manager).success  # and incremental runs carry on


def test_a_rolled_back_table_is_reloaded_from_its_own_cursor(spark, instance, io_manager, config_file, namespace):
    source = [{"id": i, "updated_at": iso(i + 1)} for i in range(3)]
    orders = _append_asset(config_file, source)
    run(orders, instance, io_manager)
    noop = run(orders, instance, io_manager)  # nothing new: no commit, the same cursor
    assert warnings(instance, noop) == []
    kept = current_snapshot_id(io_manager, "orders")  # holds ids 0-2 and their cursor
    source.extend({"id": i, "updated_at": iso(i + 1)} for i in (3, 4))
    run(orders, instance, io_manager)
    spark.sql(f"CALL lake.system.rollback_to_snapshot('{namespace}.orders', {kept})")  # ids 3, 4 are gone
    source.append({"id": 5, "updated_at": iso(6)})

    healed = run(orders, instance, io_manager)
    assert [r["id"] for r in rows(spark, io_manager, "orders")] == [0, 1, 2, 3, 4, 5]
    assert state(healed)["last_value"] == iso(6)
    (warning,) = [w for w in warnings(instance, healed) if "rolled back" in w]
    for part in ("orders", iso(3), str(kept), iso(5)):
        assert part in warning, part
    assert warnings(instance, run(orders, instance, io_manager)) == []  # agreed again: no warning

    # a cursor a user reports by hand (no run) after the table's last commit still wins
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key="orders",
            metadata={"dagster_incremental/state": {"last_value": iso(5)}, "dagster_incremental/mode": "incremental"},
        )
    )
    rewound = run(orders, instance, io_manager)
    assert state(rewound)["start_value"] == iso(5) and warnings(instance, rewound) == []
    assert [r["id"] for r in rows(spark, io_manager, "orders")] == [0, 1, 2, 3, 4, 5, 5]  # day 6 read again


def test_compaction_and_snapshot_expiry_keep_the_cursor_in_force(spark, instance, io_manager, config_file, namespace):
    """Maintenance may expire every snapshot that carried the cursor: the table still has its rows,
    so the run resumes from Dagster's cursor (and says why) instead of failing or reloading."""
    source = [{"id": i, "updated_at": iso(i + 1)} for i in range(3)]
    orders = _append_asset(config_file, source)
    run(orders, instance, io_manager)
    source.append({"id": 3, "updated_at": iso(4)})
    run(orders, instance, io_manager)
    name = f"{namespace}.orders"
    spark.sql(f"CALL lake.system.rewrite_data_files(table => '{name}', options => map('rewrite-all', 'true'))")
    newest = spark.sql(f"SELECT max(committed_at) AS t FROM {table_of(io_manager, 'orders')}.snapshots").first().t
    spark.sql(f"CALL lake.system.expire_snapshots(table => '{name}', older_than => TIMESTAMP '{newest}', retain_last => 1)")
    assert io_manager.committed_state(dg.AssetKey("orders")) is None  # no snapshot carries a cursor now
    source.append({"id": 4, "updated_at": iso(5)})

    resumed = run(orders, instance, io_manager)
    assert [r["id"] for r in rows(spark, io_manager, "orders")] == [0, 1, 2, 3, 4]
    assert state(resumed)["last_value"] == iso(5)
    assert any("expired" in w for w in warnings(instance, resumed))
    assert warnings(instance, run(orders, instance, io_manager)) == []  # the new commit carries it again


def test_an_open_partition_whose_table_was_dropped_reloads_its_window(spark, instance, io_manager, config_file):
    source: list[dict] = []
    events, key, today = _open_day_asset(config_file, source, "events_drop")
    source.extend({"id": i, "event_time": (today + timedelta(minutes=i)).isoformat()} for i in (1, 2))
    run(events, instance, io_manager, partition_key=key)
    spark.sql(f"DROP TABLE {table_of(io_manager, 'events_drop')}")
    source.append({"id": 3, "event_time": (today + timedelta(minutes=3)).isoformat()})

    reloaded = run(events, instance, io_manager, partition_key=key)
    assert [r["id"] for r in rows(spark, io_manager, "events_drop")] == [1, 2, 3]
    assert any("events_drop" in w and key in w and "reload" in w for w in warnings(instance, reloaded))
    again = run(events, instance, io_manager, partition_key=key)
    assert warnings(instance, again) == [] and len(rows(spark, io_manager, "events_drop")) == 3


def test_runs_over_an_empty_source_without_a_table_carry_on(spark, instance, io_manager, config_file):
    source: list[dict] = []
    orders = _append_asset(config_file, source, "orders_empty")
    assert run(orders, instance, io_manager).success  # no rows: no table, a cursor in Dagster
    assert run(orders, instance, io_manager).success  # no table, and nothing was lost: no failure
    source.append({"id": 1, "updated_at": iso(2)})
    assert state(run(orders, instance, io_manager))["last_value"] == iso(2)
    assert [r["id"] for r in rows(spark, io_manager, "orders_empty")] == [1]


def test_row_count_after_a_users_compaction_is_the_tables(spark, instance, io_manager, config_file, namespace):
    """A user's rewrite_data_files on a merge-on-read table leaves position deletes pointing at
    removed files in the summary's total: the reported row count must still be the table's."""
    source = [{"id": i, "v": "a", "updated_at": iso(1)} for i in range(4)]

    @incremental_asset(name="users", primary_key="id", write_disposition="merge", config_path=config_file)
    def users(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    def reported(result: dg.ExecuteInProcessResult) -> int:
        return result.get_asset_materialization_events()[-1].materialization.metadata["dagster/row_count"].value

    def count() -> int:
        return spark.table(table_of(io_manager, "users")).count()

    assert reported(run(users, instance, io_manager)) == count() == 4
    for day, ids in ((2, (0, 1)), (3, (2,))):
        source[:] = [{"id": i, "v": f"d{day}", "updated_at": iso(day)} for i in ids]
        assert reported(run(users, instance, io_manager)) == count() == 4
    spark.sql(f"CALL lake.system.rewrite_data_files(table => '{namespace}.users', options => map('min-input-files', '1'))")
    source[:] = [{"id": 3, "v": "d4", "updated_at": iso(4)}, {"id": 4, "v": "new", "updated_at": iso(4)}]
    assert reported(run(users, instance, io_manager)) == count() == 5
    source[:] = []
    assert reported(run(users, instance, io_manager)) == count() == 5  # the no-op run
