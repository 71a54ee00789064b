"""dagster-iceberg on the lake: bench/lake.py's peer, run by the interpreter that has
dagster-iceberg (`python -m venv /tmp/peer-dgi && /tmp/peer-dgi/bin/pip install
"dagster-iceberg==0.3.14"`), not by this project's.

The orders workload (bench/workload.py) through a plain `@dg.asset` returning a pyarrow Table,
written by dagster-iceberg's PyArrowIcebergIOManager with `write_mode = "upsert"` on `id` into a
table of the REST catalog named by BENCH_LAKE (a JSON file: the catalog's pyiceberg properties
and a namespace). dagster-iceberg keeps no cursor, so the asset keeps one as a Dagster user
would: max(updated_at) of what it returned, in its output metadata, read back from the latest
materialization; each run returns the rows at or after it.

    BENCH_LAKE=lake.json /tmp/peer-dgi/bin/python bench/lake_dgi.py --rows 1000000 --changes 10000 --runs 2

Prints one JSON line: seconds per run, rows in the table.
"""

import argparse
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from dagster_iceberg.config import IcebergCatalogConfig
from dagster_iceberg.io_manager.arrow import PyArrowIcebergIOManager

START = "2023-01-01T00:00:00Z"  # the workload's initial_value, as bench.orders has it
UTC = pa.timestamp("us", tz="UTC")


def workload_pages():
    spec = importlib.util.spec_from_file_location("workload", Path(__file__).with_name("workload.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.pages


class Run(dg.Config):
    run: int
    rows: int
    changes: int


def orders_asset(pages):
    upsert = {"join_cols": ["id"], "when_matched_update_all": True, "when_not_matched_insert_all": True}

    @dg.asset(name="orders", metadata={"write_mode": "upsert", "upsert_options": upsert})
    def orders(context: dg.AssetExecutionContext, config: Run) -> pa.Table:
        last = context.instance.get_latest_materialization_event(dg.AssetKey("orders"))
        kept = last.asset_materialization.metadata.get("cursor") if last and last.asset_materialization else None
        since = kept.value if kept is not None else START
        batch = pa.Table.from_pylist([r for page in pages(config.run, config.rows, config.changes) for r in page])
        batch = batch.set_column(batch.schema.get_field_index("updated_at"), "updated_at", pc.cast(batch["updated_at"], UTC))
        batch = batch.filter(pc.greater_equal(batch["updated_at"], pa.scalar(since).cast(UTC)))
        newest = pc.max(batch["updated_at"]).as_py().isoformat().replace("+00:00", "Z") if batch.num_rows else since
        context.add_output_metadata({"cursor": newest})
        return batch

    return orders


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    lake = json.loads(Path(os.environ["BENCH_LAKE"]).read_text())
    home = tempfile.mkdtemp(prefix="lake_dgi_")
    Path(home, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = home
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("lake", **lake["pyiceberg"])
    catalog.create_namespace_if_not_exists(lake["namespace"])
    io = PyArrowIcebergIOManager(name="lake", config=IcebergCatalogConfig(properties=lake["pyiceberg"]),
                                 namespace=lake["namespace"])
    asset = orders_asset(workload_pages())
    seconds = []
    with dg.DagsterInstance.get() as instance:
        for run in range(args.runs):
            started = time.perf_counter()
            config = dg.RunConfig({"orders": Run(run=run, rows=args.rows, changes=args.changes)})
            assert dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=config).success
            seconds.append(round(time.perf_counter() - started, 3))
    rows = catalog.load_table((lake["namespace"], "orders")).scan(selected_fields=("id",)).to_arrow().num_rows
    print(json.dumps({"engine": "dagster-iceberg", "catalog": "rest", "rows": args.rows, "changes": args.changes,
                      "seconds": seconds, "table_rows": rows}))


if __name__ == "__main__":
    main()
