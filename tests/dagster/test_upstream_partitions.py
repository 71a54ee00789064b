"""A daily-partitioned asset reading an upstream's `Changes`: a closed day's backfill reads that
day's upstream rows whole and replaces the day; the open day continues from its own upstream
snapshot and receives only the changed rows of its day."""

from __future__ import annotations

from datetime import date, datetime, timezone

import dagster as dg
import pytest

from attack_support import failure_text
from catalogs import HADOOP_ONLY
from dagster_incremental import Changes, Incremental, incremental, incremental_asset
from dagster_incremental.dagster import partition_scope

pytestmark = [pytest.mark.spark, HADOOP_ONLY]

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
DAYS = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-04")
UPSERT = {"disposition": "merge", "strategy": "upsert"}


@pytest.fixture
def open_day_3(monkeypatch):
    """The library's clock at noon of 2024-01-03: that day is the open window."""
    monkeypatch.setattr(partition_scope, "utc_now", lambda: datetime(2024, 1, 3, 12, tzinfo=timezone.utc))


def chain(config_file: str, source: list[dict], received: list):
    @incremental_asset(primary_key="id", write_disposition=UPSERT, config_path=config_file)
    def events(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    @incremental_asset(primary_key="id", write_disposition=UPSERT, partitions_def=DAYS, window_column="day",
                       config_path=config_file)
    def day_events(events: Changes):
        received.append(sorted(r.id for r in events.df.select("id").collect()))
        return events.upserts().select("id", "day", "amount")

    return events, day_events


def run(asset, instance, io, **kwargs) -> dg.ExecuteInProcessResult:
    result = dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=QUIET,
                            raise_on_error=False, **kwargs)
    assert result.success, failure_text(result)
    return result


def table(spark, io) -> list[tuple]:
    frame = spark.table(io.table_name(dg.AssetKey("day_events")).sql)
    return sorted((r.id, r.day.day, r.amount) for r in frame.collect())


def row(i: int, day: int, amount: int, seq: int) -> dict:
    return {"id": i, "day": date(2024, 1, day), "amount": amount, "seq": seq}


def test_closed_days_are_backfilled_whole_and_the_open_day_reads_only_its_changes(
        spark, instance, io_manager, config_file, open_day_3):
    source = [row(1, 1, 10, 1), row(2, 2, 20, 2), row(3, 3, 30, 3)]
    received: list = []
    events, day_events = chain(config_file, source, received)
    run(events, instance, io_manager)

    run(day_events, instance, io_manager, partition_key="2024-01-01")  # a closed day: its rows whole
    assert received[-1] == [1] and table(spark, io_manager) == [(1, 1, 10)]
    run(day_events, instance, io_manager, partition_key="2024-01-03")  # the open day's first run
    assert received[-1] == [3] and table(spark, io_manager) == [(1, 1, 10), (3, 3, 30)]

    source[:] = [row(1, 1, 11, 4), row(2, 2, 20, 2), row(3, 3, 30, 3), row(4, 3, 40, 5)]
    run(events, instance, io_manager)
    result = run(day_events, instance, io_manager, partition_key="2024-01-03")
    assert received[-1] == [4]  # only the open day's change; day 1's waits for its backfill
    assert table(spark, io_manager) == [(1, 1, 10), (3, 3, 30), (4, 3, 40)]
    meta = result.get_asset_materialization_events()[-1].materialization.metadata
    assert meta["dagster_incremental/rows_inserted"].value == 1
    assert meta["dagster_incremental/state"].value["upstream"]["events"]["snapshot_id"] is not None

    run(day_events, instance, io_manager, tags={"dagster/asset_partition_range_start": "2024-01-01",
                                                "dagster/asset_partition_range_end": "2024-01-02"})
    assert received[-1] == [1, 2]  # a range of closed days in one run: their rows whole
    assert table(spark, io_manager) == [(1, 1, 11), (2, 2, 20), (3, 3, 30), (4, 3, 40)]
    run(day_events, instance, io_manager, partition_key="2024-01-03")  # nothing new for the open day
    assert received[-1] == []

