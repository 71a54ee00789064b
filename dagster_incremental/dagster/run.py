"""One materialization of an incremental asset, from cursor to commit.

Plan the mode (incremental, backfill, full refresh), resolve the cursor in force (Dagster
metadata reconciled with the table commit), bind the specs, call the function, filter and stage
what it yields, and hand the batch to the IO manager, which commits rows and cursor together.
A long range with `step` runs as slices (slices.py); the asset checks follow the commit.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from dagster_incremental.dagster import checks, config_use
from dagster_incremental.dagster import metadata as md
from dagster_incremental.errors import CursorStateMismatch, IncrementalConfigError, IncrementalError, TableCursorMissing
from dagster_incremental.cursor.spec import IncrementalSpec, incremental
from dagster_incremental.cursor.state import AssetState
from dagster_incremental.cursor.vocabulary import RunMode
from dagster_incremental.dagster.masking import Redactor
from dagster_incremental.settings.secrets import Secrets, function_arguments
from dagster_incremental.spark.boundary_check import drop_rows_already_loaded
from dagster_incremental.spark.local.stage import stage_batches
from dagster_incremental.dagster.partition_scope import check_rows, tenant_plan
from dagster_incremental.dagster.partition_counts import RangeCommit, partition_figures, partition_windows
from dagster_incremental.dagster.slices import SlicedRun, plan_slices, sliced_argument
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.dagster.state_store import StoredState, latest_dagster_state, reconcile
from dagster_incremental.dagster.upstream import UpstreamInputs, check_upstream_supported
from dagster_incremental.spark.write_spec import (
    CommitInfo,
    IncrementalBatch,
    WindowReplace,
    WriteSpec,
)

from dagster_incremental.dagster.asset_settings import AssetSettings, reserved_params


class IncrementalRunConfig(dg.Config):
    """Per-run choices (Launchpad, `--config-json`, a sensor's RunRequest).

    Leave everything empty for a normal incremental run.
    """

    initial_value: str | None = None  # with end_value: the start of a stateless backfill
    end_value: str | None = None  # a stateless backfill of [initial_value, end_value)
    full_refresh: bool = False  # reset the cursor to initial_value and replace the table



def load_run_secrets(settings: AssetSettings, func, reserved: Mapping[str, str] | None = None, *,
                     strict: bool = True) -> tuple[dict[str, Any], Redactor]:
    """Read secrets.toml now (inside the run): `func`'s secret kwargs and a Redactor of every secret.

    A parameter without default that secrets.toml fed when the code loaded must still be fed.
    """
    if settings.secrets is None:
        return {}, Redactor(())
    secrets: Secrets = settings.secrets.load()
    kwargs = function_arguments(secrets, settings.name, func, reserved=reserved, strict=strict)
    if strict:
        for name, param in inspect.signature(func).parameters.items():
            if name in settings.secret_params and name not in kwargs and param.default is inspect.Parameter.empty:
                raise IncrementalConfigError(
                    f"{secrets.where(settings.name)}: no longer gives parameter {name!r} of "
                    f"{func.__name__}(), which has no default; add `{name} = \"...\"` back"
                )
    return kwargs, Redactor(secrets.values())


@dataclass
class Plan:
    """How this run binds its cursors and writes (derived from partitions and run config)."""

    mode: RunMode
    scope: str | None = None  # partition key whose cursor this run advances
    window: tuple[Any, Any] | None = None
    window_replace: bool = False
    full_refresh: bool = False  # replace the whole table (unpartitioned full refresh)
    restart: bool = False  # ignore the stored cursor: start from initial_value (full refresh)
    stateless: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # initial_value / end_value from run config
    last_run: datetime | None = None  # when the run whose cursor this one continues committed
    rows_of: tuple[str, str] | None = None  # (column, tenant): the only rows a tenant's run may touch


class Runner:
    """Executes one materialization of an incremental asset."""

    def __init__(self, func, settings: AssetSettings, io_manager_key: str):
        self.func = func
        self.settings = settings
        self.io_manager_key = io_manager_key
        self.takes_context = next(iter(inspect.signature(func).parameters), None) in ("context", "ctx")
        self.sliced = sliced_argument(settings)  # the argument whose step cuts runs into slices
        self.upstream = UpstreamInputs(func)  # its `Changes` parameters
        check_upstream_supported(self.upstream, settings, self.sliced)

    def run(self, context: dg.AssetExecutionContext, config: IncrementalRunConfig):
        try:
            # the last safety net for a misspelt [assets.<name>] section (an IO manager built without
            # from_config never checked it): nothing is written yet; ignored sections were reported at load
            config_use.check_sections(self.settings.config_path)
            secret_kwargs, redactor = load_run_secrets(self.settings, self.func, reserved_params(self.func))
        except IncrementalConfigError as exc:  # its text names file, section and key, never a value
            raise dg.Failure(description=f"asset {context.asset_key.to_user_string()}: {exc}", allow_retries=False) from None
        # Every context.log line of this run (ours and the function's) is masked before Dagster
        # stores it; errors that carry a secret are re-raised masked (_masked_failure).
        with redactor.masking_logs(context.log):
            output, state, written = self._run(context, config, secret_kwargs, redactor)
        # The IO manager stores the output before this generator resumes: the checks see the
        # table as this run committed it.
        yield output
        io = getattr(context.resources, self.io_manager_key)
        yield from checks.evaluate_checks(context, io, self.settings, written, state)

    def _run(self, context, config: IncrementalRunConfig, secret_kwargs: Mapping[str, Any], redactor: Redactor):
        started = datetime.now(timezone.utc)
        for warning in self.settings.warnings():
            context.log.warning(warning)
        io = getattr(context.resources, self.io_manager_key)
        plan = self._plan(context, config)
        stored, table_snapshot = self._stored_states(context, io, plan)
        plan.last_run = _last_run(stored.get(plan.scope))
        if plan.scope is not None and stored[plan.scope].state is None:
            # The open window's first run loads the whole window: replace what a backfill may
            # already have put there instead of adding to it.
            plan.window_replace = True
        spec = self.write_spec(io, context.asset_key)
        with user_errors(context.asset_key.to_user_string(), redactor):
            self._check_table_kept(context, io, stored, plan)
            in_force = self._state_in_force(context, stored, plan)
            self._check_write_keys(in_force, plan)
            runs = self.bind(context, plan, in_force)
            changes = self.upstream.read(context, io, self._unchanged_state(stored, plan.scope), plan.restart) if self.upstream else {}
            slices = plan_slices(runs, self.sliced)
            if slices is None:
                frame, staged = self.load(context, io, runs, spec, {**secret_kwargs, **changes}, plan.rows_of)
        if slices is not None:
            return SlicedRun(self, context, io, plan, stored, spec, started).run(
                runs, slices, in_force, table_snapshot, secret_kwargs, redactor
            )
        state = self.state_after(runs, plan, stored)
        if plan.mode == "incremental":
            state = self.upstream.record(state, changes, bool(runs))
        batch = self.batch_for(
            context, plan, spec, frame, staged, state, table_snapshot, started, self.window_replace(plan, runs)
        )
        window = self.loaded_window(runs, plan)
        if _ranged(context):
            return self._commit_range(context, io, batch, plan, stored, state, window), state, batch
        return self.output(context, batch, plan, stored, state, window), state, batch

    def _commit_range(self, context, io, batch: IncrementalBatch, plan: Plan, stored, state, window) -> dg.Output:
        """Commit a range run's batch here, not in the IO manager: each partition's figures
        are read from the commit, and Dagster takes them only before the Output is handled."""
        from dagster_incremental.dagster.metadata import result_metadata

        try:
            result, _ = io.commit_batch(batch, context.asset_key, context.log)
        finally:
            if isinstance(batch.data, LocalRows):
                batch.data.close()
        extra = result_metadata(batch.spec.table, result, batch.column_descriptions)
        commits = [RangeCommit(tuple(plan.window or window), batch.spec, result)]
        return self.output(context, None, plan, stored, state, window, extra, commits)

    def load(self, context, io, runs: Mapping[str, Any], spec: WriteSpec, secret_kwargs: Mapping[str, Any],
             rows_of: tuple[str, str] | None = None):
        """Call the function, filter and stage what it gives: (the writer's data, the staged batch).
        A tenant's run (`rows_of`) is refused rows of another tenant."""
        output = self._call(context, runs, secret_kwargs)
        staged = stage_batches(output, runs, self.settings, spec, on_first_rows=io.start_spark_in_background)
        frame = drop_rows_already_loaded(io, staged.data(lambda: io.spark), runs, spec)
        check_rows(context.asset_key.to_user_string(), frame, rows_of)
        return frame, staged

    def batch_for(self, context, plan: Plan, spec: WriteSpec, frame, staged, state, expected_snapshot, started,
               window: WindowReplace | None) -> IncrementalBatch:
        """What the IO manager commits: the rows and, on an incremental run, the cursor after them."""
        return IncrementalBatch(
            spec=spec,
            data=frame,
            commit=CommitInfo(
                state=state if plan.mode == "incremental" else None,
                run_id=context.run_id,
                scope=plan.scope,
            ),
            mode=plan.mode,
            window=window,
            full_refresh=plan.full_refresh,
            run_started_at=started,
            check_stale=plan.mode == "incremental",
            expected_snapshot_id=expected_snapshot,
            deduplicated=staged.deduplicated,
            column_descriptions=self.settings.column_descriptions,
        )

    def output(self, context, value: Any, plan: Plan, stored, state, window, extra: Mapping[str, Any] | None = None,
               commits: Sequence[RangeCommit] = ()) -> dg.Output:
        """The Output with the run's metadata; a partition range gets it per partition, each
        partition with its own window and row figures (from `commits`, the range's commits)."""
        run_md = {md.MODE: plan.mode, md.WINDOW: md.window_value(window)}
        if context.has_partition_key or context.has_partition_key_range:
            keys = context.partition_keys
            own = self._partition_metadata(context, keys, commits)
            for key in keys:
                kept = state if key == plan.scope else self._unchanged_state(stored, key)
                context.add_asset_metadata({**run_md, md.STATE: md.json_value(kept), **own[key]}, partition_key=key)
            return dg.Output(value, metadata=dict(extra)) if extra else dg.Output(value)
        return dg.Output(value, metadata={**run_md, md.STATE: md.json_value(state), **(extra or {})})

    def _partition_metadata(self, context, keys: Sequence[str], commits: Sequence[RangeCommit]) -> dict[str, dict]:
        """Per partition of a range: its window, its own row figures and what they count. Without
        a plain window column the figures cannot be split: the run's totals stand, said plainly."""
        if len(keys) == 1:  # the run's own figures (the Output's) are this partition's
            return {keys[0]: {md.COUNTS_SCOPE: dg.MetadataValue.text(_counts_scope(keys, 1, own=True))}}
        windows = partition_windows(self.settings.partitions_def, keys)
        column = self.settings.window_column
        if column is None:
            scope = dg.MetadataValue.text(_counts_scope(keys, len(commits), own=False))
            return {key: {md.WINDOW: md.window_value(windows[key]), md.COUNTS_SCOPE: scope} for key in keys}
        figures = partition_figures(getattr(context.resources, self.io_manager_key), column, windows, commits)
        scope = dg.MetadataValue.text(_counts_scope(keys, len(commits), own=True))
        return {
            key: {
                md.WINDOW: md.window_value(windows[key]),
                md.ROWS_INSERTED: dg.MetadataValue.int(figures[key].inserted),
                md.ROWS_UPDATED: dg.MetadataValue.int(figures[key].updated),
                md.ROWS_DELETED: dg.MetadataValue.int(figures[key].deleted),
                md.COUNTS_SCOPE: scope,
            }
            for key in keys
        }

    # -- planning --------------------------------------------------------------------------------

    def _plan(self, context: dg.AssetExecutionContext, config: IncrementalRunConfig) -> Plan:
        partitioned = context.has_partition_key or context.has_partition_key_range
        if partitioned and self.settings.tenants is not None:
            asset = context.asset_key.to_user_string()
            return Plan(**tenant_plan(asset, self.settings.tenants, context, config, self.settings.disposition))
        if partitioned:
            if config.end_value or config.initial_value:
                raise dg.Failure(
                    "initial_value/end_value run config is for unpartitioned assets; "
                    "launch a backfill of partitions instead"
                )
            tw = context.partition_time_window
            keys = context.partition_keys
            is_open = len(keys) == 1 and tw.end > datetime.now(timezone.utc)
            if is_open:
                # A full refresh of the open window is its first run again: the window replaced
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

    def _stored_states(self, context, io, plan: Plan) -> tuple[dict[str | None, StoredState], int | None]:
        """The cursor in force per scope (None = the asset's own cursor), and the table snapshot
        that holds the cursor of the scope this run advances (for the stale-writer check)."""
        key = context.asset_key
        if plan.restart:
            table_state = io.committed_state(key, scope=plan.scope)
            return {plan.scope: StoredState(state=None, source="none")}, _snapshot_id(table_state)
        scopes: list[str | None]
        if context.has_partition_key or context.has_partition_key_range:
            scopes = list(context.partition_keys)
        else:
            scopes = [None]
        out: dict[str | None, StoredState] = {}
        table_snapshot = None
        for scope in scopes:
            dagster_state = latest_dagster_state(context.instance, key, partition=scope)
            if scope != plan.scope:  # a backfilled partition: its state is only reported
                out[scope] = dagster_state or StoredState(state=None, source="none")
                continue
            table_state = io.committed_state(key, scope=scope)
            table_snapshot = _snapshot_id(table_state)
            out[scope] = self._trusted(context, io, reconcile(dagster_state, table_state), plan)
        return out, table_snapshot

    def _trusted(self, context, io, stored: StoredState, plan: Plan) -> StoredState:
        """The reconciled state, said aloud when the table overruled a run's Dagster cursor (the
        table is the truth about what was loaded). An open window whose table lost its cursor
        reloads the whole window; an unpartitioned asset's run fails (_check_table_kept) unless the
        table holds only compaction snapshots (maintenance expired its cursor's: Dagster's is kept). A
        backfill resumes nothing: it only reports the state, as before."""
        lost = stored.overrules
        if lost is None:
            return stored
        if plan.mode != "incremental":
            return stored if stored.state is not None else lost
        scope = plan.scope
        asset, table = context.asset_key.to_user_string(), io.table_name(context.asset_key).display
        told = f"Dagster's cursor {self._cursor_text(lost.state)} (run {lost.run_id})"
        if stored.state is not None:
            context.log.warning(
                f"asset {asset}: table {table} holds cursor {self._cursor_text(stored.state)} (snapshot "
                f"{stored.snapshot_id}), older than {told}: the table was rolled back or restored from an "
                "older copy. This run resumes from the table's cursor and loads again the rows it lost."
            )
        elif scope is not None:
            context.log.warning(
                f"asset {asset}: table {table} holds no cursor of partition {scope} but Dagster has "
                f"{told}: the table was dropped, deleted or replaced. This run reloads the whole "
                "partition window (a window replace)."
            )
            return StoredState(state=None, source="none")
        elif io.only_rewrites_left(context.asset_key):
            context.log.warning(
                f"asset {asset}: table {table} holds only compaction snapshots, none with a cursor (the "
                f"snapshots that carried it were expired); this run resumes from {told}."
            )
            return lost
        return stored

    def _cursor_text(self, state: Mapping[str, Any] | None) -> str:
        """A stored state's cursor value(s) as a message shows them (a malformed one as stored:
        the run reports that itself, with what to do)."""
        names = list(self.settings.cursors)
        try:
            typed = AssetState.from_dict(state, names)
        except CursorStateMismatch:
            return repr(state)
        values = {name: getattr(typed.cursor(name), "last_value", None) for name in names}
        return repr(next(iter(values.values()))) if len(values) == 1 else repr(values)

    def _check_table_kept(self, context, io, stored: Mapping[str | None, StoredState], plan: Plan) -> None:
        """An unpartitioned asset whose table lost every cursor a run committed must not resume
        from Dagster's cursor (the lost rows would silently stay lost) nor reload from
        initial_value unasked (a missing table may be a misconfigured destination)."""
        chosen = stored.get(plan.scope)
        if chosen is None or chosen.overrules is None or chosen.state is not None:
            return
        lost = chosen.overrules
        table = io.table_name(context.asset_key).display
        raise TableCursorMissing(
            f"table {table} holds no cursor of this asset (it was dropped, "
            f"deleted or replaced, or [destination] points elsewhere now), but Dagster has cursor "
            f"{self._cursor_text(lost.state)} committed by run {lost.run_id}. Nothing was written. To "
            f"reload everything from initial_value, {full_refresh_instructions(self.settings.name)} If the "
            "destination moved, point [destination] (catalog, namespace, warehouse) in config.toml back.",
            asset=context.asset_key.to_user_string(), table=table, run_id=lost.run_id,
        )

    def _state_in_force(self, context, stored: Mapping[str | None, StoredState], plan: Plan) -> AssetState:
        """The stored state of the scope this run continues, read (and checked) as typed values."""
        chosen = stored.get(plan.scope)
        state = AssetState.from_dict(chosen.state if chosen else None, list(self.settings.cursors))
        if chosen is not None and chosen.state is not None:
            only = state.cursor(None)
            context.log.info(f"cursor state from {chosen.source}: {only.last_value if only else None!r}")
        return state

    def bind(self, context, plan: Plan, in_force: AssetState, windows: Mapping[str, Any] = {}) -> dict[str, Any]:  # noqa: B006
        """Bind every cursor (`windows`: a narrower window for some, e.g. a slice's)."""
        runs = {}
        for name, spec in self.settings.cursors.items():
            if plan.overrides:
                spec = spec.replace(**_typed_overrides(spec, plan.overrides))
            cursor_state = in_force.cursor(name)
            try:
                run = spec.bind(
                    None if plan.stateless else cursor_state,
                    window=windows.get(name, plan.window),
                    stateless=plan.stateless,
                    inherited_primary_key=self.settings.primary_key or None,
                    last_run=plan.last_run,
                )
            except CursorStateMismatch as exc:
                if "cursor_type" not in getattr(exc, "changed", ()):
                    raise
                origin = self.settings.cursor_origins.get(name, f"parameter {name!r}")
                raise CursorStateMismatch(f"{exc} The new cursor type comes from {origin}.") from None
            context.log.info(
                f"{name}: {plan.mode} run of {spec.cursor_path} from {md.shown(run.start_value)}"
                + (f" to {md.shown(run.end_value)}" if run.end_value is not None else "")
            )
            runs[name] = run
        return runs

    def write_spec(self, io, asset_key: dg.AssetKey) -> WriteSpec:
        """The asset's own spec, also for a full refresh: the writer's full refresh writes the
        rows a first run would insert (deduplicated, no tombstones, scd2's columns)."""
        from dagster_incremental.dagster.io_manager import write_spec_from_settings

        return write_spec_from_settings(io.table_name(asset_key), self.settings.write_settings())

    def window_replace(self, plan: Plan, runs: Mapping[str, Any]) -> WindowReplace | None:
        if not plan.window_replace:
            return None
        column = self.settings.window_column
        if plan.window is not None:
            start, end = plan.window
        elif plan.rows_of is not None and (plan.restart or self.settings.disposition == "replace"):
            start, end = None, None  # all the tenant's rows: its full refresh, or a replace asset's run
            column = column or plan.rows_of[0]
        else:
            run = next(iter(runs.values()))
            start, end = run.start_value, run.end_value
        if column is None or self.settings.strategy == "scd2":
            return None  # scd2 keeps history: a backfill merges; nested cursors can't bound a window
        return WindowReplace(column=column, start=start, end=end, rows_of=plan.rows_of)

    # -- execution -------------------------------------------------------------------------------

    def _call(self, context, runs: Mapping[str, Any], secret_kwargs: Mapping[str, Any] = {}):  # noqa: B006
        kwargs = {**secret_kwargs, **runs}
        if self.takes_context:
            return self.func(context, **kwargs)
        return self.func(**kwargs)

    def state_after(self, runs: Mapping[str, Any], plan: Plan, stored) -> Any:
        if plan.mode == "backfill":
            return self._unchanged_state(stored, plan.scope)
        return AssetState.of({name: run.cursor_state for name, run in runs.items()}, self._write_keys()).to_dict()

    def _write_keys(self) -> dict[str, Any]:
        s = self.settings
        return {
            "primary_key": list(s.primary_key),
            "merge_key": list(s.merge_key),
            "write_disposition": s.disposition + (f"/{s.strategy}" if s.strategy else ""),
        }

    def _check_write_keys(self, in_force: AssetState, plan: Plan) -> None:
        """Keys decide what a merge matches: rows written under other keys must not be mixed in."""
        before = in_force.write_keys
        now = self._write_keys()
        if plan.full_refresh or before is None or before == now:
            return
        changed = ", ".join(f"{k} {before.get(k)!r} -> {now[k]!r}" for k in now if before.get(k) != now[k])
        raise CursorStateMismatch(
            f"the table was written with other keys than the asset now declares ({changed}); "
            f"to rebuild it with the new keys, {full_refresh_instructions(self.settings.name)}"
        )

    @staticmethod
    def _unchanged_state(stored: Mapping[str | None, StoredState], scope: str | None) -> Any:
        """The state in force for `scope`, unchanged; None (shown as null) when there is none, not
        an empty cursor that would read as a reset."""
        entry = stored.get(scope)
        return entry.state if entry is not None else None

    @staticmethod
    def loaded_window(runs: Mapping[str, Any], plan: Plan) -> list[Any]:
        if plan.window is not None and plan.mode == "backfill":
            return [plan.window[0], plan.window[1]]
        run = next(iter(runs.values()), None)
        if run is None:
            return [None, None]
        end = run.end_value if run.end_value is not None else run.last_value
        return [run.start_value, end]


@contextlib.contextmanager
def user_errors(asset: str, redactor: Redactor):
    """Errors of the cursor and of the user's function as the run reports them: a library error
    is a Failure naming the asset; any error whose text holds a secret is re-raised masked."""
    try:
        yield
    except IncrementalError as exc:
        if redactor.leaks(exc):
            raise _masked_failure(asset, exc, redactor) from None
        raise dg.Failure(description=f"asset {asset}: {exc}", allow_retries=False) from exc
    except Exception as exc:
        if redactor.leaks(exc):
            raise _masked_failure(asset, exc, redactor) from None
        raise


def _masked_failure(asset: str, exc: BaseException, redactor: Redactor) -> dg.Failure:
    """A Failure in place of an exception whose text holds a secret: same type name and
    traceback, each secret replaced by ***. Raise it `from None` so the original is not stored."""
    return dg.Failure(description=f"asset {asset}: {redactor.describe(exc)}", allow_retries=False)


def _counts_scope(keys: Sequence[str], commits: int, own: bool) -> str:
    """Says what the row figures of a partition's materialization count."""
    table = "dagster/row_count is the whole table's row count"
    if len(keys) == 1:
        return f"rows_inserted/rows_updated/rows_deleted are this partition's; {table}"
    run = f"a run over {keys[0]}...{keys[-1]} ({len(keys)} partitions, {commits} commit{'s' if commits != 1 else ''})"
    if own:
        return f"rows_inserted/rows_updated/rows_deleted are this partition's own, in {run}; {table}"
    return (
        f"rows_inserted/rows_updated/rows_deleted are for the whole range of {run}, not this partition "
        f"alone (its cursor is not a plain column to split them by); {table}"
    )


def full_refresh_instructions(op_name: str) -> str:
    """How a user launches a full refresh of the asset, as error messages tell it."""
    return (
        "run a full refresh: launch the asset with run config "
        "`{ops: {" + op_name + ": {config: {full_refresh: true}}}}` (Launchpad) or "
        "`dagster asset materialize ... --config-json` with the same."
    )


def _last_run(stored: StoredState | None) -> datetime | None:
    """When the run that left the cursor in force committed it (its materialization, or the
    table commit when that is newer); None when no run did (nothing yet, a runless reset)."""
    if stored is None or stored.state is None or stored.run_id is None or stored.timestamp is None:
        return None
    return datetime.fromtimestamp(stored.timestamp, timezone.utc)


def _ranged(context) -> bool:
    """A run over several partitions (one commit, or one per slice, for all of them)."""
    return (context.has_partition_key or context.has_partition_key_range) and len(context.partition_keys) > 1


def _snapshot_id(committed: Any) -> int | None:
    return committed.snapshot_id if committed is not None else None


def _typed_overrides(spec: IncrementalSpec, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Run config values arrive as text: give numbers back their type for numeric cursors."""
    reference = spec.initial_value
    out = {}
    for key, value in overrides.items():
        if isinstance(reference, (int, float)) and not isinstance(reference, bool) and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                value = float(value)
        out[key] = value
    return out
