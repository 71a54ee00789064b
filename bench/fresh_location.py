"""The code location `bench.fresh` materializes: one `dagster asset materialize` process per run.

`orders` is the workload's orders as an `@incremental_asset` (the config.toml of bench.orders:
upsert on id, incremental on updated_at) with `SparkTableIOManager` on a temporary warehouse;
`trivial` is a plain `@dg.asset` returning None through the same IO manager, Dagster's own floor
for one run. bench.fresh sets the environment:

  BENCH_FRESH_CONFIG     the config.toml          BENCH_FRESH_WAREHOUSE  the Iceberg warehouse
  BENCH_FRESH_RUN        the workload's run index, or "empty": the source returns nothing
  BENCH_FRESH_ROWS / BENCH_FRESH_CHANGES         the workload's sizes
  BENCH_FRESH_FORMAT     the tables' format (default iceberg)
  BENCH_FRESH_REMOTE     a Spark Connect server to run over (bench.connect; Delta)

The in-process executor keeps the run in this one process, as a run launcher that starts one
process per run does with it; the default multiprocess executor would start another per step.
`python -m bench.fresh_location` runs `orders` with `dg.materialize` instead, as the peers' own
scripts run theirs (no CLI, no code location to load); it prints the row count as JSON.
"""

from __future__ import annotations

import os

import dagster as dg

from bench import common  # first: loopback Spark and telemetry off before anything starts
from bench.workload import pages
from dagster_incremental import Incremental, SparkTableIOManager, incremental_asset


@incremental_asset(config_path=os.environ["BENCH_FRESH_CONFIG"])
def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
    run = os.environ["BENCH_FRESH_RUN"]
    if run != "empty":
        yield from pages(int(run), int(os.environ["BENCH_FRESH_ROWS"]), int(os.environ["BENCH_FRESH_CHANGES"]))


@dg.asset(io_manager_key="io_manager")
def trivial():
    return None


defs = dg.Definitions(
    assets=[orders, trivial],
    resources={"io_manager": SparkTableIOManager(
        app_name="dagster-incremental-bench-fresh",
        spark_config={**common.spark_extra_conf(),
                      **({"spark.remote": os.environ["BENCH_FRESH_REMOTE"]} if os.environ.get("BENCH_FRESH_REMOTE") else {})},
        table_format=os.environ.get("BENCH_FRESH_FORMAT", "iceberg"),
        catalog=common.CATALOG,
        namespace=common.NAMESPACE,
        warehouse=os.environ["BENCH_FRESH_WAREHOUSE"],
    )},
    executor=dg.in_process_executor,
)


if __name__ == "__main__":
    import json

    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([orders], instance=instance, resources=defs.resources, run_config=common.QUIET)
        count = result.get_asset_materialization_events()[-1].materialization.metadata["dagster/row_count"].value
    print(json.dumps({"table_rows": count}))
