"""The plain Spark + Delta peer: the shared workload written to a Delta table by hand, no library.

What a Spark user writes without dagster-incremental: the cursor kept in a Python variable
(the table's newest updated_at when a process starts), the pages filtered with
updated_at >= cursor, pages -> Arrow -> Spark, then the first run `df.write.format("delta")` and
every later run one `MERGE INTO delta.`<path>` USING batch ON id` (update or insert). No
boundary dedup, no cursor in the commit, no counts. Delta's jars as the library takes them
(the local Maven repository). One process, one session, its start reported apart:

    python -m bench.delta_plain --rows 1000000 --changes 10000 --runs 6

Prints one JSON line as bench.orders does (`seconds`, `total`, `table_rows`, `spark_start_s`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc

from bench import common, workload

UTC = pa.timestamp("us", tz="UTC")


def start_spark(folder: str):
    """A session with Delta's jars, extension and catalog, as a user configures one."""
    from pyspark.sql import SparkSession

    from dagster_incremental.spark.delta.session_setup import DELTA_CATALOG, DELTA_EXTENSIONS, delta_jars

    builder = SparkSession.builder.master("local[*]").appName("peer-plain-delta")
    for key, value in {**common.spark_extra_conf(shuffle_partitions=8), "spark.jars": delta_jars(),
                       "spark.sql.extensions": DELTA_EXTENSIONS, "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
                       "spark.sql.session.timeZone": "UTC", "spark.sql.execution.arrow.pyspark.enabled": "true",
                       "spark.pyspark.python": sys.executable, "spark.local.dir": folder}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def batch_since(run: int, rows: int, changes: int, cursor: dt.datetime) -> pa.Table:
    """The run's pages as one Arrow table of the rows at or after the cursor."""
    batch = pa.concat_tables(pa.Table.from_pylist(page) for page in workload.pages(run, rows, changes))
    stamps = pc.strptime(batch["updated_at"], "%Y-%m-%dT%H:%M:%SZ", "us").cast(UTC)
    batch = batch.set_column(batch.schema.get_field_index("updated_at"), "updated_at", stamps)
    return batch.filter(pc.greater_equal(batch["updated_at"], pa.scalar(cursor, UTC)))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="peer_delta_")
    path = f"{folder}/orders"
    t = time.perf_counter()
    spark = start_spark(folder)
    spark.sparkContext.setLogLevel("ERROR")
    spark_start = round(time.perf_counter() - t, 3)
    cursor = dt.datetime(2023, 1, 1, tzinfo=dt.timezone.utc)
    seconds = []
    for run in range(args.runs):
        t = time.perf_counter()
        batch = batch_since(run, args.rows, args.changes, cursor)
        frame = spark.createDataFrame(batch.to_pandas())
        if run == 0:
            frame.write.format("delta").save(path)
        else:
            frame.createOrReplaceTempView("batch")
            spark.sql(f"MERGE INTO delta.`{path}` t USING batch s ON t.id = s.id "
                      "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        if batch.num_rows:
            cursor = max(cursor, pc.max(batch["updated_at"]).as_py())
        seconds.append(round(time.perf_counter() - t, 3))
    record = {"peer": "plain-spark+delta", "rows": args.rows, "changes": args.changes, "runs": args.runs,
              "seconds": seconds, "total": round(sum(seconds), 3),
              "table_rows": spark.read.format("delta").load(path).count(), "spark_start_s": spark_start,
              **common.machine()}
    spark.stop()
    shutil.rmtree(folder, ignore_errors=True)
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
