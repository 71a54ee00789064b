"""What the compare-and-set commit costs a change run: the table's commit lock and the cursor
check made again under it, against the whole run.

Setup (not timed): the orders asset (upsert on id) loads the workload's run 0 (`--rows`). Then
`--runs` change runs of `--changes` rows each; per run we time the materialization and, inside
it, the lock's acquire + release and the second stale-cursor check (the one under the lock: the
part the compare-and-set adds; the first check existed before).

    python -m bench.cas_cost --rows 1000000 --changes 10000 --runs 5
Prints ONE JSON line: per-run seconds, the CAS seconds, and their share (target <= 5 %).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from bench import common
from bench.orders import CONFIG, build_asset


class _Clock:
    """Seconds spent in the compare-and-set parts of the current run."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.checks = 0

    def timed_lock(self, lock):
        @contextlib.contextmanager
        def timed():
            start = time.perf_counter()
            with lock:
                self.seconds += time.perf_counter() - start
                yield
                start = time.perf_counter()
            self.seconds += time.perf_counter() - start

        return timed()


def _instrument(io_cls, clock: _Clock) -> None:
    """Wrap the lock and count the second stale check of each commit (the one under the lock)."""
    lock, refuse = io_cls._commit_lock, io_cls._refuse_stale_writer

    def commit_lock(self, table):
        clock.checks = 0
        return clock.timed_lock(lock(self, table))

    def refuse_stale_writer(self, *args, **kwargs):
        clock.checks += 1
        start = time.perf_counter()
        try:
            return refuse(self, *args, **kwargs)
        finally:
            if clock.checks > 1:  # the check repeated under the lock
                clock.seconds += time.perf_counter() - start

    io_cls._commit_lock, io_cls._refuse_stale_writer = commit_lock, refuse_stale_writer


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)

    import dagster as dg

    from dagster_incremental import SparkTableIOManager

    clock = _Clock()
    _instrument(SparkTableIOManager, clock)
    state = {"run": 0}
    with common.workdir("bench_cas_", CONFIG) as wd:
        instance = dg.DagsterInstance.get()
        io = common.io_manager(wd, args.master)
        common.start_spark(io)
        asset = build_asset(str(wd.config), state, args.rows, args.changes)
        assert dg.materialize([asset], instance=instance, resources={"io_manager": io}).success
        runs, cas = [], []
        for run in range(1, args.runs + 1):
            state["run"], clock.seconds = run, 0.0
            start = time.perf_counter()
            assert dg.materialize([asset], instance=instance, resources={"io_manager": io}).success
            runs.append(time.perf_counter() - start)
            cas.append(clock.seconds)
    record = {
        "bench": "cas_cost", "rows": args.rows, "changes": args.changes,
        "run_s": [round(x, 3) for x in runs], "cas_s": [round(x, 4) for x in cas],
        "median_run_s": round(statistics.median(runs), 3), "median_cas_s": round(statistics.median(cas), 4),
        "share": round(statistics.median(cas) / statistics.median(runs), 4), "machine": common.machine(),
    }
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
