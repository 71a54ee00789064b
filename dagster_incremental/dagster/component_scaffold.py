"""What `dg scaffold defs dagster_incremental.IncrementalAssetsComponent <folder>` writes: defs.yaml,
a commented config.toml and a sample source module, which together load and run as they are."""

from __future__ import annotations

import dagster as dg
from dagster.components.component_scaffolding import scaffold_component

SOURCES = '''"""Source functions: each becomes an incremental asset named after it (defs.yaml `assets`).

A function yields dict rows or pages, or returns pyarrow Tables, pandas or pyspark DataFrames.
The parameter annotated `Incremental` receives the run's cursor ([assets.<name>.<parameter>] of
config.toml): read from `start_value` on, up to `end_value` (set on a backfill).
"""

import dagster as dg

from dagster_incremental import Incremental


def events(context: dg.AssetExecutionContext, updated_at: Incremental):
    """Events of a source: replace the rows with your API or database query, asked for the rows
    changed since `updated_at.start_value` (rows before it are dropped, whatever you yield)."""
    yield {"id": 1, "kind": "click", "updated_at": "2026-01-01T08:00:00Z"}
    yield {"id": 2, "kind": "view", "updated_at": "2026-01-02T09:30:00Z"}
'''

CONFIG = '''# dagster-incremental settings of the assets declared in defs.yaml beside this file.
# Every key can be overridden by an environment variable: DAGSTER_INCREMENTAL__ + the section path
# in upper case joined by "__", e.g. DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE.

[spark]
master = "local[*]"                  # or spark://host:7077; remote = "sc://host:15002" for Spark Connect

[destination]
format = "iceberg"                   # or "delta"
catalog = "lake"
namespace = "incremental"
warehouse = "data/warehouse"         # relative paths resolve against this file's folder; or s3://...

[assets.events]                      # one section per asset (the source function's name)
write_disposition = { disposition = "merge", strategy = "upsert" }
primary_key = ["id"]
# freshness = "PT2H"                 # the cursor_fresh check and a Dagster freshness policy
# partitions = { schedule = "daily", start = "2026-01-01" }   # window backfills

[assets.events.updated_at]           # the function's `updated_at: Incremental` parameter
cursor_path = "updated_at"
initial_value = "2026-01-01T00:00:00Z"
'''

DEFS = {
    "config_path": "config.toml",
    "assets": [{"function": "sources.events"}],
}


class IncrementalAssetsScaffolder(dg.Scaffolder):
    """defs.yaml naming sources.events, its config.toml section and the function itself."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        scaffold_component(request, DEFS)
        for name, text in (("config.toml", CONFIG), ("sources.py", SOURCES)):
            target = request.target_path / name
            if not target.exists():  # never overwrite the user's own
                target.write_text(text)
