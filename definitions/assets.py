"""The example assets: what a data engineer would write with dagster-incremental.

Their cursors, keys and write dispositions live in config/config.toml (section per asset), their
credentials in config/secrets.toml (optional, git-ignored; see config/secrets.toml.example); the
code only says where the data comes from. The sources are shipped in `definitions.sources` and
are created on first use, so the code location runs on a fresh machine with nothing else.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_incremental import Changes, Incremental, incremental_asset, source_observation
from definitions.sources import event_files, events_api, events_root, shop_db, shop_db_path, utc_now

ROOT = Path(__file__).resolve().parent.parent
CONFIG = os.environ.get("DAGSTER_INCREMENTAL_CONFIG", str(ROOT / "config" / "config.toml"))
EVENTS_API_ENV = "EVENTS_API_URL"
EVENT_DAYS = 14


def ensure_shop() -> Path:
    """The shop database, created with 14 days of history on first use."""
    path = shop_db_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shop_db.create_shop(path, start=utc_now() - timedelta(days=EVENT_DAYS))
    return path


def ensure_event_files() -> Path:
    """The daily event files (14 days ending today), written on first use."""
    root = events_root()
    if not root.is_dir() or not any(root.glob("dt=*")):
        now = utc_now()
        event_files.write_event_days(root, now.date() - timedelta(days=EVENT_DAYS - 1), EVENT_DAYS, now=now)
    return root


def first_event_day() -> date:
    """The day the event files start (today's 14-day history when none are written yet), so the
    daily partitions begin with the data instead of years of empty days before it."""
    days = sorted(p.name[3:] for p in events_root().glob("dt=*")) if events_root().is_dir() else []
    return date.fromisoformat(days[0]) if days else utc_now().date() - timedelta(days=EVENT_DAYS - 1)


@contextlib.contextmanager
def events_api_url(token: str | None = None) -> Iterator[str]:
    """$EVENTS_API_URL (e.g. `python -m definitions.simulate serve-api`), else a server for this run.

    The server started here requires `token` when one is given, as the real API would.
    """
    url = os.environ.get(EVENTS_API_ENV)
    if url:
        yield url
        return
    server, thread, base_url = events_api.serve(port=0, token=token)
    try:
        yield base_url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@incremental_asset(group_name="shop", config_path=CONFIG)
def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
    """Orders of the shop database: each run reads only the orders changed since the cursor.

    Soft-deleted orders arrive with is_deleted = true and are removed from the table.

    Columns:
        id: Order number, unique in the shop
        customer_id: The customer who placed the order
        status: pending, paid, shipped, delivered, cancelled or refunded
        amount: Order total, in the order's currency
        currency: ISO 4217 code of amount
        is_deleted: True when the shop deleted the order (the row is then removed here)
        created_at: When the order was placed (UTC)
        updated_at: Last change of the order (UTC); the cursor
    """
    yield from shop_db.fetch_orders(ensure_shop(), since=updated_at.start_value, until=updated_at.end_value)


def customers_high_water_mark() -> str | None:
    """The newest updated_at of the shop's customers table: a new value means customers changed."""
    path = shop_db_path()
    return shop_db.high_water_mark(path, "customers") if path.exists() else None


# Declarative automation instead of a sensor: the source's high-water mark is observed every five
# minutes, and customers runs (eagerly) only when it moved: no full snapshot reloaded for nothing.
customers_source = source_observation(customers_high_water_mark, ["customers_source"])


@incremental_asset(group_name="shop", config_path=CONFIG, deps=[customers_source.key],
                   automation_condition=dg.AutomationCondition.eager())
def customers(context: dg.AssetExecutionContext):
    """Every version of every customer (scd2) from a full snapshot of the customers table."""
    return shop_db.fetch_customers(ensure_shop())


@incremental_asset(group_name="web", config_path=CONFIG)
def api_events(context: dg.AssetExecutionContext, created_at: Incremental, api_token: str | None = None):
    """Events from a paginated HTTP API served newest first: paging stops at the cursor.

    `api_token` comes from config/secrets.toml ([assets.api_events] api_token) or
    $DAGSTER_INCREMENTAL_SECRETS__ASSETS__API_EVENTS__API_TOKEN; without one the API is open.
    """
    with events_api_url(api_token) as base_url:
        yield from events_api.iter_event_pages(base_url, page_size=100, token=api_token)


@incremental_asset(
    group_name="events", config_path=CONFIG,
    partitions_def=dg.DailyPartitionsDefinition(start_date=first_event_day().isoformat(), end_offset=1),
)
def daily_events(context: dg.AssetExecutionContext, event_time: Incremental):
    """Daily event files read by Spark; each partition is one day, backfills reload whole days.

    A backfill of several days runs as one slice (one commit) per day (`step` in config.toml),
    so a failure keeps the days before it. Column descriptions are in config.toml.
    """
    spark = context.resources.io_manager.spark
    events = event_files.read_events_spark(spark, ensure_event_files(), event_time.start_value, event_time.end_value)
    return events.withColumn("event_date", F.to_date("event_time"))  # the merge_key: one group per day


@dg.asset(group_name="shop", kinds={"spark", "iceberg"})
def customer_revenue(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Revenue and order count per customer tier and country, from the current customer versions."""
    current = customers.where(F.col("_valid_to").isNull()).select("customer_id", "tier", "country")
    return (
        orders.join(current, "customer_id", "left")
        .groupBy("tier", "country")
        .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count(F.lit(1)).alias("orders"))
    )


# -- a chain of incremental transformations: orders -> orders_enriched -> revenue_by_day -------------
# Each reads only what its upstream committed since its own last run (a `Changes` argument), and
# starts by itself when its upstream materializes (AutomationCondition.eager(), with the
# automation sensor on in the UI).

EUR_PER_UNIT = {"EUR": 1.0, "GBP": 1.17, "USD": 0.92, "BRL": 0.17, "PLN": 0.23, "SEK": 0.088}


@incremental_asset(group_name="shop", config_path=CONFIG, automation_condition=dg.AutomationCondition.eager())
def orders_enriched(orders: Changes) -> DataFrame:
    """Each order with its day and its amount in EUR, from the orders changed since the last run.

    An order deleted upstream arrives as a DELETE change and is deleted here (is_deleted hint).
    """
    changed = orders.upserts().unionByName(orders.deletes("id").withColumn("is_deleted", F.lit(True)))
    rate = F.create_map(*[F.lit(x) for pair in EUR_PER_UNIT.items() for x in pair])[F.col("currency")]
    return changed.select(
        "id", "customer_id", "status", "currency", "is_deleted", "updated_at",
        F.to_date(F.col("created_at").cast("timestamp")).alias("order_day"),
        F.round(F.col("amount") * F.coalesce(rate, F.lit(1.0)), 2).alias("amount_eur"),
    )


@incremental_asset(group_name="shop", config_path=CONFIG, automation_condition=dg.AutomationCondition.eager())
def revenue_by_day(orders_enriched: Changes) -> DataFrame:
    """Revenue in EUR per order day: only the days the changed orders fall on are recomputed."""
    days = orders_enriched.df.select("order_day").distinct()
    totals = (
        orders_enriched.table.join(days, "order_day")
        .groupBy("order_day")
        .agg(F.round(F.sum("amount_eur"), 2).alias("revenue_eur"), F.count(F.lit(1)).alias("orders"))
    )
    # a day whose last order was deleted shows 0, not its old revenue
    return days.join(totals, "order_day", "left").fillna(0, ["revenue_eur", "orders"])


def orders_high_water_mark() -> str | None:
    """The sensor's cheap probe: the newest updated_at in the shop database."""
    path = shop_db_path()
    return shop_db.high_water_mark(path) if path.exists() else None
