"""The orders benchmark: the shared workload through a real @incremental_asset, as Dagster runs it.

One process, one persistent (temporary) Dagster instance, one SparkTableIOManager; run 0 loads
`rows` orders, runs 1.. load `changes` changed orders each (half updates, half new ids), upsert
on `id`, incremental on `updated_at`, all through `dg.materialize`. Same settings as
../shared/bench/peer_dlt.py (initial_value 2023-01-01, merge/upsert, primary key id).

    python -m bench.orders --rows 1000000 --changes 10000 --runs 6
    python -m bench.orders --rows 20000 --changes 1000 --runs 3 --verify    # checks the table (Arrow)
    python -m bench.orders --format delta --strategy delete-insert          # delete-insert on `id`
    python -m bench.orders --profile /tmp/orders.prof                       # cProfile of run 0
    python -m bench.orders --rows 10000000 --runs 2 --profile /tmp/c.prof --profile-run 1 --jobs
                                            # cProfile of the change run, Spark's jobs of each run

Prints ONE JSON line: seconds per run (Spark session start excluded, reported as spark_start_s),
total, rows in the table, peak RSS of this Python process after run 0 and at the end (the JVM's
peak separately), and the machine's load average. Per run: wall seconds by library phase
(`phases`), by how many MB each phase raised the Python peak RSS and Arrow's peak allocation
(`phase_peak_growth_mb`), and with `--jobs` Spark's jobs (`spark_jobs`: what, seconds, tasks,
rows read and shuffled, from Spark's event log).
"""

from __future__ import annotations

import argparse
import cProfile
import io as _io
import json
import os
import pstats
import tempfile
import time
from pathlib import Path

import numpy as np
import pyspark
import pyarrow as pa
import pyarrow.compute as pc

from bench import common
from bench.workload import pages

CONFIG = """\
[assets.orders]
write_disposition = { disposition = "merge", strategy = "upsert" }
primary_key = ["id"]

[assets.orders.updated_at]
cursor_path = "updated_at"
initial_value = "2023-01-01T00:00:00Z"
"""


def build_asset(config_path: str, state: dict, rows: int, changes: int, timer=None, spark=None):
    """The orders asset: the run's pages as dict rows, or (`spark` given) as one DataFrame of
    that session, the way a Spark source arrives (made from Arrow, outside the timed phases)."""
    import dagster as dg

    from dagster_incremental import Incremental, incremental_asset

    @incremental_asset(config_path=config_path)
    def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
        if spark is not None:  # PySpark 4 takes Arrow as is (pandas 3's Arrow strings trip its pandas path)
            table = run_arrow(state["run"], rows, changes)
            return spark.createDataFrame(table if pyspark.__version__ >= "4" else table.to_pandas())
        source = pages(state["run"], rows, changes)
        return (timer.timed_iter("source_pages", source) if timer else source)

    return orders


def run_arrow(run: int, rows: int, changes: int) -> pa.Table:
    """One run's pages as an Arrow table, updated_at a UTC timestamp."""
    t = pa.concat_tables(pa.Table.from_pylist(p) for p in pages(run, rows, changes))
    stamps = pc.strptime(t["updated_at"], "%Y-%m-%dT%H:%M:%SZ", "us").cast(TS)
    return t.set_column(t.schema.get_field_index("updated_at"), "updated_at", stamps)


COLUMNS = ("id", "customer_id", "status", "amount", "version", "updated_at")
TS = pa.timestamp("us", tz="UTC")


def expected_arrow(runs: int, rows: int, changes: int) -> pa.Table:
    """`workload.expected_table` as an Arrow table sorted by id, built without a per-row loop.

    Every run's pages are concatenated in order and the last version of each id wins, so it holds
    at 10M rows where the dict of `expected_table` (and a collect() of Row objects) would not.
    """
    t = pa.concat_tables(pa.Table.from_pylist(p) for run in range(runs) for p in pages(run, rows, changes))
    t = t.append_column("_seq", pa.array(np.arange(t.num_rows)))
    last = t.group_by("id", use_threads=False).aggregate([("_seq", "max")])["_seq_max"]
    t = t.take(last).drop_columns(["_seq"]).sort_by("id").select(list(COLUMNS))
    stamps = pc.strptime(t["updated_at"], "%Y-%m-%dT%H:%M:%SZ", "us").cast(TS)
    return t.set_column(t.schema.get_field_index("updated_at"), "updated_at", stamps)


def mismatches(expected: pa.Table, got: pa.Table) -> dict[str, int]:
    """Rows that differ per column between two id-sorted tables (all rows if the ids differ)."""
    if got.num_rows != expected.num_rows or not got["id"].equals(expected["id"]):
        return {"id": abs(got.num_rows - expected.num_rows) or expected.num_rows}
    out = {}
    for col in COLUMNS:
        have = got[col].cast(expected[col].type)
        n = pc.sum(pc.invert(pc.fill_null(pc.equal(have, expected[col]), False))).as_py() or 0
        if n:
            out[col] = n
    return out


def verify(spark, table: str, runs: int, rows: int, changes: int) -> dict:
    """The table must equal the workload's expected upsert result: an Arrow comparison, any size.

    The JVM sorts the table by id and hands it over as Arrow batches; every column is compared
    with `expected_arrow` (timestamps as UTC instants). Raises on any difference.
    """
    t = time.perf_counter()
    batches = spark.table(table).select(*COLUMNS).orderBy("id")._collect_as_arrow()
    got = pa.Table.from_batches(batches) if batches else pa.table({})
    bad = mismatches(expected_arrow(runs, rows, changes), got)
    assert not bad, f"table differs from the workload's expectation: {bad}"
    return {"verify_s": round(time.perf_counter() - t, 3), "verified_rows": got.num_rows}


def table_files(spark, ref) -> dict[str, int]:
    """Data and delete files and deleted positions of the table's current snapshot (its summary,
    read from the Iceberg Table object: no Spark job). What a reader pays, and what the IO
    manager's compaction rule looks at. A Delta table: its newest commit's operation."""
    if ref.location is not None:
        from dagster_incremental.spark.delta.log import DeltaLog

        log = DeltaLog(ref.location)
        newest = log.commit(log.current_version() or 0)
        return {"operation": newest.operation if newest is not None else None}
    from dagster_incremental.spark.connect import is_connect

    if is_connect(spark):  # no Iceberg Table object here: the metadata table (one Spark job)
        row = spark.sql(f"SELECT operation, summary FROM {ref.sql}.snapshots ORDER BY committed_at DESC LIMIT 1").first()
        operation, summary = (row.operation, dict(row.summary)) if row is not None else (None, {})
    else:
        iceberg = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ref.sql)
        iceberg.refresh()
        snapshot = iceberg.currentSnapshot()
        summary = dict(snapshot.summary()) if snapshot is not None else {}
        operation = str(snapshot.operation()) if snapshot is not None else None
    keys = ("total-data-files", "total-delete-files", "total-position-deletes", "added-delete-files")
    return {k.replace("total-", "").replace("-", "_"): int(summary.get(k, 0)) for k in keys} | {"operation": operation}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--profile", help="write a cProfile of run 0 to this file (top 40 to stderr)")
    ap.add_argument("--profile-run", type=int, default=0, help="the run --profile profiles (default 0)")
    ap.add_argument("--jobs", action="store_true", help="list each run's Spark jobs (from Spark's event log)")
    ap.add_argument("--rows-per-file", type=int, help="rows per Parquet file of a local load (the library's "
                    "ROWS_PER_FILE): gives a small table the file count of a large one")
    ap.add_argument("--no-phases", action="store_true", help="do not time library phases")
    ap.add_argument("--verify", action="store_true", help="compare the final table with the workload's expectation")
    ap.add_argument("--lake", help="a JSON file naming another catalog (bench/lake.py: REST over S3)")
    ap.add_argument("--format", choices=["iceberg", "delta"], default="iceberg", help="the tables' format")
    ap.add_argument("--strategy", choices=["upsert", "delete-insert"], default="upsert",
                    help="the merge strategy on `id` (both end in the same table)")
    ap.add_argument("--remote", help="run over this Spark Connect server (sc://host:port; Delta, or Iceberg in a --lake JDBC or REST catalog)")
    ap.add_argument("--source", choices=["rows", "frame"], default="rows",
                    help="the asset gives dict rows (default) or a DataFrame of the IO manager's session")
    args = ap.parse_args(argv)

    import dagster as dg

    if args.rows_per_file:
        from dagster_incremental.spark.iceberg.local import append

        append.ROWS_PER_FILE = args.rows_per_file
    state = {"run": 0}
    config = CONFIG.replace('strategy = "upsert"', f'strategy = "{args.strategy}"')
    with common.workdir("bench_orders_", config) as wd:
        if args.jobs:
            os.environ["BENCH_EVENT_LOG"] = tempfile.mkdtemp(prefix="events_", dir=wd.root)
        instance = dg.DagsterInstance.get()  # persistent: sqlite under the temp DAGSTER_HOME
        lake = json.loads(Path(args.lake).read_text()) if args.lake else None
        io = common.io_manager(wd, args.master, lake=lake, table_format=args.format, remote=args.remote)
        spark, spark_start = common.start_spark(io)
        timer = None if args.no_phases else common.instrument()
        asset = build_asset(str(wd.config), state, args.rows, args.changes, timer,
                            spark if args.source == "frame" else None)
        rss_before = common.py_rss_mb()
        seconds: list[float] = []
        peak_first = None
        meta: list[dict] = []
        phases: list[dict] = []
        peaks: list[dict] = []
        files: list[dict] = []
        windows: list[tuple[float, float]] = []
        for run in range(args.runs):
            state["run"] = run
            prof = cProfile.Profile() if (args.profile and run == args.profile_run) else None
            t, started = time.perf_counter(), time.time()
            if prof:
                prof.enable()
            result = dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=common.QUIET)
            if prof:
                prof.disable()
            seconds.append(round(time.perf_counter() - t, 3))
            windows.append((started, time.time()))
            assert result.success, "run failed"
            phases.append(timer.reset() if timer else {})
            peaks.append(timer.reset_peaks() if timer else {})
            m = result.get_asset_materialization_events()[-1].materialization.metadata
            meta.append({k.split("/")[-1]: m[k].value for k in (
                "dagster_incremental/rows_inserted", "dagster_incremental/rows_updated", "dagster/row_count")})
            files.append(table_files(spark, io.table_name(dg.AssetKey("orders"))))
            if run == 0:
                peak_first = common.py_peak_rss_mb()
            if prof:
                prof.dump_stats(args.profile)
                out = _io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
                common.log(out.getvalue())
            common.log(f"run {run}: {seconds[-1]} s {meta[-1]} {files[-1]} {phases[-1]} peak growth MB {peaks[-1]}")
        table = io.table_name(dg.AssetKey("orders")).sql
        n = spark.table(table).count()
        # Peaks before the verification adds its own tables.
        peak_runs, jvm_peak = common.py_peak_rss_mb(), common.jvm_peak_rss_mb(spark)
        checked = verify(spark, table, args.runs, args.rows, args.changes) if args.verify else {}
        record = {
            "bench": "orders",
            "engine": f"dagster-incremental+{args.format}",
            "remote": bool(args.remote),
            "source": args.source,
            "strategy": args.strategy,
            "catalog": (lake or {}).get("catalog", common.CATALOG),
            "rows": args.rows,
            "changes": args.changes,
            "runs": args.runs,
            "seconds": seconds,
            "total": round(sum(seconds), 3),
            "table_rows": n,
            "spark_start_s": spark_start,
            "py_rss_before_mb": rss_before,
            "py_peak_rss_first_run_mb": peak_first,
            "py_peak_rss_mb": peak_runs,
            "jvm_peak_rss_mb": jvm_peak,
            "py_workers_peak_rss_mb": common.workers_rss_mb(spark),
            "per_run": meta,
            "phases": phases,
            "phase_peak_growth_mb": peaks,
            "table_files": files,
            "verified": bool(args.verify),
            **checked,
            **common.machine(),
        }
        spark.stop()
        instance.dispose()
        if args.jobs:
            record["spark_jobs"] = common.spark_jobs(os.environ.pop("BENCH_EVENT_LOG"), windows)
            for run, jobs in enumerate(record["spark_jobs"]):
                common.log(f"run {run}: {len(jobs)} Spark jobs, {sum(j['seconds'] for j in jobs):.2f} s")
                for j in jobs:
                    common.log(f"  {j['seconds']:7.2f} s {j['tasks']:4d} tasks {j['rows_read']:>11,} read "
                               f"{j['shuffle_rows_written']:>11,} shuffled  {j['what']}")
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
