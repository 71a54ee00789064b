"""config.toml loading: what a user sees (values and error messages). No Spark, no Dagster."""

from __future__ import annotations

import json
import os
import textwrap
from datetime import date, timedelta, datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagster_incremental.settings.config import AssetConfig, PartitionsConfig, ProjectConfig, load_config
from dagster_incremental.errors import IncrementalConfigError

REPO = Path(__file__).resolve().parents[2]
E = "DAGSTER_INCREMENTAL__"


def write(tmp_path: Path, text: str, folder: str = "config") -> Path:
    """A config.toml in <tmp_path>/<folder>/ (the project folder is then tmp_path)."""
    path = tmp_path / folder / "config.toml" if folder else tmp_path / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ProjectConfig:
    return load_config(write(tmp_path, text), environ=env or {})


def error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> IncrementalConfigError:
    with pytest.raises(IncrementalConfigError) as info:
        load(tmp_path, text, env)
    return info.value


FULL = """
[spark]
master = "spark://host:7077"
app_name = "my-app"

[spark.conf]
"spark.sql.shuffle.partitions" = 4
"spark.memory.fraction" = 0.5
"spark.ui.enabled" = false
"spark.executor.memory" = "2g"
spark.sql.adaptive.enabled = true

[destination]
format = "iceberg"
catalog = "cat"
namespace = "ns"
warehouse = "/abs/warehouse"

[assets.orders]
key_prefix = ["lake", "raw"]
group_name = "sales"
description = "Orders from the shop API"
primary_key = ["id", "region"]
merge_key = "region"
write_disposition = { disposition = "merge", strategy = "scd2", validity_column_names = ["from", "to"], active_record_timestamp = 9999-12-31T00:00:00Z, boundary_timestamp = "2024-06-01T12:00:00Z", row_version_column_name = "version" }
columns = { deleted = { hard_delete = true }, seq = { dedup_sort = "desc" } }
partition_by = "region"
partitions = { schedule = "hourly", start = 2024-01-01T06:00:00, end_offset = 2, timezone = "Europe/Berlin" }
concurrency_pool = "shop_api"

[assets.orders.updated_at]
cursor_path = "data.updated_at"
initial_value = 2024-01-01T00:00:00Z
end_value = 2024-02-01
last_value_func = "min"
primary_key = []
row_order = "asc"
on_cursor_value_missing = "exclude"
range_start = "open"
range_end = "closed"
lag = 3600
cursor_type = "timestamp"

[assets.orders.seq]
initial_value = 10
lag = 2.5
primary_key = "id"
"""


# --------------------------------------------------------------------------- parsing


def test_every_key_is_parsed_and_typed(tmp_path):
    cfg = load(tmp_path, FULL)
    assert cfg.found and cfg.path == tmp_path / "config" / "config.toml"
    assert cfg.spark.master == "spark://host:7077"
    assert cfg.spark.app_name == "my-app"
    assert dict(cfg.spark.conf) == {
        "spark.sql.shuffle.partitions": "4",
        "spark.memory.fraction": "0.5",
        "spark.ui.enabled": "false",
        "spark.executor.memory": "2g",
        "spark.sql.adaptive.enabled": "true",  # a bare dotted key is one Spark key, not a table
    }
    assert (cfg.destination.format, cfg.destination.catalog, cfg.destination.namespace) == ("iceberg", "cat", "ns")
    assert cfg.destination.warehouse == "/abs/warehouse"

    orders = cfg.asset("orders")
    assert dict(orders.overrides) == {
        "key_prefix": ("lake", "raw"),
        "group_name": "sales",
        "description": "Orders from the shop API",
        "primary_key": ("id", "region"),
        "merge_key": ("region",),
        "write_disposition": {
            "disposition": "merge",
            "strategy": "scd2",
            "validity_column_names": ("from", "to"),
            "active_record_timestamp": datetime(9999, 12, 31, tzinfo=timezone.utc),
            "boundary_timestamp": datetime(2024, 6, 1, 12, tzinfo=timezone.utc),
            "row_version_column_name": "version",
        },
        "columns": {"deleted": {"hard_delete": True}, "seq": {"dedup_sort": "desc"}},
        "partition_by": ("region",),
        "partitions": {"schedule": "hourly", "start": datetime(2024, 1, 1, 6), "end_offset": 2,
                       "timezone": "Europe/Berlin"},
        "concurrency_pool": "shop_api",
    }
    assert dict(orders.incremental("updated_at")) == {
        "cursor_path": "data.updated_at",
        "initial_value": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "end_value": date(2024, 2, 1),
        "last_value_func": "min",
        "primary_key": (),  # [] means: no boundary dedup
        "row_order": "asc",
        "on_cursor_value_missing": "exclude",
        "range_start": "open",
        "range_end": "closed",
        "lag": 3600,
        "cursor_type": "timestamp",
    }
    assert dict(orders.incremental("seq")) == {"initial_value": 10, "lag": 2.5, "primary_key": ("id",)}
    assert list(orders.incrementals) == ["updated_at", "seq"]


def test_only_given_keys_are_kept(tmp_path):
    cfg = load(tmp_path, """
        [assets.orders]
        primary_key = "id"
        [assets.orders.updated_at]
        initial_value = "2024-01-01T00:00:00Z"
    """)
    orders = cfg.asset("orders")
    assert dict(orders.overrides) == {"primary_key": ("id",)}
    assert dict(orders.incrementals["updated_at"]) == {"initial_value": "2024-01-01T00:00:00Z"}
    assert orders.get("write_disposition") is None and orders.partitions is None
    assert dict(orders.incremental("other")) == {}


def test_write_disposition_string_becomes_dlt_dict(tmp_path):
    cfg = load(tmp_path, '[assets.a]\nwrite_disposition = "replace"\n')
    assert cfg.asset("a").write_disposition == {"disposition": "replace"}


def test_partitions_start_accepts_iso_strings_and_defaults(tmp_path):
    cfg = load(tmp_path, """
        [assets.a]
        partitions = { schedule = "daily", start = "2024-01-01" }
        [assets.b]
        partitions = { schedule = "monthly", start = "2024-01-01T00:00:00Z" }
    """)
    a, b = cfg.asset("a").partitions, cfg.asset("b").partitions
    assert a == PartitionsConfig(schedule="daily", start=date(2024, 1, 1), end_offset=0, timezone="UTC")
    assert a.start_datetime == datetime(2024, 1, 1)
    assert b.start == datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_defaults_when_the_default_file_is_missing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(environ={})
    assert not cfg.found
    assert cfg.display_path == os.path.join("config", "config.toml")
    assert cfg.spark.master == "local[*]" and cfg.spark.app_name == "dagster-incremental"
    assert dict(cfg.spark.conf) == {}
    assert (cfg.destination.format, cfg.destination.catalog, cfg.destination.namespace) == (
        "iceberg", "lake", "incremental")
    assert cfg.destination.warehouse == str(tmp_path / "config" / "data" / "warehouse")
    assert dict(cfg.assets) == {}
    assert cfg.asset("orders") == AssetConfig("orders")


def test_default_file_and_env_path(tmp_path, monkeypatch):
    write(tmp_path, '[spark]\nmaster = "local[2]"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(environ={}).spark.master == "local[2]"
    other = write(tmp_path, '[spark]\nmaster = "local[3]"\n', folder="elsewhere")
    assert load_config(environ={"DAGSTER_INCREMENTAL_CONFIG": str(other)}).spark.master == "local[3]"
    # an explicit path wins over the variable
    assert load_config("config/config.toml", environ={"DAGSTER_INCREMENTAL_CONFIG": str(other)}).spark.master == "local[2]"


def test_missing_named_file_is_an_error(tmp_path):
    missing = tmp_path / "nope" / "config.toml"
    with pytest.raises(IncrementalConfigError, match="config file not found") as info:
        load_config(missing, environ={})
    assert str(missing) in str(info.value)
    with pytest.raises(IncrementalConfigError, match=r"named by \$DAGSTER_INCREMENTAL_CONFIG"):
        load_config(environ={"DAGSTER_INCREMENTAL_CONFIG": str(missing)})


def test_the_example_config_loads_cleanly():
    cfg = load_config(REPO / "config" / "config.toml", environ={})
    assert cfg.project_dir == REPO
    assert cfg.destination.warehouse == str(REPO / "data" / "warehouse")
    assert (cfg.destination.format, cfg.destination.catalog) == ("iceberg", "lake")
    assert cfg.spark.master == "local[*]"
    assert set(cfg.assets) == {"orders", "customers", "api_events", "daily_events", "orders_enriched", "revenue_by_day"}
    orders = cfg.asset("orders")
    assert orders.write_disposition == {"disposition": "merge", "strategy": "upsert"}
    assert orders.get("primary_key") == ("id",)
    assert orders.get("columns") == {"is_deleted": {"hard_delete": True}}
    assert orders.incremental("updated_at")["initial_value"] == "2024-01-01T00:00:00Z"
    customers = cfg.asset("customers")
    assert customers.write_disposition == {"disposition": "merge", "strategy": "scd2"}
    assert "merge_key" not in customers.overrides
    assert cfg.asset("api_events").incremental("created_at")["row_order"] == "desc"
    daily = cfg.asset("daily_events")
    assert daily.get("partitions") is None  # in code: they begin with the example's event files
    assert daily.get("merge_key") == ("event_date",)
    assert dict(daily.incremental("event_time")) == {"cursor_path": "event_time", "lag": 86400, "step": "P1D"}
    assert orders.freshness == timedelta(days=1)


# --------------------------------------------------------------------------- warehouse


@pytest.mark.parametrize(
    ("folder", "value", "expected"),
    [
        ("config", "data/warehouse", "config/data/warehouse"),
        ("config", "../data/warehouse", "data/warehouse"),
        ("config", "./wh/../wh2", "config/wh2"),
        ("", "data/warehouse", "data/warehouse"),  # file not in a config/ folder: its own folder
    ],
)
def test_relative_warehouse_resolves_against_the_config_folder(tmp_path, folder, value, expected):
    cfg = load_config(write(tmp_path, f'[destination]\nwarehouse = "{value}"\n', folder), environ={})
    assert cfg.destination.warehouse == str(tmp_path / expected)


@pytest.mark.parametrize("uri", ["s3://bucket/wh", "s3a://bucket/wh", "hdfs://nn:8020/wh", "file:/tmp/wh",
                                 "abfss://c@acct.dfs.core.windows.net/wh", "/srv/warehouse"])
def test_uris_and_absolute_warehouses_stay_as_given(tmp_path, uri):
    assert load(tmp_path, f'[destination]\nwarehouse = "{uri}"\n').destination.warehouse == uri


@pytest.mark.parametrize(("folder", "value"), [("config", "../../elsewhere"), ("", "../elsewhere")])
def test_relative_warehouse_outside_the_project_is_rejected(tmp_path, folder, value):
    path = write(tmp_path, f'[destination]\nwarehouse = "{value}"\n', folder)
    with pytest.raises(IncrementalConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f'{path}: [destination] warehouse = "{value}" resolves to ')
    assert f"outside the project folder {tmp_path}" in message
    assert "absolute path or a URI" in message and "(at line 2)" in message


# --------------------------------------------------------------------------- environment


BASE = """
[spark]
master = "local[*]"
[spark.conf]
"spark.sql.shuffle.partitions" = 4
"spark.driver.bindAddress" = "0.0.0.0"
[destination]
warehouse = "data/warehouse"
[assets.orders]
write_disposition = "merge"
primary_key = ["id"]
columns = { is_deleted = { hard_delete = true } }
[assets.orders.updated_at]
cursor_path = "updated_at"
initial_value = "2024-01-01T00:00:00Z"
[assets.dailyEvents]
partitions = { schedule = "daily", start = 2024-01-01 }
[assets.dailyEvents.eventTime]
cursor_path = "event_time"
[assets.orders.code]
cursor_path = "code"
cursor_type = "string"
"""


def test_env_str_values_win_over_the_file(tmp_path):
    cfg = load(tmp_path, BASE, {f"{E}SPARK__MASTER": "spark://cluster:7077",
                                f"{E}SPARK__APP_NAME": "nightly",
                                f"{E}DESTINATION__FORMAT": "iceberg",
                                f"{E}ASSETS__ORDERS__UPDATED_AT__CURSOR_PATH": "modified_at"})
    assert cfg.spark.master == "spark://cluster:7077" and cfg.spark.app_name == "nightly"
    assert cfg.destination.format == "iceberg"
    assert cfg.asset("orders").incremental("updated_at")["cursor_path"] == "modified_at"
    assert cfg.sources[("spark", "master")] == f"{E}SPARK__MASTER"


def test_env_warehouse_resolves_against_the_config_folder(tmp_path):
    cfg = load(tmp_path, BASE, {f"{E}DESTINATION__WAREHOUSE": "../lake"})
    assert cfg.destination.warehouse == str(tmp_path / "lake")


@pytest.mark.parametrize(
    ("var", "text", "get", "expected"),
    [
        # int / float / bool / enum
        ("ASSETS__DAILYEVENTS__PARTITIONS__END_OFFSET", "10", lambda c: c.asset("dailyEvents").partitions.end_offset, 10),
        ("ASSETS__ORDERS__UPDATED_AT__LAG", "1.5", lambda c: c.asset("orders").incremental("updated_at")["lag"], 1.5),
        ("ASSETS__ORDERS__UPDATED_AT__LAG", "30", lambda c: c.asset("orders").incremental("updated_at")["lag"], 30),
        ("ASSETS__ORDERS__COLUMNS__IS_DELETED__HARD_DELETE", "false",
         lambda c: c.asset("orders").get("columns"), {"is_deleted": {"hard_delete": False}}),
        ("ASSETS__ORDERS__COLUMNS__SEQ__DEDUP_SORT", "asc", lambda c: c.asset("orders").get("columns"),
         {"is_deleted": {"hard_delete": True}, "seq": {"dedup_sort": "asc"}}),
        ("ASSETS__ORDERS__UPDATED_AT__ROW_ORDER", "desc",
         lambda c: c.asset("orders").incremental("updated_at")["row_order"], "desc"),
        # lists, both syntaxes
        ("ASSETS__ORDERS__PRIMARY_KEY", '["id", "ts"]', lambda c: c.asset("orders").get("primary_key"), ("id", "ts")),
        ("ASSETS__ORDERS__PRIMARY_KEY", "id, ts", lambda c: c.asset("orders").get("primary_key"), ("id", "ts")),
        ("ASSETS__ORDERS__PRIMARY_KEY", "id", lambda c: c.asset("orders").get("primary_key"), ("id",)),
        ("ASSETS__ORDERS__UPDATED_AT__PRIMARY_KEY", "[]",
         lambda c: c.asset("orders").incremental("updated_at")["primary_key"], ()),
        # inline tables and their keys
        ("ASSETS__ORDERS__WRITE_DISPOSITION", '{disposition = "merge", strategy = "upsert"}',
         lambda c: c.asset("orders").write_disposition, {"disposition": "merge", "strategy": "upsert"}),
        ("ASSETS__ORDERS__WRITE_DISPOSITION", '{"disposition": "replace"}',
         lambda c: c.asset("orders").write_disposition, {"disposition": "replace"}),
        ("ASSETS__ORDERS__WRITE_DISPOSITION", "append",
         lambda c: c.asset("orders").write_disposition, {"disposition": "append"}),
        ("ASSETS__ORDERS__WRITE_DISPOSITION__STRATEGY", "delete-insert",  # patches the file's "merge"
         lambda c: c.asset("orders").write_disposition, {"disposition": "merge", "strategy": "delete-insert"}),
        ("ASSETS__ORDERS__COLUMNS", "{deleted = {hard_delete = true}}",
         lambda c: c.asset("orders").get("columns"), {"deleted": {"hard_delete": True}}),
        ("ASSETS__ORDERS__UPDATED_AT", '{initial_value = "2023-01-01", lag = 5}',
         lambda c: dict(c.asset("orders").incremental("updated_at")), {"initial_value": "2023-01-01", "lag": 5}),
        # dates and datetimes
        ("ASSETS__DAILYEVENTS__PARTITIONS__START", "2023-06-01",
         lambda c: c.asset("dailyEvents").partitions.start, date(2023, 6, 1)),
        ("ASSETS__DAILYEVENTS__PARTITIONS__START", "2023-06-01T05:00:00Z",
         lambda c: c.asset("dailyEvents").partitions.start, datetime(2023, 6, 1, 5, tzinfo=timezone.utc)),
        ("ASSETS__ORDERS__WRITE_DISPOSITION", '{disposition = "merge", strategy = "scd2", boundary_timestamp = "2024-01-01T00:00:00+02:00"}',
         lambda c: c.asset("orders").write_disposition["boundary_timestamp"],
         datetime.fromisoformat("2024-01-01T00:00:00+02:00")),
        # cursor values: ISO strings stay strings (as in the file), numbers become numbers
        ("ASSETS__ORDERS__UPDATED_AT__INITIAL_VALUE", "2025-01-01T00:00:00Z",
         lambda c: c.asset("orders").incremental("updated_at")["initial_value"], "2025-01-01T00:00:00Z"),
        ("ASSETS__ORDERS__UPDATED_AT__END_VALUE", "1700000000",
         lambda c: c.asset("orders").incremental("updated_at")["end_value"], 1700000000),
        ("ASSETS__ORDERS__UPDATED_AT__END_VALUE", "12.5",
         lambda c: c.asset("orders").incremental("updated_at")["end_value"], 12.5),
        ("ASSETS__ORDERS__CODE__END_VALUE", '"123"',  # a string cursor (cursor_type = "string")
         lambda c: c.asset("orders").incremental("code")["end_value"], "123"),
        ("ASSETS__ORDERS__CODE__END_VALUE", "007",
         lambda c: c.asset("orders").incremental("code")["end_value"], "007"),
        # Spark conf: SPARK_ keys map `_` to `.`; keys the file has match their spelling
        ("SPARK__CONF__SPARK_SQL_SHUFFLE_PARTITIONS", "16",
         lambda c: c.spark.conf["spark.sql.shuffle.partitions"], "16"),
        ("SPARK__CONF__SPARK_EXECUTOR_CORES", "2", lambda c: c.spark.conf["spark.executor.cores"], "2"),
        ("SPARK__CONF__SPARK_DRIVER_BINDADDRESS", "127.0.0.1",
         lambda c: c.spark.conf["spark.driver.bindAddress"], "127.0.0.1"),
        ("SPARK__CONF", '{"spark.sql.catalog.my_cat.type" = "hadoop", "spark.ui.enabled" = false}',
         lambda c: dict(c.spark.conf), {"spark.sql.shuffle.partitions": "4", "spark.driver.bindAddress": "0.0.0.0",
                                        "spark.sql.catalog.my_cat.type": "hadoop", "spark.ui.enabled": "false"}),
    ],
)
def test_env_values_are_typed_by_the_key(tmp_path, var, text, get, expected):
    assert get(load(tmp_path, BASE, {E + var: text})) == expected


def test_env_per_key_wins_over_env_table(tmp_path):
    cfg = load(tmp_path, BASE, {f"{E}ASSETS__ORDERS__WRITE_DISPOSITION": '{disposition = "merge", strategy = "upsert"}',
                                f"{E}ASSETS__ORDERS__WRITE_DISPOSITION__STRATEGY": "scd2"})
    assert cfg.asset("orders").write_disposition == {"disposition": "merge", "strategy": "scd2"}


def test_env_matches_asset_and_argument_names_case_insensitively(tmp_path):
    cfg = load(tmp_path, BASE, {f"{E}ASSETS__DAILYEVENTS__EVENTTIME__INITIAL_VALUE": "2024-03-01",
                                "dagster_incremental__assets__orders__group_name": "sales"})
    assert set(cfg.assets) == {"orders", "dailyEvents"}
    assert dict(cfg.asset("dailyEvents").incremental("eventTime")) == {
        "cursor_path": "event_time", "initial_value": "2024-03-01"}
    assert cfg.asset("orders").get("group_name") == "sales"
    # lookups by the asset's own spelling or any other case find the same asset
    assert cfg.asset("DailyEvents") is cfg.asset("dailyEvents")
    assert cfg.asset("dailyEvents").incremental("EVENTTIME")["cursor_path"] == "event_time"


def test_env_creates_an_asset_that_the_file_lacks(tmp_path):
    cfg = load(tmp_path, BASE, {f"{E}ASSETS__PAYMENTS__PRIMARY_KEY": "payment_id",
                                f"{E}ASSETS__PAYMENTS__PAID_AT__CURSOR_PATH": "paid_at"})
    payments = cfg.asset("payments")
    assert payments.name == "payments"
    assert dict(payments.overrides) == {"primary_key": ("payment_id",)}
    assert dict(payments.incrementals) == {"paid_at": {"cursor_path": "paid_at"}}


def test_env_cannot_tell_names_apart_that_differ_only_in_case(tmp_path):
    err = error(tmp_path, '[assets.Orders]\nprimary_key = "id"\n[assets.ORDERS]\nprimary_key = "id"\n',
                {f"{E}ASSETS__ORDERS__GROUP_NAME": "sales"})
    assert "[assets] orders (from environment variable DAGSTER_INCREMENTAL__ASSETS__ORDERS__GROUP_NAME) " \
           "matches several names of the file (Orders, ORDERS)" in str(err)


def test_env_cannot_set_a_key_inside_a_value_that_is_not_a_table(tmp_path):
    err = error(tmp_path, "[assets.orders]\ncolumns = 5\n",
                {f"{E}ASSETS__ORDERS__COLUMNS__ID__HARD_DELETE": "true"})
    assert f"[assets.orders] columns = 5 is an integer, so {E}ASSETS__ORDERS__COLUMNS__ID__HARD_DELETE " \
           "cannot set a key inside it" in str(err)


def test_env_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(environ={f"{E}ASSETS__ORDERS__UPDATED_AT__LAG": "60"})
    assert not cfg.found and cfg.asset("orders").incremental("updated_at")["lag"] == 60


@pytest.mark.parametrize(
    ("var", "text", "expected"),
    [
        ("ASSETS__DAILYEVENTS__PARTITIONS__END_OFFSET", "ten",
         '[assets.dailyEvents] partitions.end_offset = "ten" (from environment variable '
         f'{E}ASSETS__DAILYEVENTS__PARTITIONS__END_OFFSET) is not an integer; use an integer >= 0'),
        ("ASSETS__ORDERS__UPDATED_AT__LAG", "soon",
         '[assets.orders.updated_at] lag = "soon" (from environment variable '
         f'{E}ASSETS__ORDERS__UPDATED_AT__LAG) is not an ISO-8601 duration; use a number >= 0'),
        ("ASSETS__ORDERS__UPDATED_AT__LAG", "-1",
         f"[assets.orders.updated_at] lag = -1 (from environment variable {E}ASSETS__ORDERS__UPDATED_AT__LAG) "
         "is not allowed; use a number >= 0"),
        ("ASSETS__ORDERS__COLUMNS__IS_DELETED__HARD_DELETE", "yes",
         '[assets.orders] columns.is_deleted.hard_delete = "yes" (from environment variable '
         f'{E}ASSETS__ORDERS__COLUMNS__IS_DELETED__HARD_DELETE) is not true or false; use true or false'),
        ("ASSETS__ORDERS__UPDATED_AT__ON_CURSOR_VALUE_MISSING", "skip",
         '[assets.orders.updated_at] on_cursor_value_missing = "skip" (from environment variable '
         f'{E}ASSETS__ORDERS__UPDATED_AT__ON_CURSOR_VALUE_MISSING) is not allowed; use one of "raise", '
         '"include", "exclude"'),
        ("ASSETS__ORDERS__WRITE_DISPOSITION", "{disposition = ",
         '[assets.orders] write_disposition = "{disposition = " (from environment variable '
         f"{E}ASSETS__ORDERS__WRITE_DISPOSITION) is neither a TOML nor a JSON literal"),
        ("ASSETS__ORDERS__PRIMARY_KEY", "[id, ts]",
         f'[assets.orders] primary_key = "[id, ts]" (from environment variable {E}ASSETS__ORDERS__PRIMARY_KEY) '
         "is neither a TOML nor a JSON literal; use a column name or a list of column names"),
        ("ASSETS__DAILYEVENTS__PARTITIONS__START", "yesterday",
         '[assets.dailyEvents] partitions.start = "yesterday" (from environment variable '
         f"{E}ASSETS__DAILYEVENTS__PARTITIONS__START) is not an ISO-8601 date or datetime"),
        ("ASSETS__ORDERS__UPDATED_AT__INITAL_VALUE", "2024-01-01",
         "[assets.orders.updated_at] inital_value (from environment variable "
         f"{E}ASSETS__ORDERS__UPDATED_AT__INITAL_VALUE) is not a known key; did you mean "
         f"{E}ASSETS__ORDERS__UPDATED_AT__INITIAL_VALUE?"),
        ("SPARK__MASTR", "local", f"[spark] mastr (from environment variable {E}SPARK__MASTR) is not a known "
         f"key; did you mean {E}SPARK__MASTER?"),
        ("SPARKS__MASTER", "local", f"[sparks] (from environment variable {E}SPARKS__MASTER) is not a known "
         f"section; did you mean {E}SPARK__...?"),
        ("SPARK__CONF__DRIVER_MEMORY", "2g", "[spark.conf] DRIVER_MEMORY (from environment variable "
         f"{E}SPARK__CONF__DRIVER_MEMORY) does not start with SPARK_"),
    ],
)
def test_env_errors_name_the_variable_the_value_and_what_is_allowed(tmp_path, var, text, expected):
    err = error(tmp_path, BASE, {E + var: text})
    assert str(err).startswith(f"{tmp_path / 'config' / 'config.toml'}: {expected}"), str(err)
    assert err.env_var == E + var
    assert "(at line" not in str(err)


def test_env_name_with_an_empty_level_is_an_error(tmp_path):
    err = error(tmp_path, BASE, {f"{E}ASSETS____PRIMARY_KEY": "id"})
    assert str(err).startswith(f"environment variable {E}ASSETS____PRIMARY_KEY is not a valid name; separate")


def test_env_patch_that_breaks_a_file_table_names_both(tmp_path):
    err = error(tmp_path, BASE, {f"{E}ASSETS__ORDERS__WRITE_DISPOSITION__DISPOSITION": "append",
                                 f"{E}ASSETS__ORDERS__WRITE_DISPOSITION__STRATEGY": "upsert"})
    message = str(err)
    assert '[assets.orders] write_disposition = {disposition = "append", strategy = "upsert"}' in message
    assert f"{E}ASSETS__ORDERS__WRITE_DISPOSITION__DISPOSITION" in message
    assert f"{E}ASSETS__ORDERS__WRITE_DISPOSITION__STRATEGY" in message
    assert 'sets strategy but disposition is "append"' in message


@pytest.fixture(scope="module")
def base_config(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("project"), BASE)


@given(names=st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
                      min_size=1, max_size=5, unique=True))
def test_env_lists_in_either_syntax_give_the_same_columns(base_config, names):
    var = f"{E}ASSETS__ORDERS__PRIMARY_KEY"
    as_array = load_config(base_config, environ={var: json.dumps(names)}).asset("orders").get("primary_key")
    as_csv = load_config(base_config, environ={var: ", ".join(names)}).asset("orders").get("primary_key")
    assert as_array == as_csv == tuple(names)


# --------------------------------------------------------------------------- file errors


def test_malformed_toml_names_the_file_and_line(tmp_path):
    path = write(tmp_path, '[spark]\nmaster = "local[*]"\napp_name = = "x"\n')
    with pytest.raises(IncrementalConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "(at line 3, column" in message
    assert '3 | app_name = = "x"' in message
    assert info.value.line == 3


def test_unknown_section_suggests_the_closest(tmp_path):
    err = error(tmp_path, '[spark]\nmaster = "x"\n\n[destinaton]\nformat = "delta"\n')
    assert str(err).endswith("[destinaton] is not a known section; did you mean [destination]? known sections: "
                             "[spark], [destination], [assets.<asset>] (at line 4)")


def test_unknown_key_suggests_the_closest_known_key(tmp_path):
    err = error(tmp_path, """
        [assets.orders]
        primary_key = ["id"]

        [assets.orders.updated_at]
        cursor_path = "updated_at"
        inital_value = "2024-01-01"
    """)
    assert str(err).startswith(f"{err.path}: [assets.orders.updated_at] inital_value is not a known key; "
                               "did you mean initial_value? known keys: cursor_path, initial_value")
    assert str(err).endswith("(at line 7)")
    assert (err.section, err.key, err.line) == ("[assets.orders.updated_at]", "inital_value", 7)


def test_unknown_asset_key_suggests_and_explains_sub_tables(tmp_path):
    err = error(tmp_path, '[assets.orders]\nprimary_keys = ["id"]\n')
    assert "[assets.orders] primary_keys is not a known key; did you mean primary_key? sub-tables name " \
           "incremental arguments; known keys: key_prefix, group_name" in str(err)


def test_a_key_in_the_wrong_table_says_where_it_belongs(tmp_path):
    err = error(tmp_path, '[assets.orders.updated_at]\ncursor_path = "x"\nwrite_disposition = "merge"\n')
    assert "write_disposition belongs in [assets.orders]" in str(err)
    err = error(tmp_path, '[assets.orders]\ncursor_path = "x"\n')
    assert "cursor_path belongs in the table of an incremental argument" in str(err)


def test_a_misspelt_table_is_read_as_an_argument_and_the_message_says_so(tmp_path):
    err = error(tmp_path, "[assets.orders.colums]\nis_deleted = { hard_delete = true }\n")
    assert "[assets.orders.colums] is read as the incremental argument 'colums'; " \
           "did you mean [assets.orders.columns]?" in str(err)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[assets.orders.updated_at]\non_cursor_value_missing = "skip"\n',
         '[assets.orders.updated_at] on_cursor_value_missing = "skip" is not allowed; use one of "raise", '
         '"include", "exclude" (at line 2)'),
        ('[assets.orders.updated_at]\nlast_value_func = "latest"\n',
         '[assets.orders.updated_at] last_value_func = "latest" is not allowed; use one of "max", "min"'),
        ('[assets.orders.updated_at]\nrange_start = "half"\n',
         '[assets.orders.updated_at] range_start = "half" is not allowed; use one of "closed", "open"'),
        ('[assets.orders.updated_at]\ncursor_type = "uuid"\n',
         '[assets.orders.updated_at] cursor_type = "uuid" is not allowed; use one of "timestamp", "date", '
         '"number", "string", "epoch_seconds", "epoch_millis"'),
        ('[destination]\nformat = "parquet"\n',
         '[destination] format = "parquet" is not allowed; use "iceberg" or "delta" (at line 2)'),
        ('[assets.orders]\nwrite_disposition = "upsert"\n',
         '[assets.orders] write_disposition = "upsert" is not allowed; use "append", "replace" or "merge", '
         "or a table such as"),
        ('[assets.orders]\nwrite_disposition = { disposition = "merge", strategy = "insert" }\n',
         '[assets.orders] write_disposition.strategy = "insert" is not allowed; use one of "delete-insert", '
         '"upsert", "insert-only", "scd2"'),
        ('[assets.orders]\ncolumns = { seq = { dedup_sort = "newest" } }\n',
         '[assets.orders] columns.seq.dedup_sort = "newest" is not allowed; use one of "asc", "desc"'),
        ('[assets.orders]\npartitions = { schedule = "yearly", start = 2024-01-01 }\n',
         '[assets.orders] partitions.schedule = "yearly" is not allowed; use one of "hourly", "daily", '
         '"weekly", "monthly"'),
    ],
)
def test_bad_enum_values(tmp_path, toml, expected):
    err = error(tmp_path, toml)
    assert str(err).startswith(f"{err.path}: {expected}"), str(err)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[spark]\nmaster = 7077\n", '[spark] master = 7077 is an integer; use a Spark master URL'),
        ('[spark]\nmaster = ""\n', '[spark] master = "" is empty'),
        ("[spark.conf]\n\"spark.jars\" = [\"a.jar\"]\n",
         '[spark.conf] spark.jars = ["a.jar"] is an array; Spark settings are strings, numbers or booleans'),
        ('spark = "local"\n', 'spark = "local" is a string; make it a table: [spark]'),
        ("[assets]\norders = 1\n", "[assets] orders = 1 is an integer; each asset is a table: [assets.orders]"),
        ("[assets.orders]\nprimary_key = 5\n",
         "[assets.orders] primary_key = 5 is an integer; use a column name or a list of column names"),
        ("[assets.orders]\nkey_prefix = 5\n",
         '[assets.orders] key_prefix = 5 is an integer; use a string or a list of strings, e.g. ["lake", "raw"]'),
        ('[assets.orders]\nprimary_key = ["id", 5]\n', '[assets.orders] primary_key = ["id", 5] has an integer item 5'),
        ('[assets.orders]\nprimary_key = ["id", "id"]\n', '[assets.orders] primary_key = ["id", "id"] names a column twice'),
        ("[assets.orders]\nprimary_key = []\n", "[assets.orders] primary_key = [] is empty"),
        ('[assets.orders]\nwrite_disposition = ["merge"]\n', '[assets.orders] write_disposition = ["merge"] is an array'),
        ("[assets.orders]\ncolumns = { deleted = true }\n",
         "[assets.orders] columns.deleted = true is a boolean; use a table of hints"),
        ('[assets.orders]\ncolumns = { deleted = { hard_delete = "yes" } }\n',
         '[assets.orders] columns.deleted.hard_delete = "yes" is a string; use true or false'),
        ('[assets.orders]\ncolumns = { deleted = { nullable = false } }\n',
         "[assets.orders] columns.deleted.nullable is not a known key; known keys: hard_delete, dedup_sort"),
        ('[assets.orders.updated_at]\nlag = "1h"\n', '[assets.orders.updated_at] lag = "1h" is not an ISO-8601 duration; use a number >= 0'),
        ("[assets.orders.updated_at]\nlag = -5\n", "[assets.orders.updated_at] lag = -5 is not allowed; use a number >= 0"),
        ("[assets.orders.updated_at]\nlag = true\n", "[assets.orders.updated_at] lag = true is a boolean"),
        ("[assets.orders.updated_at]\ninitial_value = true\n",
         "[assets.orders.updated_at] initial_value = true is a boolean; use a date, a datetime, a number or a string"),
        ('[assets.daily_events.event_time]\ninitial_value = "yesterday"\n',
         '[assets.daily_events.event_time] initial_value = "yesterday" is not an ISO-8601 date or datetime; '
         'use a date, a datetime, a number or an ISO-8601 string such as "2024-01-01T00:00:00Z"; for a cursor '
         'column holding other strings, also set cursor_type = "string" (at line 2)'),
        ('[assets.orders.updated_at]\nend_value = "2024-13-45"\n',
         '[assets.orders.updated_at] end_value = "2024-13-45" is not a valid date'),
        ('[assets.orders.updated_at]\ncursor_type = "number"\ninitial_value = "2024-01-01"\n',
         '[assets.orders.updated_at] initial_value = "2024-01-01" is not a valid number'),
        ("[assets.orders.updated_at]\ninitial_value = 10:00:00\n", "[assets.orders.updated_at] initial_value = 10:00:00 is a time"),
        ("[assets.orders.updated_at]\nend_value = [1]\n", "[assets.orders.updated_at] end_value = [1] is an array"),
        ("[assets.orders.updated_at]\ncursor_path = 1\n", "[assets.orders.updated_at] cursor_path = 1 is an integer"),
        ('[assets.orders]\npartitions = { schedule = "daily", start = "soon" }\n',
         '[assets.orders] partitions.start = "soon" is not an ISO-8601 date or datetime'),
        ('[assets.orders]\npartitions = { schedule = "daily" }\n',
         '[assets.orders] partitions = {schedule = "daily"} has no start'),
        ('[assets.orders]\npartitions = { schedule = "daily", start = 2024-01-01, end_offset = -1 }\n',
         "[assets.orders] partitions.end_offset = -1 is not allowed; use an integer >= 0"),
        ('[assets.orders]\npartitions = { schedule = "daily", start = 2024-01-01, timezone = "Mars/Olympus" }\n',
         '[assets.orders] partitions.timezone = "Mars/Olympus" is not a known time zone'),
        ('[assets.orders]\nwrite_disposition = { strategy = "upsert" }\n',
         '[assets.orders] write_disposition = {strategy = "upsert"} has no disposition'),
        ('[assets.orders]\nwrite_disposition = { disposition = "merge", strategy = "scd2", validity_column_names = ["a"] }\n',
         '[assets.orders] write_disposition.validity_column_names = ["a"] has 1 names; use two column names'),
        ('[destination]\ncatalog = "a.b"\n', '[destination] catalog = "a.b" contains a dot'),
        ('[assets."my-asset"]\nprimary_key = "id"\n', "[assets.my-asset] is not a valid asset name"),
        ('[assets.orders."updated-at"]\ncursor_path = "x"\n', "[assets.orders.updated-at] is not a valid argument name"),
    ],
)
def test_wrong_types_and_values(tmp_path, toml, expected):
    err = error(tmp_path, toml)
    assert str(err).startswith(f"{err.path}: {expected}"), str(err)


def test_hard_delete_on_two_columns_is_rejected(tmp_path):
    err = error(tmp_path, """
        [assets.orders]
        primary_key = "id"
        columns = { deleted = { hard_delete = true }, removed = { hard_delete = true }, ok = { hard_delete = false } }
    """)
    assert "[assets.orders] columns = {deleted = {hard_delete = true}, removed = {hard_delete = true}" in str(err)
    assert "gives hard_delete = true to 2 columns (deleted, removed); at most one column may have " \
           "hard_delete = true (at line 4)" in str(err)


def test_dedup_sort_on_two_columns_is_rejected(tmp_path):
    err = error(tmp_path, """
        [assets.orders.columns.a]
        dedup_sort = "asc"
        [assets.orders.columns.b]
        dedup_sort = "desc"
    """)
    assert "gives dedup_sort to 2 columns (a, b); at most one column may have dedup_sort" in str(err)


def test_strategy_without_merge_is_rejected(tmp_path):
    err = error(tmp_path, """
        [assets.orders.write_disposition]
        disposition = "append"
        strategy = "upsert"
    """)
    assert str(err) == (f'{err.path}: [assets.orders] write_disposition = {{disposition = "append", strategy = '
                        '"upsert"} sets strategy but disposition is "append"; a strategy only applies to '
                        'disposition = "merge" (at line 2)')


@pytest.mark.parametrize("strategy", ['strategy = "upsert", ', ""])
def test_scd2_options_without_scd2_are_rejected(tmp_path, strategy):
    err = error(tmp_path, "[assets.orders]\nwrite_disposition = { disposition = \"merge\", "
                          f'{strategy}validity_column_names = ["f", "t"], row_version_column_name = "v" }}\n')
    assert "sets validity_column_names, row_version_column_name but " in str(err)
    assert 'these options only apply to strategy = "scd2"' in str(err)


def test_errors_are_value_errors_with_structured_attributes(tmp_path):
    err = error(tmp_path, '[assets.orders.updated_at]\nrow_order = "up"\n')
    assert isinstance(err, ValueError)
    assert (err.path, err.section, err.key, err.value, err.line, err.env_var) == (
        tmp_path / "config" / "config.toml", "[assets.orders.updated_at]", "row_order", "up", 2, None)


def test_messages_use_the_path_as_the_user_named_it(tmp_path, monkeypatch):
    write(tmp_path, '[destination]\nformat = "csv"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IncrementalConfigError) as info:
        load_config(environ={})
    assert str(info.value).startswith(os.path.join("config", "config.toml") + ': [destination] format = "csv"')


# --------------------------------------------------------------------------- where()


def test_where_renders_the_location_for_later_errors(tmp_path):
    cfg = load(tmp_path, BASE, {f"{E}ASSETS__ORDERS__UPDATED_AT__END_VALUE": "2023-01-01"})
    file = tmp_path / "config" / "config.toml"
    assert cfg.where("orders", "updated_at", "initial_value") == (
        f"{file}: [assets.orders.updated_at] initial_value (at line 15)")
    assert cfg.where("ORDERS", "UPDATED_AT", "end_value") == (
        f"{file}: [assets.orders.updated_at] end_value (from environment variable "
        f"{E}ASSETS__ORDERS__UPDATED_AT__END_VALUE)")
    assert cfg.where("dailyevents", "eventtime") == f"{file}: [assets.dailyEvents.eventTime] (at line 18)"
    assert cfg.where("orders", key="primary_key") == f"{file}: [assets.orders] primary_key (at line 11)"
    assert cfg.where("unknown", "arg", "lag") == f"{file}: [assets.unknown.arg] lag"


def test_a_column_description_must_be_text(tmp_path):
    err = error(tmp_path, """
        [assets.orders]
        columns = { amount = { description = 3 } }
    """)
    assert "[assets.orders] columns.amount.description = 3 is an integer; use a non-empty string (at line 3)" in str(err)
