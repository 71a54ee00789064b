"""Fresh-process runs: one whole OS process per run, as Dagster's run launcher starts them.

Long-running benchmarks (bench.orders, bench.compare) keep one warm process; a deployed Dagster
starts a new process per run, so Python imports, the JVM and the first Spark job are paid by
every run. Each measurement here is the wall time of one whole process:

  ours      `dagster asset materialize -m bench.fresh_location --select orders` on a new temp
            warehouse + DAGSTER_HOME: run 0 (`--rows` orders), then a change run (`--changes`),
            then a no-op run (the source returns nothing; the table holds the cursor)
  trivial   the same command for a plain @dg.asset returning None (the no-op's floor)
  plain     ../shared/bench/peer_plain_spark.py (this interpreter)
  dgi       ../shared/bench/peer_dagster_iceberg.py (/tmp/peer-dgi)
  dlt       ../shared/bench/peer_dlt.py --destination delta (/tmp/peer)

Each peer runs as two processes on one folder (`--dir`): its first run (`--first-run 0 --runs 1`),
then its change run (`--first-run 1 --runs 1`), a new process continuing the same table and
incremental state, as ours' change run is. The peers read OUR bench/workload.py. The Dagster
instance's storage is created before the timed processes, as a deployment's already exists. The
order reverses every other repeat.

    python -m bench.fresh --rows 20000 --changes 1000 --repeats 3

Prints ONE JSON line (every process's seconds, medians, ratios: ours' first run / each peer's,
target <= 0.8 against plain Spark; ours' change run / each peer's, target <= 1.0 against
dagster-iceberg and dlt+delta, and / the trivial asset's, <= 1.3; no-op / trivial, <= 1.1; the
change run's peak memory / dagster-iceberg's, <= 1.2) and markdown tables on stderr. Peak memory
is each process's resident peak with the children it waited for (see common.run_json: a Spark
JVM is not in it).
Every first run must load `--rows` rows and every change run end with `--rows + changes - changes // 2`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench import common
from bench.compare import PEERS, REPO, WORKLOAD
from bench.orders import CONFIG

TARGETS = {"first_vs_plain": 0.8, "change_vs_dgi": 1.0, "change_vs_dlt": 1.0, "change_vs_trivial": 1.3,
           "noop_vs_trivial": 1.1, "change_memory_vs_dgi": 1.2}


def fresh_env(wd: common.Workdir, run: str, rows: int, changes: int,
              extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """bench.fresh_location's variables for one run on this workdir."""
    return {"BENCH_FRESH_CONFIG": str(wd.config), "BENCH_FRESH_WAREHOUSE": str(wd.warehouse),
            "BENCH_FRESH_RUN": run, "BENCH_FRESH_ROWS": str(rows), "BENCH_FRESH_CHANGES": str(changes),
            **(extra_env or {})}


def materialize(wd: common.Workdir, asset: str, run: str, rows: int, changes: int,
                extra_env: dict[str, str] | None = None) -> tuple[float, int | None, int]:
    """One `dagster asset materialize` process; its wall seconds, the asset's row count after and
    the process's peak memory (MB). `extra_env`: more of bench.fresh_location's variables."""
    import dagster as dg

    env = fresh_env(wd, run, rows, changes, extra_env)
    cmd = [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "bench.fresh_location",
           "--select", asset, "--config-json", json.dumps(common.QUIET)]
    record, wall = common.run_json(cmd, REPO, env)
    with dg.DagsterInstance.get() as instance:  # the temp DAGSTER_HOME the process used
        event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    count = event.asset_materialization.metadata.get("dagster/row_count") if event else None
    return wall, count.value if count else None, record["process_peak_mb"]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default="plain,dgi,dlt", help="comma-separated subset of plain,dgi,dlt")
    ap.add_argument("--peer-dir", default=str(REPO.parent / "shared" / "bench"))
    ap.add_argument("--plain-python", default=sys.executable)
    ap.add_argument("--dgi-python", default="/tmp/peer-dgi/bin/python")
    ap.add_argument("--dlt-python", default="/tmp/peer/bin/python")
    args = ap.parse_args(argv)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if set(peers) - set(PEERS):
        ap.error(f"--peers: choose from {sorted(PEERS)}")

    import dagster as dg

    python = {"plain": args.plain_python, "dgi": args.dgi_python, "dlt": args.dlt_python}
    size = ["--rows", str(args.rows), "--changes", str(args.changes), "--runs", "1", "--workload", str(WORKLOAD)]
    peer_cmds = {p: [python[p], str(Path(args.peer_dir) / PEERS[p][1]), *size,
                     *(["--destination", "delta"] if p == "dlt" else [])] for p in peers}
    keys = ["ours_first", "ours_change", "noop", "trivial", *peers, *(f"{p}_change" for p in peers)]
    seconds: dict[str, list[float]] = {k: [] for k in keys}
    peak_mb: dict[str, list[int]] = {k: [] for k in keys}
    rows: dict[str, set] = {k: set() for k in keys}
    units = ["ours", "trivial", *peers]
    for rep in range(args.repeats):
        with common.workdir("bench_fresh_", CONFIG) as wd:
            dg.DagsterInstance.from_config(str(wd.dagster_home)).dispose()  # storage exists (untimed)
            for unit in units if rep % 2 == 0 else units[::-1]:
                if unit == "ours":  # in this order: the no-op needs the table and its cursor
                    for key, run in (("ours_first", "0"), ("ours_change", "1"), ("noop", "empty")):
                        wall, n, peak = materialize(wd, "orders", run, args.rows, args.changes)
                        seconds[key].append(wall)
                        peak_mb[key].append(peak)
                        rows[key].add(n)
                elif unit == "trivial":
                    wall, _, peak = materialize(wd, "trivial", "0", args.rows, args.changes)
                    seconds["trivial"].append(wall)
                    peak_mb["trivial"].append(peak)
                else:
                    folder = wd.root / f"peer_{unit}"  # both processes continue one table
                    for key, first in ((unit, "0"), (f"{unit}_change", "1")):
                        record, wall = common.run_json(
                            [*peer_cmds[unit], "--dir", str(folder), "--first-run", first], REPO)
                        seconds[key].append(wall)
                        peak_mb[key].append(record["process_peak_mb"])
                        rows[key].add(record.get("table_rows"))

    median = {k: round(statistics.median(v), 3) for k, v in seconds.items()}
    ratios = {f"first_vs_{p}": common.ratio(median["ours_first"], median[p]) for p in peers}
    ratios |= {f"change_vs_{p}": common.ratio(median["ours_change"], median[f"{p}_change"]) for p in peers}
    ratios["change_vs_trivial"] = common.ratio(median["ours_change"], median["trivial"])
    ratios["noop_vs_trivial"] = common.ratio(median["noop"], median["trivial"])
    peak = {k: statistics.median(v) for k, v in peak_mb.items() if v}
    ratios |= {f"change_memory_vs_{p}": common.ratio(peak["ours_change"], peak[f"{p}_change"]) for p in peers}
    targets = {k: t for k, t in TARGETS.items() if k in ratios}
    first_rows = {n for k in ("ours_first", *peers) for n in rows[k]}
    after_change = args.rows + args.changes - args.changes // 2  # half the change rows are new ids
    change_rows = {n for k in ("ours_change", *(f"{p}_change" for p in peers)) for n in rows[k]}
    record = {
        "bench": "fresh", "rows": args.rows, "changes": args.changes, "repeats": args.repeats,
        "seconds": seconds, "median": median, "peak_mb": peak_mb, "median_peak_mb": peak, "ratios": ratios, "targets": targets,
        "meets": {k: ratios[k] is not None and ratios[k] <= t for k, t in targets.items()},
        "table_rows": {k: [*v] for k, v in rows.items() if k != "trivial"},
        "same_first_run_rows": first_rows == {args.rows},
        "same_change_run_rows": change_rows == {after_change},
        **common.machine(),
    }
    common.log(tables(record, peers))
    common.emit(record)
    if not (record["same_first_run_rows"] and record["same_change_run_rows"]):
        raise SystemExit(f"first runs must load {args.rows} rows and change runs end with {after_change}: "
                         f"{record['table_rows']}")
    return record


def tables(record: dict, peers: list[str]) -> str:
    med, rat, tgt = record["median"], record["ratios"], record["targets"]

    def cell(key: str) -> str:
        if rat.get(key) is None:
            return ""
        t = tgt.get(key)
        return f"{rat[key]:.2f}" + (f" (≤ {t:g}: {'met' if rat[key] <= t else 'no'})" if t else "")

    n = record["repeats"]
    ours = "ours (dagster-incremental, iceberg)"
    runs = [[ours, common.seconds(med["ours_first"]), ""]]
    runs += [[PEERS[p][0], common.seconds(med[p]), cell(f"first_vs_{p}")] for p in peers]
    mem = record["median_peak_mb"]
    change = [[ours, common.seconds(med["ours_change"]), cell("change_vs_trivial") + " (vs trivial)", f"{mem['ours_change']:.0f} MB", ""]]
    change += [[PEERS[p][0], common.seconds(med[f"{p}_change"]), cell(f"change_vs_{p}"), f"{mem[f'{p}_change']:.0f} MB",
                cell(f"change_memory_vs_{p}")] for p in peers]
    noop = [["ours, no-op (source returns nothing)", common.seconds(med["noop"]), cell("noop_vs_trivial")],
            ["trivial `@dg.asset` returning None", common.seconds(med["trivial"]), ""]]
    return "\n\n".join([
        common.markdown([f"fresh process, first run: {record['rows']:,} rows (median of {n})", "wall time",
                         "ours' first run / this"], runs),
        common.markdown([f"fresh process, change run: {record['changes']:,} rows into {record['rows']:,} "
                         f"(median of {n})", "wall time", "ours' change run / this", "peak memory",
                         "ours' peak / this"], change),
        common.markdown([f"fresh process, nothing new (median of {n})", "wall time", "ours / trivial"], noop),
        f"load avg {record['loadavg']} on {record['cpus']} cores at the end, {record['utc']}",
    ])


if __name__ == "__main__":
    main()
