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
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import dagster as dg

from dagster_incremental.cursor.state import AssetState
from dagster_incremental.dagster import checks, config_use, progress
from dagster_incremental.dagster.asset_settings import AssetSettings, reserved_params
from dagster_incremental.dagster.masking import Redactor
from dagster_incremental.dagster.partition_counts import RangeCommit, Window
from dagster_incremental.dagster.partition_scope import check_rows
from dagster_incremental.dagster.run_binding import Binding
from dagster_incremental.dagster.run_output import RunOutputs
from dagster_incremental.dagster.run_plan import (
    IncrementalRunConfig,
    LoadedSlice,
    MaterializationRun,
    Plan,
    Runs,
    as_json,
    last_run,
    plan_of,
    ranged,
    state_in_force_unchanged,
)
from dagster_incremental.dagster.slices import Commits, slice_windows, sliced_argument, sliced_span, sub_window
from dagster_incremental.dagster.state_store import CursorInForce, StoredState
from dagster_incremental.dagster.upstream import UpstreamInputs, check_upstream_supported
from dagster_incremental.errors import CursorRowError, IncrementalConfigError, IncrementalError, PrimaryKeyMissing
from dagster_incremental.settings.secrets import Secrets, function_arguments
from dagster_incremental.spark.boundary_check import drop_rows_already_loaded
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.local.stage import stage_batches
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WindowReplace, WriteResult, WriteSpec

if TYPE_CHECKING:
    from dagster_incremental.dagster.io_manager import SparkTableIOManager

__all__ = ["IncrementalRunConfig", "Runner", "load_run_secrets", "user_errors"]


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
        self.binding = Binding(settings)
        self.outputs = RunOutputs(settings, self.sliced, self.upstream, self.binding)
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
        plan.last_run = last_run(stored.get(plan.scope))
        if plan.scope is not None and (stored[plan.scope].state is None or self.reloads_whole_scope):
            # The open window's (or tenant's) first run loads the whole window: replace what a
            # backfill may already have put there instead of adding to it. Without a cursor to
            # continue from, every run loads it whole again.
            plan.window_replace = True
        run = MaterializationRun(context, io, plan, stored, self.binding.write_spec(io, context.asset_key), started, secret_kwargs, redactor)
        progress.say(context.log, run.asset, f"{'full refresh' if plan.full_refresh else plan.mode} run started"
                     + (f" (partition {plan.scope})" if plan.scope is not None else ""))
        with user_errors(run.asset, redactor):
            self.in_force.check_table_kept(context, io, stored, plan.scope)
            in_force = self.in_force.state_in_force(context, stored, plan.scope)
            self.binding.check_write_keys(in_force, plan)
            whole = self.binding.bind(context, plan, in_force)
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
        reads = self.upstream.plan(run.io, state_in_force_unchanged(stored, plan.scope), restart,
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
                if len(windows) == 1 and not ranged(run.context):
                    return self.outputs.for_io_manager(run, whole, done)
                result, expected = _commit(run, done.batch)
            except BaseException:
                commits.failed(run.context.log)
                raise
            commits.add(RangeCommit(windows[index - 1], done.batch.spec, result), self._slice_span_text(run, done.runs), run.context.log)
            if done.state is not None:  # an incremental run: the next slice continues from here
                in_force = done.state
        replace = self.binding.window_replace(run.plan, whole)
        written = self._batch_to_commit(run, run.plan, run.spec, None, done.batch.deduplicated, done.state, expected, replace)
        return self.outputs.of_committed_slices(run, whole, done.state, commits), self.outputs.state_to_report(run, done.state), written

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
            runs = whole if self.sliced is None or count == 1 else self.binding.bind(
                run.context, run.plan, in_force, {self.sliced: window})
            frame, deduplicated = self.load(run, runs)
        # after the load: a cursor type read from the rows gives the window its bounds' type
        part = sub_window(self.binding.window_replace(run.plan, whole), window, index, count)
        state = self._state_after(run, runs, whole)
        plan, spec = _write_for(run.plan, run.spec, index, part)
        return LoadedSlice(runs, state, self._batch_to_commit(run, plan, spec, frame, deduplicated, state, expected, part))

    def load(self, run: MaterializationRun, runs: Runs) -> tuple[Any, bool]:
        """Call the function, filter and stage what it gives: (the writer's data, deduplicated)."""
        output = self._call_function(run.context, runs, {**run.secret_kwargs, **run.changes})
        io, spec = run.io, run.spec
        try:
            staged = stage_batches(output, runs, self.settings, spec, on_first_rows=lambda: self._start_spark(run),
                                   collect_frames_up_to=run.collect_up_to, connect_ok=io.tables.over_connect)
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
                state=as_json(state),
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


def _commit(run: MaterializationRun, batch: IncrementalBatch) -> tuple[WriteResult, int | None]:
    """Commit a batch now (as the IO manager's handle_output would); spilled rows are removed."""
    try:
        return run.io.commit_batch(batch, run.context.asset_key, run.context.log)
    finally:
        if isinstance(batch.data, LocalRows):
            batch.data.close()


def _write_for(plan: Plan, spec: WriteSpec, index: int, replace: WindowReplace | None) -> tuple[Plan, WriteSpec]:
    """How slice `index` writes. A full refresh rebuilds the table with the first slice; the
    later ones write as the asset does (a replace asset: they add, not replace again)."""
    if index == 1 or replace is not None:
        return plan, spec
    if spec.disposition == "replace":
        spec = dataclasses.replace(spec, disposition="append", strategy=None)
    return dataclasses.replace(plan, full_refresh=False), spec


