"""What a run's plan makes of its asset's settings: each cursor bound (with run config's
bounds, a slice's narrower window), the write's spec, the window a write replaces, and the keys
it may write under."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from dagster_incremental.cursor.spec import IncrementalSpec
from dagster_incremental.cursor.state import AssetState
from dagster_incremental.dagster import metadata as md
from dagster_incremental.dagster.asset_settings import AssetSettings
from dagster_incremental.dagster.run_plan import Plan
from dagster_incremental.dagster.state_store import full_refresh_instructions
from dagster_incremental.errors import CursorStateMismatch
from dagster_incremental.spark.write_spec import WindowReplace, WriteSpec


class Binding:
    """Binds an asset's cursors for a run's plan and says how its write replaces rows."""

    def __init__(self, settings: AssetSettings):
        self.settings = settings

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

    def check_write_keys(self, in_force: AssetState, plan: Plan) -> None:
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
