"""Spark source: a pyspark DataFrame of 10,000,000 rows through the incremental filter and an
append, against a plain Spark append of the same kept rows.

The source is the workload's run-0 orders for ids 0..rows-1 (updated_at = 2024-01-01 + id s),
written once to Parquet in the temp folder (not timed) and read back as a DataFrame, the way a
Spark source usually arrives. The cursor's initial_value keeps the newest `--keep` fraction.

  A (asset)  : an @incremental_asset (append, primary key id) whose body returns that DataFrame,
               run by dg.materialize with the SparkTableIOManager (first run: creates the table);
  E (engine) : the same without Dagster: `incremental(...).bind(None).filter(df)` then
               `TableWriter.write(append)` (first write: creates the table);
  P (plain)  : `df.where(updated_at >= start)` then CREATE TABLE (same table properties) and
               `writeTo(table).append()`.

After `--warmup` untimed rounds they run in turn (P E A, then A E P, ... `--rounds` times), each
into a fresh table; medians compared.

    python -m bench.spark_source --rows 10000000 --keep 0.5 --rounds 2
    python -m bench.spark_source --rows 200000 --rounds 1        # quick

Prints ONE JSON line: seconds for each, kept rows, and the ratios asset/plain and engine/plain
(target <= 1.2).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time

from bench import common
from bench.merge_scaling import EPOCH_S, base_frame


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--keep", type=float, default=0.5, help="fraction of rows at or after initial_value")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--source", choices=["parquet", "range"], default="parquet")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (JVM JIT, file cache)")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)

    import dagster as dg

    from dagster_incremental import Incremental, incremental, incremental_asset
    from dagster_incremental.spark.iceberg.table_create import DEFAULT_TABLE_PROPERTIES
    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

    start_s = EPOCH_S + int(args.rows * (1 - args.keep))
    start = dt.datetime.fromtimestamp(start_s, dt.timezone.utc)
    start_iso = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    # each round's asset has a fresh name, so its settings are given in code, not as [assets.events]
    with common.workdir("bench_spark_source_") as wd:
        instance = dg.DagsterInstance.get()
        io = common.io_manager(wd, args.master)
        spark, spark_start = common.start_spark(io)
        from pyspark.sql import functions as F

        if args.source == "parquet":
            path = str(wd.root / "source.parquet")
            base_frame(spark, args.rows).write.parquet(path)

            def source():
                return spark.read.parquet(path)
        else:
            def source():
                return base_frame(spark, args.rows)

        props = ", ".join(f"'{k}' = '{v}'" for k, v in DEFAULT_TABLE_PROPERTIES.items())
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {common.CATALOG}.{common.NAMESPACE}")
        counter = {"n": 0}

        def fresh(prefix: str) -> str:
            counter["n"] += 1
            return f"{prefix}_{counter['n']}"

        def plain() -> tuple[float, int]:
            name = TableRef.for_asset(common.CATALOG, common.NAMESPACE, [fresh("plain")])
            t = time.perf_counter()
            df = source().where(F.col("updated_at") >= F.lit(start))
            cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
            spark.sql(f"CREATE TABLE {name} ({cols}) USING iceberg TBLPROPERTIES ({props})")
            df.writeTo(name.sql).append()
            s = time.perf_counter() - t
            return s, spark.table(name.sql).count()

        def engine() -> tuple[float, int]:
            name = TableRef.for_asset(common.CATALOG, common.NAMESPACE, [fresh("engine")])
            t = time.perf_counter()
            run = incremental("updated_at", initial_value=start_iso).bind(None)
            kept = run.filter(source())
            TableWriter(spark).write(WriteSpec(table=name, disposition="append", primary_key=("id",)),
                                     kept, commit=CommitInfo(state=run.state, run_id="engine"))
            s = time.perf_counter() - t
            return s, spark.table(name.sql).count()

        def asset() -> tuple[float, int]:
            asset_name = fresh("events")

            @incremental_asset(name=asset_name, primary_key="id", write_disposition="append",
                               config_path=str(wd.config))
            def events(updated_at: Incremental = incremental("updated_at", initial_value=start_iso)):
                return source()

            t = time.perf_counter()
            result = dg.materialize([events], instance=instance, resources={"io_manager": io},
                                    run_config=common.QUIET)
            s = time.perf_counter() - t
            assert result.success
            return s, spark.table(io.table_name(dg.AssetKey(asset_name)).sql).count()

        timer = common.instrument((*common.PHASES, "dagster_incremental.cursor.spark_filter:filter_spark"))
        phases: dict[str, list[dict]] = {"engine": [], "asset": []}
        times: dict[str, list[float]] = {"plain": [], "engine": [], "asset": []}
        kept_rows: dict[str, int] = {}
        order = [("plain", plain), ("engine", engine), ("asset", asset)]
        for i in range(args.warmup + args.rounds):
            for label, fn in (order if i % 2 == 0 else order[::-1]):
                timer.reset()
                s, n = fn()
                if label in phases and i >= args.warmup:
                    phases[label].append(timer.reset())
                if i < args.warmup:
                    common.log(f"warm-up {label}: {s:.3f} s")
                    continue
                times[label].append(round(s, 3))
                kept_rows[label] = n
                common.log(f"{label}: {s:.3f} s, {n} rows")
        assert len(set(kept_rows.values())) == 1, kept_rows
        med = {k: round(statistics.median(v), 3) for k, v in times.items()}
        record = {
            "bench": "spark_source",
            "rows": args.rows,
            "kept": kept_rows["plain"],
            "source": args.source,
            "seconds": times,
            "median": med,
            "phases": phases,
            "ratio_asset_to_plain": common.ratio(med["asset"], med["plain"]),
            "ratio_engine_to_plain": common.ratio(med["engine"], med["plain"]),
            "target": 1.2,
            "spark_start_s": spark_start,
            "py_peak_rss_mb": common.py_peak_rss_mb(),
            "jvm_peak_rss_mb": common.jvm_peak_rss_mb(spark),
            **common.machine(),
        }
        spark.stop()
        instance.dispose()
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
