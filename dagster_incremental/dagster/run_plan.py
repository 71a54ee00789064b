"""A run's plan and what it carries from that plan to its Output: the mode (incremental,
backfill, full refresh) from its partitions and run config, the cursor in force per scope, the
write's spec, and each loaded slice. Shared by the run loop (run.py), its Output (run_output.py)
and its binding (run_binding.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import dagster as dg

from dagster_incremental.cursor.state import AssetState
from dagster_incremental.cursor.vocabulary import RunMode
from dagster_incremental.dagster.asset_settings import AssetSettings
from dagster_incremental.dagster.masking import Redactor
from dagster_incremental.dagster.partition_counts import Window
from dagster_incremental.dagster.partition_scope import tenant_plan, window_is_open
from dagster_incremental.dagster.state_store import StoredState
from dagster_incremental.spark.write_spec import IncrementalBatch, WriteSpec

if TYPE_CHECKING:
    from dagster_incremental.dagster.io_manager import SparkTableIOManager

Runs = Mapping[str, Any]  # incremental argument -> its IncrementalRun


class IncrementalRunConfig(dg.Config):
    """Per-run choices (Launchpad, `--config-json`, a sensor's RunRequest).

    Leave everything empty for a normal incremental run.
    """

    initial_value: str | None = None  # with end_value: the start of a stateless backfill
    end_value: str | None = None  # a stateless backfill of [initial_value, end_value)
    full_refresh: bool = False  # reset the cursor to initial_value and replace the table


@dataclass
class Plan:
    """How this run binds its cursors and writes (derived from partitions and run config)."""

    mode: RunMode
    scope: str | None = None  # partition key whose cursor this run advances
    window: Window | None = None
    window_replace: bool = False
    full_refresh: bool = False  # replace the whole table (unpartitioned full refresh)
    restart: bool = False  # ignore the stored cursor: start from initial_value (full refresh)
    stateless: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # initial_value / end_value from run config
    last_run: datetime | None = None  # when the run whose cursor this one continues committed
    rows_of: tuple[str, str] | None = None  # (column, tenant): the only rows a tenant's run may touch


def plan_of(context: dg.AssetExecutionContext, config: IncrementalRunConfig, settings: AssetSettings) -> Plan:
    """The run's mode from its partitions and run config."""
    if not settings.cursors and (config.initial_value is not None or config.end_value is not None):
        raise dg.Failure(
            f"asset {context.asset_key.to_user_string()}: initial_value/end_value run config bounds the "
            "asset's cursor, and it has no `Incremental` parameter; launch the run without them (each run "
            "loads what the function gives), or add an `Incremental` parameter",
            allow_retries=False,
        )
    if partitioned(context) and settings.tenants is not None:
        asset = context.asset_key.to_user_string()
        return Plan(**tenant_plan(asset, settings.tenants, context, config, settings.disposition))
    if partitioned(context):
        if config.end_value or config.initial_value:
            raise dg.Failure(
                "initial_value/end_value run config is for unpartitioned assets; "
                "launch a backfill of partitions instead"
            )
        tw = context.partition_time_window
        keys = context.partition_keys
        if len(keys) == 1 and window_is_open(tw.end):
            # The open window. A full refresh of it is its first run again: the window replaced
            # and its cursor restarted.
            return Plan(mode="incremental", scope=keys[0], window=(tw.start, tw.end), restart=config.full_refresh)
        return Plan(mode="backfill", window=(tw.start, tw.end), window_replace=True, stateless=True)
    if config.full_refresh:
        return Plan(mode="incremental", full_refresh=True, restart=True)
    if config.end_value is not None:
        overrides = {"end_value": config.end_value}
        if config.initial_value is not None:
            overrides["initial_value"] = config.initial_value
        return Plan(mode="backfill", window_replace=True, stateless=True, overrides=overrides)
    if config.initial_value is not None:
        raise dg.Failure("initial_value in run config needs end_value too (a backfill of [initial_value, end_value))")
    return Plan(mode="incremental")


@dataclass(frozen=True)
class MaterializationRun:
    """What one materialization carries from its plan to its Output."""

    context: dg.AssetExecutionContext
    io: SparkTableIOManager
    plan: Plan
    stored: Mapping[str | None, StoredState]  # the cursor in force per scope (see Runner._stored_states)
    spec: WriteSpec
    started: datetime
    secret_kwargs: Mapping[str, Any]
    redactor: Redactor
    changes: Mapping[str, Any] = field(default_factory=dict)  # each `Changes` parameter's read (this slice's)
    change_reads: Sequence[Mapping[str, Any]] = ()  # per slice: what each `Changes` parameter reads
    changes_window: tuple[Any, Any, str] | None = None  # a partitioned `Changes` asset's window (start, end, column)
    collect_up_to: int = 0  # rows of a Spark output to collect for the local write (UpstreamInputs.rows_to_collect)

    @property
    def asset(self) -> str:
        return self.context.asset_key.to_user_string()


@dataclass(frozen=True)
class LoadedSlice:
    """One slice loaded: its bound runs, the cursor it leaves (None: a backfill leaves none)
    and the batch that commits its rows with that cursor."""

    runs: Runs
    state: AssetState | None
    batch: IncrementalBatch


def partitioned(context) -> bool:
    return context.has_partition_key or context.has_partition_key_range


def ranged(context) -> bool:
    """A run over several partitions (one commit, or one per slice, for all of them)."""
    return partitioned(context) and len(context.partition_keys) > 1


def last_run(stored: StoredState | None) -> datetime | None:
    """When the run that left the cursor in force committed it (its materialization, or the
    table commit when that is newer); None when no run did (nothing yet, a runless reset)."""
    if stored is None or stored.state is None or stored.run_id is None or stored.timestamp is None:
        return None
    return datetime.fromtimestamp(stored.timestamp, timezone.utc)


def as_json(state: AssetState | None) -> dict[str, Any] | None:
    """The state as the commit stores it and the materialization shows it: typed up to here."""
    return state.to_dict() if state is not None else None


def state_in_force_unchanged(stored: Mapping[str | None, StoredState], scope: str | None) -> Any:
    """The state in force for `scope`, unchanged as stored; None (shown as null) when there is
    none, not an empty cursor that would read as a reset."""
    entry = stored.get(scope)
    return entry.state if entry is not None else None
