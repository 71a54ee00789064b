"""Ours against the three peers on identical rows, in turn A B C D D C B A, with the issue's ratios.

A = `python -m bench.orders --verify` (this interpreter; the final table is compared with the
workload's expectation after the timed runs). The peers live in ../shared/bench/ and each is fed
OUR bench/workload.py via --workload, so all four load the same rows:

  B plain   peer_plain_spark.py, plain pyspark + Iceberg by hand (this interpreter: the floor)
  C dgi     peer_dagster_iceberg.py, Dagster + dagster-iceberg (/tmp/peer-dgi/bin/python)
  D dlt     peer_dlt.py --destination delta, dlt + delta-rs (/tmp/peer/bin/python)

    python -m bench.compare --rows 1000000 --changes 10000 --runs 6 --rounds 2
    python -m bench.compare --rows 10000000 --changes 10000 --runs 3 --rounds 1   # the 10M variant
    python -m bench.compare --peers plain,dlt --rows 20000 --changes 1000 --runs 3 --rounds 1
    python -m bench.compare --format delta --peers plain,dlt --rows 1000000 --changes 10000 --runs 6

With `--format delta` ours writes Delta tables and "plain" is bench/delta_plain.py (plain Spark
+ Delta MERGE by hand, this interpreter); dlt writes Delta in either case.

Alternating the order per round pair spreads the box's load drift over all systems. Prints ONE
JSON line (every result, medians over rounds, ratios ours/peer for the first run, the mean change
run, the total and the worst change run, each against its target) and, on stderr, markdown tables
to paste into bench/README.md. Every system must end with the same number of rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench import common

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "bench" / "workload.py"
PEERS = {  # name: (label, script in --peer-dir)
    "plain": ("plain Spark + Iceberg", "peer_plain_spark.py"),
    "dgi": ("Dagster + dagster-iceberg", "peer_dagster_iceberg.py"),
    "dlt": ("dlt + delta", "peer_dlt.py"),
}
# Ratio ours/peer must be <= the target. The 10M variant is judged on its own targets.
TARGETS = {
    "plain": {"first": 1.15, "change": 1.2, "total": 1.15},
    "dgi": {"total": 0.85},
    "dlt": {"total": 0.6},
}
TARGETS_10M = {"dlt": {"worst_change": 1.5, "total": 1.0}}
# On Delta: the change run at most 0.8x each peer's, the first load half dlt's, six runs ahead.
TARGETS_DELTA = {"plain": {"change": 0.8, "total": 1.0}, "dlt": {"first": 0.5, "change": 0.8, "total": 1.0}}
PLAIN_DELTA = ("plain Spark + Delta", "bench.delta_plain")
RATIOS = ("first", "change", "total", "worst_change")


def plain_peer_env() -> dict[str, str]:
    """What the plain peer (run by this interpreter) needs on its Spark line. It takes Iceberg's runtime for Spark
    3.5 from the snowpark-connect-deps-iceberg wheel, which ships no other line's; on Spark 4 it
    gets a stand-in module of that name (first on its PYTHONPATH) listing this line's runtime,
    the jar our runs use, under the file name it looks for. Nothing else of the peer changes."""
    from dagster_incremental.spark.iceberg.session_setup import iceberg_runtime_jar
    from dagster_incremental.spark.spark_line import running_line

    if running_line().iceberg_wheel_jar is not None:
        return {}
    folder = Path(tempfile.mkdtemp(prefix="bench_plain_line_"))
    runtime = Path(iceberg_runtime_jar())
    link = folder / f"iceberg-spark-runtime-3.5_2.12.stand-in.{runtime.name}"
    link.symlink_to(runtime)
    (folder / "snowpark_connect_deps_iceberg.py").write_text(
        f"from pathlib import Path\n\ndef list_jars():\n    return [Path({str(link)!r})]\n")
    common.log(f"plain peer on Spark {running_line().name}: Iceberg runtime {runtime.name} (stand-in module in {folder})")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))}


def summary(results: list[dict]) -> dict:
    """Medians over rounds: first run, mean change run, total, and each run."""
    runs = [r["seconds"] for r in results]
    med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
    return {
        "first": med([s[0] for s in runs]),
        "change": med([statistics.mean(s[1:]) for s in runs]) if len(runs[0]) > 1 else None,
        "total": med([r["total"] for r in results]),
        "per_run": [med([s[i] for s in runs]) for i in range(len(runs[0]))],
    }


def ratios(ours: dict, peer: dict) -> dict:
    out = {k: common.ratio(ours[k], peer[k]) if ours[k] is not None and peer[k] else None for k in RATIOS[:3]}
    per = [common.ratio(a, b) for a, b in zip(ours["per_run"][1:], peer["per_run"][1:])]
    out["worst_change"] = max(per) if per and None not in per else None
    out["per_run"] = [common.ratio(a, b) for a, b in zip(ours["per_run"], peer["per_run"])]
    return out


def cell(value: float | None, target: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.2f}" + (f" (≤ {target:g}: {'met' if value <= target else 'no'})" if target else "")


def label(name: str, record: dict) -> str:
    return f"ours (dagster-incremental, {record['format']})" if name == "ours" else record["peers"][name]


def tables(record: dict) -> str:
    """The README tables: one row per system with its ratios, then the seconds of each run."""
    n = record["runs"]
    head = ["system", "first run", "mean change run", f"{n} runs",
            "ours / system: first", "change", f"{n} runs", "worst change run"]
    rows = []
    for name, s in record["median"].items():
        r, t = record["ratios"].get(name, {}), record["targets"].get(name, {})
        rows.append([label(name, record), common.seconds(s["first"]), common.seconds(s["change"]), common.seconds(s["total"]),
                     *(cell(r.get(k), t.get(k)) for k in RATIOS)])
    per_run = [[label(k, record), *(common.seconds(x) for x in s["per_run"])] for k, s in record["median"].items()]
    loads = [x["loadavg"][0] for runs in record["results"].values() for x in runs]
    note = (f"{record['rows']:,} rows + {n - 1} change runs of {record['changes']:,}; medians of "
            f"{record['rounds']} round(s); load avg {min(loads)} - {max(loads)} on {record['cpus']} cores; "
            f"table rows {record['table_rows']:,} in all ({'same' if record['same_table_rows'] else 'DIFFERENT'}), "
            f"ours verified: {record['verified']}; our Python peak RSS {record['py_peak_rss_mb']} MB "
            f"(first run {record['py_peak_rss_first_run_mb']} MB)")
    return "\n\n".join([common.markdown(head, rows),
                        common.markdown(["seconds per run", *(f"run {i}" for i in range(n))], per_run), note])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2, help="rounds; the order reverses every other one")
    ap.add_argument("--peers", default="plain,dgi,dlt", help="comma-separated subset of plain,dgi,dlt")
    ap.add_argument("--peer-dir", default=str(REPO.parent / "shared" / "bench"))
    ap.add_argument("--plain-python", default=sys.executable)
    ap.add_argument("--dgi-python", default="/tmp/peer-dgi/bin/python")
    ap.add_argument("--dlt-python", default="/tmp/peer/bin/python")
    ap.add_argument("--destination", choices=["delta", "duckdb"], default="delta", help="dlt's destination")
    ap.add_argument("--no-verify", action="store_true", help="skip the check of our final table")
    ap.add_argument("--format", choices=["iceberg", "delta"], default="iceberg", help="our tables' format")
    args = ap.parse_args(argv)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"unknown peers {sorted(unknown)}; choose from {sorted(PEERS)}")

    size = ["--rows", str(args.rows), "--changes", str(args.changes), "--runs", str(args.runs)]
    python = {"plain": args.plain_python, "dgi": args.dgi_python, "dlt": args.dlt_python}
    cmds = {"ours": [sys.executable, "-m", "bench.orders", *size, "--format", args.format,
                     *([] if args.no_verify else ["--verify"])]}
    for p in peers:
        extra = ["--destination", args.destination] if p == "dlt" else []
        if p == "plain" and args.format == "delta":
            cmds[p] = [python[p], "-m", PLAIN_DELTA[1], *size]
            continue
        cmds[p] = [python[p], str(Path(args.peer_dir) / PEERS[p][1]), *size, "--workload", str(WORKLOAD), *extra]

    envs = {"plain": plain_peer_env()} if "plain" in peers and args.format == "iceberg" else {}
    order = list(cmds)
    results: dict[str, list[dict]] = {k: [] for k in order}
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            results[name].append(common.run_json(cmds[name], REPO, envs.get(name))[0])

    median = {k: summary(v) for k, v in results.items()}
    chosen = TARGETS_DELTA if args.format == "delta" else TARGETS_10M if args.rows >= 10_000_000 else TARGETS
    targets = {k: v for k, v in chosen.items() if k in peers}
    rat = {p: ratios(median["ours"], median[p]) for p in peers}
    counts = {x["table_rows"] for v in results.values() for x in v}
    record = {
        "bench": "compare",
        "rows": args.rows, "changes": args.changes, "runs": args.runs, "rounds": args.rounds,
        "format": args.format,
        "peers": {p: (PLAIN_DELTA[0] if p == "plain" and args.format == "delta" else PEERS[p][0])
                  + (f" ({args.destination})" if p == "dlt" else "") for p in peers},
        "median": median, "ratios": rat, "targets": targets,
        "meets": {p: {k: rat[p][k] is not None and rat[p][k] <= t for k, t in ts.items()} for p, ts in targets.items()},
        "table_rows": results["ours"][0]["table_rows"], "same_table_rows": len(counts) == 1,
        "verified": all(x.get("verified") for x in results["ours"]),
        "py_peak_rss_first_run_mb": max(x.get("py_peak_rss_first_run_mb") or 0 for x in results["ours"]),
        "py_peak_rss_mb": max(x.get("py_peak_rss_mb") or 0 for x in results["ours"]),
        "py_peak_rss_target_mb": 1024,
        "results": {k: [{key: x.get(key) for key in ("seconds", "total", "table_rows", "loadavg")} for x in v]
                    for k, v in results.items()},
        **common.machine(),
    }
    common.log(tables(record))
    common.emit(record)
    if not record["same_table_rows"]:
        raise SystemExit(f"the systems ended with different row counts: {sorted(counts)}")
    return record


if __name__ == "__main__":
    main()
