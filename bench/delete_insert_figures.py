"""One day reloaded by a delete-insert on a merge_key into a large Delta table: the write and its figures.

A delete-insert on `merge_key = day` deletes the rows of every day its batch names and inserts the
batch; Delta's MERGE metrics count every deleted row, unchanged or not, so the figures net the two
versions' rows. Only the rows of the groups the batch names can differ: netting those costs
about the reloaded day's rows, netting the whole table its size (what it read before). The table:
`--rows` orders (`id`, `day`, `amount`) spread over `--days` days, written once (`--layout by-day`:
files of five days each, as daily loads leave a table; `scattered`: every file holds every day,
so no file can be skipped); then `--repeats`
reloads of the middle day, each changing a tenth of its rows. Each reload's figures are also
counted both ways, interleaved, and must agree:

    python -m bench.delete_insert_figures --rows 2000000 --days 100 --repeats 3
    python -m bench.delete_insert_figures --rows 2000000 --primary-key id   # pk OR merge_key

Prints ONE JSON line: the first load's seconds, each reload's seconds (MERGE and figures, as the
writer returns them) and figures, their median, and the two countings' medians and ratio.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time

from bench import common
from bench.window_backfill import START, orders


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--primary-key", default="", help="a primary key beside merge_key = day (e.g. id)")
    ap.add_argument("--layout", choices=["by-day", "scattered"], default="by-day",
                    help="the first load's files each hold a few days (as daily loads leave them), or every day")
    args = ap.parse_args(argv)
    with common.workdir("bench_di_figures_") as wd:
        spark, _ = common.start_spark(common.io_manager(wd, table_format="delta"))
        record = measure(spark, wd, args)
    common.emit(record)
    return record


def measure(spark, wd: common.Workdir, args: argparse.Namespace) -> dict:
    from pyspark.sql import functions as F

    from dagster_incremental.spark.delta import figures
    from dagster_incremental.spark.delta.writer import DeltaWriter
    from dagster_incremental.spark.merge.delete_insert import key_groups
    from dagster_incremental.spark.statistics import pairing_key
    from dagster_incremental.spark.delta.table_ref import DeltaTableRef
    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

    table = DeltaTableRef.at(TableRef(common.CATALOG, (common.NAMESPACE,), "orders"), str(wd.warehouse / "delta_orders"))
    primary_key = (args.primary_key,) if args.primary_key else ()
    spec = WriteSpec(table=table, disposition="merge", strategy="delete-insert", primary_key=primary_key,
                     merge_key=("day",), cursor_column="day")
    writer, keys = DeltaWriter(spark), pairing_key(spec)
    started = time.perf_counter()
    first = orders(spark, args.rows, args.days, 0)
    first = first.repartitionByRange(max(args.days // 5, 1), "day") if args.layout == "by-day" else first
    writer.write(spec, first, commit=CommitInfo(state={"last_value": 0}, run_id="load"))
    first_load = time.perf_counter() - started
    day = START + dt.timedelta(days=args.days // 2)
    reloads, figures_by = [], {"groups": [], "whole": []}
    for repeat in range(1, args.repeats + 1):
        batch = orders(spark, args.rows, args.days, repeat).where(F.col("day") == F.lit(day)).cache()
        batch.count()
        started = time.perf_counter()
        made = writer.write(spec, batch, commit=CommitInfo(state={"last_value": repeat}, run_id=f"r{repeat}"))
        reloads.append({"seconds": time.perf_counter() - started,
                        "figures": (made.rows_inserted, made.rows_updated, made.rows_deleted, made.row_count)})
        ways = {"groups": lambda: figures.net_change(spark, table, made.snapshot_id, keys, (key_groups(spec), batch)),
                "whole": lambda: figures.net_change(spark, table, made.snapshot_id, keys)}
        counted = common.interleaved(ways, repeat, figures_by)
        assert counted["groups"] == counted["whole"], f"the countings disagree: {counted}"
        batch.unpersist()
    return {"bench": "delete_insert_figures", "rows": args.rows, "days": args.days, "primary_key": args.primary_key,
            "layout": args.layout,
            "first_load_s": first_load, "reloads": reloads,
            "reload_median_s": statistics.median(r["seconds"] for r in reloads),
            "figures_median_s": {k: statistics.median(v) for k, v in figures_by.items()},
            "whole_over_groups": common.ratio(statistics.median(figures_by["whole"]), statistics.median(figures_by["groups"])),
            "machine": common.machine()}


if __name__ == "__main__":
    main()
