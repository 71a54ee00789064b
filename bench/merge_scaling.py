"""Merge scaling: the same-shaped 10,000-row upsert into tables of 1,000,000 and 10,000,000 rows.

The table holds the workload's orders (id, customer_id, status, amount, version, updated_at with
updated_at = 2024-01-01 + id seconds), is partitioned by days(updated_at) and written by the
library's TableWriter (so it has the library's table properties). The batch is built the same way
for every size, relative to the table's end T: half updates of ids whose rows lie in the last
`--recent-days` days, half new ids, every row with an updated_at spread evenly over those recent
days. So the partitions a batch touches are the same number for every size: a merge whose cost
"grows with the batch and the partitions it touches, not with the table" takes the same time.

An untimed upsert into a 20,000-row table warms the JVM first. The timed step is `TableWriter.write(upsert on id, batch)`: dedup + MERGE (one commit) + reading
back the counts. The batch is materialised (cached) before timing; the base load is not timed.

    python -m bench.merge_scaling --sizes 1000000,10000000 --changes 10000
    python -m bench.merge_scaling --sizes 20000,200000 --changes 1000 --recent-days 1   # quick
    python -m bench.merge_scaling --layout scattered    # ids not correlated with updated_at
    python -m bench.merge_scaling --table-property write.merge.mode=merge-on-read
    python -m bench.merge_scaling --source arrow --partition-by "" --table-property write.merge.mode=merge-on-read

With the workload's layout (ids grow with updated_at) Iceberg skips the files whose id range
misses the batch (min/max statistics), even though the library's MERGE carries no partition
bounds here (an upsert on id cannot prune on days(updated_at): `library_prunes_on` shows []).
`--layout scattered` removes that correlation: then nothing can skip files.

Prints ONE JSON line: seconds per size (and per repeat), the ratio largest/smallest (target
<= 1.5), the phase breakdown (prepare_batch, MERGE statement, result counting) and the rows.
"""

from __future__ import annotations

import argparse
import time

from bench import common

EPOCH_S = 1704067200  # 2024-01-01T00:00:00Z
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
DAY = 86400


SCATTER = 1_000_003  # a prime: id = position * SCATTER mod n is a permutation of 0..n-1 (n < SCATTER**2)


def scattered(position: int, n: int) -> int:
    return (position * SCATTER) % n


def base_frame(spark, n: int, layout: str = "correlated"):
    """The workload's run-0 rows for ids 0..n-1, generated inside Spark (identical values).

    layout "correlated": the row at position p has id p and updated_at 2024-01-01 + p seconds
    (the workload: ids grow with time, so data files hold narrow id ranges); "scattered": the
    row at position p has id (p * 1,000,003) mod n, so every file's id range spans the table.
    """
    from pyspark.sql import functions as F

    if layout == "scattered":
        assert n % SCATTER != 0
        frame = spark.range(n).select(F.col("id").alias("pos"), ((F.col("id") * SCATTER) % n).alias("id"))
    else:
        frame = spark.range(n).select(F.col("id").alias("pos"), F.col("id"))
    status = F.element_at(F.array(*(F.lit(s) for s in STATUSES)), (F.col("id") % 5 + 1).cast("int"))
    return frame.select(
        F.col("id"),
        (F.col("id") % 9973).alias("customer_id"),
        status.alias("status"),
        F.round((F.col("id") % 1000) * 1.25, 2).cast("double").alias("amount"),
        F.lit(0).cast("long").alias("version"),
        F.timestamp_seconds(F.col("pos") + EPOCH_S).alias("updated_at"),
    )


def batch_rows(n: int, changes: int, recent_days: int, layout: str = "correlated", size: int | None = None) -> list[tuple]:
    """Half updates of ids in the last `recent_days` days, half new ids; stamps over those days."""
    import datetime as dt

    window = min(recent_days * DAY, n)
    half = changes // 2
    ids = [n - 1 - ((k * 104729) % window) for k in range(half)]  # positions in the recent days
    if layout == "scattered":
        ids = [scattered(p, size or n) if p < (size or n) else p for p in ids]
    seen: set[int] = set()
    ids = [i for i in ids if not (i in seen or seen.add(i))]  # distinct updates
    ids += [n + k for k in range(changes - len(ids))]
    out = []
    for k, i in enumerate(ids):
        stamp = EPOCH_S + n - window + (k * window) // len(ids)
        out.append((i, i % 9973, STATUSES[(i + 1) % 5], round((i % 1000) * 1.25 + 1, 2), 1,
                    dt.datetime.fromtimestamp(stamp, dt.timezone.utc)))
    return out


def arrow_batch(rows: list[tuple]):
    """The batch as local rows (Arrow), as an asset function's output reaches the writer."""
    import pyarrow as pa

    names = ["id", "customer_id", "status", "amount", "version", "updated_at"]
    return pa.Table.from_pylist([dict(zip(names, r)) for r in rows]).cast(pa.schema([
        ("id", pa.int64()), ("customer_id", pa.int64()), ("status", pa.string()), ("amount", pa.float64()),
        ("version", pa.int64()), ("updated_at", pa.timestamp("us", tz="UTC")),
    ]))


def measure(spark, writer, size: int, changes: int, recent_days: int, repeats: int, partition_by, timer,
            layout: str = "correlated", properties: dict | None = None, source: str = "spark") -> dict:
    from pyspark.sql import types as T

    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

    table = TableRef.for_asset(common.CATALOG, common.NAMESPACE, [f"orders_{size}"])
    props = dict(properties or {})
    append = WriteSpec(table=table, disposition="append", partition_by=tuple(partition_by), table_properties=props)
    t = time.perf_counter()
    writer.write(append, base_frame(spark, size, layout), commit=CommitInfo(state=None, run_id="base"))
    load_s = round(time.perf_counter() - t, 3)
    files = spark.sql(f"SELECT count(*) AS n FROM {table}.files").collect()[0].n
    upsert = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",),
                       cursor_column="updated_at", partition_by=tuple(partition_by), table_properties=props)
    schema = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("customer_id", T.LongType()),
        T.StructField("status", T.StringType()), T.StructField("amount", T.DoubleType()),
        T.StructField("version", T.LongType()), T.StructField("updated_at", T.TimestampType()),
    ])
    seconds, phases, results = [], [], []
    for rep in range(repeats):
        rows = batch_rows(size + rep * changes, changes, recent_days, layout, size)
        if source == "arrow":
            batch = arrow_batch(rows)
        else:
            batch = spark.createDataFrame(rows, schema).cache()
            batch.count()
        timer.reset()
        t = time.perf_counter()
        result = writer.write(upsert, batch, commit=CommitInfo(state=None, run_id=f"merge{rep}"), deduplicated=source == "arrow")
        seconds.append(round(time.perf_counter() - t, 3))
        phases.append(timer.reset())
        results.append({"inserted": result.rows_inserted, "updated": result.rows_updated, "rows": result.row_count})
        if source != "arrow":
            batch.unpersist()
        common.log(f"size {size} rep {rep}: {seconds[-1]} s {results[-1]} {phases[-1]}")
    spark.sql(f"DROP TABLE {table} PURGE")
    return {"size": size, "base_load_s": load_s, "data_files": files, "seconds": seconds,
            "best": min(seconds), "phases": phases, "results": results}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated table sizes")
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--recent-days", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="upserts per size (each into the grown table); best is reported")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed 20,000-row warm-up (JIT, catalog)")
    ap.add_argument("--partition-by", default="days(updated_at)", help="items separated by |; empty = unpartitioned")
    ap.add_argument("--layout", choices=["correlated", "scattered"], default="correlated",
                    help="ids grow with updated_at (the workload) or are scattered over the table")
    ap.add_argument("--table-property", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Iceberg table property, e.g. write.merge.mode=merge-on-read (repeatable)")
    ap.add_argument("--source", choices=["spark", "arrow"], default="spark",
                    help="the batch as a cached Spark DataFrame (Spark's MERGE) or as local Arrow rows "
                    "(merged without Spark where the table allows: unpartitioned, merge-on-read)")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)
    properties = dict(kv.split("=", 1) for kv in args.table_property)
    sizes = [int(s) for s in args.sizes.split(",")]
    partition_by = [p.strip() for p in args.partition_by.split(";" if ";" in args.partition_by else "|") if p.strip()]

    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.batch_fit import prunable_partition_by
    from dagster_incremental.spark.write_spec import WriteSpec

    timer = common.instrument()
    with common.workdir("bench_merge_") as wd:
        io = common.io_manager(wd, args.master)
        spark, spark_start = common.start_spark(io)
        writer = TableWriter(spark)
        if not args.no_warmup:
            measure(spark, writer, 20_000, min(args.changes, 1000), 1, 1, partition_by, timer)
        out = [measure(spark, writer, s, args.changes, args.recent_days, args.repeats, partition_by, timer, args.layout, properties, args.source)
               for s in sizes]
        prunes = prunable_partition_by(
            WriteSpec(table=TableRef("lake", ("bench",), "t"), disposition="merge", strategy="upsert", primary_key=("id",),
                      partition_by=tuple(partition_by)),
            ["id", "customer_id", "status", "amount", "version", "updated_at"])
        record = {
            "bench": "merge_scaling",
            "changes": args.changes,
            "recent_days": args.recent_days,
            "partition_by": partition_by,
            "layout": args.layout,
            "source": args.source,
            "table_properties": properties,
            "library_prunes_on": prunes,
            "sizes": out,
            "seconds": {str(o["size"]): o["best"] for o in out},
            "ratio_largest_to_smallest": common.ratio(out[-1]["best"], out[0]["best"]),
            "target": 1.5,
            "spark_start_s": spark_start,
            "py_peak_rss_mb": common.py_peak_rss_mb(),
            "jvm_peak_rss_mb": common.jvm_peak_rss_mb(spark),
            **common.machine(),
        }
        spark.stop()
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
