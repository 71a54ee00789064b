"""A user's process whose secrets.toml holds credentials in [spark.conf] (tests/test_security.py):
one run of an append asset on a local Hadoop catalog, then a read of its table through Spark.
Prints whether the running session holds each secret (never a value) and writes every stored
event record's text to SECRET_EVENTS.

    SECRET_CONFIG   config.toml (secrets.toml beside it)
    SECRET_EVENTS   where to write the event log records
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
from dagster_shared.serdes import serialize_value

from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

CONFIG = os.environ["SECRET_CONFIG"]


@incremental_asset(primary_key="id", write_disposition="append", config_path=CONFIG)
def orders(updated_at: Incremental = incremental("updated_at", initial_value="2025-01-01T00:00:00Z")):
    return [{"id": i, "updated_at": datetime(2025, 1, i + 1, tzinfo=timezone.utc)} for i in (1, 2, 3)]


def held(spark, key: str, value: str) -> bool:
    """Whether the running session has `value` where Spark reads `key`."""
    if key.startswith("spark.hadoop."):
        return spark.sparkContext._jsc.hadoopConfiguration().get(key[len("spark.hadoop."):]) == value
    return spark.conf.get(key, None) == value


def main() -> None:
    io = SparkTableIOManager.from_config(CONFIG)
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([orders], instance=instance, resources={"io_manager": io})
        spark = io.spark
        rows = spark.table(io.table_name(dg.AssetKey("orders")).sql).count()
        secrets = tomllib.loads((Path(CONFIG).parent / "secrets.toml").read_text())["spark"]["conf"]
        print(json.dumps({"success": result.success, "rows": rows,
                          "held": {k: held(spark, k, v) for k, v in secrets.items()}}), flush=True)
        stored = [serialize_value(entry) for run in instance.get_runs() for entry in instance.all_logs(run.run_id)]
        Path(os.environ["SECRET_EVENTS"]).write_text("\n".join(stored))


if __name__ == "__main__":
    sys.exit(main())
