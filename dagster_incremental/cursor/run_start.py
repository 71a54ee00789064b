"""Where a bound run starts, decided once at `bind`: its range in key space (the state's
last_value moved back by lag, else initial_value; narrowed to a partition window), the cursor
before any row and the boundary keys rows at the start value are checked against.

Why apart from the run (run.py): this is the one place that reads the stored state's values;
the run then only moves forward from what it decides.
"""

from __future__ import annotations

from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import Boundary, DedupKey
from dagster_incremental.cursor.decide import Cursor
from dagster_incremental.cursor.definition import CursorDefinition
from dagster_incremental.cursor.run_type import RunType
from dagster_incremental.cursor.state import CursorState
from dagster_incremental.errors import IncrementalConfigError


class RunStart:
    """The start of one run: `start_key`/`end_key`/`start_closed`/`end_closed` (the range),
    `cursor` (before any row), `start_set` (the stored boundary to dedup against, if trusted),
    `boundary_unverified`, and the state's `state_last` / `state_initial` and the spec's
    `initial`, as keys."""

    def __init__(
        self,
        spec: CursorDefinition,
        state: CursorState | None,
        window: tuple[Any, Any] | None,
        *,
        types: RunType,
        dedup_key: DedupKey,
        dedup: bool,
        is_backfill: bool,
    ) -> None:
        self.spec, self.types = spec, types
        self.dedup_key, self.dedup, self.is_backfill = dedup_key, dedup, is_backfill
        self.boundary_unverified = False
        self.start_set: Boundary | None = None
        self.state_last: Any = None
        self.state_initial: Any = None
        if state is not None and state.initial_value is not None:
            self.state_initial = types.key(state.initial_value, "state initial_value")
        self.initial: Any = None
        if spec.initial_value is not None:
            self.initial = spec._initial_key if not spec.is_callable else types.key(spec.initial_value, "initial_value")
        end_key = None
        if spec.end_value is not None:
            end_key = spec._end_key if not spec.is_callable else types.key(spec.end_value, "end_value")
        start, from_state = self._start_from(state)
        start_open, end_closed = spec.range_start == "open", spec.range_end == "closed"
        if window is not None:
            start, start_open, end_key, end_closed, from_state = self._clamp_to_window(
                window, start, start_open, end_key, end_closed, from_state
            )
        self.start_key, self.end_key = start, end_key
        self.start_closed, self.end_closed = not start_open, end_closed
        self.cursor = self._initial_cursor(state, start, self._start_boundary(state, start, from_state))

    def _initial_cursor(self, state: CursorState | None, start: Any, boundary: Boundary | None) -> Cursor:
        """The cursor before any row: at the start, or at the state's last_value when a window
        starts past it (a slice after slices without rows), so a window without rows leaves the
        state as it was: last_value stays the newest value loaded, never a bound."""
        behind = self.state_last
        if behind is None or start is None or self.spec.is_callable or self.spec.direction != "max" or behind >= start:
            return Cursor(start, boundary)
        if not self.dedup:
            return Cursor(behind, None)
        stored = self._stored_boundary(state)
        if stored is None or stored.value != behind:
            stored = Boundary(behind, frozenset(), True)  # keys unknown: the next run verifies them
        return Cursor(behind, stored)

    def _start_from(self, state: CursorState | None) -> tuple[Any, bool]:
        """(start key, whether it is the state's last_value): lag moves it back, not below the floor."""
        spec = self.spec
        if self.is_backfill or state is None or state.last_value is None:
            return self.initial, False
        self.state_last = self.types.key(state.last_value, "state last_value")
        start = self.state_last
        ctype = self.types.value
        if spec.lag is not None and ctype is not None:
            floor = self.initial if self.initial is not None else self.state_initial
            if spec.is_callable:
                start = self._lagged_public(start, floor, ctype, spec.lag)
            else:
                start = cv.apply_lag(start, spec.lag, ctype, spec.direction, floor)
        return start, start == self.state_last

    def _lagged_public(self, value: Any, floor: Any, ctype: str, lag: float | str) -> Any:
        """lag for a callable last_value_func, whose values are public: moved back in the
        values' own order (a callable counts as "max", as for row_order), not below `floor`."""
        error = self.spec.lag_error(ctype)
        if error is not None:
            raise error
        keys = [cv.to_key(v, ctype, self.spec.formats) if v is not None else None for v in (value, floor)]
        if keys[0] is None:
            return None
        return cv.key_to_public(cv.apply_lag(keys[0], lag, ctype, "max", keys[1]), ctype)

    def _clamp_to_window(
        self, window: tuple[Any, Any], start: Any, start_open: bool, end_key: Any, end_closed: bool, from_state: bool
    ) -> tuple[Any, bool, Any, bool, bool]:
        """The range narrowed to a partition window: its start inclusive, its end exclusive."""
        if self.spec.is_callable or self.spec.direction != "max":
            raise IncrementalConfigError(
                "bind(window=...) needs last_value_func='max' (windows are time ranges going up)."
            )
        ws, we = window
        ws_key = self.types.key(ws, "window start") if ws is not None else None
        we_key = self.types.key(we, "window end") if we is not None else None
        if ws_key is not None and (start is None or ws_key > start):
            start, start_open, from_state = ws_key, False, False
        if we_key is not None and (end_key is None or we_key <= end_key):
            end_key, end_closed = we_key, False
        return start, start_open, end_key, end_closed, from_state

    def _start_boundary(self, state: CursorState | None, start: Any, from_state: bool) -> Boundary | None:
        """The boundary the run starts with; sets the stored one to dedup against, if trusted."""
        if not self.dedup:
            return None
        if not from_state:
            return Boundary(start)
        stored = self._stored_boundary(state)
        if stored is not None and stored.value == start and not stored.overflow:
            self.start_set = stored
            return stored
        self.boundary_unverified = True
        return Boundary(start, frozenset(), True)

    def _stored_boundary(self, state: CursorState | None) -> Boundary | None:
        """The state's boundary if it can be trusted: same dedup key. A state whose dedup_key
        differs keeps its last_value but loses its boundary keys (rows at the start value are then
        all kept and flagged `boundary_unverified`)."""
        if state is None or state.boundary is None or state.dedup_key != self.dedup_key:
            return None
        b = state.boundary
        if b.value is None:
            return None
        value = self.types.key(b.value, "state boundary value")
        return Boundary(value, b.key_texts(state.version, self.dedup_key), b.overflow)
