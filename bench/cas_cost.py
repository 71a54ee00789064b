"""What the compare-and-set commit costs a change run, on the Hadoop or a JDBC catalog.

Setup (not timed): the orders asset (upsert on id) loads the workload's run 0 (`--rows`). Then
`--runs` change runs of `--changes` rows each; per run we time the materialization and, inside
it, what the compare-and-set adds: taking the run's branch (the cursor check and one metadata
commit), publishing it to main (one metadata commit) and, on the Hadoop catalog, the table's
commit lock (acquire + release). `--catalog jdbc` starts a PostgreSQL server for the catalog
(as the tests do: PostgreSQL and its JDBC driver installed).

    python -m bench.cas_cost --rows 1000000 --changes 10000 --runs 5 --catalog jdbc
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


def _instrument(io_cls, branch_cls, clock: _Clock) -> None:
    """Wrap the lock and the branch's take and publish (the parts the compare-and-set adds)."""
    lock = io_cls._commit_lock

    def commit_lock(self, table):
        return clock.timed_lock(lock(self, table))

    def timed(method):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - start

        return run

    io_cls._commit_lock = commit_lock
    branch_cls.take, branch_cls.publish = timed(branch_cls.take), timed(branch_cls.publish)


@contextlib.contextmanager
def _catalog_conf(kind: str, warehouse: str):
    """Extra `[spark.conf]` of the catalog: none for Hadoop; a JDBC catalog on a fresh server."""
    if kind == "hadoop":
        yield {}
        return
    from dagster_incremental.spark.iceberg.session_setup import iceberg_runtime_jar
    from tests.postgres_server import driver_jar, jdbc_catalog_conf, postgres_server

    with postgres_server() as server:
        conf = jdbc_catalog_conf(common.CATALOG, server, warehouse)
        yield {**conf, "spark.jars": f"{iceberg_runtime_jar()},{driver_jar()}"}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--catalog", choices=["hadoop", "jdbc"], default="hadoop")
    args = ap.parse_args(argv)

    import dagster as dg

    from dagster_incremental import SparkTableIOManager
    from dagster_incremental.spark.iceberg.commit import RunBranch

    clock = _Clock()
    _instrument(SparkTableIOManager, RunBranch, clock)
    state = {"run": 0}
    with common.workdir("bench_cas_", CONFIG) as wd, _catalog_conf(args.catalog, str(wd.warehouse)) as conf:
        instance = dg.DagsterInstance.get()
        io = SparkTableIOManager(
            master=args.master, app_name="dagster-incremental-bench", catalog=common.CATALOG,
            namespace=common.NAMESPACE, warehouse=str(wd.warehouse),
            spark_config={**common.spark_extra_conf(args.master, 4), **conf},
        )
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
        "bench": "cas_cost", "catalog": args.catalog, "rows": args.rows, "changes": args.changes,
        "run_s": [round(x, 3) for x in runs], "cas_s": [round(x, 4) for x in cas],
        "median_run_s": round(statistics.median(runs), 3), "median_cas_s": round(statistics.median(cas), 4),
        "share": round(statistics.median(cas) / statistics.median(runs), 4), "machine": common.machine(),
    }
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
