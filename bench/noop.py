"""No-op run: an incremental run that finds nothing new, against the same asset with a trivial body.

Setup (not timed): the orders asset (upsert on id, incremental on updated_at) loads the
workload's run 0 (`--rows` orders), so the table and the cursor exist. Then, in turn:

  N (no-op)   : the same @incremental_asset runs again; its source returns what a real API
                returns when nothing changed since the cursor: nothing (`--source empty`), or the
                last rows again, all at or before the cursor (`--source stale`: the last page of
                run 0, so the boundary dedup drops them);
  T (trivial) : a plain @dg.asset in the same Definitions style, same IO manager, whose body
                returns None (Dagster's own floor for one materialization in this process).

    python -m bench.noop --rows 100000 --repeats 5
Prints ONE JSON line: seconds of every repeat, the medians and the ratio no-op/trivial
(target <= 1.3).
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench import common
from bench.orders import CONFIG
from bench.workload import pages


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--source", choices=["empty", "stale"], default="empty")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)

    import dagster as dg

    from dagster_incremental import Incremental, incremental_asset

    mode = {"setup": True}
    last_page: list[dict] = []
    for page in pages(0, args.rows, 0):
        last_page = page

    with common.workdir("bench_noop_", CONFIG) as wd:
        instance = dg.DagsterInstance.get()
        io = common.io_manager(wd, args.master)
        spark, spark_start = common.start_spark(io)

        @incremental_asset(config_path=str(wd.config))
        def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
            if mode["setup"]:
                yield from pages(0, args.rows, 0)
            elif args.source == "stale":
                yield last_page

        @dg.asset(name="orders_trivial", io_manager_key="io_manager")
        def trivial():
            return None

        def materialize(asset) -> float:
            t = time.perf_counter()
            result = dg.materialize([asset], instance=instance, resources={"io_manager": io},
                                    run_config=common.QUIET)
            s = time.perf_counter() - t
            assert result.success
            return s

        setup_s = materialize(orders)
        mode["setup"] = False
        materialize(trivial)  # warm both code paths once
        materialize(orders)
        timer = common.instrument()
        noop_s, trivial_s, phases = [], [], []
        for _ in range(args.repeats):
            noop_s.append(round(materialize(orders), 3))
            phases.append(timer.reset())
            trivial_s.append(round(materialize(trivial), 3))
            timer.reset()
            common.log(f"no-op {noop_s[-1]} s, trivial {trivial_s[-1]} s {phases[-1]}")
        rows = spark.table(io.table_name(dg.AssetKey("orders")).sql).count()
        med_n, med_t = statistics.median(noop_s), statistics.median(trivial_s)
        record = {
            "bench": "noop",
            "rows": args.rows,
            "source": args.source,
            "setup_s": round(setup_s, 3),
            "noop_seconds": noop_s,
            "trivial_seconds": trivial_s,
            "noop_median": round(med_n, 3),
            "trivial_median": round(med_t, 3),
            "ratio": common.ratio(med_n, med_t),
            "target": 1.3,
            "table_rows": rows,
            "noop_phases": phases,
            "spark_start_s": spark_start,
            **common.machine(),
        }
        spark.stop()
        instance.dispose()
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
