"""Helpers shared by the attack tests (bad input, security, faults, exactly-once, concurrency).

Everything here goes through the public surface: `@incremental_asset`, `dg.materialize`, a
`SparkTableIOManager` and the Iceberg table itself (its snapshots and their summaries).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from dagster_incremental import SparkTableIOManager
from dagster_incremental.spark.write_spec import STATE_PROPERTY

QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}

DISPOSITIONS: dict[str, Any] = {
    "append": "append",
    "replace": "replace",
    "delete-insert": {"disposition": "merge", "strategy": "delete-insert"},
    "upsert": {"disposition": "merge", "strategy": "upsert"},
    "scd2": {"disposition": "merge", "strategy": "scd2"},
}


def write_config(path, warehouse: str, namespace: str, extra: str = "") -> str:
    path.write_text(
        f'[destination]\ncatalog = "lake"\nnamespace = "{namespace}"\nwarehouse = "{warehouse}"\n' + extra
    )
    return str(path)


def io_manager_for(warehouse: str, namespace: str) -> SparkTableIOManager:
    return SparkTableIOManager(catalog="lake", namespace=namespace, warehouse=warehouse, master="local[2]")


def materialize(asset, instance, io, *, run_config: Mapping[str, Any] | None = None, **kwargs) -> dg.ExecuteInProcessResult:
    config = dict(QUIET)
    if run_config:
        config.update(run_config)
    return dg.materialize(
        [asset], instance=instance, resources={"io_manager": io}, run_config=config, raise_on_error=False, **kwargs
    )


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """Everything the user sees of a failed run: the step failure message and its causes."""
    assert not result.success, "the run was expected to fail"
    events = result.get_step_failure_events()
    assert events, "a failed run without a step failure event"
    error = events[0].step_failure_data.error
    parts = []
    while error is not None:
        parts.append(error.message)
        error = error.cause
    return "\n".join(parts)


def table_id(io: SparkTableIOManager, asset_name: str) -> str:
    return io.table_name(dg.AssetKey(asset_name)).sql


def table_exists(spark, io, asset_name: str) -> bool:
    table = io.table_name(dg.AssetKey(asset_name))
    if table.location is not None:  # a Delta table: its folder has a commit log
        from dagster_incremental.spark.delta.log import DeltaLog

        return DeltaLog(table.location).current_version() is not None
    return bool(spark.catalog.tableExists(table.sql))


def snapshots(spark, io, asset_name: str) -> list[int]:
    """The ids of the table's data commits (made by runs), oldest first ([] without a table).

    Compactions of merge-on-read deletes (maintenance.py) are commits too, but change no row.
    """
    if not table_exists(spark, io, asset_name):
        return []
    table = io.table_name(dg.AssetKey(asset_name))
    if table.location is not None:  # a Delta table: the versions a run's commit made
        from dagster_incremental.spark.run_commit import COMMIT_ID_PROPERTY
        from dagster_incremental.spark.delta.log import DeltaLog

        return [c.version for c in DeltaLog(table.location).commits_since(None) if COMMIT_ID_PROPERTY in c.properties]
    rows = spark.sql(
        f"SELECT snapshot_id FROM {table_id(io, asset_name)}.`snapshots` "
        "WHERE summary['dagster_incremental.commit_id'] IS NOT NULL ORDER BY committed_at"
    ).collect()
    return [r.snapshot_id for r in rows]


def committed_states(spark, io, asset_name: str) -> list[dict]:
    """The cursor state of every commit of the table's main lineage that carries one, oldest first
    (Iceberg: main's snapshot and its ancestors; a losing run's unpublished branch snapshot is
    not one of them)."""
    if not table_exists(spark, io, asset_name):
        return []
    table = io.table_name(dg.AssetKey(asset_name))
    if table.location is not None:  # a Delta table: the commits' userMetadata, oldest first
        from dagster_incremental.spark.delta.log import DeltaLog

        log = DeltaLog(table.location)
        found = [log.commit(v) for v in log.versions()]
        return [json.loads(c.properties[STATE_PROPERTY]) for c in found if c is not None and STATE_PROPERTY in c.properties]
    from catalogs import main_lineage_summaries

    summaries = main_lineage_summaries(spark, table_id(io, asset_name))
    return [json.loads(s[STATE_PROPERTY]) for s in summaries if STATE_PROPERTY in s]


def dagster_state(instance, asset_name: str) -> Any:
    """The cursor state of the newest materialization Dagster recorded (None if none)."""
    records = instance.fetch_materializations(dg.AssetKey(asset_name), limit=1).records
    if not records:
        return None
    return records[0].asset_materialization.metadata["dagster_incremental/state"].value


def rows(spark, io, asset_name: str, columns: Sequence[str] | None = None) -> list[tuple]:
    """The table's rows as sorted tuples of `columns` (default: all columns but scd2's bookkeeping)."""
    frame = spark.table(table_id(io, asset_name))
    names = list(columns) if columns else [c for c in frame.columns if c not in ("_valid_from", "_valid_to", "_row_hash")]
    return sorted((tuple(r[n] for n in names) for r in frame.select(*[f"`{n}`" for n in names]).collect()), key=repr)


def scd2_rows(spark, io, asset_name: str, columns: Sequence[str]) -> tuple[list[tuple], list[tuple]]:
    """(active versions, retired versions) of an scd2 table, as sorted tuples of `columns`."""
    frame = spark.table(table_id(io, asset_name))
    active, retired = [], []
    for r in frame.collect():
        (active if r["_valid_to"] is None else retired).append(tuple(r[n] for n in columns))
    return sorted(active, key=repr), sorted(retired, key=repr)


# -- plain-Python references of each disposition -----------------------------------------------------


def reference_table(strategy: str, loads: Sequence[Sequence[Mapping[str, Any]]], key: str = "id",
                    cursor: str = "updated") -> list[dict]:
    """What the table must hold after `loads` (each the rows one successful run delivered).

    append: every delivered row; replace: the last load; delete-insert / upsert: per key the row
    with the newest cursor of the newest load holding it (a batch is deduplicated by newest
    cursor); scd2: the active versions, i.e. the same as upsert for a source without deletes.
    """
    if strategy == "append":
        return [dict(r) for load in loads for r in load]
    if strategy == "replace":
        return [dict(r) for r in (loads[-1] if loads else [])]
    table: dict[Any, dict] = {}
    for load in loads:
        batch: dict[Any, dict] = {}
        for r in load:
            old = batch.get(r[key])
            if old is None or r[cursor] >= old[cursor]:
                batch[r[key]] = dict(r)
        table.update(batch)
    return list(table.values())


def as_tuples(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[tuple]:
    return sorted((tuple(r.get(c) for c in columns) for r in records), key=repr)


def source_asset(name: str, config_path: str, strategy: str, source: Callable[[], Any], *,
                 initial_value: Any = 0, primary_key: Any = "id", merge_key: Any = None, **spec_kwargs: Any):
    """An asset named `name` whose function returns/yields `source()`; integer cursor `updated`."""
    from dagster_incremental import Incremental, incremental, incremental_asset

    default = incremental("updated", initial_value=initial_value, **spec_kwargs)

    def body(context: dg.AssetExecutionContext, updated: Incremental = default):
        return source()

    body.__name__ = name
    return incremental_asset(
        name=name,
        primary_key=primary_key,
        merge_key=merge_key,
        write_disposition=DISPOSITIONS[strategy],
        config_path=config_path,
    )(body)
