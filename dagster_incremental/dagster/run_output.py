"""The Output a run yields and the metadata its materialization shows: the mode, the window
loaded, the cursor after the run (a backfill: the one in force, unchanged), the row figures;
per partition for a partition range, and a run's totals once its slices are committed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from dagster_incremental.cursor.state import AssetState
from dagster_incremental.dagster import metadata as md
from dagster_incremental.dagster.asset_settings import AssetSettings
from dagster_incremental.dagster.metadata import result_metadata
from dagster_incremental.dagster.partition_counts import RangeCommit, partition_metadata
from dagster_incremental.dagster.run_binding import Binding
from dagster_incremental.dagster.run_plan import (
    LoadedSlice,
    MaterializationRun,
    Plan,
    Runs,
    as_json,
    partitioned,
    state_in_force_unchanged,
)
from dagster_incremental.dagster.slices import Commits
from dagster_incremental.dagster.upstream import UpstreamInputs


class RunOutputs:
    """The Outputs of one asset's runs (a lone slice's for the IO manager to commit, or the
    totals of committed slices), with their metadata."""

    def __init__(self, settings: AssetSettings, sliced: str | None, upstream: UpstreamInputs, binding: Binding):
        self.settings = settings
        self.sliced = sliced  # the argument whose step cuts runs into slices
        self.upstream = upstream
        self.binding = binding

    def for_io_manager(self, run: MaterializationRun, whole: Runs, done: LoadedSlice):
        """A lone slice's batch as the Output's value: the IO manager commits it."""
        reported = self.state_to_report(run, done.state)
        window = self._loaded_window(run.plan, whole, done.state, sliced=False)
        return self.output(run, done.batch, reported, window), reported, done.batch

    def of_committed_slices(self, run: MaterializationRun, whole: Runs, state: AssetState | None, commits: Commits) -> dg.Output:
        """The Output of a run whose slices are committed: no value, the run's totals."""
        extra = result_metadata(run.spec.table, commits.total(), self.settings.column_descriptions,
                                replaced=run.spec.replaces_table(self.binding.window_replace(run.plan, whole)))
        if commits.planned > 1:
            extra = {md.SLICES: dg.MetadataValue.json([len(commits.made), commits.planned]),
                     md.SLICES_TEXT: dg.MetadataValue.text(f"{len(commits.made)} of {commits.planned} slices"), **extra}
        window = self._loaded_window(run.plan, whole, state, sliced=commits.planned > 1)
        return self.output(run, None, self.state_to_report(run, state), window, extra, commits.made)

    def _loaded_window(self, plan: Plan, whole: Runs, state: AssetState | None, sliced: bool) -> list[Any]:
        """The window a run reports: a backfill's own; else from the start to the end, or to the
        last value loaded (a sliced run: its cursor's after the last slice)."""
        if not sliced or self.sliced is None:
            lead = next(iter(whole.values()), None)
            return window_of(plan, lead, lead.last_value if lead is not None else None)
        cursor = state.cursor(self.sliced) if state is not None else None
        return window_of(plan, whole[self.sliced], cursor.last_value if cursor is not None else None)

    def state_to_report(self, run: MaterializationRun, state: AssetState | None) -> Any:
        """The state the materialization shows: the cursor after the run, or (a backfill) the
        one in force, unchanged."""
        if state is None:
            return state_in_force_unchanged(run.stored, run.plan.scope)
        return as_json(state)

    def output(self, run: MaterializationRun, value: Any, state: Any, window: list[Any], extra: Mapping[str, Any] | None = None,
               commits: Sequence[RangeCommit] = ()) -> dg.Output:
        """The Output with the run's metadata; a partition range gets it per partition, each
        partition with its own window and row figures (from `commits`, the range's commits)."""
        context, plan = run.context, run.plan
        run_md, names = {md.MODE: plan.mode, md.WINDOW: md.window_value(window)}, list(self.settings.cursors)
        if run.change_reads:  # the cursor is a bare snapshot id: say what it means
            run_md[md.UPSTREAM_READ] = md.json_value(self.upstream.described(run.io, run.change_reads))
        if not partitioned(context):
            return dg.Output(value, metadata={**run_md, **md.state_metadata(state, names), **(extra or {})})
        keys = context.partition_keys
        own = partition_metadata(run.io, self.settings.partitions_def, self.settings.window_column, keys, commits)
        for key in keys:
            kept = state if key == plan.scope else state_in_force_unchanged(run.stored, key)
            context.add_asset_metadata({**run_md, **md.state_metadata(kept, names), **own[key]}, partition_key=key)
        return dg.Output(value, metadata=dict(extra)) if extra else dg.Output(value)


def window_of(plan: Plan, lead: Any, last_value: Any) -> list[Any]:
    """A backfill's window, else `lead`'s run from its start to its end or to `last_value`."""
    if plan.window is not None and plan.mode == "backfill":
        return [plan.window[0], plan.window[1]]
    if lead is None:
        return [None, None]
    return [lead.start_value, lead.end_value if lead.end_value is not None else last_value]
