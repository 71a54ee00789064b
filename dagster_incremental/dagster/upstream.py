"""Downstream assets that read an upstream table's changes: the Dagster side.

A parameter annotated `Changes` names an upstream asset (its own name, or `changes_of(...)`).
The asset depends on it (lineage, automation), each run reads what the upstream committed
since the snapshot in this asset's cursor, and the cursor it commits with its own rows is the
upstream snapshot it read up to: `state["upstream"][<parameter>]`, shown with the state in the UI.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from dagster_incremental.cursor.state import UPSTREAM, AssetState, UpstreamPosition
from dagster_incremental.cursor.upstream import Changes, UpstreamOf, UpstreamRead, cut_read, plan_read
from dagster_incremental.errors import IncrementalError

# A transformation of an upstream's changes rarely outgrows them: collected to Arrow up to this
# many rows, its write takes the local merge (see bench/README.md, the chain).
SMALL_CHANGE_ROWS = 200_000
ALL_ROWS = 2**62  # rows_written's bound when every row is counted


def is_changes_param(param: inspect.Parameter) -> bool:
    annotation = param.annotation
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "Changes"
    return annotation is Changes or isinstance(param.default, UpstreamOf)


def changes_params(func) -> dict[str, dg.AssetKey]:
    """Each `Changes` parameter of `func` and the upstream asset it reads."""
    out = {}
    for param in inspect.signature(func).parameters.values():
        if is_changes_param(param):
            path = param.default.asset if isinstance(param.default, UpstreamOf) else (param.name,)
            out[param.name] = dg.AssetKey(list(path))
    return out


class UpstreamInputs:
    """The `Changes` parameters of one asset function: what each run reads and records."""

    def __init__(self, func):
        self.keys = changes_params(func)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def plan(self, io, state: Mapping[str, Any] | None, restart: bool,
             commits_per_slice: int | None = None) -> list[dict[str, UpstreamRead]]:
        """What each slice of the run reads of each parameter's upstream: from the cursor in
        `state` (everything when `restart`) to the upstream's current snapshot, cut into reads
        of at most `commits_per_slice` upstream commits (one upstream, checked at definition)."""
        from dagster_incremental.spark.upstream_changes import check_same_table

        cursors = {} if restart or not state else (state.get(UPSTREAM) or {})
        reads, changes = {}, io.upstream_changes()
        for name, key in self.keys.items():
            table = io.table_name(key)
            history, current = changes.snapshot_history(io.spark, table)
            if current is None:
                raise IncrementalError(
                    f"upstream asset {key.to_user_string()} (parameter {name!r}) has no table {table.display} "
                    "yet, or it has no commit: materialize it first."
                )
            cursor = cursors.get(name) or {}
            identity = changes.table_id(table)
            check_same_table(table, identity, cursor.get("table_id"), cursor.get("snapshot_id"))
            read = plan_read(table.display, history, current, cursor.get("snapshot_id"))
            reads[name] = dataclasses.replace(read, table_id=identity)
        if len(reads) != 1:
            return [reads]
        name, read = next(iter(reads.items()))
        return [{name: part} for part in cut_read(read, commits_per_slice)]

    def read(self, context, io, reads: Mapping[str, UpstreamRead],
             window: tuple[Any, Any, str] | None = None) -> dict[str, Changes]:
        """Each parameter's changes as `reads` plans them; window (start, end, column): only the
        changed rows whose column lies in [start, end)."""
        from dagster_incremental.spark.upstream_changes import read_changes, rows_in_window

        out, changes = {}, io.upstream_changes()
        for name, read in reads.items():
            table = io.table_name(self.keys[name])
            context.log.info(
                f"{name}: nothing new in {table.display} since snapshot {read.end}" if read.kind == "none" else
                f"{name}: {read.kind} read of {table.display} from snapshot {read.start} to {read.end}"
                + (f" ({len(read.commits)} commits)" if read.commits else "")
            )
            frame = read_changes(changes, io.spark, table, read)
            if window is not None:
                frame = rows_in_window(frame, table, *window)
            out[name] = Changes(
                table.display, read.kind, read.start, read.end,
                df=frame, table=changes.table_at(io.spark, table, read.end), table_id=read.table_id,
            )
        return out

    def rows_to_collect(self, io, reads: Mapping[str, UpstreamRead]) -> int:
        """How many rows of the function's Spark output to collect for the local write: none on
        a first run or full refresh (every upstream row) nor when the commits read touched more
        than SMALL_CHANGE_ROWS rows (the output would then be computed twice: collected in
        vain, then written by Spark), else up to SMALL_CHANGE_ROWS."""
        changes = io.upstream_changes()
        if not reads or any(read.kind == "full" for read in reads.values()):
            return 0
        written = 0
        for name, read in reads.items():
            written += changes.rows_written(io.spark, io.table_name(self.keys[name]), read.commits, SMALL_CHANGE_ROWS - written)
        return SMALL_CHANGE_ROWS if written <= SMALL_CHANGE_ROWS else 0

    def described(self, io, reads: Sequence[Mapping[str, UpstreamRead]]) -> dict[str, dict[str, Any]]:
        """What a run read of each upstream, as a person reads it (the cursor state stores only
        the snapshot id): the upstream snapshot read up to, when it was committed, and the rows
        read (a full read: the rows the upstream held at that snapshot; else the rows the
        commits read added or deleted, by their summaries)."""
        from dagster_incremental.cursor.values import format_instant

        out, changes = {}, io.upstream_changes()
        for name, key in self.keys.items():
            parts = [per_slice[name] for per_slice in reads if name in per_slice]
            if not parts:
                continue
            table, end = io.table_name(key), parts[-1].end
            full = any(part.kind == "full" for part in parts)
            at_ms, total = changes.snapshot_facts(io.spark, table, end, rows=full) if end is not None else (None, None)
            rows = total if full else _rows_written(changes, io.spark, table, parts)
            committed = datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc) if at_ms is not None else None
            out[name] = {
                "table": table.display,
                # text: Dagster's UI shows JSON numbers past 2**53 rounded, and a snapshot id is 64 bits
                "snapshot_id": str(end) if end is not None else None,
                "snapshot_committed_at": format_instant(committed) if committed is not None else None,
                "read": "nothing new" if all(part.kind == "none" for part in parts) else
                        ", ".join(dict.fromkeys(part.kind for part in parts if part.kind != "none")),
                "rows_read": rows,
            }
        return out

    def record(self, state: AssetState | None, changes: Mapping[str, Changes]) -> AssetState | None:
        """`state` with each parameter's cursor: the upstream snapshot read up to."""
        if not changes or state is None:
            return state
        return dataclasses.replace(state, upstream={
            name: UpstreamPosition(c.upstream, c.end_snapshot_id, c.table_id or None) for name, c in changes.items()
        })


def _rows_written(changes: Any, spark: Any, table: Any, parts: Sequence[UpstreamRead]) -> int | None:
    """Rows the reads' commits added or deleted; None where a commit's files carry no row count
    (rows_written is then past its bound: a count, not the bound, is what the metadata shows)."""
    total = sum(changes.rows_written(spark, table, part.commits, ALL_ROWS) for part in parts)
    return total if total <= ALL_ROWS else None


def check_upstream_supported(inputs: UpstreamInputs, settings, sliced: str | None) -> None:
    """What a `Changes` parameter does not combine with yet fails at definition, named."""
    from dagster_incremental.errors import IncrementalConfigError

    if not inputs:
        if settings.upstream_commits_per_slice is not None:
            raise IncrementalConfigError(
                f"asset {settings.name!r}: upstream_commits_per_slice cuts runs that read an upstream's Changes, "
                "and this asset has no Changes argument: remove upstream_commits_per_slice (step cuts a cursor's runs)"
            )
        return
    names = ", ".join(inputs.keys)
    if settings.partitions_def is not None and not isinstance(settings.partitions_def, dg.TimeWindowPartitionsDefinition):
        raise IncrementalConfigError(
            f"asset {settings.name!r}: Changes parameters ({names}) are read by unpartitioned assets and by "
            "time-window partitions only; remove partitions_def, or read the upstream as a DataFrame input instead"
        )
    if settings.partitions_def is not None and settings.window_column is None:
        raise IncrementalConfigError(
            f"asset {settings.name!r}: a partitioned asset reading Changes ({names}) needs window_column, the "
            "column of the upstream's rows (and of this asset's) whose value places a row in a window, e.g. "
            'window_column="order_day" (decorator) or window_column = "order_day" in [assets.'
            f"{settings.name}]"
        )
    if sliced is not None:
        raise IncrementalConfigError(
            f"asset {settings.name!r}: step on argument {sliced!r} cannot cut a run that reads Changes ({names}); "
            "remove step (upstream_commits_per_slice cuts such a run by upstream commits)"
        )
    if settings.upstream_commits_per_slice is not None and (len(inputs.keys) > 1 or settings.cursors):
        raise IncrementalConfigError(
            f"asset {settings.name!r}: upstream_commits_per_slice cuts the runs of an asset whose only cursor is "
            f"one Changes argument, and this asset has {_other_cursors(inputs, settings)}: remove "
            "upstream_commits_per_slice"
        )


def _other_cursors(inputs: UpstreamInputs, settings) -> str:
    if settings.cursors:
        return f"the incremental argument(s) {', '.join(settings.cursors)}"
    return f"several Changes arguments ({', '.join(inputs.keys)})"
