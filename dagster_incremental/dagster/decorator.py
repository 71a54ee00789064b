"""@incremental_asset: a resource function becomes a Dagster asset with a cursor.

The asset's settings are resolved when the code location loads (asset_settings.py); each
materialization is one run of `run.Runner`, its asset checks declared here (checks.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, overload

import dagster as dg

from dagster_incremental.dagster import checks, config_use
from dagster_incremental.dagster import metadata as md
from dagster_incremental.cursor.spec import Incremental, incremental
from dagster_incremental.errors import IncrementalSettingsWarning

from dagster_incremental.dagster.asset_settings import AssetSettings, resolve_settings, without_columns
from dagster_incremental.dagster.run import IncrementalRunConfig, Runner
from dagster_incremental.dagster.upstream import changes_params


# Dagster refuses a freshness policy's window under a minute; a shorter freshness keeps its check only.
MIN_FRESHNESS_POLICY = timedelta(minutes=1)


@overload
def incremental_asset(fn: Callable[..., Any], /) -> dg.AssetsDefinition: ...


@overload
def incremental_asset(
    fn: None = None,
    *,
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    primary_key: str | Sequence[str] | None = None,
    merge_key: str | Sequence[str] | None = None,
    write_disposition: str | Mapping[str, Any] = "append",
    columns: Mapping[str, Mapping[str, Any]] | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    partition_by: str | Sequence[str] | None = None,
    partition_column: str | None = None,
    window_column: str | None = None,
    upstream_commits_per_slice: int | None = None,
    config_path: str | None = None,
    io_manager_key: str = "io_manager",
    freshness: timedelta | str | float | None = None,
    check_severity: str | None = None,
    **asset_kwargs: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]: ...


def incremental_asset(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    primary_key: str | Sequence[str] | None = None,
    merge_key: str | Sequence[str] | None = None,
    write_disposition: str | Mapping[str, Any] = "append",
    columns: Mapping[str, Mapping[str, Any]] | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    partition_by: str | Sequence[str] | None = None,
    partition_column: str | None = None,
    window_column: str | None = None,
    upstream_commits_per_slice: int | None = None,
    config_path: str | None = None,
    io_manager_key: str = "io_manager",
    freshness: timedelta | str | float | None = None,
    check_severity: str | None = None,
    **asset_kwargs: Any,
) -> dg.AssetsDefinition | Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """Declare a resource function as an incremental Dagster asset.

    The parameter annotated `Incremental` receives the bound cursor run; its spec comes from
    config.toml (`[assets.<name>.<parameter>]`), else from a default in the signature
    (`updated_at: Incremental = incremental("updated_at")`). The function may yield dict rows or
    pages, or return/yield pyarrow Tables, pandas DataFrames or a pyspark DataFrame.

    Other parameters can receive credentials from secrets.toml (`[assets.<name>] api_token =
    "..."` -> `api_token: str | None = None`), read inside each run and masked in its logs.

    `freshness` (timedelta, ISO-8601 duration or seconds) adds the cursor_fresh check (the data's
    age) and, from a minute up, a freshness policy; `check_severity` is "WARN" or "ERROR". Checks
    of a partitioned asset are per partition. Kinds: Spark, the format, the catalog, plus `kinds`.
    `partitions_def` may be static (tenants, each with its own cursor; `partition_column` holds a
    row's tenant) or time windows (`window_column`, default the cursor's column, places a row in
    one; with neither, refused). `upstream_commits_per_slice` slices a `Changes` run by upstream
    commits. Other keyword arguments (tags, owners, automation_condition...) go to `dagster.asset`.

    Examples:
        .. code-block:: python

            @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"})
            def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
                yield from fetch_orders(since=updated_at.start_value, until=updated_at.end_value)

            defs = dg.Definitions(
                assets=[orders],
                resources={"io_manager": SparkTableIOManager.from_config()},
            )
    """

    options = {k: v for k, v in locals().items() if k not in ("fn", "io_manager_key", "asset_kwargs")}

    if fn is not None:  # @incremental_asset without parentheses
        return _declare(fn, options, io_manager_key, asset_kwargs)
    return lambda func: _declare(func, options, io_manager_key, asset_kwargs)


def _declare(func: Callable[..., Any], options: Mapping[str, Any], io_manager_key: str,
             asset_kwargs: Mapping[str, Any]) -> dg.AssetsDefinition:
    """`func` as an incremental asset: its settings resolved from `options` (the decorator's
    keyword arguments), config.toml and the environment; their warnings said; its config file
    told about it."""
    settings = resolve_settings(func, **options)
    for text in settings.warnings():  # the run logs them again, where operators look
        warnings.warn(text, IncrementalSettingsWarning, stacklevel=3)
    if settings.config_path is not None:
        config_use.register(settings.config_path, settings.name)
    return _build_asset(func, settings, io_manager_key, asset_kwargs)


# -- the Dagster asset ----------------------------------------------------------------------------


def _definition_metadata(settings: AssetSettings) -> dict[str, Any]:
    cursors = {
        name: {
            "cursor_path": spec.cursor_path,
            "initial_value": md.json_safe(spec.initial_value),
            "end_value": md.json_safe(spec.end_value),
            "last_value_func": spec.last_value_func if isinstance(spec.last_value_func, str) else "custom",
        }
        for name, spec in settings.cursors.items()
    }
    out: dict[str, Any] = {
        md.TABLE_NAME: dg.MetadataValue.text(settings.table.display),
        md.DEF_WRITE_DISPOSITION: dg.MetadataValue.text(
            settings.disposition + (f" ({settings.strategy})" if settings.strategy else "")
        ),
        md.DEF_PRIMARY_KEY: dg.MetadataValue.json(list(settings.primary_key)),
        md.DEF_CURSORS: dg.MetadataValue.json(cursors),
        md.DEF_WRITE_SETTINGS: dg.MetadataValue.json(settings.write_settings()),
    }
    if settings.merge_key:
        out[md.DEF_MERGE_KEY] = dg.MetadataValue.json(list(settings.merge_key))
    if settings.window_column:
        out[md.DEF_WINDOW_COLUMN] = dg.MetadataValue.text(settings.window_column)
    if settings.tenants is not None:
        out[md.DEF_PARTITION_COLUMN] = dg.MetadataValue.text(settings.tenants.column)
    return out


def _cursor_start(spec: Any) -> str:
    """Where a cursor starts, as the asset's description says it (no initial_value: the first
    run, or a partition's first run, loads every row it is given)."""
    if spec.initial_value is None:
        return f"`{spec.cursor_path}` from the first row (no initial_value)"
    return f"`{spec.cursor_path}` from {md.json_safe(spec.initial_value)!r}"


def _incremental_on(settings: AssetSettings, upstreams: Mapping[str, dg.AssetKey]) -> str:
    """What the asset is incremental on: its cursors, and the upstreams whose changes it reads."""
    parts = [_cursor_start(spec) for spec in settings.cursors.values()]
    parts += [f"the changes of `{key.to_user_string()}` committed since the last run" for key in upstreams.values()]
    return f"Incremental on {', '.join(parts)}" if parts else "Not incremental (each run loads what it is given)"


def _description(settings: AssetSettings, upstreams: Mapping[str, dg.AssetKey]) -> str:
    prose = without_columns(settings.description.strip(), settings.column_descriptions) if settings.description else ""
    lines = [prose] if prose else []
    write = settings.disposition + (f"/{settings.strategy}" if settings.strategy else "")
    # Name each key: "delete-insert on event_id" read as if event_id chose the rows replaced,
    # where a merge_key (event_date) does.
    keys = [f"{label} {', '.join(columns)}" for label, columns in
            (("merge key", settings.merge_key), ("primary key", settings.primary_key)) if columns]
    write += f" ({'; '.join(keys)})" if keys else ""
    lines.append(f"{_incremental_on(settings, upstreams)}; {write} into {settings.table.display}.")
    return "\n\n".join(lines)


def _build_asset(func, settings: AssetSettings, io_manager_key: str, asset_kwargs: Mapping[str, Any]) -> dg.AssetsDefinition:
    runner = Runner(func, settings, io_manager_key)
    kwargs = dict(asset_kwargs)
    if settings.tenants is not None:  # a run binds one tenant's cursor: one run per partition
        kwargs.setdefault("backfill_policy", dg.BackfillPolicy.multi_run(max_partitions_per_run=1))
    elif settings.partitions_def is not None:
        kwargs.setdefault("backfill_policy", dg.BackfillPolicy.single_run())
    # Each asset gets its own pool: limited to 1 in dagster.yaml, runs of one asset wait their
    # turn; without the limit, the IO manager's compare-and-set commit lets one of them commit.
    kwargs.setdefault("pool", settings.pool or "incremental/" + "__".join((*settings.key_prefix, settings.name)))
    kwargs["kinds"] = {*settings.kinds, *kwargs.get("kinds", ())}  # the format's and the catalog's, and the user's
    if settings.freshness is not None and settings.freshness >= MIN_FRESHNESS_POLICY:
        kwargs.setdefault("freshness_policy", dg.FreshnessPolicy.time_window(fail_window=settings.freshness))
    if upstream_deps := list(changes_params(func).values()):  # lineage, and automation's trigger
        kwargs["deps"] = [*kwargs.get("deps", ()), *upstream_deps]
    if checks.check_specs(settings):
        kwargs["check_specs"] = [*kwargs.get("check_specs", ()), *checks.check_specs(settings)]

    def compute(context: dg.AssetExecutionContext, config: IncrementalRunConfig):
        yield from runner.run(context, config)

    compute.__name__ = settings.name
    compute.dagster_incremental_settings = settings  # type: ignore[attr-defined]  # read back by incremental_settings()
    # Dagster reads these annotations at definition time: give it classes, not postponed strings.
    compute.__annotations__ = {"context": dg.AssetExecutionContext, "config": IncrementalRunConfig}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backfill_policy on @asset is a beta parameter
        return dg.asset(
            compute,
            name=settings.name,
            key_prefix=list(settings.key_prefix) or None,
            group_name=settings.group_name,
            description=_description(settings, changes_params(func)),
            partitions_def=settings.partitions_def,
            io_manager_key=io_manager_key,
            required_resource_keys={io_manager_key},
            metadata=_definition_metadata(settings),
            **kwargs,
        )


def incremental_settings(asset: dg.AssetsDefinition) -> AssetSettings | None:
    """The settings an `@incremental_asset` was built with (None for any other asset)."""
    compute = getattr(getattr(asset.op, "compute_fn", None), "decorated_fn", None)
    return getattr(compute, "dagster_incremental_settings", None)


