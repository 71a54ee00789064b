"""One materialization of an incremental asset, from cursor to commit: one run loop.

Plan the mode (incremental, backfill, full refresh), resolve the cursor in force (Dagster
metadata reconciled with the table commit), bind the specs, then run the slices: the range cut
by the cursor's `step` (slices.py), or one slice for the whole run. Each slice calls the
function, filters and stages what it yields, and commits rows and cursor together. The one
slice of a single-partition or unpartitioned run is committed by the IO manager as it stores
the Output; several slices, or a run over several partitions, are committed here (each
partition's figures are read from the commits, and Dagster takes them only before the Output
is stored). The asset checks follow the commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import dagster as dg

from dagster_incremental.cursor.spec import IncrementalSpec
from dagster_incremental.cursor.state import AssetState
from dagster_incremental.cursor.vocabulary import RunMode
from dagster_incremental.dagster import checks, config_use, progress
from dagster_incremental.dagster import metadata as md
from dagster_incremental.dagster.asset_settings import AssetSettings, reserved_params
from dagster_incremental.dagster.metadata import result_metadata
from dagster_incremental.dagster.masking import Redactor
from dagster_incremental.dagster.partition_counts import RangeCommit, Window, partition_metadata
from dagster_incremental.dagster.partition_scope import check_rows, tenant_plan, window_is_open
from dagster_incremental.dagster.slices import Commits, slice_windows, sliced_argument, sliced_span, sub_window
from dagster_incremental.dagster.state_store import CursorInForce, StoredState, full_refresh_instructions
from dagster_incremental.dagster.upstream import UpstreamInputs, check_upstream_supported
from dagster_incremental.errors import (
    CursorRowError,
    CursorStateMismatch,
    IncrementalConfigError,
    IncrementalError,
    PrimaryKeyMissing,
)
from dagster_incremental.settings.secrets import Secrets, function_arguments
from dagster_incremental.spark.boundary_check import drop_rows_already_loaded
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.local.stage import stage_batches
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WindowReplace, WriteResult, WriteSpec

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
    if _partitioned(context) and settings.tenants is not None:
        asset = context.asset_key.to_user_string()
        return Plan(**tenant_plan(asset, settings.tenants, context, config, settings.disposition))
    if _partitioned(context):
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


class Runner:
    """Executes one materialization of an incremental asset."""

    def __init__(self, func, settings: AssetSettings, io_manager_key: str):
        self.func = func
        self.settings = settings
        self.io_manager_key = io_manager_key
        self.takes_context = next(iter(inspect.signature(func).parameters), None) in ("context", "ctx")
        self.sliced = sliced_argument(settings)  # the argument whose step cuts runs into slices
        self.upstream = UpstreamInputs(func)  # its `Changes` parameters
        self.in_force = CursorInForce(settings.name, tuple(settings.cursors))  # which stored cursor a run continues
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
        asset, io = context.asset_key.to_user_string(), self._io(context)
        explain = lambda e: storage_failure(e, io, context.asset_key)  # noqa: E731
        with redactor.masking_logs(context.log), user_errors(asset, redactor, explain):
            output, state, written = self._run(context, config, secret_kwargs, redactor)
        # The IO manager stores the output before this generator resumes: the checks see the
        # table as this run committed it.
        yield output
        yield from checks.evaluate_checks(context, self._io(context), self.settings, written, state)

    def _run(self, context, config: IncrementalRunConfig, secret_kwargs: Mapping[str, Any], redactor: Redactor):
        """Plan, find the cursor in force, bind, then run the slices. Returns the Output, the
        state it reports and the run's whole write without rows (what the asset checks read)."""
        started = datetime.now(timezone.utc)
        for warning in self.settings.warnings():
            context.log.warning(warning)
        io = self._io(context)
        plan = plan_of(context, config, self.settings)
        stored, expected = self.in_force.stored_states(context, io, plan.scope, plan.restart, plan.mode)
        plan.last_run = _last_run(stored.get(plan.scope))
        if plan.scope is not None and (stored[plan.scope].state is None or self.reloads_whole_scope):
            # The open window's (or tenant's) first run loads the whole window: replace what a
            # backfill may already have put there instead of adding to it. Without a cursor to
            # continue from, every run loads it whole again.
            plan.window_replace = True
        run = MaterializationRun(context, io, plan, stored, self.write_spec(io, context.asset_key), started, secret_kwargs, redactor)
        progress.say(context.log, run.asset, f"{'full refresh' if plan.full_refresh else plan.mode} run started"
                     + (f" (partition {plan.scope})" if plan.scope is not None else ""))
        with user_errors(run.asset, redactor):
            self.in_force.check_table_kept(context, io, stored, plan.scope)
            in_force = self.in_force.state_in_force(context, stored, plan.scope)
            self._check_write_keys(in_force, plan)
            whole = self.bind(context, plan, in_force)
            windows = slice_windows(whole, self.sliced, plan.window)
            if self.upstream:
                run = self._with_change_reads(run, stored)
                windows = windows * len(run.change_reads)  # a Changes asset has no step (checked at definition)
        return self._run_slices(run, whole, windows, in_force, expected)

    def _with_change_reads(self, run: MaterializationRun, stored: Mapping[str | None, StoredState]) -> MaterializationRun:
        """`run` with what each slice reads of the upstreams: a backfill its window whole, else
        from the cursor in force, cut by upstream_commits_per_slice."""
        plan, column = run.plan, self.settings.window_column  # set for a partitioned Changes asset
        if not run.io.spark_started:
            progress.say(run.context.log, run.asset, "starting Spark (to read the upstream tables' snapshots)")
        restart = plan.restart or plan.mode == "backfill"
        reads = self.upstream.plan(run.io, _state_in_force_unchanged(stored, plan.scope), restart,
                                   self.settings.upstream_commits_per_slice)
        window = (*plan.window, column) if plan.window is not None and column else None
        return dataclasses.replace(run, change_reads=reads, changes_window=window)

    def _run_slices(self, run: MaterializationRun, whole: Runs, windows: list[Window], in_force: AssetState, expected: int | None):
        """Load and commit each slice in order, each expecting the snapshot the one before left.
        A lone slice the IO manager can commit is handed to it as the Output's value."""
        commits = Commits(len(windows))
        for index in range(1, len(windows) + 1):
            try:
                if run.change_reads:
                    run = self._with_slice_changes(run, index)
                done = self._slice(run, whole, in_force, windows, index, expected)
                if len(windows) == 1 and not _ranged(run.context):
                    return self._output_for_io_manager(run, whole, done)
                result, expected = _commit(run, done.batch)
            except BaseException:
                commits.failed(run.context.log)
                raise
            commits.add(RangeCommit(windows[index - 1], done.batch.spec, result), self._slice_span_text(run, done.runs), run.context.log)
            if done.state is not None:  # an incremental run: the next slice continues from here
                in_force = done.state
        replace = self.window_replace(run.plan, whole)
        written = self._batch_to_commit(run, run.plan, run.spec, None, done.batch.deduplicated, done.state, expected, replace)
        return self._output_of_committed_slices(run, whole, done.state, commits), self._state_to_report(run, done.state), written

    def _with_slice_changes(self, run: MaterializationRun, index: int) -> MaterializationRun:
        """`run` with slice `index`'s Changes, read now: a later slice's read waits for its turn."""
        reads = run.change_reads[index - 1]
        with user_errors(run.asset, run.redactor):
            changes = self.upstream.read(run.context, run.io, reads, run.changes_window)
        return dataclasses.replace(run, changes=changes, collect_up_to=self.upstream.rows_to_collect(run.io, reads))

    def _slice_span_text(self, run: MaterializationRun, runs: Runs) -> str | None:
        """What a slice covered, as its log line shows it (None: the run is not sliced)."""
        if self.sliced is not None:
            return sliced_span(runs[self.sliced])
        if len(run.change_reads) > 1:
            return ", ".join(f"{name} snapshots ({c.start_snapshot_id}, {c.end_snapshot_id}]" for name, c in run.changes.items())
        return None

    def _slice(self, run: MaterializationRun, whole: Runs, in_force: AssetState, windows: list[Window], index: int,
               expected: int | None) -> LoadedSlice:
        """Bind slice `index` (a lone slice keeps the run's own binding), call the function,
        filter and stage its rows; the batch carries the cursor after them."""
        window, count = windows[index - 1], len(windows)
        with user_errors(run.asset, run.redactor):
            runs = whole if self.sliced is None or count == 1 else self.bind(
                run.context, run.plan, in_force, {self.sliced: window})
            frame, deduplicated = self.load(run, runs)
        # after the load: a cursor type read from the rows gives the window its bounds' type
        part = sub_window(self.window_replace(run.plan, whole), window, index, count)
        state = self._state_after(run, runs, whole)
        plan, spec = _write_for(run.plan, run.spec, index, part)
        return LoadedSlice(runs, state, self._batch_to_commit(run, plan, spec, frame, deduplicated, state, expected, part))

    def load(self, run: MaterializationRun, runs: Runs) -> tuple[Any, bool]:
        """Call the function, filter and stage what it gives: (the writer's data, deduplicated)."""
        output = self._call_function(run.context, runs, {**run.secret_kwargs, **run.changes})
        io, spec = run.io, run.spec
        try:
            staged = stage_batches(output, runs, self.settings, spec, on_first_rows=lambda: self._start_spark(run),
                                   collect_frames_up_to=run.collect_up_to)
            frame = drop_rows_already_loaded(io, staged.data(lambda: io.spark), runs, spec)
        except (CursorRowError, PrimaryKeyMissing) as exc:  # add where the option it blames is set
            raise self.settings.located(exc) from None
        rows = getattr(frame, "num_rows", None)  # local rows; a Spark frame is counted by its commit
        progress.say(run.context.log, run.asset, f"loaded {rows:,} new rows" if isinstance(rows, int) else
                     "the function's Spark DataFrame is ready (the commit counts its rows)" if frame is not None
                     else "loaded no new rows")
        check_rows(run.asset, frame, run.plan.rows_of)  # a tenant's run is refused another tenant's rows
        return frame, staged.deduplicated

    def _start_spark(self, run: MaterializationRun) -> None:
        """The first rows arrived: start Spark while the function still extracts (unless the
        write needs no JVM), and say so."""
        already = run.io.spark_started
        run.io.start_spark_in_background(run.spec)
        if not already and run.io.spark_started:
            progress.say(run.context.log, run.asset, "first rows in: starting Spark in the background")

    def _state_after(self, run: MaterializationRun, runs: Runs, whole: Runs) -> AssetState | None:
        """The cursor a slice leaves (None: a backfill leaves none): last_value the newest value
        loaded so far (a slice without rows leaves it where it was), begun where the run began;
        each `Changes` parameter's, the upstream snapshot the slice read up to."""
        if run.plan.mode == "backfill":
            return None
        cursors = {name: bound.cursor_state for name, bound in runs.items()}
        name = self.sliced
        begun = whole[name].cursor_state if name is not None else None
        if name is not None and begun is not None and cursors[name] is not None:
            cursors[name] = dataclasses.replace(cursors[name], start_value=begun.start_value)
        return self.upstream.record(AssetState.of(cursors, self.settings.write_keys), run.changes)

    def _batch_to_commit(self, run: MaterializationRun, plan: Plan, spec: WriteSpec, frame: Any, deduplicated: bool,
               state: AssetState | None, expected_snapshot: int | None, window: WindowReplace | None) -> IncrementalBatch:
        """What the IO manager commits: the rows and, on an incremental run, the cursor after them
        (as stored: the commit's properties hold its JSON)."""
        return IncrementalBatch(
            spec=spec,
            data=frame,
            commit=CommitInfo(
                state=_as_json(state),
                run_id=run.context.run_id,
                scope=plan.scope,
            ),
            mode=plan.mode,
            window=window,
            full_refresh=plan.full_refresh,
            run_started_at=run.started,
            check_stale=plan.mode == "incremental",
            expected_snapshot_id=expected_snapshot,
            deduplicated=deduplicated,
            column_descriptions=self.settings.column_descriptions,
        )

    # -- the Output ----------------------------------------------------------------------------

    def _output_for_io_manager(self, run: MaterializationRun, whole: Runs, done: LoadedSlice):
        """A lone slice's batch as the Output's value: the IO manager commits it."""
        reported = self._state_to_report(run, done.state)
        window = self._loaded_window(run.plan, whole, done.state, sliced=False)
        return self.output(run, done.batch, reported, window), reported, done.batch

    def _output_of_committed_slices(self, run: MaterializationRun, whole: Runs, state: AssetState | None, commits: Commits) -> dg.Output:
        """The Output of a run whose slices are committed: no value, the run's totals."""
        extra = result_metadata(run.spec.table, commits.total(), self.settings.column_descriptions,
                                replaced=run.spec.replaces_table(self.window_replace(run.plan, whole)))
        if commits.planned > 1:
            extra = {md.SLICES: dg.MetadataValue.json([len(commits.made), commits.planned]),
                     md.SLICES_TEXT: dg.MetadataValue.text(f"{len(commits.made)} of {commits.planned} slices"), **extra}
        window = self._loaded_window(run.plan, whole, state, sliced=commits.planned > 1)
        return self.output(run, None, self._state_to_report(run, state), window, extra, commits.made)

    def _loaded_window(self, plan: Plan, whole: Runs, state: AssetState | None, sliced: bool) -> list[Any]:
        """The window a run reports: a backfill's own; else from the start to the end, or to the
        last value loaded (a sliced run: its cursor's after the last slice)."""
        if not sliced or self.sliced is None:
            lead = next(iter(whole.values()), None)
            return _window_of(plan, lead, lead.last_value if lead is not None else None)
        cursor = state.cursor(self.sliced) if state is not None else None
        return _window_of(plan, whole[self.sliced], cursor.last_value if cursor is not None else None)

    def _state_to_report(self, run: MaterializationRun, state: AssetState | None) -> Any:
        """The state the materialization shows: the cursor after the run, or (a backfill) the
        one in force, unchanged."""
        if state is None:
            return _state_in_force_unchanged(run.stored, run.plan.scope)
        return _as_json(state)

    def output(self, run: MaterializationRun, value: Any, state: Any, window: list[Any], extra: Mapping[str, Any] | None = None,
               commits: Sequence[RangeCommit] = ()) -> dg.Output:
        """The Output with the run's metadata; a partition range gets it per partition, each
        partition with its own window and row figures (from `commits`, the range's commits)."""
        context, plan = run.context, run.plan
        run_md, names = {md.MODE: plan.mode, md.WINDOW: md.window_value(window)}, list(self.settings.cursors)
        if run.change_reads:  # the cursor is a bare snapshot id: say what it means
            run_md[md.UPSTREAM_READ] = md.json_value(self.upstream.described(run.io, run.change_reads))
        if not _partitioned(context):
            return dg.Output(value, metadata={**run_md, **md.state_metadata(state, names), **(extra or {})})
        keys = context.partition_keys
        own = partition_metadata(run.io, self.settings.partitions_def, self.settings.window_column, keys, commits)
        for key in keys:
            kept = state if key == plan.scope else _state_in_force_unchanged(run.stored, key)
            context.add_asset_metadata({**run_md, **md.state_metadata(kept, names), **own[key]}, partition_key=key)
        return dg.Output(value, metadata=dict(extra)) if extra else dg.Output(value)

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
                if "cursor_type" not in exc.changed:
                    raise
                origin = self.settings.cursor_origins.get(name, f"parameter {name!r}")
                raise CursorStateMismatch(f"{exc} The new cursor type comes from {origin}.", changed=exc.changed) from None
            context.log.info(
                f"{name}: {plan.mode} run of {spec.cursor_path} from {md.shown(run.start_value)}"
                + (f" to {md.shown(run.end_value)}" if run.end_value is not None else "")
            )
            runs[name] = run
        return runs

    def write_spec(self, io, asset_key: dg.AssetKey) -> WriteSpec:
        """The asset's own spec, also for a full refresh: the writer's full refresh writes the
        rows a first run would insert (deduplicated, no tombstones, scd2's columns)."""
        return self.settings.write_spec(io.table_name(asset_key))

    def window_replace(self, plan: Plan, runs: Mapping[str, Any]) -> WindowReplace | None:
        if not plan.window_replace or self.settings.strategy == "scd2":
            return None  # scd2 keeps history: a backfill merges
        column = self.settings.window_column
        bounds: dict[str, Any]
        if plan.window is not None:
            bounds = {"start": plan.window[0], "end": plan.window[1]}
        elif plan.rows_of is not None and (plan.restart or self.settings.disposition == "replace" or not runs):
            # all the tenant's rows: its full refresh, a replace asset's run, or a run without a cursor
            bounds = {"start": None, "end": None}
            column = column or plan.rows_of[0]
        else:  # the cursor's own range, with its range_start / range_end: exactly what its filter keeps
            run = next(iter(runs.values()))
            bounds = {"start": run.start_value, "end": run.end_value,
                      "start_open": not run.start_closed, "end_closed": run.end_closed}
        if column is None:
            return None  # nested cursors can't bound a window
        return WindowReplace(column=column, rows_of=plan.rows_of, **bounds)

    @property
    def reloads_whole_scope(self) -> bool:
        """No cursor (no `Incremental`, no `Changes` parameter): each run of a partition loads
        all of its rows, so each run replaces them."""
        return not self.settings.cursors and not self.upstream

    def _call_function(self, context, runs: Runs, secret_kwargs: Mapping[str, Any] = {}):  # noqa: B006
        kwargs = {**secret_kwargs, **runs}
        if self.takes_context:
            return self.func(context, **kwargs)
        return self.func(**kwargs)

    def _io(self, context) -> SparkTableIOManager:
        return getattr(context.resources, self.io_manager_key)

    def _check_write_keys(self, in_force: AssetState, plan: Plan) -> None:
        """Keys decide what a merge matches: rows written under other keys must not be mixed in."""
        before = in_force.write_keys
        now = self.settings.write_keys
        if plan.full_refresh or before is None or before == now:
            return
        changed = [k for k in now if before.get(k) != now[k]]
        said = ", ".join(f"{k} {before.get(k)!r} -> {now[k]!r}" for k in changed)
        raise CursorStateMismatch(
            f"the table was written with other keys than the asset now declares ({said}); "
            f"to rebuild it with the new keys, {full_refresh_instructions(self.settings.name)}",
            changed=changed,
        )


@contextlib.contextmanager
def user_errors(asset: str, redactor: Redactor, storage: Callable[[BaseException], str | None] | None = None):
    """Errors of the cursor and of the user's function as the run reports them: a library error
    is a Failure naming the asset; any error whose text holds a secret is re-raised masked.

    A library error's message is complete (what, where, what to do) and its frames are the
    library's: the Failure carries the message alone (`from None`), so the step's failure shows
    it once, not again as the cause (and again in every log line that prints the chain)."""
    try:
        yield
    except IncrementalError as exc:
        if redactor.leaks(exc):
            raise _masked_failure(asset, exc, redactor) from None
        raise dg.Failure(description=f"asset {asset}: {exc}", allow_retries=False) from None
    except Exception as exc:
        if redactor.leaks(exc):
            raise _masked_failure(asset, exc, redactor) from None
        explained = storage(exc) if storage is not None else None
        if explained is not None:  # the Java trace (100+ lines) is left out: the cause is named
            raise dg.Failure(description=f"asset {asset}: {explained}", allow_retries=False) from None
        raise


def storage_failure(exc: BaseException, io: SparkTableIOManager, asset_key: dg.AssetKey) -> str | None:
    """A storage or catalog failure explained by the IO manager (None: not one, or an IO
    manager of another kind)."""
    explain = getattr(io, "storage_error", None)
    return explain(exc, asset_key) if explain is not None else None


def _masked_failure(asset: str, exc: BaseException, redactor: Redactor) -> dg.Failure:
    """A Failure in place of an exception whose text holds a secret: same type name and
    traceback, each secret replaced by ***. Raise it `from None` so the original is not stored."""
    return dg.Failure(description=f"asset {asset}: {redactor.describe(exc)}", allow_retries=False)


def _partitioned(context) -> bool:
    return context.has_partition_key or context.has_partition_key_range


def _last_run(stored: StoredState | None) -> datetime | None:
    """When the run that left the cursor in force committed it (its materialization, or the
    table commit when that is newer); None when no run did (nothing yet, a runless reset)."""
    if stored is None or stored.state is None or stored.run_id is None or stored.timestamp is None:
        return None
    return datetime.fromtimestamp(stored.timestamp, timezone.utc)


def _ranged(context) -> bool:
    """A run over several partitions (one commit, or one per slice, for all of them)."""
    return _partitioned(context) and len(context.partition_keys) > 1


def _commit(run: MaterializationRun, batch: IncrementalBatch) -> tuple[WriteResult, int | None]:
    """Commit a batch now (as the IO manager's handle_output would); spilled rows are removed."""
    try:
        return run.io.commit_batch(batch, run.context.asset_key, run.context.log)
    finally:
        if isinstance(batch.data, LocalRows):
            batch.data.close()


def _as_json(state: AssetState | None) -> dict[str, Any] | None:
    """The state as the commit stores it and the materialization shows it: typed up to here."""
    return state.to_dict() if state is not None else None


def _write_for(plan: Plan, spec: WriteSpec, index: int, replace: WindowReplace | None) -> tuple[Plan, WriteSpec]:
    """How slice `index` writes. A full refresh rebuilds the table with the first slice; the
    later ones write as the asset does (a replace asset: they add, not replace again)."""
    if index == 1 or replace is not None:
        return plan, spec
    if spec.disposition == "replace":
        spec = dataclasses.replace(spec, disposition="append", strategy=None)
    return dataclasses.replace(plan, full_refresh=False), spec


def _state_in_force_unchanged(stored: Mapping[str | None, StoredState], scope: str | None) -> Any:
    """The state in force for `scope`, unchanged as stored; None (shown as null) when there is
    none, not an empty cursor that would read as a reset."""
    entry = stored.get(scope)
    return entry.state if entry is not None else None


def _window_of(plan: Plan, lead: Any, last_value: Any) -> list[Any]:
    """A backfill's window, else `lead`'s run from its start to its end or to `last_value`."""
    if plan.window is not None and plan.mode == "backfill":
        return [plan.window[0], plan.window[1]]
    if lead is None:
        return [None, None]
    return [lead.start_value, lead.end_value if lead.end_value is not None else last_value]


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
