"""The cursor as declared: `incremental(...)` -> a frozen, validated `IncrementalSpec`, and
`Incremental`, the type an asset's parameter is annotated with (the spec or its bound run).
"""

from __future__ import annotations

# Why two classes: dlt's `Incremental` is config, transform, state and scheduler at once. Here the
# spec is a frozen value (safe to share, to put in a signature default, to `replace`), and
# `spec.bind(state)` returns the run that owns the per-run mutable values. The checks live in
# `CursorDefinition` (definition.py), which the run reads; this module adds only the binding.
#
# Example:
#     spec = incremental("updated_at", initial_value="2024-01-01T00:00:00Z", primary_key="id")
#     run = spec.bind(previous_state)          # None on the first run
#     rows = run.filter(fetch(since=run.start_value))
#     save(rows, state=run.state)              # persist run.state together with the data

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dagster_incremental.cursor.definition import CursorDefinition, Incremental, normalise_pk
from dagster_incremental.cursor.run import IncrementalRun
from dagster_incremental.cursor.state import CursorState
from dagster_incremental.cursor.vocabulary import CursorType, LastValueFunc, OnCursorValueMissing, RangeBound, RowOrder

__all__ = ["Incremental", "IncrementalSpec", "incremental"]


@dataclass(frozen=True)
class IncrementalSpec(CursorDefinition, Incremental):
    """A validated cursor definition. Build it with `incremental(...)`; bind it per run.

    `primary_key=None` means "inherit the asset's primary key" (content hash if it has none);
    `()` disables boundary dedup. `cursor_type` (keyword extra): None = detect, else one of
    "timestamp", "date", "number", "string", "epoch_seconds", "epoch_millis" (numbers in rows are
    instants).
    """

    @property
    def start_value(self) -> Any:
        """start_value of a first run (no state): initial_value as the run would give it."""
        return self.bind(None).start_value

    @property
    def last_value(self) -> Any:
        return self.bind(None).last_value

    @property
    def is_backfill(self) -> bool:
        return self.end_value is not None

    @property
    def state(self) -> dict[str, Any] | None:
        """A spec has run nothing: no state."""
        return None

    def filter(self, items: Any) -> Any:
        raise TypeError(
            f"incremental({self.cursor_path!r}) is a cursor spec, not a run: filter with the bound run "
            "`spec.bind(state).filter(items)` (an asset's Incremental parameter already is one)."
        )

    def can_close(self) -> bool:
        return False

    def bind(
        self,
        state: Mapping[str, Any] | CursorState | None = None,
        *,
        window: tuple[Any, Any] | None = None,
        stateless: bool = False,
        inherited_primary_key: str | Sequence[str] | None = None,
        last_run: datetime | None = None,
    ) -> IncrementalRun:
        """Start a run from `state` (None on the first run); see IncrementalRun. `last_run`:
        when the run that left `state` committed (the asset layer knows it)."""
        return IncrementalRun(
            self,
            state,
            window=window,
            stateless=stateless,
            inherited_primary_key=inherited_primary_key,
            last_run=last_run,
        )


def incremental(
    cursor_path: str,
    initial_value: Any = None,
    end_value: Any = None,
    last_value_func: LastValueFunc | Callable[[Sequence[Any]], Any] = "max",
    primary_key: str | Sequence[str] | None = None,
    row_order: RowOrder | None = None,
    on_cursor_value_missing: OnCursorValueMissing = "raise",
    range_start: RangeBound = "closed",
    range_end: RangeBound = "open",
    lag: float | str | None = None,
    *,
    cursor_type: CursorType | None = None,
    step: str | float | None = None,
    datetime_format: str | None = None,
    cursor_datetime_formats: Sequence[str] | None = None,
) -> IncrementalSpec:
    """Define an incremental cursor (dlt's `dlt.sources.incremental` vocabulary and defaults).

    `step` (an ISO-8601 duration such as "P1D", or a number in lag's units) cuts a longer range
    into slices of at most `step`, each committed with its cursor as it is loaded.
    `datetime_format` / `cursor_datetime_formats` (Airbyte's): strptime formats of a string
    cursor column, tried in order (then ISO-8601), so its values compare as instants.
    """
    return IncrementalSpec(
        cursor_path=cursor_path,
        initial_value=initial_value,
        end_value=end_value,
        last_value_func=last_value_func,
        primary_key=normalise_pk(primary_key),
        row_order=row_order,
        on_cursor_value_missing=on_cursor_value_missing,
        range_start=range_start,
        range_end=range_end,
        lag=lag,
        cursor_type=cursor_type,
        step=step,
        datetime_format=datetime_format,
        cursor_datetime_formats=tuple(cursor_datetime_formats) if cursor_datetime_formats is not None else None,
    )

