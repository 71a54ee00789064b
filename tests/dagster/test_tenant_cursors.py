"""Per-tenant cursors: static partitions (tenants) and tenant x day partitions.

What a user sees: each tenant's rows and cursor in the table and in its partition's
materialization; a run, backfill or full refresh of one tenant leaves every other tenant's rows
and cursor as they were; partition definitions that cannot be mapped fail when the asset is
defined, naming the asset.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_incremental import Incremental, SparkTableIOManager, build_incremental_sensor, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError
from attack_support import failure_text, table_exists
from catalogs import EACH_FORMAT, HADOOP_ONLY, LOCAL_LAKE_AND_DELTA, assert_other_readers_agree

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
TENANTS = dg.StaticPartitionsDefinition(["acme", "globex"])
STATE = "dagster_incremental/state"


def at(day: int) -> datetime:
    return datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=day - 1)


def iso(day: int) -> str:
    return at(day).isoformat().replace("+00:00", "Z")


# -- definition time (no Spark) ---------------------------------------------------------------------


@pytest.fixture
def plain_config(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[destination]\ncatalog = "lake"\nnamespace = "t"\nwarehouse = "{tmp_path / "wh"}"\n')
    return str(path)


def define(config_path, partitions_def, **kwargs):
    @incremental_asset(name="tenant_orders", partitions_def=partitions_def, config_path=config_path, **kwargs)
    def tenant_orders(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return []

    return tenant_orders


def test_static_partitions_without_partition_column_name_the_asset_and_the_key(plain_config):
    with pytest.raises(IncrementalConfigError, match=r"asset 'tenant_orders': static partitions need partition_column"):
        define(plain_config, TENANTS)


def test_partition_column_comes_from_config_toml_too(plain_config):
    with open(plain_config, "a") as f:
        f.write('\n[assets.tenant_orders]\npartition_column = "tenant"\n')
    asset = define(plain_config, TENANTS)
    assert asset.backfill_policy == dg.BackfillPolicy.multi_run(max_partitions_per_run=1)


@pytest.mark.parametrize(
    ("partitions_def", "message"),
    [
        (dg.DynamicPartitionsDefinition(name="tenants"),
         r"asset 'tenant_orders': partitions_def DynamicPartitionsDefinition cannot carry a cursor per partition"),
        (dg.MultiPartitionsDefinition({"region": dg.StaticPartitionsDefinition(["eu"]), "tenant": TENANTS}),
         r"asset 'tenant_orders': a MultiPartitionsDefinition needs one static and one time-window dimension "
         r"\(tenant x day\), got region: StaticPartitionsDefinition, tenant: StaticPartitionsDefinition"),
    ],
)
def test_partitions_that_cannot_be_mapped_fail_naming_the_asset(plain_config, partitions_def, message):
    with pytest.raises(IncrementalConfigError, match=message):
        define(plain_config, partitions_def, partition_column="tenant")


def test_partition_column_on_time_partitions_is_refused(plain_config):
    with pytest.raises(IncrementalConfigError, match=r"asset 'tenant_orders': partition_column 'tenant' .* time-window"):
        define(plain_config, dg.DailyPartitionsDefinition(start_date="2024-01-01"), partition_column="tenant")


def test_merge_keys_without_the_tenant_column_are_refused(plain_config):
    merge = {"disposition": "merge", "strategy": "upsert"}
    with pytest.raises(IncrementalConfigError, match=r"primary_key \['id'\] must include the partition column 'tenant'.*\['tenant', 'id'\]"):
        define(plain_config, TENANTS, partition_column="tenant", primary_key="id", write_disposition=merge)
    scd2 = {"disposition": "merge", "strategy": "scd2"}
    with pytest.raises(IncrementalConfigError, match=r"scd2 on static partitions needs merge_key holding 'tenant'"):
        define(plain_config, TENANTS, partition_column="tenant", write_disposition=scd2)
    # tenant x day: the column defaults to the static dimension's name
    days = dg.DailyPartitionsDefinition(start_date="2024-01-01")
    by_day = dg.MultiPartitionsDefinition({"day": days, "tenant": TENANTS})
    with pytest.raises(IncrementalConfigError, match=r"partition column 'tenant'"):
        define(plain_config, by_day, primary_key="id", write_disposition=merge)
    assert define(plain_config, by_day, primary_key=["tenant", "id"], write_disposition=merge) is not None


def test_the_sensor_asks_each_tenant_and_requests_only_those_ahead_of_their_own_cursor(plain_config, instance, tmp_path):
    asset = define(plain_config, TENANTS, partition_column="tenant")
    for tenant, day in (("acme", 3), ("globex", 5)):
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key="tenant_orders", partition=tenant,
            metadata={STATE: {"last_value": iso(day)}, "dagster_incremental/mode": "incremental"},
        ))
    source = {"acme": iso(4), "globex": iso(5)}
    asked = []

    def probe(tenant):
        asked.append(tenant)
        return source[tenant]

    sensor = build_incremental_sensor(asset, probe=probe)
    io = SparkTableIOManager(warehouse=str(tmp_path / "wh"))
    defs = dg.Definitions(assets=[asset], sensors=[sensor], resources={"io_manager": io})
    first = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    assert asked == ["acme", "globex"]
    assert [r.partition_key for r in first.run_requests] == ["acme"]  # globex is at its source's mark
    again = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, definitions=defs))
    assert isinstance(again, dg.SkipReason) and "acme: a run for" in again.skip_message
    source["globex"] = iso(6)
    moved = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, definitions=defs))
    assert [r.partition_key for r in moved.run_requests] == ["globex"]


def test_a_sensor_probe_of_a_tenant_asset_must_take_the_tenant(plain_config):
    asset = define(plain_config, TENANTS, partition_column="tenant")
    with pytest.raises(IncrementalConfigError, match=r"build_incremental_sensor\(tenant_orders\): .* give it a `tenant` parameter"):
        build_incremental_sensor(asset, probe=lambda: iso(1))


def test_state_show_without_partition_lists_each_tenants_cursor_partition(plain_config, tmp_path, monkeypatch, capsys):
    from dagster_incremental.dagster.state_cli import main

    name = "tenant_location_" + uuid.uuid4().hex[:8]
    (tmp_path / f"{name}.py").write_text(
        "import dagster as dg\n"
        "from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset\n"
        "days = dg.DailyPartitionsDefinition(start_date='2024-01-01', end_date='2024-01-03')\n"
        "tenants = dg.StaticPartitionsDefinition(['acme', 'globex'])\n"
        f"@incremental_asset(partitions_def=dg.MultiPartitionsDefinition({{'day': days, 'tenant': tenants}}), config_path={plain_config!r})\n"
        "def events(at: Incremental = incremental('at')):\n"
        "    return []\n"
        f"defs = dg.Definitions(assets=[events], resources={{'io_manager': SparkTableIOManager.from_config({plain_config!r})}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["show", "events", "-m", name]) != 0
    err = capsys.readouterr().err
    assert "give --partition: each tenant has its own cursor (2024-01-02|acme, 2024-01-02|globex)" in err


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["acme", "globex", "Acme", None]), min_size=1, max_size=30))
def test_local_rows_pass_exactly_when_every_row_holds_the_tenant(values):
    import pyarrow as pa

    from dagster_incremental.dagster.partition_scope import check_rows
    from dagster_incremental.errors import DataShapeError
    from dagster_incremental.spark.local.rows import LocalRows

    frame = LocalRows.of(pa.table({"tenant": pa.array(values, pa.string()), "id": list(range(len(values)))}))
    others = [v for v in values if v != "acme"]
    if not others:
        check_rows("orders", frame, ("tenant", "acme"))
        return
    with pytest.raises(DataShapeError) as raised:
        check_rows("orders", frame, ("tenant", "acme"))
    assert f"got a row whose 'tenant' is {others[0]!r}" in str(raised.value)


def test_a_run_over_several_tenants_fails_before_loading_anything(plain_config, instance, tmp_path):
    called = []

    @incremental_asset(name="orders_many", partitions_def=TENANTS, partition_column="tenant", config_path=plain_config)
    def orders_many(updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        called.append(1)
        return []

    result = dg.materialize(
        [orders_many], instance=instance, raise_on_error=False, run_config=QUIET,
        resources={"io_manager": SparkTableIOManager(warehouse=str(tmp_path / "wh"))},
        tags={"dagster/asset_partition_range_start": "acme", "dagster/asset_partition_range_end": "globex"},
    )
    assert not result.success and called == []
    message = result.get_step_failure_events()[0].step_failure_data.error.message
    assert "asset orders_many: a run covers one partition of its tenants, this one was launched for 2 (acme ... globex)" in message


# -- runs (Spark) ------------------------------------------------------------------------------------


def rows(spark, io, key: str) -> list[tuple]:
    frame = spark.table(io.table_name(dg.AssetKey(key)).sql)
    return sorted((r["tenant"], r["id"], r["amount"]) for r in frame.collect())


def run(asset, instance, io, partition: str, config: dict | None = None, **kwargs) -> dg.ExecuteInProcessResult:
    run_config = {**QUIET, "ops": {asset.op.name: {"config": config}}} if config else QUIET
    return dg.materialize([asset], instance=instance, resources={"io_manager": io}, partition_key=partition,
                          run_config=run_config, **kwargs)


def metadata(result: dg.ExecuteInProcessResult, partition: str):
    mats = [m for m in result.get_asset_materialization_events() if m.materialization.partition == partition]
    assert mats, f"no materialization of partition {partition}"
    return mats[-1].materialization.metadata


class Source:
    """Each tenant's orders; records the start value each call of a tenant received."""

    def __init__(self):
        self.orders = {
            "acme": [{"tenant": "acme", "id": i, "amount": i, "updated_at": at(i)} for i in (1, 2, 3)],
            "globex": [{"tenant": "globex", "id": i, "amount": 100 + i, "updated_at": at(i + 3)} for i in (1, 2)],
        }
        self.starts: list[tuple[str, datetime]] = []

    def read(self, tenant: str, run) -> list[dict]:
        self.starts.append((tenant, run.start_value))
        return [r for r in self.orders[tenant] if run.end_value is None or r["updated_at"] < run.end_value]


@EACH_FORMAT
def test_each_tenant_keeps_its_own_cursor_and_a_run_of_one_leaves_the_other_alone(spark, instance, io_manager, config_file):
    source = Source()

    @incremental_asset(partitions_def=TENANTS, partition_column="tenant", primary_key=["tenant", "id"],
                       write_disposition={"disposition": "merge", "strategy": "upsert"}, config_path=config_file)
    def orders_t(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return source.read(context.partition_key, updated_at)

    assert metadata(run(orders_t, instance, io_manager, "acme"), "acme")[STATE].value["last_value"] == iso(3)
    globex = metadata(run(orders_t, instance, io_manager, "globex"), "globex")
    assert globex[STATE].value["last_value"] == iso(5)
    assert globex["dagster_incremental/mode"].value == "incremental"
    # the same ids in two tenants are two rows: the upsert matches on (tenant, id)
    assert rows(spark, io_manager, "orders_t") == [
        ("acme", 1, 1), ("acme", 2, 2), ("acme", 3, 3), ("globex", 1, 101), ("globex", 2, 102)
    ]

    source.orders["acme"].append({"tenant": "acme", "id": 1, "amount": 11, "updated_at": at(9)})
    again = run(orders_t, instance, io_manager, "acme")
    assert metadata(again, "acme")[STATE].value["last_value"] == iso(9)
    assert source.starts[-1] == ("acme", at(3))  # continued from acme's own cursor, not globex's
    assert [m.materialization.partition for m in again.get_asset_materialization_events()] == ["acme"]
    assert rows(spark, io_manager, "orders_t") == [
        ("acme", 1, 11), ("acme", 2, 2), ("acme", 3, 3), ("globex", 1, 101), ("globex", 2, 102)
    ]
    # globex's cursor did not move: its next run starts where its own last run ended
    run(orders_t, instance, io_manager, "globex")
    assert source.starts[-1] == ("globex", at(5))


@EACH_FORMAT
def test_backfill_and_full_refresh_of_one_tenant_replace_only_its_rows(spark, catalog, instance, io_manager, config_file):
    source = Source()

    @incremental_asset(partitions_def=TENANTS, partition_column="tenant", config_path=config_file)
    def orders_b(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return source.read(context.partition_key, updated_at)

    run(orders_b, instance, io_manager, "acme")
    live = metadata(run(orders_b, instance, io_manager, "globex"), "globex")[STATE].value
    # acme's day-2 order was corrected at the source; globex has an order on day 2 too
    source.orders["acme"][1]["amount"] = 22
    backfill = run(orders_b, instance, io_manager, "acme", {"initial_value": iso(2), "end_value": iso(3)})
    meta = metadata(backfill, "acme")
    assert meta["dagster_incremental/mode"].value == "backfill"
    assert meta[STATE].value["last_value"] == iso(3)  # acme's cursor in force, unchanged
    assert rows(spark, io_manager, "orders_b") == [
        ("acme", 1, 1), ("acme", 2, 22), ("acme", 3, 3), ("globex", 1, 101), ("globex", 2, 102)
    ]

    source.orders["acme"] = [{"tenant": "acme", "id": 7, "amount": 7, "updated_at": at(2)}]  # rebuilt
    refresh = run(orders_b, instance, io_manager, "acme", {"full_refresh": True})
    assert metadata(refresh, "acme")[STATE].value["last_value"] == iso(2)
    assert rows(spark, io_manager, "orders_b") == [("acme", 7, 7), ("globex", 1, 101), ("globex", 2, 102)]
    assert_other_readers_agree(catalog, spark, io_manager.table_name(dg.AssetKey("orders_b")))
    nxt = run(orders_b, instance, io_manager, "globex")
    assert metadata(nxt, "globex")[STATE].value["last_value"] == live["last_value"]
    assert source.starts[-1] == ("globex", at(5))


@EACH_FORMAT
def test_a_row_of_another_tenant_fails_the_run_and_writes_nothing(spark, instance, io_manager, config_file):
    source = Source()

    @incremental_asset(partitions_def=TENANTS, partition_column="tenant", config_path=config_file)
    def orders_x(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return source.read(context.partition_key, updated_at) + source.orders["globex"][:1]

    result = run(orders_x, instance, io_manager, "acme", raise_on_error=False)
    assert not result.success
    text = failure_text(result)
    assert "asset orders_x: a run of partition 'acme' got a row whose 'tenant' is 'globex'" in text
    assert not table_exists(spark, io_manager, "orders_x")


@LOCAL_LAKE_AND_DELTA
def test_tenant_by_day_open_days_keep_each_tenants_cursor_and_a_closed_day_backfills_one_tenant(spark, instance, io_manager, config_file):
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    yesterday = today - timedelta(days=1)
    days = dg.DailyPartitionsDefinition(start_date=yesterday.strftime("%Y-%m-%d"), end_offset=1)
    by_day = dg.MultiPartitionsDefinition({"day": days, "tenant": TENANTS})
    events = [
        {"tenant": t, "id": i, "amount": n + i + (10 if day == today else 0), "at": day + timedelta(hours=i)}
        for t, n in (("acme", 0), ("globex", 100)) for day in (yesterday, today) for i in (1, 2)
    ]
    seen: list[tuple[str, datetime, datetime]] = []

    @incremental_asset(partitions_def=by_day, config_path=config_file)
    def events_td(context: dg.AssetExecutionContext, at: Incremental = incremental("at")):
        tenant = context.partition_key.keys_by_dimension["tenant"]
        seen.append((tenant, at.start_value, at.end_value))
        return [e for e in events if e["tenant"] == tenant and at.start_value <= e["at"] < at.end_value]

    def key(day: datetime, tenant: str) -> str:
        return str(dg.MultiPartitionKey({"day": day.strftime("%Y-%m-%d"), "tenant": tenant}))

    for tenant in ("acme", "globex"):
        for day in (yesterday, today):
            assert run(events_td, instance, io_manager, key(day, tenant)).success
    acme_today = metadata(run(events_td, instance, io_manager, key(today, "acme")), key(today, "acme"))
    assert acme_today["dagster_incremental/mode"].value == "incremental"
    assert acme_today[STATE].value["last_value"].startswith(today.strftime("%Y-%m-%d") + "T02:00:00")
    assert seen[-1][0] == "acme" and seen[-1][1] == today + timedelta(hours=2)  # its own cursor

    # globex's yesterday changed at the source: backfill that one partition
    for e in events:
        if e["tenant"] == "globex" and e["at"] < today:
            e["amount"] += 1000
    backfill = run(events_td, instance, io_manager, key(yesterday, "globex"))
    assert metadata(backfill, key(yesterday, "globex"))["dagster_incremental/mode"].value == "backfill"
    frame = spark.table(io_manager.table_name(dg.AssetKey("events_td")).sql)
    # yesterday's amounts end in 1 and 2, today's in 11 and 12: only globex's yesterday changed
    assert sorted((r["tenant"], r["amount"]) for r in frame.collect()) == [
        ("acme", 1), ("acme", 2), ("acme", 11), ("acme", 12),
        ("globex", 111), ("globex", 112), ("globex", 1101), ("globex", 1102),
    ]
    # acme's open day still continues from its own cursor
    run(events_td, instance, io_manager, key(today, "acme"))
    assert seen[-1][0] == "acme" and seen[-1][1] == today + timedelta(hours=2)


@EACH_FORMAT
def test_a_replace_asset_replaces_only_the_tenants_rows_and_a_spark_frame_is_checked_too(spark, instance, io_manager, config_file):
    source = Source()
    extra: list[dict] = []

    @incremental_asset(partitions_def=TENANTS, partition_column="tenant", write_disposition="replace", config_path=config_file)
    def orders_r(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return spark.createDataFrame(source.orders[context.partition_key] + extra)

    run(orders_r, instance, io_manager, "acme")
    run(orders_r, instance, io_manager, "globex")
    source.orders["acme"] = [{"tenant": "acme", "id": 9, "amount": 9, "updated_at": at(8)}]
    assert run(orders_r, instance, io_manager, "acme").success
    assert rows(spark, io_manager, "orders_r") == [("acme", 9, 9), ("globex", 1, 101), ("globex", 2, 102)]

    extra.append({"tenant": "globex", "id": 5, "amount": 5, "updated_at": at(9)})
    failed = run(orders_r, instance, io_manager, "acme", raise_on_error=False)
    assert not failed.success
    assert "a run of partition 'acme' got a row whose 'tenant' is 'globex'" in failure_text(failed)
    assert rows(spark, io_manager, "orders_r") == [("acme", 9, 9), ("globex", 1, 101), ("globex", 2, 102)]


@HADOOP_ONLY
def test_downstream_assets_read_their_tenants_rows(spark, instance, io_manager, config_file):
    source = Source()

    @incremental_asset(partitions_def=TENANTS, partition_column="tenant", config_path=config_file)
    def orders_d(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value=iso(1))):
        return source.read(context.partition_key, updated_at)

    @dg.asset(io_manager_key="mem")
    def tenant_totals(orders_d):
        return {r["tenant"]: r["count"] for r in orders_d.groupBy("tenant").count().collect()}

    @dg.asset(partitions_def=TENANTS, io_manager_key="mem")
    def tenant_ids(orders_d):
        return sorted(r["id"] for r in orders_d.collect())

    resources = {"io_manager": io_manager, "mem": dg.InMemoryIOManager()}
    for tenant in ("acme", "globex"):
        run(orders_d, instance, io_manager, tenant)
    assets = [orders_d, tenant_totals, tenant_ids]
    whole = dg.materialize(assets, selection=[tenant_totals], instance=instance, resources=resources, run_config=QUIET)
    assert whole.output_for_node("tenant_totals") == {"acme": 3, "globex": 2}
    one = dg.materialize(assets, selection=[tenant_ids], partition_key="globex", instance=instance,
                         resources=resources, run_config=QUIET)
    assert one.output_for_node("tenant_ids") == [1, 2]
