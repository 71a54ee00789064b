"""The `primary_key_unique` check's count, by a Spark job and in the run's process, with Spark
already running (as after a run that wrote a Spark DataFrame):

    python -m bench.key_check --rows 1000000 --format delta --repeats 5

One table of `--rows` unique keys, written once by Spark; then each repeat counts its duplicated
keys both ways, the two alternating which goes first (`common.interleaved`). Both must find the
same count. Prints one JSON line: the medians and in-process / Spark.
"""

from __future__ import annotations

import argparse
import statistics

import dagster as dg

from bench import common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", choices=["iceberg", "delta"], default="iceberg")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with common.workdir("bench_key_check_") as wd:
        io = common.io_manager(wd, table_format=args.format)
        spark, _ = common.start_spark(io)
        table = io.table_name(dg.AssetKey("keys"))
        frame = spark.range(args.rows).selectExpr("id", "CAST(id AS STRING) AS name", "id * 2 AS amount")
        if args.format == "iceberg":
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {common.CATALOG}.{common.NAMESPACE}")
            frame.writeTo(table.sql).using("iceberg").create()
        else:
            frame.write.format("delta").save(table.location)
        options = {"snapshot_id": io.tables.snapshot(table), "current": None, "examples": 5}
        ways = {"spark": lambda: io.tables.duplicate_keys(table, ["id"], **options),
                "in_process": lambda: io.tables.duplicate_keys_without_jvm(table, ["id"], **options)}
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        for turn in range(1, args.repeats + 1):
            found = common.interleaved(ways, turn, seconds)
            assert found["in_process"] is not None and found["spark"].count == found["in_process"].count == 0
        medians = {name: round(statistics.median(s), 3) for name, s in seconds.items()}
        common.emit({"bench": "key_check", "format": args.format, "rows": args.rows, "median": medians,
                     "in_process_over_spark": common.ratio(medians["in_process"], medians["spark"]),
                     "seconds": {name: [round(x, 3) for x in s] for name, s in seconds.items()}, **common.machine()})


if __name__ == "__main__":
    main()
