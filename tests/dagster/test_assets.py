"""@incremental_asset end to end, in process: cursor in metadata, backfills, healing, sensors.

Each test builds its own asset over an in-memory source and a persistent (temporary) Dagster
instance, runs it with `dg.materialize` and checks what a user sees: the table, the cursor and
the materialization metadata.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from dagster_incremental import Incremental, build_incremental_sensor, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError
from attack_support import failure_text
from catalogs import HADOOP_ONLY, ICEBERG_ONLY

pytestmark = pytest.mark.spark
# On one catalog kind per format (tests/conftest.py ONE_KIND_PER_FORMAT; DI_EVERY_KIND=1: on
# every kind): what commits, heals, refuses a stale writer, whose commits the fault, race and
# exactly-once tests prove on every kind; the two marked `every_kind` (no other module commits
# them on each kind) on all; planning, sensors, messages, metadata on the Hadoop catalog only
# (HADOOP_ONLY); Iceberg's delete-file compaction on the Iceberg catalogs (ICEBERG_ONLY).

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def iso(day: int, hour: int = 0) -> str:
    return (datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=day - 1, hours=hour)).isoformat().replace("+00:00", "Z")


def table_rows(spark, io, key: str, order_by: str = "id") -> list[dict]:
    frame = spark.table(io.table_name(dg.AssetKey(key)).sql).orderBy(order_by)
    return [row.asDict() for row in frame.collect()]


def materialization(result: dg.ExecuteInProcessResult, partition: str | None = None):
    mats = result.get_asset_materialization_events()
    if partition is not None:
        mats = [m for m in mats if m.materialization.partition == partition]
    assert mats, "no materialization recorded"
    return mats[-1].materialization.metadata


def run(asset, instance, io, **kwargs) -> dg.ExecuteInProcessResult:
    return dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=kwargs.pop("run_config", QUIET), **kwargs)


def test_cursor_advances_across_runs_and_metadata_shows_it(spark, instance, io_manager, config_file, catalog):
    source = [{"id": i, "amount": i * 10, "updated_at": iso(i)} for i in range(1, 4)]
    seen_starts = []

    @incremental_asset(primary_key="id", write_disposition="append", config_path=config_file)
    def orders_a(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        seen_starts.append(updated_at.start_value)
        yield from source

    first = run(orders_a, instance, io_manager)
    meta = materialization(first)
    assert meta["dagster_incremental/mode"].value == "incremental"
    assert meta["dagster_incremental/state"].value["last_value"] == iso(3)
    assert meta["dagster_incremental/rows_inserted"].value == 3
    assert meta["dagster/row_count"].value == 3
    assert meta["dagster/table_name"].value == f"{io_manager.catalog}.{io_manager.namespace}.orders_a"
    assert {c.name for c in meta["dagster/column_schema"].value.columns} >= {"id", "amount", "updated_at"}

    source.append({"id": 4, "amount": 40, "updated_at": iso(4)})
    second = run(orders_a, instance, io_manager)
    meta2 = materialization(second)
    assert meta2["dagster_incremental/state"].value["last_value"] == iso(4)
    assert meta2["dagster_incremental/rows_inserted"].value == 1  # the boundary row is not loaded twice
    assert [r["id"] for r in table_rows(spark, io_manager, "orders_a")] == [1, 2, 3, 4]
    assert str(seen_starts[1]).startswith("2024-01-03")

    table = io_manager.table_name(dg.AssetKey("orders_a"))
    commits = catalog.commit_count(spark, table)
    third = run(orders_a, instance, io_manager)  # nothing new: a normal, successful no-op
    meta3 = materialization(third)
    assert meta3["dagster_incremental/rows_inserted"].value == 0
    assert meta3["dagster/row_count"].value == 4
    state2, state3 = (m["dagster_incremental/state"].value for m in (meta2, meta3))
    assert state3 == {**state2, "start_value": iso(4)}  # it started where the last run ended
    assert len(table_rows(spark, io_manager, "orders_a")) == 4
    # the table already holds this cursor: the no-op run adds no (empty) commit
    assert catalog.commit_count(spark, table) == commits


def test_full_refresh_resets_cursor_and_replaces_table(spark, instance, io_manager, config_file):
    source = [{"id": i, "updated_at": iso(i)} for i in range(1, 4)]

    @incremental_asset(primary_key="id", config_path=config_file)
    def orders_fr(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    run(orders_fr, instance, io_manager)
    source[:] = [{"id": 10, "updated_at": iso(2)}]  # the source was rebuilt: history changed
    result = run(orders_fr, instance, io_manager, run_config={**QUIET, "ops": {"orders_fr": {"config": {"full_refresh": True}}}})
    assert [r["id"] for r in table_rows(spark, io_manager, "orders_fr")] == [10]
    assert materialization(result)["dagster_incremental/state"].value["last_value"] == iso(2)


def test_unpartitioned_backfill_is_stateless_and_replaces_its_window(spark, instance, io_manager, config_file):
    source = [{"id": i, "updated_at": iso(i)} for i in range(1, 6)]

    @incremental_asset(primary_key="id", config_path=config_file)
    def orders_bf(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return [r for r in source]

    run(orders_bf, instance, io_manager)
    live = materialization(run(orders_bf, instance, io_manager))["dagster_incremental/state"].value
    del source[1]  # id 2 (day 2) vanished from the source
    backfill = run(
        orders_bf, instance, io_manager,
        run_config={**QUIET, "ops": {"orders_bf": {"config": {"initial_value": iso(2), "end_value": iso(4)}}}},
    )
    meta = materialization(backfill)
    assert meta["dagster_incremental/mode"].value == "backfill"
    assert meta["dagster_incremental/state"].value == live  # the state in force, unchanged
    assert [r["id"] for r in table_rows(spark, io_manager, "orders_bf")] == [1, 3, 4, 5]
    # the live cursor did not move: the next incremental run still starts at day 5
    nxt = run(orders_bf, instance, io_manager)
    assert materialization(nxt)["dagster_incremental/state"].value["last_value"] == iso(5)


def test_partitioned_ranged_backfill_leaves_live_cursor_and_window_rerun_removes_deleted_rows(spark, instance, io_manager, config_file):
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=5)
    days = [(start + timedelta(days=d)) for d in range(6)]  # 5 closed days + today (open)
    source = [
        {"event_id": f"e{d}-{h}", "value": d * 10 + h, "event_time": (day + timedelta(hours=h)).isoformat()}
        for d, day in enumerate(days)
        for h in (1, 2)
    ]
    parts = dg.DailyPartitionsDefinition(start_date=start.strftime("%Y-%m-%d"), end_offset=1)

    @incremental_asset(primary_key="event_id", partitions_def=parts, write_disposition="merge", config_path=config_file)
    def events_p(context: dg.AssetExecutionContext, event_time: Incremental = incremental("event_time")):
        return [r for r in source if event_time.start_value <= datetime.fromisoformat(r["event_time"]) < event_time.end_value]

    today_key = today.strftime("%Y-%m-%d")
    live = run(events_p, instance, io_manager, partition_key=today_key)
    live_state = materialization(live, today_key)["dagster_incremental/state"].value
    assert materialization(live, today_key)["dagster_incremental/mode"].value == "incremental"

    keys = [d.strftime("%Y-%m-%d") for d in days[1:4]]
    ranged = run(
        events_p, instance, io_manager,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
    )
    assert ranged.success
    for key in keys:
        meta = materialization(ranged, key)
        assert meta["dagster_incremental/mode"].value == "backfill"
        scope = meta["dagster_incremental/counts_scope"].value  # each partition's own figures, said plainly
        assert f"this partition's own, in a run over {keys[0]}...{keys[-1]} (3 partitions" in scope
        assert "whole table" in scope and meta["dagster_incremental/rows_inserted"].value == 2
    assert "this partition's" in materialization(live, today_key)["dagster_incremental/counts_scope"].value
    assert len(table_rows(spark, io_manager, "events_p", "event_id")) == 2 + 6
    # the open partition's cursor is untouched by the backfill
    again = run(events_p, instance, io_manager, partition_key=today_key)
    assert materialization(again, today_key)["dagster_incremental/state"].value["last_value"] == live_state["last_value"]

    source[:] = [r for r in source if r["event_id"] != "e2-1"]  # deleted at the source
    rerun = run(events_p, instance, io_manager, partition_key=keys[1])
    assert rerun.success
    ids = {r["event_id"] for r in table_rows(spark, io_manager, "events_p", "event_id")}
    assert "e2-1" not in ids and "e2-2" in ids


@HADOOP_ONLY
def test_late_events_of_the_open_day_arrive_with_the_example_lag(spark, instance, io_manager, config_file, tmp_path):
    """The example's daily_events: upstream adds events whose time is before the cursor."""
    from pathlib import Path

    from dagster_incremental.settings.config import load_config
    from definitions.sources import event_files, utc_now

    example = load_config(Path(__file__).resolve().parents[2] / "config" / "config.toml", environ={})
    lag = example.asset("daily_events").incremental("event_time").get("lag")
    # Events up to noon of today's (open) partition, whatever the clock says: just after midnight
    # the day would hold too few minutes for late events to fall before the cursor.
    now = utc_now().replace(hour=12, minute=0, second=0, microsecond=0)
    today = now.replace(hour=0)
    root = tmp_path / "events"
    event_files.write_event_days(root, today.date(), 1, per_day=50, now=now)
    parts = dg.DailyPartitionsDefinition(start_date=(today - timedelta(days=1)).strftime("%Y-%m-%d"), end_offset=1)

    @incremental_asset(primary_key="event_id", partitions_def=parts, config_path=config_file,
                       write_disposition={"disposition": "merge", "strategy": "delete-insert"})
    def late_events(event_time: Incremental = incremental("event_time", lag=lag)):
        return event_files.read_events_arrow(root, event_time.start_value, event_time.end_value)

    key = today.strftime("%Y-%m-%d")
    first = run(late_events, instance, io_manager, partition_key=key)
    cursor = first.get_asset_materialization_events()[0].materialization.metadata["dagster_incremental/state"].value["last_value"]
    added = event_files.mutate_day(root, today.date(), seed=3, remove=0, change=0, add=10, now=now)["added"]
    source = event_files.read_day_rows(root, today.date())
    assert [r for r in source if r["event_id"] in added and r["event_time"] < cursor], "no late event simulated"
    assert run(late_events, instance, io_manager, partition_key=key).success
    ids = {r["event_id"] for r in table_rows(spark, io_manager, "late_events", "event_id")}
    assert ids == {r["event_id"] for r in source}  # every late event arrived, nothing doubled


@HADOOP_ONLY
def test_write_settings_show_only_what_the_strategy_uses(config_file):
    def settings(disposition):
        @incremental_asset(name="ws", primary_key="id", write_disposition=disposition, config_path=config_file)
        def ws(updated_at: Incremental = incremental("updated_at")):
            return []

        return ws.metadata_by_key[dg.AssetKey("ws")]["dagster_incremental/write_settings"].value

    assert "scd2" not in settings({"disposition": "merge", "strategy": "upsert"})
    assert settings({"disposition": "merge", "strategy": "scd2"})["scd2"] == {
        "validity_column_names": ["_valid_from", "_valid_to"]}


def test_lost_dagster_event_is_healed_from_the_table_commit(spark, instance, io_manager, config_file):
    source = [{"id": i, "updated_at": iso(i)} for i in range(1, 4)]

    @incremental_asset(write_disposition="append", config_path=config_file)
    def orders_heal(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    run(orders_heal, instance, io_manager)
    source.extend({"id": i, "updated_at": iso(i)} for i in (4, 5))
    lost = run(orders_heal, instance, io_manager)
    # The run committed days 4-5 (and its cursor) to the table, but its Dagster events are lost.
    instance.delete_run(lost.run_id)
    healed = run(orders_heal, instance, io_manager)
    assert [r["id"] for r in table_rows(spark, io_manager, "orders_heal")] == [1, 2, 3, 4, 5]  # no duplicate
    meta = materialization(healed)
    assert meta["dagster_incremental/rows_inserted"].value == 0
    assert meta["dagster_incremental/state"].value["last_value"] == iso(5)


@HADOOP_ONLY
def test_sensor_requests_runs_only_when_probe_moves(spark, instance, io_manager, config_file):
    source = [{"id": 1, "updated_at": iso(1)}]
    hwm = {"value": iso(1)}

    @incremental_asset(primary_key="id", config_path=config_file)
    def orders_s(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    sensor = build_incremental_sensor(orders_s, probe=lambda: hwm["value"])
    defs = dg.Definitions(assets=[orders_s], sensors=[sensor], resources={"io_manager": io_manager})

    first = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    assert len(first.run_requests) == 1  # nothing stored yet
    run(orders_s, instance, io_manager)
    ctx = dg.build_sensor_context(instance=instance, cursor=first.cursor, definitions=defs)
    assert isinstance(sensor(ctx), dg.SkipReason)  # the cursor is at the source's high-water mark
    hwm["value"] = iso(2)
    moved = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, definitions=defs))
    assert len(moved.run_requests) == 1 and moved.run_requests[0].run_key.endswith(iso(2))
    repeat = sensor(dg.build_sensor_context(instance=instance, cursor=moved.cursor, definitions=defs))
    assert isinstance(repeat, dg.SkipReason)  # idempotent: the same high-water mark is not requested twice


@HADOOP_ONLY
def test_sensor_of_an_asset_with_two_cursors_compares_each_with_its_own(spark, instance, io_manager, config_file):
    source = [{"id": 1, "seq": 10, "updated_at": iso(1)}]
    hwm = {"updated_at": iso(1), "seq": 10}

    @incremental_asset(primary_key="id", config_path=config_file)
    def orders_two(updated_at: Incremental = incremental("updated_at", initial_value=iso(1)),
                   seq: Incremental = incremental("seq", initial_value=0)):
        return seq.filter(updated_at.filter(list(source)))

    both = build_incremental_sensor(orders_two, probe=lambda: dict(hwm))
    one = build_incremental_sensor(orders_two, probe=lambda: hwm["seq"], cursor="seq", name="by_seq")
    defs = dg.Definitions(assets=[orders_two], sensors=[both, one], resources={"io_manager": io_manager})

    def evaluate(sensor, cursor=None):
        return sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))

    assert len(evaluate(both).run_requests) == 1  # nothing stored yet
    assert run(orders_two, instance, io_manager).success
    assert isinstance(evaluate(both), dg.SkipReason) and isinstance(evaluate(one), dg.SkipReason)
    hwm["seq"] = 11  # only the second cursor's source moved
    moved = evaluate(both)
    assert len(moved.run_requests) == 1 and "seq=11" in moved.run_requests[0].run_key
    assert len(evaluate(one).run_requests) == 1
    assert isinstance(evaluate(both, moved.cursor), dg.SkipReason)  # idempotent
    with pytest.raises(Exception, match="several cursors"):
        evaluate(build_incremental_sensor(orders_two, probe=lambda: 5, name="scalar"))
    with pytest.raises(Exception, match="no incremental argument 'nope'"):
        build_incremental_sensor(orders_two, probe=lambda: 5, cursor="nope")


@HADOOP_ONLY
def test_user_errors_fail_the_run_with_a_clear_message_and_write_nothing(spark, instance, io_manager, config_file):
    @incremental_asset(config_path=config_file)
    def broken(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        yield {"id": 1, "updated_at": iso(1)}
        yield "not a row"

    result = run(broken, instance, io_manager, raise_on_error=False)
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert "broken" in str(failure.message) and "str" in str(failure.message)
    assert not spark.catalog.tableExists(io_manager.table_name(dg.AssetKey("broken")).sql)


@HADOOP_ONLY
def test_a_day_first_cursor_from_config_loads_in_date_order(spark, instance, io_manager, config_file):
    """cursor_datetime_formats in config.toml: "31/12/2023" is older than "05/01/2024" (as text
    it would be newer); the column is stored as a timestamp and the cursor as ISO-8601 UTC; a
    value no format matches fails the run naming the asset, the column and the value."""
    with open(config_file, "a") as f:
        f.write('[assets.orders_dmy.updated_at]\ncursor_path = "updated_at"\ninitial_value = "01/12/2023"\n'
                'cursor_datetime_formats = ["%d/%m/%Y %H:%M", "%d/%m/%Y"]\n')
    source = [{"id": 1, "updated_at": "31/12/2023 23:30"}, {"id": 2, "updated_at": "05/01/2024"}]

    @incremental_asset(primary_key="id", write_disposition="merge", config_path=config_file)
    def orders_dmy(updated_at: Incremental):
        return list(source)

    assert run(orders_dmy, instance, io_manager).success
    source[:] = [{"id": 1, "updated_at": "31/12/2023 23:30"}, {"id": 3, "updated_at": "06/01/2024 08:00"}]
    second = run(orders_dmy, instance, io_manager)
    assert materialization(second)["dagster_incremental/rows_inserted"].value == 1
    assert materialization(second)["dagster_incremental/state"].value["last_value"] == "2024-01-06T08:00:00Z"
    assert [(r["id"], r["updated_at"]) for r in table_rows(spark, io_manager, "orders_dmy")] == [
        (1, datetime(2023, 12, 31, 23, 30)), (2, datetime(2024, 1, 5)), (3, datetime(2024, 1, 6, 8))]
    source[:] = [{"id": 4, "updated_at": "07.01.2024 09:00"}]
    bad = run(orders_dmy, instance, io_manager, raise_on_error=False)
    message = failure_text(bad)
    assert "orders_dmy" in message and "'updated_at'" in message and "'07.01.2024 09:00'" in message
    assert "matches none of the cursor_datetime_formats" in message
    assert len(table_rows(spark, io_manager, "orders_dmy")) == 3


@HADOOP_ONLY
def test_changed_keys_are_reported_and_need_a_full_refresh(spark, instance, io_manager, config_file):
    source = [{"id": i, "region": "eu", "updated_at": iso(i)} for i in range(1, 3)]

    def define(primary_key):
        @incremental_asset(name="orders_keys", primary_key=primary_key, write_disposition="merge", config_path=config_file)
        def orders_keys(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
            return list(source)

        return orders_keys

    assert run(define("id"), instance, io_manager).success
    changed = define(["id", "region"])
    result = run(changed, instance, io_manager, raise_on_error=False)
    assert not result.success
    message = failure_text(result)
    assert "primary_key ['id'] -> ['id', 'region']" in message and "full_refresh" in message
    refreshed = run(changed, instance, io_manager, run_config={**QUIET, "ops": {"orders_keys": {"config": {"full_refresh": True}}}})
    assert refreshed.success and len(table_rows(spark, io_manager, "orders_keys")) == 2
    assert run(changed, instance, io_manager).success  # and it carries on with the new keys


def test_a_stale_writer_is_refused_and_writes_nothing(spark, instance, io_manager, config_file):
    from dagster_incremental.dagster.io_manager import write_spec_from_settings
    from dagster_incremental.spark.write_spec import CommitInfo

    source = [{"id": 1, "updated_at": iso(1)}]
    interloper = {"armed": False}

    @incremental_asset(write_disposition="append", config_path=config_file)
    def orders_race(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        if interloper["armed"]:  # another run commits while this one is extracting
            interloper["armed"] = False
            table = io_manager.table_name(dg.AssetKey("orders_race"))
            spec = write_spec_from_settings(table, {"disposition": "append"})
            other = spark.createDataFrame([(2, datetime(2024, 1, 2))], "id bigint, updated_at timestamp")
            io_manager.tables.writer.write(spec, other, commit=CommitInfo(state={"last_value": iso(2)}, run_id="other-run"))
        return list(source)

    run(orders_race, instance, io_manager)
    source.append({"id": 3, "updated_at": iso(3)})
    interloper["armed"] = True
    result = run(orders_race, instance, io_manager, raise_on_error=False)
    assert not result.success
    assert "another run (other-run) committed" in failure_text(result)
    assert [r["id"] for r in table_rows(spark, io_manager, "orders_race")] == [1, 2]  # nothing from the loser
    assert orders_race.op.pool == "incremental/orders_race"


@HADOOP_ONLY
def test_append_after_a_boundary_overflow_loads_no_duplicates(spark, instance, io_manager, config_file, monkeypatch):
    import dagster_incremental.cursor.boundary as boundary

    monkeypatch.setattr(boundary, "BOUNDARY_KEY_LIMIT", 2)
    source = [{"id": i, "updated_at": iso(1)} for i in range(5)]  # 5 rows share one cursor value

    @incremental_asset(primary_key="id", write_disposition="append", config_path=config_file)
    def orders_overflow(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    first = run(orders_overflow, instance, io_manager)
    assert materialization(first)["dagster_incremental/state"].value["boundary"]["overflow"] is True
    source.append({"id": 5, "updated_at": iso(1)})  # a new row at the same value
    second = run(orders_overflow, instance, io_manager)
    assert [r["id"] for r in table_rows(spark, io_manager, "orders_overflow")] == [0, 1, 2, 3, 4, 5]
    assert materialization(second)["dagster_incremental/rows_inserted"].value == 1


@HADOOP_ONLY
def test_merge_without_keys_fails_at_definition_naming_where_the_disposition_is_set(config_file):
    """It used to append every row with a warning in the run log; now the code location fails."""
    with pytest.raises(IncrementalConfigError) as info:
        @incremental_asset(write_disposition="merge", config_path=config_file)
        def keyless(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
            return []
    text = str(info.value)
    assert text.startswith("asset 'keyless': primary_key is not set; merge/delete-insert needs primary_key or merge_key")
    assert "write_disposition is set by @incremental_asset(write_disposition=...)" in text


@HADOOP_ONLY
def test_a_changed_cursor_path_is_reported_with_what_to_do(spark, instance, io_manager, config_file):
    source = [{"id": 1, "updated_at": iso(1), "created_at": iso(1)}]

    def define(path):
        @incremental_asset(name="orders_path", primary_key="id", write_disposition="merge", config_path=config_file)
        def orders_path(cursor: Incremental = incremental(path, initial_value=iso(1))):
            return list(source)

        return orders_path

    assert run(define("updated_at"), instance, io_manager).success
    result = run(define("created_at"), instance, io_manager, raise_on_error=False)
    assert not result.success
    message = failure_text(result)
    assert "orders_path" in message and "updated_at" in message and "created_at" in message
    assert "full refresh" in message


@HADOOP_ONLY
def test_a_cursor_type_changed_in_config_names_the_key_and_keeps_table_and_cursor(spark, instance, io_manager, config_file, tmp_path):
    source = [{"id": 1, "updated_at": iso(1)}]
    base = open(config_file).read()

    def define(initial):
        path = tmp_path / f"typed_{initial}.toml"
        path.write_text(base + f"\n[assets.orders_typed.updated_at]\ncursor_path = \"updated_at\"\ninitial_value = {initial}\n")

        @incremental_asset(name="orders_typed", primary_key="id", write_disposition="merge", config_path=str(path))
        def orders_typed(updated_at: Incremental):
            return list(source)

        return orders_typed

    first = run(define('"2024-01-01T00:00:00Z"'), instance, io_manager)
    table = io_manager.table_name(dg.AssetKey("orders_typed")).display
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count()
    result = run(define("0"), instance, io_manager, raise_on_error=False)  # a number: a number cursor
    message = failure_text(result)
    assert not result.success
    assert "cursor_type 'timestamp' -> 'number'" in message
    assert "[assets.orders_typed.updated_at] initial_value (at line" in message and "= 0" in message
    assert spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").count() == snapshots
    state = materialization(first)["dagster_incremental/state"].value
    assert instance.fetch_materializations(dg.AssetKey("orders_typed"), limit=5).records[0].asset_materialization \
        .metadata["dagster_incremental/state"].value == state  # the cursor is the first run's


@HADOOP_ONLY
def test_partitioned_downstream_reads_its_window_and_writes_it_back(spark, instance, io_manager, config_file):
    from pyspark.sql import functions as F

    parts = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")
    source = [{"event_id": f"e{d}-{h}", "event_time": iso(d, h)} for d in range(1, 5) for h in range(d)]

    @incremental_asset(primary_key="event_id", partitions_def=parts, config_path=config_file)
    def events_up(event_time: Incremental = incremental("event_time")):
        return [r for r in source if event_time.start_value <= datetime.fromisoformat(r["event_time"]) < event_time.end_value]

    @dg.asset(partitions_def=parts, metadata={"partition_expr": "day"})
    def daily_counts(events_up):
        return events_up.groupBy(F.to_date("event_time").alias("day")).count()

    tags = {"dagster/asset_partition_range_start": "2024-01-01", "dagster/asset_partition_range_end": "2024-01-04"}
    assert dg.materialize([events_up, daily_counts], instance=instance, resources={"io_manager": io_manager}, tags=tags, run_config=QUIET).success
    rerun = dg.materialize([events_up, daily_counts], instance=instance, resources={"io_manager": io_manager}, partition_key="2024-01-03", run_config=QUIET)
    assert rerun.success
    counts = {str(r["day"]): r["count"] for r in table_rows(spark, io_manager, "daily_counts", "day")}
    assert counts == {"2024-01-01": 1, "2024-01-02": 2, "2024-01-03": 3, "2024-01-04": 4}  # no day doubled


def test_partitioned_plain_asset_without_partition_expr_gets_a_clear_error(spark, instance, io_manager):
    parts = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-03")

    @dg.asset(partitions_def=parts)
    def unplaced(context):
        return context.resources.io_manager.spark.range(1)

    result = dg.materialize([unplaced], instance=instance, resources={"io_manager": io_manager}, partition_key="2024-01-01", raise_on_error=False, run_config=QUIET)
    assert not result.success and 'metadata={"partition_expr"' in failure_text(result)


def test_a_cursor_reported_by_hand_wins_over_the_table(spark, instance, io_manager, config_file):
    source = [{"id": i, "v": "a", "updated_at": iso(i)} for i in range(1, 5)]
    starts = []

    @incremental_asset(primary_key="id", write_disposition="merge", config_path=config_file)
    def orders_reset(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        starts.append(str(updated_at.start_value))
        return list(source)

    run(orders_reset, instance, io_manager)
    source[2]["v"] = "corrected"  # the source fixed day 3 without touching updated_at
    # an operator rewinds the cursor to day 2 to re-read the corrected period
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key="orders_reset",
            metadata={"dagster_incremental/state": {"last_value": iso(2)}, "dagster_incremental/mode": "incremental"},
        )
    )
    result = run(orders_reset, instance, io_manager)
    assert starts[-1].startswith("2024-01-02")
    # days 2-4 were re-read: their keys were replaced (counted as MERGE does, equal values too)
    assert materialization(result)["dagster_incremental/rows_updated"].value == 3
    assert [r["v"] for r in table_rows(spark, io_manager, "orders_reset")] == ["a", "a", "corrected", "a"]


@HADOOP_ONLY
def test_last_run_is_when_the_previous_run_committed(spark, instance, io_manager, config_file):
    """`last_run` (OndatraSQL's): None on a first run; then the time of the materialization whose
    cursor the run continues (a run that found nothing new counts); None after a full refresh
    and after a cursor reset by hand (no run made that cursor)."""
    source = [{"id": 1, "updated_at": iso(1)}]
    seen = []

    @incremental_asset(primary_key="id", write_disposition="merge", config_path=config_file)
    def orders_lr(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        seen.append(updated_at.last_run)
        return list(source)

    def committed_at():
        return datetime.fromtimestamp(instance.get_latest_materialization_event(dg.AssetKey("orders_lr")).timestamp,
                                      timezone.utc)

    run(orders_lr, instance, io_manager)
    first = committed_at()
    run(orders_lr, instance, io_manager)  # nothing new
    second = committed_at()
    source.append({"id": 2, "updated_at": iso(2)})
    run(orders_lr, instance, io_manager)
    assert seen == [None, first, second] and first < second
    run(orders_lr, instance, io_manager, run_config={**QUIET, "ops": {"orders_lr": {"config": {"full_refresh": True}}}})
    assert seen[-1] is None
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key="orders_lr",
        metadata={"dagster_incremental/state": {"last_value": iso(1)}, "dagster_incremental/mode": "incremental"}))
    run(orders_lr, instance, io_manager)
    assert seen[-1] is None


@ICEBERG_ONLY
@pytest.mark.every_kind  # the compaction commit: no other module runs it on each catalog
def test_merge_on_read_deletes_are_compacted_by_the_io_manager(spark, instance, io_manager, config_file, monkeypatch):
    from dagster_incremental.spark.iceberg import maintenance
    from dagster_incremental.spark.iceberg.local import python_write
    monkeypatch.setattr(maintenance, "COMPACT_AT_DELETED_ROWS", 1)  # this tiny table qualifies
    # a change scattered over a large table: position deletes, not pyiceberg's rewrite of its files
    monkeypatch.setattr(python_write, "MAX_REWRITE_ROWS", 0)
    monkeypatch.setattr(python_write, "MAX_REWRITE_ROWS_WITH_JVM", 0)
    source = [{"id": i, "v": "a", "updated_at": iso(1)} for i in range(1, 5)]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"}, config_path=config_file)
    def orders_mor(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return list(source)

    run(orders_mor, instance, io_manager)
    source.append({"id": 2, "v": "b", "updated_at": iso(2)})
    result = run(orders_mor, instance, io_manager)
    assert materialization(result)["dagster_incremental/rows_updated"].value == 1
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("folded 1 deleted rows" in m for m in logs), logs
    table = io_manager.table_name(dg.AssetKey("orders_mor"))
    summary = spark.sql(f"SELECT summary FROM {table}.`snapshots` ORDER BY committed_at DESC LIMIT 1").first().summary
    assert summary.get("total-delete-files") == "0"
    assert [r["v"] for r in table_rows(spark, io_manager, "orders_mor")] == ["a", "b", "a", "a"]
    again = run(orders_mor, instance, io_manager)  # the cursor continues after the compaction commit
    assert materialization(again)["dagster_incremental/rows_inserted"].value == 0


@HADOOP_ONLY
def test_columns_carry_descriptions_from_hints_and_the_docstring(spark, instance, io_manager, config_file):
    @incremental_asset(config_path=config_file, columns={"amount": {"description": "Total in EUR, VAT included"}})
    def described(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        """Orders of the shop.

        Columns:
            id: The order number.
            amount: overridden by the column hint.
            updated_at: When the order last changed,
                in UTC.
        """
        yield [{"id": 1, "amount": 2.5, "updated_at": iso(2), "note": "x"}]

    result = run(described, instance, io_manager)
    columns = {c.name: c.description for c in materialization(result)["dagster/column_schema"].value.columns}
    assert columns == {
        "id": "The order number.",
        "amount": "Total in EUR, VAT included",
        "updated_at": "When the order last changed, in UTC.",
        "note": None,
    }


@pytest.mark.every_kind  # an empty replace's commit: the fault tests replace on Hadoop only
@pytest.mark.parametrize("step", [None, "P400D"], ids=["one run", "sliced"])
def test_a_replace_asset_whose_source_returns_nothing_empties_its_table(spark, instance, io_manager, config_file, step, catalog):
    """replace: the table holds exactly what the run loaded, also when that is nothing (as
    dlt truncates a replace table that receives no data); an empty table stays a no-op."""
    source = [{"id": i, "amount": i, "updated_at": iso(i)} for i in range(1, 4)]
    name = f"replaced_{'sliced' if step else 'once'}"

    @incremental_asset(name=name, write_disposition="replace", config_path=config_file)
    def replaced(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1), step=step)):
        return list(source)

    run(replaced, instance, io_manager)
    assert len(table_rows(spark, io_manager, name)) == 3
    source.clear()
    emptied = materialization(run(replaced, instance, io_manager))
    assert table_rows(spark, io_manager, name) == []
    assert (emptied["dagster_incremental/rows_deleted"].value, emptied["dagster/row_count"].value) == (3, 0)
    assert emptied["dagster_incremental/replaced"].value.startswith("replaced the whole table: 3 rows removed, 0 rows written")

    table = io_manager.table_name(dg.AssetKey(name))
    commits = catalog.commit_count(spark, table)
    again = materialization(run(replaced, instance, io_manager))
    assert (again["dagster_incremental/rows_deleted"].value, again["dagster/row_count"].value) == (0, 0)
    assert "dagster_incremental/replaced" not in again  # nothing was replaced
    assert catalog.commit_count(spark, table) == commits  # nothing to empty: no commit


def description(asset: dg.AssetsDefinition) -> str:
    return asset.descriptions_by_key[asset.key]


@HADOOP_ONLY
def test_the_description_leaves_docstring_columns_to_the_column_schema_and_says_where_each_cursor_starts(config_file):
    """The docstring's `Columns:` section is left to the column schema (the asset page's Columns
    table; tests/dagster/test_ui_metadata.py), and the closing line says what the asset is
    incremental on."""
    from dagster_incremental import Changes

    @incremental_asset(config_path=config_file)
    def described(updated_at: Incremental = incremental("updated_at")):
        """Orders of the shop.

        Columns:
            id: The order number.
            updated_at: When the order last changed,
                in UTC.

        Soft-deleted orders are removed.
        """
        yield []

    @incremental_asset(config_path=config_file)
    def downstream(described: Changes):
        """Each order once more."""
        return described.upserts()

    text = description(described)
    assert text.startswith("Orders of the shop.\n\nSoft-deleted orders are removed.\n\n")
    assert "Incremental on `updated_at` from the first row (no initial_value); append" in text
    assert "None" not in text
    assert description(downstream).startswith(
        "Each order once more.\n\nIncremental on the changes of `described` committed since the last run; append"
    )
