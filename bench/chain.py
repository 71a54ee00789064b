"""A change at the top of a 3-asset chain: incremental transformations against a full recompute.

The chain is the example's shape: `orders` (an `@incremental_asset` upserting on `id`, its source a
Spark DataFrame) -> `orders_enriched` (a `Changes` argument: upserts the changed orders with their
EUR amount and day, deletes the deleted ones) -> `revenue_by_day` (a `Changes` argument: recomputes
the days the changed orders fall on). The base load (`--rows` orders, every table filled) is not
timed. Then, per round, a change of `--changes` rows (half updates of recent orders, half new
orders) is loaded at the top and the chain is materialised in one run, alternating:

- incremental: each downstream asset reads only its upstream's changes since its cursor;
- recompute: the two downstream assets run with `full_refresh` (each reads its whole upstream
  and replaces its table), which is what the chain costs without `Changes`.

Both modes load the same-sized change into `orders` first, so they differ only in the downstream
work. Prints ONE JSON line: seconds per run of each mode, their medians and the ratio
incremental / recompute (target < 1), and the rows each table ends with.

    python -m bench.chain --rows 1000000 --changes 10000 --rounds 2
    python -m bench.chain --rows 50000 --changes 1000 --rounds 1     # quick
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench import common

EPOCH_S = 1704067200  # 2024-01-01T00:00:00Z
SPACING_S = 30  # one order every 30 s: 1M orders span about 347 days


def base_frame(spark, n: int):
    """Orders 0..n-1, created and last updated at 2024-01-01 + id * 30 s (generated in Spark)."""
    from pyspark.sql import functions as F

    stamp = F.timestamp_seconds(F.lit(EPOCH_S) + F.col("id") * SPACING_S)
    return spark.range(n).select(
        "id",
        (F.col("id") % 5000).alias("customer_id"),
        (F.col("id") % 997 / 10).cast("double").alias("amount"),
        F.element_at(F.array(*(F.lit(c) for c in ("EUR", "USD", "GBP"))), (F.col("id") % 3 + 1).cast("int")).alias("currency"),
        stamp.alias("created_at"),
        stamp.alias("updated_at"),
    )


def change_frame(spark, n: int, changes: int, round_no: int):
    """`changes` rows after the newest one: half updates of the newest 3 days' orders, half new ids."""
    from pyspark.sql import functions as F

    recent = 3 * 86400 // SPACING_S
    updates = spark.range(changes // 2).select((F.lit(n - 1) - (F.col("id") * 7919) % recent).alias("id"))
    new = spark.range(changes - changes // 2).select((F.lit(n + round_no * changes) + F.col("id")).alias("id"))
    now = F.timestamp_seconds(F.lit(EPOCH_S + (n + (round_no + 1) * changes) * SPACING_S))
    rows = base_frame(spark, 1).limit(0).columns
    frame = updates.unionByName(new).select(
        "id",
        (F.col("id") % 5000).alias("customer_id"),
        (F.lit(round_no + 1) + F.col("id") % 13).cast("double").alias("amount"),
        F.lit("EUR").alias("currency"),
        F.timestamp_seconds(F.lit(EPOCH_S) + F.col("id") * SPACING_S).alias("created_at"),
        now.alias("updated_at"),
    )
    return frame.select(*rows)


def chain_assets(config: str, source: dict):
    import dagster as dg
    from pyspark.sql import functions as F

    from dagster_incremental import Changes, Incremental, incremental, incremental_asset

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"}, config_path=config)
    def orders(updated_at: Incremental = incremental("updated_at", initial_value="2023-01-01T00:00:00Z")):
        return source["frame"]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"}, config_path=config)
    def orders_enriched(orders: Changes):
        rate = F.when(F.col("currency") == "USD", 0.92).when(F.col("currency") == "GBP", 1.17).otherwise(1.0)
        return orders.upserts().select(
            "id", "customer_id", "currency", "updated_at",
            F.to_date("created_at").alias("order_day"), F.round(F.col("amount") * rate, 2).alias("amount_eur"),
        )

    @incremental_asset(primary_key="order_day", write_disposition={"disposition": "merge", "strategy": "upsert"}, config_path=config)
    def revenue_by_day(orders_enriched: Changes):
        days = orders_enriched.df.select("order_day").distinct()
        totals = orders_enriched.table.join(days, "order_day").groupBy("order_day").agg(
            F.round(F.sum("amount_eur"), 2).alias("revenue_eur"), F.count(F.lit(1)).alias("orders"))
        return days.join(totals, "order_day", "left").fillna(0, ["revenue_eur", "orders"])

    return [orders, orders_enriched, revenue_by_day], dg


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (incremental, recompute), order alternating")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)

    from dagster import DagsterInstance

    with common.workdir("bench_chain_") as wd:
        io = common.io_manager(wd, args.master)
        spark, spark_start = common.start_spark(io)
        source = {"frame": base_frame(spark, args.rows)}
        assets, dg = chain_assets(str(wd.config), source)
        instance = DagsterInstance.get()

        def materialize(full_refresh: bool) -> float:
            ops = {name: {"config": {"full_refresh": True}} for name in ("orders_enriched", "revenue_by_day")} if full_refresh else {}
            t = time.perf_counter()
            result = dg.materialize(assets, instance=instance, resources={"io_manager": io},
                                    run_config={**common.QUIET, "ops": ops})
            assert result.success
            return round(time.perf_counter() - t, 3)

        base_s = materialize(full_refresh=False)
        common.log(f"base load of {args.rows} rows through the chain: {base_s} s")
        seconds: dict[str, list[float]] = {"incremental": [], "recompute": []}
        change_no = 0
        for round_no in range(args.rounds):
            order = ["incremental", "recompute"] if round_no % 2 == 0 else ["recompute", "incremental"]
            for mode in order:
                source["frame"] = change_frame(spark, args.rows, args.changes, change_no).cache()
                source["frame"].count()  # the source is ready before timing, as a real source's rows are
                change_no += 1
                seconds[mode].append(materialize(full_refresh=mode == "recompute"))
                common.log(f"round {round_no} {mode}: {seconds[mode][-1]} s")
                source["frame"].unpersist()

        def count(name: str) -> int:
            return spark.table(io.table_name(dg.AssetKey(name)).sql).count()

        incremental_s, recompute_s = statistics.median(seconds["incremental"]), statistics.median(seconds["recompute"])
        record = {
            "bench": "chain",
            "rows": args.rows,
            "changes": args.changes,
            "base_load_s": base_s,
            "spark_start_s": spark_start,
            "incremental_s": seconds["incremental"],
            "recompute_s": seconds["recompute"],
            "median_incremental_s": incremental_s,
            "median_recompute_s": recompute_s,
            "ratio_incremental_to_recompute": common.ratio(incremental_s, recompute_s),
            "table_rows": {name: count(name) for name in ("orders", "orders_enriched", "revenue_by_day")},
            **common.machine(),
        }
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
