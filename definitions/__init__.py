"""The example code location: `dg dev` from the repository root, or `python -m definitions` for one run.

Sources (shipped, generated locally): a SQLite shop database, a paginated events API on
127.0.0.1, and daily event files. Everything lands in Iceberg tables under data/warehouse.
"""

from __future__ import annotations

from definitions import cli_errors

cli_errors.install()  # before config.toml is read below

import dagster as dg  # noqa: E402

from dagster_incremental import SparkTableIOManager, build_incremental_sensor
from definitions.assets import (
    CONFIG,
    api_events,
    customer_revenue,
    customers,
    customers_source,
    daily_events,
    orders,
    orders_enriched,
    orders_high_water_mark,
    revenue_by_day,
)

main_job = dg.define_asset_job(
    "main",
    selection=[orders, customers, api_events, customer_revenue, orders_enriched, revenue_by_day],
    description="The shop and web assets, the revenue rollup and the orders chain, each continuing from its cursor.",
)
daily_events_job = dg.define_asset_job(
    "daily_events_job", selection=[daily_events], partitions_def=daily_events.partitions_def
)


@dg.schedule(job=daily_events_job, cron_schedule="15 * * * *", default_status=dg.DefaultScheduleStatus.STOPPED)
def daily_events_hourly(context: dg.ScheduleEvaluationContext):
    """Every hour, load the new events of today's (still open) partition."""
    today = daily_events.partitions_def.get_last_partition_key()
    return dg.RunRequest(run_key=f"daily_events:{context.scheduled_execution_time.isoformat()}", partition_key=today)


orders_sensor = build_incremental_sensor(orders, probe=orders_high_water_mark, minimum_interval_seconds=30)

defs = dg.Definitions(
    assets=[customers_source, orders, customers, api_events, daily_events, customer_revenue, orders_enriched, revenue_by_day],
    jobs=[main_job, daily_events_job],
    schedules=[daily_events_hourly],
    sensors=[orders_sensor],
    resources={"io_manager": SparkTableIOManager.from_config(CONFIG)},
    # Every run (a job, or assets picked in the UI) executes its steps in ONE process, so they
    # share one Spark session instead of starting a JVM per step (Dagster's default executor
    # starts a process per step).
    executor=dg.in_process_executor,
)
