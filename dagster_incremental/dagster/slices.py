"""A run cut into slices by its cursor's `step`: the function is called once per slice with the
slice's bounds, and each slice is committed with the cursor after it, so a failure in slice k
keeps slices 1..k-1 and the next run starts at slice k.
"""

from __future__ import annotations

# Slices 1..n are all committed here, through SparkTableIOManager.commit_batch (the same commit as
# handle_output's, compare-and-set included: slice k+1 expects the snapshot slice k created). The
# asset's Output then carries no value (the IO manager has nothing left to write) and the run's
# totals as metadata. A run whose range fits in one step never comes here.

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.slices import plan_run
from dagster_incremental.cursor.state import AssetState
from dagster_incremental.dagster import metadata as md
from dagster_incremental.dagster.partition_counts import RangeCommit
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.write_spec import WriteResult

if TYPE_CHECKING:  # pragma: no cover
    from dagster_incremental.dagster.asset_settings import AssetSettings
    from dagster_incremental.dagster.run import Runner, Plan


def sliced_argument(settings: AssetSettings) -> str | None:
    """The incremental argument whose `step` cuts runs into slices (None: no step anywhere)."""
    names = [name for name, spec in settings.cursors.items() if spec.step is not None]
    if len(names) > 1:
        raise IncrementalConfigError(
            f"asset {settings.name!r}: step is set on several incremental arguments ({', '.join(names)}); "
            "slices follow one cursor: keep step on one of them."
        )
    return names[0] if names else None


def plan_slices(runs: Mapping[str, Any], name: str | None) -> list[tuple[Any, Any]] | None:
    """The slices (cursor keys) of this run, or None to run it whole as without step."""
    if name is None:
        return None
    return plan_run(runs[name], now_key=time.time_ns() // 1_000)


@dataclasses.dataclass
class _Totals:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    committed: int = 0
    last: Any = None  # the last slice's WriteResult (a sliced run has two slices at least)
    commits: list[RangeCommit] = dataclasses.field(default_factory=list)  # each slice's, for partition figures

    def add(self, commit: RangeCommit) -> None:
        result = commit.result
        self.inserted += result.rows_inserted
        self.updated += result.rows_updated
        self.deleted += result.rows_deleted
        self.committed += 1
        self.last = result
        self.commits.append(commit)


class SlicedRun:
    """One materialization cut into slices: bind, load and commit each in order."""

    def __init__(self, runner: Runner, context, io, plan: Plan, stored, spec, started):
        self.runner, self.context, self.io, self.plan = runner, context, io, plan
        self.stored, self.spec, self.started = stored, spec, started
        self.name: str = runner.sliced  # type: ignore[assignment]
        self.names = list(runner.settings.cursors)

    def run(self, runs, slices, in_force: AssetState, expected: int | None, secret_kwargs, redactor):
        """Commit every slice. Returns the Output (the run's totals, the state after the last
        slice), that state, and the run's whole write without rows (what the asset checks read)."""
        from dagster_incremental.dagster.run import user_errors

        whole = runs[self.name]
        bounds = self._windows(whole, slices)
        replace = self.runner.window_replace(self.plan, runs)
        totals, state = _Totals(), self.runner.state_after(runs, self.plan, self.stored)
        asset = self.context.asset_key.to_user_string()
        for index, window in enumerate(bounds, start=1):
            try:
                with user_errors(asset, redactor):
                    slice_runs = self.runner.bind(self.context, self.plan, in_force, {self.name: window})
                    frame, staged = self.runner.load(self.context, self.io, slice_runs, self.spec, secret_kwargs,
                                                      self.plan.rows_of)
                state = self._state(slice_runs, whole)
                window_replace = _sub_window(replace, window, index, len(bounds))
                plan, spec = self._write_for(index, window_replace)
                batch = self.runner.batch_for(
                    self.context, plan, spec, frame, staged, state, expected, self.started, window_replace
                )
                try:
                    result, expected = self.io.commit_batch(batch, self.context.asset_key, self.context.log)
                finally:
                    if isinstance(frame, LocalRows):
                        frame.close()
            except BaseException:
                self._log_failure(index, len(bounds), totals.committed)
                raise
            totals.add(RangeCommit(window, spec, result))
            self._log_slice(index, len(bounds), slice_runs[self.name], window, result)
            if self.plan.mode == "incremental":
                in_force = AssetState.from_dict(state, self.names)
        written = self.runner.batch_for(self.context, self.plan, self.spec, None, staged, state, expected,
                                     self.started, replace)
        return self.output(whole, state, totals, len(bounds)), state, written

    def _windows(self, whole, slices: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """Each slice as a window of public values; the first and last keep the run's own ends
        (a partition window's, or none: the spec's initial_value / end_value stay in force)."""
        ctype = whole.cursor_type
        plan_start, plan_end = self.plan.window if self.plan.window is not None else (None, None)
        inner = [cv.key_to_public(b, ctype) for _, b in slices[:-1]]
        return list(zip([plan_start, *inner], [*inner, plan_end]))

    def _write_for(self, index: int, window_replace) -> tuple[Plan, Any]:
        """How slice `index` writes. A full refresh rebuilds the table with the first slice; the
        later ones write as the asset does (a replace asset: they add, not replace again)."""
        if index == 1 or window_replace is not None:
            return self.plan, self.spec
        plan = dataclasses.replace(self.plan, full_refresh=False)
        spec = self.runner.write_spec(self.io, self.context.asset_key)
        if spec.disposition == "replace":
            spec = dataclasses.replace(spec, disposition="append", strategy=None)
        return plan, spec

    def _state(self, runs, whole) -> Any:
        """The asset's state after a slice: as the run's own would be (last_value the newest value
        loaded, a slice without rows leaves it where it was), begun where the run began."""
        state = self.runner.state_after(runs, self.plan, self.stored)
        if self.plan.mode != "incremental":
            return state
        typed = AssetState.from_dict(state, self.names)
        cursors = {name: typed.cursor(name) for name in self.names}
        sliced = cursors[self.name]
        if sliced is not None and whole.cursor_state is not None:
            cursors[self.name] = dataclasses.replace(sliced, start_value=whole.cursor_state.start_value)
        return AssetState.of(cursors, typed.write_keys).to_dict()

    def _log_slice(self, index: int, count: int, run, window, result: WriteResult) -> None:
        rows = result.rows_inserted + result.rows_updated
        start, end = _shown(run.start_key, run), _shown(run.end_key, run)
        self.context.log.info(f"slice {index}/{count} [{start}, {end}): {rows:,} rows")

    def _log_failure(self, index: int, count: int, committed: int) -> None:
        kept = f"slices 1-{committed} are committed" if committed else "no slice was committed"
        self.context.log.error(
            f"slice {index}/{count} failed: {kept}; the next run continues from the last committed cursor."
        )

    def output(self, whole, state, totals: _Totals, planned: int) -> dg.Output:
        summed = dataclasses.replace(
            totals.last, rows_inserted=totals.inserted, rows_updated=totals.updated, rows_deleted=totals.deleted
        )
        from dagster_incremental.dagster.metadata import result_metadata

        extra = {
            md.SLICES: dg.MetadataValue.json([totals.committed, planned]),
            **result_metadata(self.spec.table, summed, self.runner.settings.column_descriptions),
        }
        if self.plan.mode == "backfill":
            window = self.runner.loaded_window({self.name: whole}, self.plan)
        else:  # as an unsliced run reports it: from its start to its end, or to the last value loaded
            end = whole.end_value if whole.end_value is not None else _last_value(state, self)
            window = [whole.start_value, end]
        return self.runner.output(self.context, None, self.plan, self.stored, state, window, extra, totals.commits)


def _sub_window(replace, window: tuple[Any, Any], index: int, count: int):
    """The part of the run's window replace that slice `index` replaces."""
    if replace is None:
        return None
    start = replace.start if index == 1 else window[0]
    end = replace.end if index == count else window[1]
    return dataclasses.replace(replace, start=start, end=end)


def _shown(key: Any, run) -> str:
    """A slice bound as the log shows it: the stored form, "..." for an open end."""
    if key is None:
        return "..."
    value = cv.key_to_canonical(key, run.cursor_type)
    return value if isinstance(value, str) else json.dumps(value)


def _last_value(state: Any, sliced: SlicedRun) -> Any:
    cursor = AssetState.from_dict(state, sliced.names).cursor(sliced.name)
    return cursor.last_value if cursor is not None else None
