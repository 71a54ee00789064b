"""`python -m dagster_incremental state show|reset ASSET`: an asset's cursor without editing metadata.

Why: the cursor lives in two places (the table commit and Dagster's materialization,
docs/concurrency-and-guarantees.md "Where the cursor lives"); `show` prints both and the one the
next run continues from, `reset` records a runless materialization, the documented way to rewind or
seed a cursor (it wins over the table's copy; the next run's commit carries it into the table). A
reset while a run of the asset is queued or running is refused: that run would commit the cursor it
read before.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dagster_incremental.errors import IncrementalError

_BUSY = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


class StateCommandError(IncrementalError):
    """A state command that cannot be done as asked; the message says what to do instead."""


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        target = _Target.load(args.asset, args.module, args.partition)
        if args.command == "show":
            print(target.describe())
        else:
            print(target.reset(args.to, args.cursor))
    except IncrementalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dagster_incremental state",
                                     description="Show or reset an incremental asset's cursor.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("show", "print the cursor Dagster holds, the table holds, and the one in force"),
                       ("reset", "rewind or seed the cursor: back to initial_value, or to --to VALUE")):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("asset", help="asset key, parts joined with / (e.g. orders, shop/orders)")
        cmd.add_argument("-m", "--module", help="the code location's module (default: pyproject.toml's dg "
                         "project, as `dg` finds it)")
        cmd.add_argument("--partition", help="a partitioned asset's partition (its open partition has a cursor)")
        if name == "reset":
            cmd.add_argument("--to", help="the cursor's new last_value; the next run loads rows from it on "
                             "(default: initial_value, as a first run)")
            cmd.add_argument("--cursor", help="the incremental argument to reset, when the asset has several")
    return parser


def _default_module() -> str:
    """The module `dg` loads in this folder: [tool.dg.project] of ./pyproject.toml."""
    path = Path("pyproject.toml")
    project = {}
    if path.is_file():
        project = tomllib.loads(path.read_text()).get("tool", {}).get("dg", {}).get("project", {})
    if "code_location_target_module" in project:
        return project["code_location_target_module"]
    if "root_module" in project:
        return f"{project['root_module']}.definitions"
    raise StateCommandError(
        f"no code location given and {path.resolve()} names no dg project; pass the module that "
        "holds your Definitions: -m my_project.definitions"
    )


def _load_repository(module: str):
    from dagster._core.definitions.reconstruct import repository_def_from_target_def
    from dagster._core.workspace.autodiscovery import loadable_targets_from_python_module

    sys.path.insert(0, os.getcwd())  # as `dagster dev -m` does
    targets = loadable_targets_from_python_module(module, None)
    if not targets:
        raise StateCommandError(f"module {module} defines no Definitions; pass the right one with -m")
    return repository_def_from_target_def(targets[0].target_definition)


class _Target:
    """One asset (and partition) of a loaded code location, with its instance and IO manager."""

    def __init__(self, asset_name: str, asset, settings, repo, partition: str | None):
        self.name, self.asset, self.settings, self.repo, self.partition = asset_name, asset, settings, repo, partition
        self.key = asset.key

    @classmethod
    def load(cls, asset_name: str, module: str | None, partition: str | None) -> _Target:
        import dagster as dg

        from dagster_incremental.dagster.decorator import incremental_settings

        repo = _load_repository(module or _default_module())
        key = dg.AssetKey(asset_name.split("/"))
        asset = repo.assets_defs_by_key.get(key)
        if asset is None:
            known = ", ".join(sorted(k.to_user_string() for k in repo.assets_defs_by_key))
            raise StateCommandError(f"asset {asset_name!r} is not in the code location (it has: {known})")
        settings = incremental_settings(asset)
        if settings is None:
            raise StateCommandError(f"asset {asset_name!r} is not an @incremental_asset: it has no cursor")
        if (partition is None) != (settings.partitions_def is None):
            hint = _partition_hint(settings) if partition is None else "drop --partition"
            raise StateCommandError(f"asset {asset_name!r} is {'' if partition is None else 'not '}partitioned: {hint}")
        return cls(asset_name, asset, settings, repo, partition)

    # -- the two copies ------------------------------------------------------------------------

    def copies(self, instance):
        from dagster_incremental.dagster.state_store import latest_dagster_state, reconcile

        dagster = latest_dagster_state(instance, self.key, partition=self.partition)
        with self._io_manager() as io:
            table = io.committed_state(self.key, scope=self.partition)
            table_name = io.table_name(self.key).display
        return dagster, table, reconcile(dagster, table), table_name

    def _io_manager(self) -> _Resources:
        return _Resources(self.asset.get_io_manager_key_for_asset_key(self.key), self.repo)

    def describe(self) -> str:
        instance = _instance(self.name)
        dagster, table, chosen, table_name = self.copies(instance)
        where = f"asset {self.name}" + (f", partition {self.partition}" if self.partition else "")
        lines = [f"{where} (table {table_name}, Dagster instance {instance.root_directory})"]
        lines.append("  Dagster: " + (_state_line(dagster.state) + f"; {_origin(dagster.run_id, dagster.timestamp)}"
                                      if dagster is not None else "no materialization with a cursor"))
        lines.append("  table:   " + (_state_line(table.state) + f"; snapshot {table.snapshot_id}, "
                                      + _origin(table.run_id, table.committed_at)
                                      if table is not None and table.state is not None else "no commit with a cursor"))
        source = {"dagster": "Dagster's (a reset or seed wins over the table)" if chosen.run_id is None and dagster
                  else "Dagster's", "table": "the table's", "none": "none: it starts at initial_value"}[chosen.source]
        if dagster is not None and table is not None and chosen.source == "dagster" and chosen.run_id is not None:
            source = "both (they agree)"
        if chosen.overrules is not None:
            source += " (the table overrules a newer Dagster cursor: it was rolled back)"
        lines.append(f"  next run continues from: {source}")
        return "\n".join(lines)

    # -- reset ----------------------------------------------------------------------------------

    def reset(self, to: str | None, cursor: str | None) -> str:
        import dagster as dg

        from dagster_incremental.cursor.state import AssetState
        from dagster_incremental.dagster import metadata as md

        instance = _instance(self.name)
        self._refuse_if_running(instance)
        names = list(self.settings.cursors)
        if not names:
            raise StateCommandError(f"asset {self.name!r} has no incremental argument: nothing to reset")
        chosen_names = self._chosen(cursor, to, names)
        _, _, in_force, _ = self.copies(instance)
        current = AssetState.from_dict(in_force.state, names)
        new = {n: self._new_cursor(n, to) if n in chosen_names else current.cursor(n) for n in names}
        state = AssetState.of(new, current.write_keys).to_dict()
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=self.key, partition=self.partition,
            description="cursor reset with `python -m dagster_incremental state reset`",
            metadata={**md.state_metadata(state, names), md.MODE: dg.MetadataValue.text("incremental")},
        ))
        lines = [f"asset {self.name}: cursor reset; the next run continues from it:", self.describe()]
        if self.settings.disposition == "append":
            lines.append("  note: an append table keeps the rows it has: the next run appends the rows "
                         "from the new cursor on again (a full refresh rebuilds the table instead)")
        return "\n".join(lines)

    def _chosen(self, cursor: str | None, to: str | None, names: list[str]) -> list[str]:
        if cursor is not None and cursor not in names:
            raise StateCommandError(f"asset {self.name!r} has no incremental argument {cursor!r} (it has: {', '.join(names)})")
        if cursor is None and to is not None and len(names) > 1:
            raise StateCommandError(f"asset {self.name!r} has several cursors ({', '.join(names)}): "
                                    "say which one --to sets with --cursor NAME")
        return [cursor] if cursor is not None else names

    def _new_cursor(self, name: str, to: str | None):
        """The state a first run from `to` (else from initial_value) would start with."""
        spec = self.settings.cursors[name]
        primary_key = self.settings.primary_key or None
        first = spec.bind(None, inherited_primary_key=primary_key).cursor_state
        if to is None:
            return first
        try:
            moved = spec.replace(initial_value=to).bind(None, inherited_primary_key=primary_key).cursor_state
        except IncrementalError as exc:
            raise StateCommandError(f"asset {self.name!r}: --to {to!r}: {exc}") from None
        return replace(moved, initial_value=first.initial_value)

    def _refuse_if_running(self, instance) -> None:
        busy = [run.run_id for run in _runs_in_progress(instance) if self._targets(instance, run)]
        if busy:
            raise StateCommandError(
                f"asset {self.name!r} has a run in progress ({', '.join(busy)}); it would commit the "
                "cursor it read before the reset. Wait for it to finish (or cancel it), then reset again."
            )

    def _targets(self, instance, run) -> bool:
        if run.asset_selection is not None:
            return self.key in run.asset_selection
        plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id) if run.execution_plan_snapshot_id else None
        if plan is None:
            return True  # cannot tell: assume it does
        return any(step.key == self.asset.op.name for step in plan.steps)


class _Resources:
    """The IO manager of the asset, built as a run would build it (and torn down after)."""

    def __init__(self, key: str, repo):
        self.key, self.repo = key, repo

    def __enter__(self):
        import dagster as dg

        self._context = dg.build_resources({self.key: self.repo.get_top_level_resources()[self.key]})
        return getattr(self._context.__enter__(), self.key)

    def __exit__(self, *exc) -> None:
        self._context.__exit__(*exc)


def _runs_in_progress(instance):
    import dagster as dg

    return instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus[s] for s in _BUSY]))


def _instance(asset: str):
    import dagster as dg

    if not os.environ.get("DAGSTER_HOME"):
        raise StateCommandError(
            f"asset {asset!r}: DAGSTER_HOME is not set; set it to the folder of the Dagster instance "
            "your runs use (the example's: DAGSTER_HOME=$PWD/data/dagster_home)"
        )
    return dg.DagsterInstance.get()


def _state_line(state: Any) -> str:
    """Each cursor's last_value, and where the next run starts, in one readable line."""
    if not isinstance(state, dict):
        return f"state {json.dumps(state)}"
    parts = state.items() if all(isinstance(v, dict) or v is None for k, v in state.items() if k != "write_keys") and \
        "last_value" not in state else [(None, state)]
    out = []
    for name, part in parts:
        if name == "write_keys" or not isinstance(part, dict):
            continue
        label = f"{name}: " if name else ""
        out.append(f"{label}last_value {_text(part.get('last_value'))}")
    return ", ".join(out) or "no cursor"


def _text(value: Any) -> str:
    return "none (starts at initial_value)" if value is None else str(value)


def _origin(run_id: str | None, when: Any) -> str:
    who = f"run {run_id}" if run_id else "recorded without a run (a reset or seed)"
    return f"{who}, at {_iso(when)}"


def _iso(when: Any) -> str:
    from dagster_incremental.cursor.values import format_instant

    if isinstance(when, (int, float)):
        when = datetime.fromtimestamp(when, tz=timezone.utc)
    if isinstance(when, datetime):
        return format_instant(when.replace(microsecond=0) if when.tzinfo else when.replace(tzinfo=timezone.utc, microsecond=0))
    return "an unknown time"


def _partition_hint(settings) -> str:
    """Which --partition holds a live cursor: the open one, or each tenant's (its open day)."""
    if settings.tenants is None:
        return f"give --partition (its open partition, {settings.partitions_def.get_last_partition_key()}, has the live cursor)"
    from dagster_incremental.dagster.partition_scope import open_partition, tenant_keys

    keys = [open_partition(settings.tenants, settings.partitions_def, t)
            for t in tenant_keys(settings.tenants, settings.partitions_def)]
    return f"give --partition: each tenant has its own cursor ({', '.join(keys)})"
