"""The live side of a bound run, which its filters (row_filter.py, spark_filter.py) read and
move: the range as keys, the cursor so far, the out-of-range flags and the cursor type they may
widen.

Why apart from the run (run.py): the run is what the asset function sees (public values, the
state it leaves); this is what the engine sees, in key space, behind the filters' protocol.
"""

from __future__ import annotations

from typing import Any

from dagster_incremental.cursor.boundary import DedupKey
from dagster_incremental.cursor.decide import CallableSpec, Cursor, RangeSpec
from dagster_incremental.cursor.definition import CursorDefinition
from dagster_incremental.cursor.row_errors import RowErrors
from dagster_incremental.cursor.run_start import RunStart
from dagster_incremental.cursor.run_type import RunType


class LiveCursor:
    """One run's cursor while rows pass: constant range (`start`), live `cursor` and flags."""

    def __init__(
        self, spec: CursorDefinition, types: RunType, start: RunStart, *, is_backfill: bool, stored_type: str | None
    ) -> None:
        self.spec, self.types, self.start = spec, types, start
        self.dedup_key: DedupKey = start.dedup_key
        self.is_backfill = is_backfill
        self.cursor: Cursor = start.cursor
        self.start_out_of_range = False
        self.end_out_of_range = False
        self._stored_type = stored_type

    @property
    def cursor_type(self) -> str | None:
        """The cursor type as it stands now (a filter may learn it from the rows)."""
        return self.types.value

    @cursor_type.setter
    def cursor_type(self, value: str | None) -> None:
        self.types.value = value

    def can_close(self) -> bool:
        """True once row_order says no more in-range rows can come (stop pulling pages)."""
        order = self.spec.row_order
        return (order == "asc" and self.end_out_of_range) or (order == "desc" and self.start_out_of_range)

    def adopt_type(self, detected: str | None, sample: Any, where: str) -> None:
        """Fix the cursor type from the data when nothing declared it (see RunType.adopt)."""
        self.types.adopt(detected, sample, where)

    def type_after(self, detected: str) -> str:
        """The cursor type adopt_type(detected) would give, without adopting it yet."""
        return self.types.after(detected)

    def public_of(self, value: Any) -> Any:
        """A stored (canonical) or raw value as a callable last_value_func compares it."""
        return self.types.public_of(value)

    def advance(self, cursor: Cursor, start_out_of_range: bool, end_out_of_range: bool) -> None:
        """Take the cursor after a batch (a detected "date" cursor may become "timestamp")."""
        self.cursor = cursor
        self.start_out_of_range |= start_out_of_range
        self.end_out_of_range |= end_out_of_range
        self.types.widen_for(cursor.last)

    @property
    def decision_inputs(self) -> RangeSpec:
        """The run's constants every filter needs, in key space (range, missing policy, dedup)."""
        return RangeSpec(direction=self.spec.direction, **self._bounds())

    @property
    def callable_spec(self) -> CallableSpec:
        """decision_inputs with the user's last_value_func, for a callable cursor."""
        return CallableSpec(func=self.spec.last_value_func, **self._bounds())  # type: ignore[arg-type]

    def _bounds(self) -> dict[str, Any]:
        start = self.start
        return {
            "start": start.start_key,
            "start_open": not start.start_closed,
            "end": start.end_key,
            "end_closed": start.end_closed,
            "on_missing": self.spec.on_cursor_value_missing,
            "dedup": start.dedup,
            "start_set": start.start_set,
        }

    @property
    def errors(self) -> RowErrors:
        """The errors a row can cause, worded from the cursor as it stands now."""
        return RowErrors(self.spec, self.types.value, self.dedup_key, self._stored_type)
