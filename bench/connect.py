"""Spark Connect against classic mode: a change run into a Delta table (or, with `--format
iceberg`, an Iceberg table in a JDBC catalog on SQLite that the server and the run both reach),
through a warm Connect server or through the Spark driver in the run's own process.

Each measurement is one process of `bench.orders --format delta` (run 0 loads `--rows` orders,
then `--runs - 1` change runs of `--changes` each, upsert on id), in classic mode (its own
driver JVM, `local[*]`) or with `--remote` (a Spark Connect server this command starts once on
127.0.0.1, `local[*]`, and warms with one such process first, untimed). The server and the
classic driver get the same Spark settings (bench.common.spark_extra_conf) and the same jars.
Two sources: `rows` (the workload's dict pages: the library appends and upserts them with
delta-rs in the run's process in both modes) and `frame` (one DataFrame of the session, made
from Arrow: Spark's MERGE runs on the server, or in the run's own driver). Classic and Connect
alternate, the order reversing every repeat.

    python -m bench.connect --rows 1000000 --changes 10000 --runs 4 --repeats 2
    python -m bench.connect --rows 20000 --changes 1000 --runs 3 --repeats 1     # quick
    python -m bench.connect --format iceberg --rows 1000000 --changes 10000 --runs 4 --repeats 2

With `--fresh` it also times what a sensor tick costs: a fresh `dagster asset materialize` process
(bench.fresh's) whose change run (`--fresh-changes` into `--fresh-rows`) goes over the warm
server, against dagster-iceberg's change run in a fresh process (../shared/bench's peer, in
`--dgi-python`'s virtualenv: no JVM either); target <= 0.8. Both continue a table their own
untimed first process loaded.

Needs PySpark 4 (its wheel ships the Connect server) and the Delta jars (Iceberg: its runtime and
SQLite's JDBC driver) in the local Maven repository (tests/maven_jars.py). Prints ONE JSON line: every process's change-run seconds, the
medians, and connect / classic per source (target <= 1.2), and a markdown table on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from bench import common

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.2
FRESH_TARGET = 0.8
SOURCES = ("rows", "frame")


def server_conf(shuffle_partitions: int, table_format: str, folder: Path) -> dict[str, str]:
    """The Connect server's Spark settings: the classic driver's (bench.common), and Delta's or
    the Iceberg catalog's (`iceberg_catalog`)."""
    from dagster_incremental.spark.delta.session_setup import DELTA_CATALOG, DELTA_EXTENSIONS, delta_jars
    from dagster_incremental.spark.iceberg.session_setup import ICEBERG_EXTENSIONS

    conf = {**common.spark_extra_conf("local[*]", shuffle_partitions), "spark.master": "local[*]",
            "spark.sql.session.timeZone": "UTC"}
    if table_format == "iceberg":
        return {**conf, **iceberg_catalog(folder), "spark.sql.extensions": ICEBERG_EXTENSIONS}
    return {**conf, "spark.jars": delta_jars(), "spark.sql.extensions": DELTA_EXTENSIONS,
            "spark.sql.catalog.spark_catalog": DELTA_CATALOG}


def iceberg_catalog(folder: Path) -> dict[str, str]:
    """Catalog `lake`: Iceberg's JDBC catalog on a SQLite file in `folder` (what a JDBC or REST
    catalog is over Connect: a service both the server and the run's process reach), with the
    runtime and driver jars of the local Maven repository."""
    from maven_jars import s3_jars, sqlite_jar

    jars, driver = s3_jars(), sqlite_jar()
    if jars is None or driver is None:
        raise SystemExit("the Iceberg runtime or SQLite's JDBC driver is not in the local Maven repository "
                         "(python3 tests/maven_jars.py lists them)")
    prefix = f"spark.sql.catalog.{common.CATALOG}"
    return {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc",
            f"{prefix}.uri": f"jdbc:sqlite:{folder}/catalog.db", f"{prefix}.warehouse": f"{folder}/iceberg",
            f"{prefix}.jdbc.schema-version": "V1", "spark.jars": ",".join([*jars, driver])}


def lake_file(folder: Path) -> Path:
    """bench.orders' `--lake`: the Iceberg catalog, a namespace of each process's own."""
    namespace = f"bench_{uuid.uuid4().hex[:8]}"
    path = folder / f"{namespace}.json"
    path.write_text(json.dumps({"catalog": common.CATALOG, "namespace": namespace, "warehouse": f"{folder}/iceberg",
                                "spark_config": iceberg_catalog(folder)}))
    return path


def one_process(args: argparse.Namespace, source: str, remote: str | None, folder: Path) -> list[float]:
    """The change runs' seconds of one bench.orders process."""
    lake = ["--lake", str(lake_file(folder))] if args.format == "iceberg" else []
    cmd = [sys.executable, "-m", "bench.orders", "--format", args.format, "--source", source, "--rows", str(args.rows),
           "--changes", str(args.changes), "--runs", str(args.runs), "--no-phases", *lake,
           *(["--remote", remote] if remote else [])]
    record, _ = common.run_json(cmd, REPO)
    after = args.rows + (args.runs - 1) * (args.changes - args.changes // 2)  # half of each change is new ids
    if record["table_rows"] != after:
        raise SystemExit(f"{'connect' if remote else 'classic'} {source}: {record['table_rows']} rows, not {after}")
    return record["seconds"][1:]


def fresh_change_runs(args: argparse.Namespace, url: str, rep: int) -> dict[str, float]:
    """Fresh-process change runs over Connect, ours through `dagster asset materialize` (as
    Dagster launches a run) and through a script calling `dg.materialize` (as the peer runs), one
    after the other, each a change run of its own; and dagster-iceberg's. Each after its own
    first run; the order reverses every repeat."""
    from bench.compare import PEERS, WORKLOAD
    from bench.fresh import fresh_env, materialize
    from bench.orders import CONFIG

    walls: dict[str, float] = {}
    rows, changes = args.fresh_rows, args.fresh_changes
    size = ["--rows", str(rows), "--changes", str(changes), "--runs", "1", "--workload", str(WORKLOAD)]
    with common.workdir("bench_connect_fresh_", CONFIG) as wd:
        wd.config.write_text(wd.config.read_text().replace('format = "iceberg"', 'format = "delta"'))
        over = {"BENCH_FRESH_REMOTE": url, "BENCH_FRESH_FORMAT": "delta"}
        peer = [args.dgi_python, str(Path(args.peer_dir) / PEERS["dgi"][1]), *size, "--dir", str(wd.root / "dgi")]

        def ours(kind: str, run: int) -> None:
            if kind == "cli":
                walls["ours"], count, _ = materialize(wd, "orders", str(run), rows, changes, over)
            else:
                env = fresh_env(wd, str(run), rows, changes, over)
                record, walls["ours_script"] = common.run_json([sys.executable, "-m", "bench.fresh_location"], REPO, env)
                count = record["table_rows"]
            _expect(f"ours ({kind}) after run {run}", count, rows + run * (changes - changes // 2))

        for unit in (["ours", "dgi"] if rep % 2 == 0 else ["dgi", "ours"]):
            if unit == "ours":
                materialize(wd, "orders", "0", rows, changes, over)
                for run, kind in enumerate(["cli", "script"] if rep % 2 == 0 else ["script", "cli"], start=1):
                    ours(kind, run)
            else:
                common.run_json([*peer, "--first-run", "0"], REPO)
                record, walls["dgi"] = common.run_json([*peer, "--first-run", "1"], REPO)
                _expect("dagster-iceberg after its change run", record.get("table_rows"), rows + changes - changes // 2)
    return walls


def _expect(what: str, got: int | None, want: int) -> None:
    if got != want:
        raise SystemExit(f"fresh {what}: {got} rows, not {want}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--format", choices=["delta", "iceberg"], default="delta")
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=4, help="run 0 (the load) and runs - 1 change runs per process")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sources", default=",".join(SOURCES), help='comma-separated; "" with --fresh: only the fresh runs')
    ap.add_argument("--fresh", action="store_true", help="also time fresh-process change runs against dagster-iceberg's")
    ap.add_argument("--fresh-rows", type=int, default=20_000)
    ap.add_argument("--fresh-changes", type=int, default=1_000)
    ap.add_argument("--peer-dir", default=str(REPO.parent / "shared" / "bench"))
    ap.add_argument("--dgi-python", default="/tmp/peer-dgi/bin/python")
    args = ap.parse_args(argv)
    sources = [s for s in args.sources.split(",") if s]
    if args.fresh and args.format != "delta":
        raise SystemExit("--fresh times Delta's fresh process against dagster-iceberg's: leave --format delta")
    sys.path.insert(0, str(REPO / "tests"))  # the tests' Connect server: started, awaited and stopped the same way
    from connect_server import ConnectServer

    seconds: dict[str, list[float]] = {f"{mode}_{s}": [] for s in sources for mode in ("classic", "connect")}
    fresh: dict[str, list[float]] = {"ours": [], "ours_script": [], "dgi": []}
    with tempfile.TemporaryDirectory(prefix="bench_connect_") as folder:
        base = Path(folder)
        server = ConnectServer(base=base, warehouse=folder, session_conf=server_conf(4, args.format, base)).start()
        try:
            if sources:  # warm the server: its JIT, its first MERGE (untimed)
                one_process(args, sources[0], server.url, base)
            for rep in range(args.repeats):
                for source in sources:
                    modes = [("classic", None), ("connect", server.url)]
                    for mode, remote in modes if rep % 2 == 0 else modes[::-1]:
                        seconds[f"{mode}_{source}"] += one_process(args, source, remote, base)
                if args.fresh:
                    for unit, wall in fresh_change_runs(args, server.url, rep).items():
                        fresh[unit].append(wall)
        finally:
            server.stop()
    median = {k: round(statistics.median(v), 3) for k, v in seconds.items()}
    ratios = {s: common.ratio(median[f"connect_{s}"], median[f"classic_{s}"]) for s in sources}
    record = {"bench": "connect", "format": args.format, "rows": args.rows, "changes": args.changes, "runs": args.runs, "repeats": args.repeats,
              "seconds": seconds, "median": median, "connect_vs_classic": ratios, "target": TARGET,
              "meets": {s: r is not None and r <= TARGET for s, r in ratios.items()}, **common.machine()}
    if args.fresh:
        fresh_median = {k: round(statistics.median(v), 3) for k, v in fresh.items()}
        fresh_ratio = common.ratio(fresh_median["ours"], fresh_median["dgi"])
        script_ratio = common.ratio(fresh_median["ours_script"], fresh_median["dgi"])
        record |= {"fresh_seconds": fresh, "fresh_median": fresh_median, "fresh_vs_dgi": fresh_ratio,
                   "fresh_script_vs_dgi": script_ratio, "fresh_target": FRESH_TARGET,
                   "fresh_meets": fresh_ratio is not None and fresh_ratio <= FRESH_TARGET}
        common.log(common.markdown(
            [f"fresh process, change run: {args.fresh_changes:,} rows into {args.fresh_rows:,} (median of {args.repeats})",
             "wall time", "ours / dagster-iceberg"],
            [["ours over Connect (Delta), `dagster asset materialize`", common.seconds(fresh_median["ours"]),
              f"{fresh_ratio:.2f} (≤ {FRESH_TARGET:g}: {'met' if record['fresh_meets'] else 'no'})"],
             ["ours over Connect (Delta), a script's `dg.materialize`", common.seconds(fresh_median["ours_script"]),
              f"{script_ratio:.2f}"],
             ["dagster-iceberg (PyArrow IO manager)", common.seconds(fresh_median["dgi"]), ""]]))
    if sources:
        common.log(common.markdown(
            [f"change run, {args.changes:,} rows into {args.rows:,} ({args.format}, median of {args.repeats * (args.runs - 1)})",
             "classic", "over Connect", "connect / classic"],
            [[s, common.seconds(median[f"classic_{s}"]), common.seconds(median[f"connect_{s}"]),
              f"{ratios[s]:.2f} (≤ {TARGET:g}: {'met' if record['meets'][s] else 'no'})" if ratios[s] else ""]
             for s in sources]))
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
