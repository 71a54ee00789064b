"""Ours against the peer (dlt), in turn A B A B, with the ratios the issue targets.

A = `python -m bench.orders` (this interpreter), B = ../shared/bench/peer_dlt.py run by the peer
virtualenv's Python against OUR bench/workload.py (so both load identical rows):

    python -m venv /tmp/peer && /tmp/peer/bin/pip install "dlt[duckdb,deltalake]==1.31.0"
    python -m bench.compare --rows 1000000 --changes 10000 --runs 6 --rounds 2

Prints ONE JSON line: every A and B result, the medians, and the ratios ours/peer for the first
run, the mean change run and the total, each next to its target (first <= 0.5, change <= 1.0,
total <= 0.6), plus our Python peak RSS in the first run against 1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import common

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PEER = REPO.parent / "shared" / "bench" / "peer_dlt.py"
TARGETS = {"first": 0.5, "change": 1.0, "total": 0.6}


def _run(cmd: list[str], cwd: Path) -> dict:
    """Run one benchmark; its temp files (the peer's pipeline and lake) go to a folder removed after."""
    common.log("$", " ".join(cmd))
    tmp = tempfile.mkdtemp(prefix="bench_compare_")
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, "TMPDIR": tmp})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    record = json.loads(line)
    record.setdefault("loadavg", [round(x, 2) for x in os.getloadavg()])
    common.log(line)
    return record


def _summary(results: list[dict]) -> dict:
    firsts = [r["seconds"][0] for r in results]
    changes = [statistics.mean(r["seconds"][1:]) for r in results if len(r["seconds"]) > 1]
    totals = [r["total"] for r in results]
    return {
        "first": round(statistics.median(firsts), 3),
        "change": round(statistics.median(changes), 3) if changes else None,
        "total": round(statistics.median(totals), 3),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2, help="A B pairs (A B A B for 2)")
    ap.add_argument("--destination", choices=["delta", "duckdb"], default="delta")
    ap.add_argument("--peer-python", default="/tmp/peer/bin/python")
    ap.add_argument("--peer-script", default=str(DEFAULT_PEER))
    args = ap.parse_args(argv)

    size = ["--rows", str(args.rows), "--changes", str(args.changes), "--runs", str(args.runs)]
    ours_cmd = [sys.executable, "-m", "bench.orders", *size]
    peer_cmd = [args.peer_python, args.peer_script, *size, "--destination", args.destination,
                "--workload", str(REPO / "bench" / "workload.py")]
    ours: list[dict] = []
    peer: list[dict] = []
    for _ in range(args.rounds):
        ours.append(_run(ours_cmd, REPO))
        peer.append(_run(peer_cmd, REPO))
    a, b = _summary(ours), _summary(peer)
    ratios = {k: common.ratio(a[k], b[k]) if a[k] is not None and b[k] else None for k in a}
    peak = max(r.get("py_peak_rss_first_run_mb") or 0 for r in ours)
    record = {
        "bench": "compare",
        "peer": f"dlt+{args.destination}",
        "rows": args.rows, "changes": args.changes, "runs": args.runs, "rounds": args.rounds,
        "ours": a, "peer_median": b, "ratios": ratios, "targets": TARGETS,
        "meets": {k: (ratios[k] is not None and ratios[k] <= TARGETS[k]) for k in TARGETS},
        "py_peak_rss_first_run_mb": peak, "py_peak_rss_target_mb": 1024,
        "same_table_rows": all(o["table_rows"] == p["table_rows"] for o, p in zip(ours, peer)),
        "ours_runs": [{"seconds": r["seconds"], "total": r["total"], "loadavg": r.get("loadavg")} for r in ours],
        "peer_runs": [{"seconds": r["seconds"], "total": r["total"], "loadavg": r.get("loadavg")} for r in peer],
        **common.machine(),
    }
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
