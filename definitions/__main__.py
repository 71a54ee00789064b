"""`python -m definitions`: run the main job once on the embedded default and show the cursors.

Uses $DAGSTER_HOME (default: <repo>/data/dagster_home, created with a dagster.yaml that limits
every concurrency pool to one run, so two runs of one incremental asset never interleave). Runs
in one process, so the assets share one Spark session. Run it again after
`python -m definitions.simulate step` to see only the changes loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAGSTER_YAML = """\
# Written by `python -m definitions`. Runs of one incremental asset share a concurrency pool
# (one per asset); a limit of 1 makes them take turns instead of racing for the cursor.
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""


def prepare_dagster_home() -> Path:
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(ROOT / "data" / "dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return home


def summarize(result) -> list[str]:
    from dagster_incremental.cursor.state import CursorState

    lines = []
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        meta = {k: v.value for k, v in mat.metadata.items()}
        state = meta.get("dagster_incremental/state") or {}
        last = CursorState.from_dict(state).last_value if isinstance(state, dict) else None
        part = f" [{mat.partition}]" if mat.partition else ""
        cursor = f"cursor {last!r}" if last is not None else "no cursor"  # customers, customer_revenue: none
        upstream = meta.get("dagster_incremental/upstream")
        if isinstance(upstream, dict) and upstream:  # a Changes asset: its cursor is an upstream snapshot
            cursor = "; ".join(
                f"read {name} up to snapshot {read['snapshot_id']} (committed {read['snapshot_committed_at']}): "
                f"{read['rows_read']} rows" for name, read in upstream.items()
            )
        figures = (f"+{meta.get('dagster_incremental/rows_inserted', 0)} "
                   f"~{meta.get('dagster_incremental/rows_updated', 0)} "
                   f"-{meta.get('dagster_incremental/rows_deleted', 0)}")
        if "dagster_incremental/replaced" in meta:  # a replace rewrites every row: not a diff
            figures = f"table replaced: {meta.get('dagster_incremental/rows_inserted', 0)} rows written"
        lines.append(f"  {mat.asset_key.to_user_string()}{part}: {meta.get('dagster/row_count', '?')} rows ({figures}), {cursor}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m definitions", description=__doc__.splitlines()[0])
    parser.add_argument("--traceback", action="store_true",
                        help="show the traceback of an error, not only its message (see definitions/cli_errors.py)")
    parser.parse_args(argv)
    return run()


def run() -> int:
    home = prepare_dagster_home()
    import dagster as dg

    from dagster_incremental.spark.java_check import require_java
    from definitions import daily_events, defs

    require_java()  # every run of the example starts Spark: say what is missing before any run
    instance = dg.DagsterInstance.get()
    print(f"Dagster instance: {home}")
    # INFO: each asset says its steps (run started, Spark starting, rows loaded, the commit)
    quiet = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
    main_result = defs.resolve_job_def("main").execute_in_process(
        instance=instance, run_config=quiet, raise_on_error=False
    )
    today = daily_events.partitions_def.get_last_partition_key()
    daily_result = defs.resolve_job_def("daily_events_job").execute_in_process(
        instance=instance, partition_key=today, run_config=quiet, raise_on_error=False
    )
    print("Materialized:")
    for line in summarize(main_result) + summarize(daily_result):
        print(line)
    ok = main_result.success and daily_result.success
    print("Done." if ok else "Some steps failed; see the errors above.")
    print("Next: `python -m definitions.simulate step`, run this again, or `dg dev`.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
