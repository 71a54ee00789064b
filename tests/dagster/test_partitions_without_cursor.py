"""Partitioned assets without a cursor: a partition run replaces that partition's rows.

What a user sees: running the same partition twice leaves exactly one copy of its rows (the
second run's), and the other partitions' rows as they were, for daily, hourly, static and
tenant x day partitions and every disposition (delete-insert, which takes upsert's path there, on
tenant x day); a time-window asset that has no column placing a row in a window is refused when
it is defined, naming the asset and the key to add.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset
from dagster_incremental.dagster import partition_scope
from dagster_incremental.errors import IncrementalConfigError
from attack_support import failure_text
from catalogs import HADOOP_ONLY

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
NOW = datetime(2024, 1, 3, 12, tzinfo=timezone.utc)  # 2024-01-03 is the open day
TENANTS = dg.StaticPartitionsDefinition(["acme", "globex"])
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_offset=1)
HOURLY = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00")
BY_DAY = dg.MultiPartitionsDefinition({"day": DAILY, "tenant": TENANTS})
DISPOSITIONS = {
    "append": "append",
    "replace": "replace",
    "delete-insert": {"disposition": "merge", "strategy": "delete-insert"},
    "upsert": {"disposition": "merge", "strategy": "upsert"},
    "insert-only": {"disposition": "merge", "strategy": "insert-only"},
    "scd2": {"disposition": "merge", "strategy": "scd2"},
}


def key(day: str, tenant: str) -> str:
    return str(dg.MultiPartitionKey({"day": day, "tenant": tenant}))


# kind -> (partitions_def, the partition run twice, another partition, merge_key of scd2). A closed
# window (hourly here; a closed day runs the same way) is a backfill; an open one holds a cursor scope.
KINDS = {
    "hourly": (HOURLY, "2024-01-01-05:00", "2024-01-01-06:00", ["day"]),
    "daily-open": (DAILY, "2024-01-03", "2024-01-02", ["day"]),
    "static": (TENANTS, "acme", "globex", ["tenant"]),
    "tenant-by-open-day": (BY_DAY, key("2024-01-03", "acme"), key("2024-01-03", "globex"), ["tenant", "day"]),
}
# A partition run without a cursor replaces its window (scd2 merges instead): delete-insert and
# upsert then take one path (the same window MERGE with the batch's keys, the same table
# properties), so the richest kind runs both and the others upsert only.
EVERY_DISPOSITION_KIND = "tenant-by-open-day"


def dispositions_of(kind: str) -> list[str]:
    return [d for d in DISPOSITIONS if kind == EVERY_DISPOSITION_KIND or d != "delete-insert"]


@pytest.fixture(autouse=True)
def open_day(monkeypatch):
    monkeypatch.setattr(partition_scope, "utc_now", lambda: NOW)


@pytest.fixture
def plain_config(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[destination]\ncatalog = "lake"\nnamespace = "t"\nwarehouse = "{tmp_path / "wh"}"\n')
    return str(path)


def write_options(disposition: str, scd2_merge_key: list[str]) -> dict:
    options: dict = {"write_disposition": DISPOSITIONS[disposition], "primary_key": ["tenant", "day", "id"]}
    if disposition == "scd2":  # a batch retires only the current rows of its own partition
        options["merge_key"] = scd2_merge_key
    return options


# -- definition time (no Spark) ---------------------------------------------------------------------


@pytest.mark.parametrize("disposition", DISPOSITIONS)
@pytest.mark.parametrize("partitions_def", [DAILY, HOURLY, BY_DAY], ids=["daily", "hourly", "tenant-by-day"])
def test_time_windows_without_a_window_column_or_cursor_are_refused_naming_the_key(plain_config, partitions_def, disposition):
    with pytest.raises(IncrementalConfigError) as refused:
        @incremental_asset(partitions_def=partitions_def, config_path=plain_config,
                           **write_options(disposition, ["tenant", "day"]))
        def daily_rows():
            return []
    text = str(refused.value)
    assert text.startswith("asset 'daily_rows': a run of one of its time-window partitions replaces")
    assert "it has no `Incremental` parameter and no window_column" in text
    assert f'Set window_column = "<column>" in {plain_config}: [assets.daily_rows]' in text
    assert 'incremental("updated_at")' in text


def test_a_nested_cursor_without_a_window_column_is_refused_naming_the_argument(plain_config):
    with pytest.raises(IncrementalConfigError, match=r"asset 'nested_rows': .*its incremental argument 'seen' "
                                                     r"\(cursor_path 'meta.seen'\) is a nested path, not a column"):
        @incremental_asset(partitions_def=DAILY, config_path=plain_config)
        def nested_rows(seen: Incremental = incremental("meta.seen")):
            return []


def test_window_column_in_config_toml_or_a_plain_cursor_makes_the_asset_definable(plain_config):
    with open(plain_config, "a") as f:
        f.write('\n[assets.from_toml]\nwindow_column = "at"\n')

    @incremental_asset(partitions_def=HOURLY, config_path=plain_config)
    def from_toml():
        return []

    @incremental_asset(partitions_def=BY_DAY, config_path=plain_config)
    def from_cursor(at: Incremental = incremental("at")):
        return []

    @incremental_asset(partitions_def=TENANTS, partition_column="tenant", config_path=plain_config)
    def tenants_only():  # static partitions: partition_column tells a tenant's rows
        return []

    assert [a.key.to_user_string() for a in (from_toml, from_cursor, tenants_only)] == ["from_toml", "from_cursor", "tenants_only"]


@pytest.mark.parametrize("partitions_def", [None, TENANTS], ids=["unpartitioned", "static"])
def test_run_config_bounds_without_a_cursor_fail_before_loading_anything(plain_config, tmp_path, instance, partitions_def):
    calls = []

    @incremental_asset(partitions_def=partitions_def, config_path=plain_config,
                       **({"partition_column": "tenant"} if partitions_def else {}))
    def unbounded():
        calls.append(1)
        return []

    config = {"ops": {"unbounded": {"config": {"initial_value": "2024-01-01", "end_value": "2024-01-02"}}}}
    result = dg.materialize([unbounded], instance=instance, raise_on_error=False, run_config={**QUIET, **config},
                            resources={"io_manager": SparkTableIOManager(warehouse=str(tmp_path / "wh"))},
                            partition_key="acme" if partitions_def else None)
    assert not result.success and not calls
    assert ("asset unbounded: initial_value/end_value run config bounds the asset's cursor, and it has no "
            "`Incremental` parameter") in failure_text(result)


# -- runs (Spark) ------------------------------------------------------------------------------------


class Source:
    """A partition's rows, version 1 or 2 (2: id 1 changed, id 3 gone, id 4 new)."""

    def __init__(self, partitions_def):
        self.partitions_def = partitions_def
        self.version = 1

    def rows(self, context: dg.AssetExecutionContext) -> list[dict]:
        partition = context.partition_key
        tenant, start = "all", datetime(2024, 1, 1, tzinfo=timezone.utc)
        if isinstance(partition, dg.MultiPartitionKey):
            tenant = partition.keys_by_dimension["tenant"]
        elif self.partitions_def is TENANTS:
            tenant = partition
        if self.partitions_def is not TENANTS:
            start = context.partition_time_window.start
        ids = {1: 10, 2: 20, 3: 30} if self.version == 1 else {1: 11, 2: 20, 4: 40}
        return [{"tenant": tenant, "day": str(partition), "id": i, "amount": amount,
                 "at": start + timedelta(minutes=i)} for i, amount in ids.items()]


def table_rows(spark, io, name: str, disposition: str) -> list[tuple]:
    frame = spark.table(io.table_name(dg.AssetKey(name)).sql)
    if disposition == "scd2":
        frame = frame.where("_valid_to IS NULL")  # the current versions
    return sorted((r["day"], r["id"], r["amount"]) for r in frame.collect())


def define(name: str, kind: str, disposition: str, source: Source, config_file: str) -> dg.AssetsDefinition:
    partitions_def, _, _, scd2_merge_key = KINDS[kind]
    rows_of = {"partition_column": "tenant"} if partitions_def is TENANTS else {"window_column": "at"}

    @incremental_asset(name=name, partitions_def=partitions_def, config_path=config_file, **rows_of,
                       **write_options(disposition, scd2_merge_key))
    def no_cursor(context: dg.AssetExecutionContext):
        return source.rows(context)

    return no_cursor


@HADOOP_ONLY
@pytest.mark.parametrize("kind", KINDS)
def test_a_rerun_of_a_partition_without_a_cursor_leaves_one_copy_of_its_rows(spark, instance, io_manager, config_file, kind):
    """One asset per disposition, materialized together (one run per partition keeps Spark time small)."""
    partitions_def, partition, other, _ = KINDS[kind]
    source = Source(partitions_def)
    names = {d: "rows_" + d.replace("-", "_") for d in dispositions_of(kind)}
    assets = [define(name, kind, d, source, config_file) for d, name in names.items()]

    def materialize(partition_key: str) -> None:
        result = dg.materialize(assets, instance=instance, resources={"io_manager": io_manager},
                                partition_key=partition_key, run_config=QUIET, raise_on_error=False)
        assert result.success, failure_text(result)

    materialize(other)
    materialize(partition)
    source.version = 2
    materialize(partition)  # run again, the source changed: the partition holds exactly its new rows
    expected = sorted([(partition, 1, 11), (partition, 2, 20), (partition, 4, 40),
                       (other, 1, 10), (other, 2, 20), (other, 3, 30)])
    for disposition, name in names.items():
        assert (disposition, table_rows(spark, io_manager, name, disposition)) == (disposition, expected)
    # scd2: the unchanged row kept its one version, the re-run added none
    versions = spark.table(io_manager.table_name(dg.AssetKey(names["scd2"])).sql)
    assert versions.where(f"day = '{partition}' AND id = 2").count() == 1
