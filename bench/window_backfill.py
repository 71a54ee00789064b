"""One day's window backfill into a large table: the MERGE and its figures, on Iceberg or Delta.

A partition backfill of a merge table replaces its window in one MERGE that also deletes the
batch's keys outside the window; its figures net the window's rows of the two versions. Both must
cost about the rows of the window, not the table's times the batch's. The table: `--rows` orders
(`id`, `day`, `amount`) spread over `--days` days, written once; then `--repeats` backfills of
the middle day, each changing a tenth of its rows, with a primary key (upsert) or without
(append). On Delta, each backfill's figures are also counted over the whole table's two versions
(what they read before), interleaved with the window's, and must agree:

    python -m bench.window_backfill --format delta --rows 2000000 --days 100 --repeats 3
    python -m bench.window_backfill --format iceberg --rows 2000000 --days 100 --repeats 3

Prints ONE JSON line: the first load's seconds, each backfill's seconds (MERGE and figures, as
the writer returns them) and figures, their medians, and on Delta the two countings' medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time

from bench import common

START = dt.date(2024, 1, 1)


def orders(spark, rows: int, days: int, version: int):
    """The table's rows; version k changes a tenth of each day's amounts (k of them)."""
    from pyspark.sql import functions as F

    changed = F.when(F.floor(F.col("id") / days) % 10 == 0, F.lit(version)).otherwise(F.lit(0))
    return spark.range(rows).select(
        F.col("id"), F.date_add(F.lit(START), (F.col("id") % days).cast("int")).alias("day"),
        ((F.col("id") * 7 % 1000) + changed).cast("double").alias("amount"))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=["iceberg", "delta"], default="delta")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keyed", choices=["yes", "no"], default="yes", help="a primary key (upsert) or none (append)")
    args = ap.parse_args(argv)
    with common.workdir("bench_window_") as wd:
        spark, _ = common.start_spark(common.io_manager(wd, table_format=args.format))
        record = measure(spark, wd, args)
    common.emit(record)
    return record


def measure(spark, wd: common.Workdir, args: argparse.Namespace) -> dict:
    from pyspark.sql import functions as F

    from dagster_incremental.spark.delta import figures
    from dagster_incremental.spark.delta.writer import DeltaWriter
    from dagster_incremental.spark.delta.table_ref import DeltaTableRef
    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import CommitInfo, WindowReplace, WriteSpec
    from dagster_incremental.spark.iceberg.writer import TableWriter

    delta = args.format == "delta"
    table = TableRef(common.CATALOG, (common.NAMESPACE,), "orders")
    table = DeltaTableRef.at(table, str(wd.warehouse / "delta_orders")) if delta else table
    keys = ("id",) if args.keyed == "yes" else ()
    spec = WriteSpec(table=table, disposition="merge" if keys else "append", strategy="upsert" if keys else None,
                     primary_key=keys, cursor_column="day")
    writer = DeltaWriter(spark) if delta else TableWriter(spark)
    started = time.perf_counter()
    writer.write(spec, orders(spark, args.rows, args.days, 0), commit=CommitInfo(state={"last_value": 0}, run_id="load"))
    first_load = time.perf_counter() - started
    day = START + dt.timedelta(days=args.days // 2)
    window = WindowReplace("day", day, day + dt.timedelta(days=1))
    backfills, figures_by = [], {"window": [], "whole": []}
    for repeat in range(1, args.repeats + 1):
        batch = orders(spark, args.rows, args.days, repeat).where(F.col("day") == F.lit(day))
        started = time.perf_counter()
        made = writer.write(spec, batch, commit=CommitInfo(state={"last_value": repeat}, run_id=f"b{repeat}"), window=window)
        backfills.append({"seconds": time.perf_counter() - started,
                          "figures": (made.rows_inserted, made.rows_updated, made.rows_deleted, made.row_count)})
        if delta:
            ways = {"window": lambda: figures.window_change(spark, table, made.snapshot_id, window, keys),
                    "whole": lambda: figures.net_change(spark, table, made.snapshot_id, keys)}
            counted = common.interleaved(ways, repeat, figures_by)
            assert counted["window"] == counted["whole"], f"the countings disagree: {counted}"
    return {"bench": "window_backfill", "format": args.format, "rows": args.rows, "days": args.days,
            "keyed": args.keyed, "first_load_s": first_load, "backfills": backfills,
            "backfill_median_s": statistics.median(b["seconds"] for b in backfills),
            **({"figures_median_s": {k: statistics.median(v) for k, v in figures_by.items()},
                "whole_over_window": common.ratio(statistics.median(figures_by["whole"]),
                                                  statistics.median(figures_by["window"]))} if delta else {}),
            "machine": common.machine()}


if __name__ == "__main__":
    main()
