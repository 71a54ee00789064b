"""Assets reading an upstream's changes: what the function received, the cursor, the table.

A chain source -> orders (written by the library) -> downstream asset(s) taking `orders: Changes`.
Each test records the rows the downstream function received, so "only the changed rows were read"
is asserted on the input itself, not only on the downstream table.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest
from pyspark.sql import functions as F

from dagster_incremental import Changes, Incremental, changes_of, incremental, incremental_asset
from attack_support import failure_text
from catalogs import EACH_FORMAT, HADOOP_ONLY, LOCAL_LAKE_AND_DELTA, assert_other_readers_agree

pytestmark = [pytest.mark.spark]

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run(assets, instance, io, full_refresh: tuple[str, ...] = ()) -> dg.ExecuteInProcessResult:
    config = {**QUIET, "ops": {name: {"config": {"full_refresh": True}} for name in full_refresh}}
    return dg.materialize(assets, instance=instance, resources={"io_manager": io}, run_config=config,
                          raise_on_error=False)


def rows(frame, *columns) -> list[tuple]:
    return sorted(tuple(r) for r in frame.select(*columns).collect())


def table(spark, io, name: str, *columns) -> list[tuple]:
    return rows(spark.table(io.table_name(dg.AssetKey(name)).sql), *columns)


def state_of(result, name: str) -> dict:
    mats = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey(name)]
    data = mats[-1].materialization.metadata["dagster_incremental/state"].data
    return json.loads(data) if isinstance(data, str) else data


def snapshot_now(spark, io, name: str) -> int:
    table_ref = io.table_name(dg.AssetKey(name))
    if table_ref.location is not None:  # a Delta table: its version
        from dagster_incremental.spark.delta.log import DeltaLog

        return DeltaLog(table_ref.location).current_version()
    return spark.sql(f"SELECT snapshot_id FROM {table_ref.sql}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]


@EACH_FORMAT
def test_append_chain_reads_only_the_new_rows_and_commits_the_upstream_snapshot(spark, instance, io_manager, config_file):
    source = [{"id": i, "amount": 10 * i, "seq": i} for i in range(1, 4)]
    received = []

    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(config_path=config_file)
    def orders_enriched(orders: Changes):
        received.append((orders.kind, rows(orders.df, "id", "_change_type")))
        return orders.upserts().withColumn("amount_eur", F.col("amount") * 2)

    first = run([orders, orders_enriched], instance, io_manager)
    assert first.success
    assert received[-1] == ("full", [(1, "INSERT"), (2, "INSERT"), (3, "INSERT")])
    upstream_snapshot = snapshot_now(spark, io_manager, "orders")
    state = state_of(first, "orders_enriched")
    assert state["last_value"] == upstream_snapshot
    assert state["upstream"]["orders"]["snapshot_id"] == upstream_snapshot
    committed = io_manager.committed_state(dg.AssetKey("orders_enriched"))
    assert committed.state["upstream"] == state["upstream"]  # in the same commit as the rows

    source.extend({"id": i, "amount": 10 * i, "seq": i} for i in (4, 5))
    second = run([orders, orders_enriched], instance, io_manager)
    assert second.success
    assert received[-1] == ("append", [(4, "INSERT"), (5, "INSERT")])
    assert table(spark, io_manager, "orders_enriched", "id", "amount_eur") == [(i, 20 * i) for i in range(1, 6)]
    assert state_of(second, "orders_enriched")["last_value"] == snapshot_now(spark, io_manager, "orders")

    third = run([orders_enriched], instance, io_manager)  # the upstream did not change
    assert third.success
    assert received[-1] == ("none", [])
    assert table(spark, io_manager, "orders_enriched", "id") == [(i,) for i in range(1, 6)]


@pytest.mark.parametrize("catalog", ["hadoop", "rest", "delta", "delta-s3"], indirect=True)
def test_merge_upstream_gives_changed_and_deleted_rows_with_their_kind(spark, instance, io_manager, config_file):
    source = {i: {"id": i, "amount": 10 * i, "deleted": False} for i in range(1, 6)}
    received = []

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       columns={"deleted": {"hard_delete": True}}, config_path=config_file)
    def orders():
        return [dict(r) for r in source.values()]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       columns={"deleted": {"hard_delete": True}}, config_path=config_file)
    def orders_enriched(orders: Changes):
        received.append((orders.kind, rows(orders.df, "id", "amount", "_change_type")))
        kept = orders.upserts().select("id", (F.col("amount") + 1).alias("amount_plus"), "deleted")
        gone = orders.deletes("id").select("id", F.lit(None).cast("long").alias("amount_plus"), F.lit(True).alias("deleted"))
        return kept.unionByName(gone)

    assert run([orders, orders_enriched], instance, io_manager).success
    source.clear()
    source.update({2: {"id": 2, "amount": 99, "deleted": False}, 4: {"id": 4, "amount": 40, "deleted": True},
                   6: {"id": 6, "amount": 60, "deleted": False}})
    assert run([orders, orders_enriched], instance, io_manager).success
    assert received[-1] == ("changes", [(2, 20, "DELETE"), (2, 99, "INSERT"), (4, 40, "DELETE"), (6, 60, "INSERT")])
    assert table(spark, io_manager, "orders_enriched", "id", "amount_plus") == [(1, 11), (2, 100), (3, 31), (5, 51), (6, 61)]
    assert table(spark, io_manager, "orders", "id", "amount") == [(1, 10), (2, 99), (3, 30), (5, 50), (6, 60)]


@HADOOP_ONLY
def test_rewritten_upstream_fails_clearly_until_a_full_refresh(spark, instance, io_manager, config_file):
    source = [{"id": i, "seq": i} for i in range(1, 4)]
    received = []

    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(config_path=config_file)
    def copy(upstream: Changes = changes_of("orders")):
        received.append((upstream.kind, rows(upstream.df, "id")))
        return upstream.upserts()

    assert run([orders, copy], instance, io_manager).success
    before = state_of(run([copy], instance, io_manager), "copy")
    source[:] = [{"id": 7, "seq": 7}]
    assert run([orders], instance, io_manager, full_refresh=("orders",)).success  # the table is replaced

    failed = run([copy], instance, io_manager)
    assert not failed.success
    message = failure_text(failed)
    assert f"snapshot {before['last_value']}" in message and "full refresh" in message
    assert table(spark, io_manager, "copy", "id") == [(1,), (2,), (3,)]  # untouched
    assert io_manager.committed_state(dg.AssetKey("copy")).state["upstream"] == before["upstream"]

    refreshed = run([copy], instance, io_manager, full_refresh=("copy",))
    assert refreshed.success
    assert received[-1] == ("full", [(7,)])
    assert table(spark, io_manager, "copy", "id") == [(7,)]
    assert state_of(refreshed, "copy")["last_value"] == snapshot_now(spark, io_manager, "orders")


@HADOOP_ONLY
def test_three_asset_chain_passes_one_change_through(spark, instance, io_manager, config_file):
    source = [{"id": i, "day": f"2024-01-0{1 + i % 3}", "amount": i, "seq": i} for i in range(1, 10)]
    received = {"enriched": [], "daily": []}

    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(config_path=config_file)
    def orders_enriched(orders: Changes):
        received["enriched"].append(rows(orders.df, "id"))
        return orders.upserts().withColumn("amount2", F.col("amount") * 2)

    @incremental_asset(primary_key="day", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=config_file)
    def revenue_by_day(context: dg.AssetExecutionContext, orders_enriched: Changes):
        received["daily"].append(rows(orders_enriched.df, "id"))
        days = orders_enriched.upserts().select("day").distinct()
        spark_ = orders_enriched.df.sparkSession
        whole = spark_.table(context.resources.io_manager.table_name(dg.AssetKey("orders_enriched")).sql)
        return whole.join(days, "day").groupBy("day").agg(F.sum("amount2").alias("revenue"))

    chain = [orders, orders_enriched, revenue_by_day]
    assert run(chain, instance, io_manager).success
    source.append({"id": 10, "day": "2024-01-02", "amount": 10, "seq": 10})
    assert run(chain, instance, io_manager).success
    assert received["enriched"][-1] == [(10,)] and received["daily"][-1] == [(10,)]
    expected = {}
    for r in source:
        expected[r["day"]] = expected.get(r["day"], 0) + 2 * r["amount"]
    assert table(spark, io_manager, "revenue_by_day", "day", "revenue") == sorted(expected.items())


@pytest.mark.parametrize("new_rows", [10, 2], ids=["past-the-bound-spark-writes", "collected-written-locally"])
@HADOOP_ONLY
def test_a_change_run_computes_the_functions_spark_output_once(spark, instance, io_manager, config_file,
                                                               monkeypatch, tmp_path, new_rows):
    """A function's Spark output is collected for the local write only when the upstream commits
    read wrote few rows (their snapshot summaries say how many; the bound is 5 here); a larger
    change goes to Spark's write directly, so the output is computed once, not collected in vain
    first. The function's own UDF writes a line per row it computes (a file, not an accumulator:
    a task a limit stops early never reports its accumulator updates)."""
    from dagster_incremental.dagster import upstream

    monkeypatch.setattr(upstream, "SMALL_CHANGE_ROWS", 5)
    source = [{"id": i, "amount": i, "seq": i} for i in range(1, 4)]
    log = tmp_path / "computed.txt"
    log.touch()

    def seen(amount):
        with open(log, "a") as out:
            out.write(f"{amount}\n")
        return amount

    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(config_path=config_file, write_disposition="append")
    def doubled(orders: Changes):
        return orders.upserts().select("id", F.udf(seen, "long")("amount").alias("amount"))

    assert run([orders, doubled], instance, io_manager).success
    before = len(log.read_text().splitlines())
    source += [{"id": i, "amount": i, "seq": i} for i in range(4, 4 + new_rows)]
    result = run([orders, doubled], instance, io_manager)
    assert result.success, failure_text(result)
    assert sorted(map(int, log.read_text().splitlines()[before:])) == list(range(4, 4 + new_rows))  # each once
    assert table(spark, io_manager, "doubled", "id", "amount") == [(i, i) for i in range(1, 4 + new_rows)]


DELTA = pytest.mark.parametrize("catalog", ["delta"], indirect=True)


@DELTA
def test_a_delta_upstream_read_across_optimize_restore_and_overwrite_gives_the_net_change(spark, catalog, instance, io_manager, config_file):
    """Delta's log lists the files live at each version: the change between two versions is
    exact whatever came between (a compaction moves rows and is no change; a RESTORE and a full
    refresh are read as the rows they changed), so the chain never needs a full refresh for them."""
    source = {i: {"id": i, "amount": i} for i in range(1, 5)}
    received = []

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=config_file)
    def orders():
        return [dict(r) for r in source.values()]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       columns={"gone": {"hard_delete": True}}, config_path=config_file)
    def mirror(orders: Changes):
        received.append((orders.kind, rows(orders.df, "id", "amount", "_change_type")))
        return orders.upserts().withColumn("gone", F.lit(False)).unionByName(
            orders.deletes("id").withColumn("gone", F.lit(True)))

    assert run([orders, mirror], instance, io_manager).success
    path = io_manager.table_name(dg.AssetKey("orders")).sql
    before = snapshot_now(spark, io_manager, "orders")
    source[2] = {"id": 2, "amount": 20}
    assert run([orders], instance, io_manager).success
    spark.sql(f"OPTIMIZE {path}")
    assert run([mirror], instance, io_manager).success
    assert received[-1] == ("changes", [(2, 2, "DELETE"), (2, 20, "INSERT")])  # OPTIMIZE's copies net out

    spark.sql(f"RESTORE TABLE {path} TO VERSION AS OF {before}")  # amount 20 is rolled back
    assert run([mirror], instance, io_manager).success
    assert received[-1] == ("changes", [(2, 2, "INSERT"), (2, 20, "DELETE")])

    source.clear()
    source[9] = {"id": 9, "amount": 9}
    assert run([orders], instance, io_manager, full_refresh=("orders",)).success
    mirrored = run([mirror], instance, io_manager)
    assert mirrored.success, failure_text(mirrored)
    assert table(spark, io_manager, "mirror", "id", "amount") == table(spark, io_manager, "orders", "id", "amount") == [(9, 9)]
    upstream = state_of(mirrored, "mirror")["upstream"]["orders"]
    assert upstream["snapshot_id"] == snapshot_now(spark, io_manager, "orders") and upstream["table_id"]
    assert_other_readers_agree(catalog, spark, io_manager.table_name(dg.AssetKey("mirror")))


@DELTA
def test_a_delta_upstream_created_again_or_vacuumed_fails_until_a_full_refresh(spark, instance, io_manager, config_file):
    import shutil

    source = [{"id": i, "seq": i} for i in range(1, 4)]

    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(config_path=config_file)
    def copy(upstream: Changes = changes_of("orders")):
        return upstream.upserts()

    assert run([orders, copy], instance, io_manager).success
    before = io_manager.committed_state(dg.AssetKey("copy")).state["upstream"]
    upstream_table = io_manager.table_name(dg.AssetKey("orders"))
    shutil.rmtree(upstream_table.location)  # the folder deleted, then written again: versions from 0
    source[:] = [{"id": 7, "seq": 7}, {"id": 8, "seq": 8}]
    assert run([orders], instance, io_manager, full_refresh=("orders",)).success  # its version 0, as the cursor's
    assert snapshot_now(spark, io_manager, "orders") == before["upstream"]["snapshot_id"]
    failed = run([copy], instance, io_manager)
    assert not failed.success
    assert "was created again" in failure_text(failed) and "full refresh" in failure_text(failed)
    assert table(spark, io_manager, "copy", "id") == [(1,), (2,), (3,)]
    assert io_manager.committed_state(dg.AssetKey("copy")).state["upstream"] == before

    assert run([copy], instance, io_manager, full_refresh=("copy",)).success
    source[:] = [{"id": 9, "seq": 9}]
    assert run([orders], instance, io_manager, full_refresh=("orders",)).success  # version 0's files leave the table
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM {upstream_table.sql} RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    vacuumed = run([copy], instance, io_manager)
    assert not vacuumed.success
    assert "VACUUM deleted data files" in failure_text(vacuumed)
    assert table(spark, io_manager, "copy", "id") == [(7,), (8,)]


def upstream_read(result, name: str) -> dict:
    """The human-readable metadata of what a Changes asset read (its cursor is a bare snapshot id)."""
    mats = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey(name)]
    return mats[-1].materialization.metadata["dagster_incremental/upstream"].data


def figures(result, name: str) -> tuple[int, int, int]:
    mats = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey(name)]
    meta = mats[-1].materialization.metadata
    return tuple(meta[f"dagster_incremental/rows_{k}"].value for k in ("inserted", "updated", "deleted"))


@EACH_FORMAT
def test_a_chain_run_with_nothing_new_upstream_commits_nothing_and_keeps_every_cursor(spark, instance, io_manager,
                                                                                       config_file):
    """The example's chain (upsert with a hard-delete hint, then a per-day upsert reading the whole
    upstream table): a second run with no new source rows leaves both tables' snapshots and both
    cursors where they were, and reports 0 rows."""
    source = [{"id": i, "day": f"2024-01-0{1 + i % 3}", "amount": i, "seq": i} for i in range(1, 10)]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       columns={"is_deleted": {"hard_delete": True}}, config_path=config_file)
    def orders_enriched(orders: Changes):
        changed = orders.upserts().unionByName(orders.deletes("id").withColumn("is_deleted", F.lit(True)),
                                               allowMissingColumns=True)
        return changed.select("id", "day", "is_deleted", (F.col("amount") * 2).alias("amount2"))

    @incremental_asset(primary_key="day", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=config_file)
    def revenue_by_day(orders_enriched: Changes):
        days = orders_enriched.df.select("day").distinct()
        totals = orders_enriched.table.join(days, "day").groupBy("day").agg(F.sum("amount2").alias("revenue"))
        return days.join(totals, "day", "left").fillna(0, ["revenue"])

    chain = [orders, orders_enriched, revenue_by_day]
    first = run(chain, instance, io_manager)
    assert first.success
    read = upstream_read(first, "orders_enriched")["orders"]
    # the id as text: the UI would round a 64-bit number
    assert read["snapshot_id"] == str(snapshot_now(spark, io_manager, "orders")) == str(state_of(first, "orders_enriched")["last_value"])
    assert (read["read"], read["rows_read"]) == ("full", 9) and read["snapshot_committed_at"].endswith("Z")
    before = {name: snapshot_now(spark, io_manager, name) for name in ("orders_enriched", "revenue_by_day")}
    cursors = {name: io_manager.committed_state(dg.AssetKey(name)).state for name in before}

    again = run(chain, instance, io_manager)
    assert again.success
    assert {name: snapshot_now(spark, io_manager, name) for name in before} == before
    assert {name: io_manager.committed_state(dg.AssetKey(name)).state for name in before} == cursors
    for name in before:
        assert state_of(again, name) == cursors[name]  # the UI's cursor did not move either
        assert figures(again, name) == (0, 0, 0)
    assert {k: v for k, v in upstream_read(again, "revenue_by_day")["orders_enriched"].items()
            if k != "snapshot_committed_at"} == {"table": io_manager.table_name(dg.AssetKey("orders_enriched")).display,
                                                "snapshot_id": str(before["orders_enriched"]), "read": "nothing new",
                                                "rows_read": 0}
