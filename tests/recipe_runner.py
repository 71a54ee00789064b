"""A user's process on config/rest-s3/ (tests/test_lake.py): two runs of an upsert asset from
the recipe's config.toml and secrets.toml, as copied; prints each run's metadata as JSON lines
and dumps the runs' event log records (RECIPE_EVENTS) for the test to search for secrets.

    RECIPE_CONFIG   the copied config.toml (secrets.toml beside it)
    RECIPE_EVENTS   where to write every event log record's text
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone

import dagster as dg
from dagster_shared.serdes import serialize_value

from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

CONFIG = os.environ["RECIPE_CONFIG"]
SOURCE = {"rows": []}


@incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                   config_path=CONFIG)
def orders(updated_at: Incremental = incremental("updated_at", initial_value="2025-01-01T00:00:00Z")):
    return SOURCE["rows"]


def at(day: int) -> datetime:
    return datetime(2025, 1, day, tzinfo=timezone.utc)


def main() -> None:
    io = SparkTableIOManager.from_config(CONFIG)
    steps = [
        [{"id": i, "amount": 10 * i, "updated_at": at(i)} for i in (1, 2, 3)],
        [{"id": 2, "amount": 21, "updated_at": at(4)}, {"id": 4, "amount": 40, "updated_at": at(5)}],
    ]
    with dg.DagsterInstance.get() as instance:
        for rows in steps:
            SOURCE["rows"] = rows
            result = dg.materialize([orders], instance=instance, resources={"io_manager": io})
            meta = result.asset_materializations_for_node("orders")[0].metadata
            ours = {k: v.value for k, v in meta.items() if k.startswith("dagster_incremental/")}
            print(json.dumps(ours, default=str), flush=True)
        stored = [serialize_value(entry) for run in instance.get_runs() for entry in instance.all_logs(run.run_id)]
        with open(os.environ["RECIPE_EVENTS"], "w") as out:
            out.write("\n".join(stored))  # every event record as Dagster stores it

if __name__ == "__main__":
    sys.exit(main())
