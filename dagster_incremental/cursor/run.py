"""The bound run (`spec.bind(state)` -> `IncrementalRun`): it owns what changes during a run (live
last_value, boundary keys, out-of-range flags) and the state it leaves; rows meet it through its
filters (cursor/row_filter.py), which hand every input kind to decide.py.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import CONTENT, Boundary, DedupKey, _canonical
from dagster_incremental.cursor.decide import CallableSpec, Cursor, RangeSpec
from dagster_incremental.cursor.row_errors import RowErrors
from dagster_incremental.cursor.row_filter import RowFilter
from dagster_incremental.cursor.definition import CursorDefinition, Incremental, func_name, normalise_pk
from dagster_incremental.cursor.state import CursorState, StoredBoundary
from dagster_incremental.errors import IncrementalConfigError


class IncrementalRun(Incremental):
    """One run of a cursor: constant start/end, a live last_value, and the state to persist.

    Attributes for the asset / writer layer:
    - `start_value`, `end_value`, `last_value`, `initial_value` (public values: pendulum for
      instants and dates), `is_backfill`;
    - `boundary_unverified`: rows at `boundary_value` (= start_value) could not be checked against
      the stored boundary keys (overflowed, or dropped because the dedup key changed); they are all
      kept, and an append writer should anti-join them against the table;
    - `dedup_key`: ("id",) | "content" | () (disabled) — the key the boundary keys are made of;
    - `start_key` / `end_key` / `cursor_type` / `start_closed` / `end_closed`: the range in key
      space, for writers that push the range down themselves.
    """

    def __init__(
        self,
        spec: CursorDefinition,
        state: Mapping[str, Any] | CursorState | None,
        *,
        window: tuple[Any, Any] | None,
        stateless: bool,
        inherited_primary_key: str | Sequence[str] | None,
        last_run: datetime | None = None,
    ) -> None:
        self.spec = spec
        self._last_run = last_run
        self.cursor_path = spec.cursor_path
        stored = state if isinstance(state, CursorState) or state is None else CursorState.from_dict(state)
        self._given_state = stored
        self._is_backfill = spec.end_value is not None or (window is not None and stateless)
        if stateless and window is None and spec.end_value is None:
            raise IncrementalConfigError("bind(stateless=True) needs a window=(start, end) or an end_value.")
        spec.check_state(stored)
        self.cursor_type: str | None = spec.cursor_type_with(stored)
        self._type_explicit = spec.cursor_type is not None
        inherited = normalise_pk(inherited_primary_key, "inherited_primary_key") or None  # () = none
        self.dedup_key: DedupKey = (
            spec.primary_key
            if spec.primary_key is not None
            else (inherited if inherited is not None else CONTENT)
        )
        self._dedup = (
            self.dedup_key != ()
            and spec.range_start == "closed"
            and not self.is_backfill
            and spec.lag is None
        )
        self.start_out_of_range = False
        self.end_out_of_range = False
        self.boundary_unverified = False
        self._state_last: Any = None
        self._state_initial: Any = None
        self._resolve_range(stored, window)

    # -- binding ---------------------------------------------------------------------------------

    def _key(self, value: Any, what: str) -> Any:
        """A bound / state value as a key (for a callable: as the public value it compares)."""
        if self.spec.is_callable:
            return self._callable_public(value)
        if self.cursor_type is None:
            t = cv.detect_type(value)
            if t is None:
                raise IncrementalConfigError(f"{what}={value!r} cannot be a cursor value.")
            self.adopt_type(t, value, what)
        try:
            return cv.to_key(value, self.cursor_type, self.spec.formats)  # type: ignore[arg-type]
        except cv.KeyConversionError as e:
            raise IncrementalConfigError(
                f"{what}={value!r} is not comparable with the {self.cursor_type} cursor "
                f"{self.spec.cursor_path!r}: {e.reason}."
            ) from e

    def public_of(self, value: Any) -> Any:
        """A stored (canonical) or raw value as a callable last_value_func compares it."""
        return self._callable_public(value)

    def _callable_public(self, value: Any) -> Any:
        """Scalar values reach a callable last_value_func in public form (ISO strings and
        datetimes as pendulum instants), so it compares instants; other values stay as they are."""
        if value is None:
            return None
        t = self.cursor_type or cv.detect_type(value)
        if t is None or t == "string":
            return value
        if self.cursor_type is None:
            self.cursor_type = t
        try:
            return cv.key_to_public(cv.to_key(value, t, self.spec.formats), t)
        except cv.KeyConversionError:
            return value

    def _resolve_range(self, state: CursorState | None, window: tuple[Any, Any] | None) -> None:
        spec = self.spec
        if state is not None and state.initial_value is not None:
            self._state_initial = self._key(state.initial_value, "state initial_value")
        self._initial = None
        if spec.initial_value is not None:
            self._initial = (
                spec._initial_key if not spec.is_callable else self._key(spec.initial_value, "initial_value")
            )
        end_key = None
        if spec.end_value is not None:
            end_key = spec._end_key if not spec.is_callable else self._key(spec.end_value, "end_value")
        start, from_state = self._start_from(state)
        start_open, end_closed = spec.range_start == "open", spec.range_end == "closed"
        if window is not None:
            start, start_open, end_key, end_closed, from_state = self._clamp_to_window(
                window, start, start_open, end_key, end_closed, from_state
            )
        self.start_key = start
        self.end_key = end_key
        self.start_closed = not start_open
        self.end_closed = end_closed
        self._cursor = self._initial_cursor(state, start, self._start_boundary(state, start, from_state))

    def _initial_cursor(self, state: CursorState | None, start: Any, boundary: Boundary | None) -> Cursor:
        """The cursor before any row: at the start, or at the state's last_value when a window
        starts past it (a slice after slices without rows), so a window without rows leaves the
        state as it was: last_value stays the newest value loaded, never a bound."""
        behind = self._state_last
        if behind is None or start is None or self.spec.is_callable or self.spec.direction != "max" or behind >= start:
            return Cursor(start, boundary)
        if not self._dedup:
            return Cursor(behind, None)
        stored = self._stored_boundary(state)
        if stored is None or stored.value != behind:
            stored = Boundary(behind, frozenset(), True)  # keys unknown: the next run verifies them
        return Cursor(behind, stored)

    def _start_from(self, state: CursorState | None) -> tuple[Any, bool]:
        """(start key, whether it is the state's last_value): lag moves it back, not below the floor."""
        spec = self.spec
        if self.is_backfill or state is None or state.last_value is None:
            return self._initial, False
        self._state_last = self._key(state.last_value, "state last_value")
        start = self._state_last
        if spec.lag is not None and self.cursor_type is not None:
            floor = self._initial if self._initial is not None else self._state_initial
            if spec.is_callable:
                start = self._lagged_public(start, floor, self.cursor_type, spec.lag)
            else:
                start = cv.apply_lag(start, spec.lag, self.cursor_type, spec.direction, floor)
        return start, start == self._state_last

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
        ws_key = self._key(ws, "window start") if ws is not None else None
        we_key = self._key(we, "window end") if we is not None else None
        if ws_key is not None and (start is None or ws_key > start):
            start, start_open, from_state = ws_key, False, False
        if we_key is not None and (end_key is None or we_key <= end_key):
            end_key, end_closed = we_key, False
        return start, start_open, end_key, end_closed, from_state

    def _start_boundary(self, state: CursorState | None, start: Any, from_state: bool) -> Boundary | None:
        """The boundary the run starts with; sets the stored one to dedup against, if trusted."""
        self._start_set: Boundary | None = None
        if not self._dedup:
            return None
        if not from_state:
            return Boundary(start)
        stored = self._stored_boundary(state)
        if stored is not None and stored.value == start and not stored.overflow:
            self._start_set = stored
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
        value = self._key(b.value, "state boundary value")
        return Boundary(value, b.key_texts(state.version, self.dedup_key), b.overflow)

    # -- public values -----------------------------------------------------------------------------

    def _public(self, key: Any) -> Any:
        if key is None or self.spec.is_callable or self.cursor_type is None:
            return key
        return cv.key_to_public(key, self.cursor_type)

    def _canonical(self, key: Any) -> Any:
        if key is None:
            return None
        if self.spec.is_callable:
            t = self.cursor_type
            if t is not None and cv.detect_type(key) is not None:
                try:
                    return cv.key_to_canonical(cv.to_key(key, t), t)
                except cv.KeyConversionError:
                    pass
            return _canonical(key)
        if self.cursor_type is None:
            return _canonical(key)
        return cv.key_to_canonical(key, self.cursor_type)

    @property
    def start_value(self) -> Any:
        """Constant for the run: the previous last_value (lag-adjusted) or initial_value."""
        return self._public(self.start_key)

    @property
    def last_value(self) -> Any:
        """Live: start_value before any row (a window starting past the state's last_value: that
        last_value), then last_value_func over the kept values."""
        return self._public(self._cursor.last)

    @property
    def end_value(self) -> Any:
        return self._public(self.end_key)

    @property
    def initial_value(self) -> Any:
        """The spec's initial_value, else the one recorded in the state (still the lag floor)."""
        return self._public(self._initial if self._initial is not None else self._state_initial)

    @property
    def last_run(self) -> Any:
        """When the previous run of the asset committed the cursor this run continues from
        (pendulum, UTC), or None: a first run, a full refresh, a cursor reset by hand."""
        if self._last_run is None:
            return None
        import pendulum

        return pendulum.instance(self._last_run, tz="UTC").in_tz("UTC")

    @property
    def is_backfill(self) -> bool:
        """Bounded and stateless: an end_value, or a window bound with stateless=True."""
        return self._is_backfill

    @property
    def boundary_value(self) -> Any:
        """The cursor value whose rows could not be verified (see boundary_unverified), or None."""
        return self.start_value if self.boundary_unverified else None

    @property
    def boundary(self) -> Boundary | None:
        return self._cursor.boundary

    def can_close(self) -> bool:
        """True once row_order says no more in-range rows can come (stop pulling pages)."""
        order = self.spec.row_order
        return (order == "asc" and self.end_out_of_range) or (order == "desc" and self.start_out_of_range)

    @property
    def state(self) -> dict[str, Any] | None:
        """The JSON-serialisable state to persist; for a backfill, the state given to bind."""
        typed = self.cursor_state
        return typed.to_dict() if typed is not None else None

    @property
    def cursor_state(self) -> CursorState | None:
        """`state` as the typed value (what the asset layer stores)."""
        if self.is_backfill:
            return self._given_state
        spec = self.spec
        last = self._cursor.last
        if self._state_last is not None and (
            last is None
            or (spec.direction == "max" and not spec.is_callable and last < self._state_last)
            or (spec.direction == "min" and not spec.is_callable and last > self._state_last)
        ):
            last = self._state_last  # lag or a window never move the state backwards
        elif spec.is_callable and spec.lag is not None and last is not None and self._state_last is not None:
            last = spec.function((last, self._state_last))  # nor does lag with a callable
        initial = self._state_initial if self._state_initial is not None else self._initial
        boundary = self._cursor.boundary
        stored = None
        if self._dedup and boundary is not None and boundary.value is not None and boundary.value == last:
            stored = StoredBoundary.of(self._canonical(boundary.value), boundary.keys, boundary.overflow, self.dedup_key)
        return CursorState(
            cursor_path=spec.cursor_path,
            cursor_type=self.cursor_type,
            last_value_func=func_name(spec.last_value_func),
            initial_value=self._canonical(initial),
            last_value=self._canonical(last),
            start_value=self._canonical(self.start_key),
            dedup_key=self.dedup_key,
            boundary=stored,
        )

    # -- types ---------------------------------------------------------------------------------

    def adopt_type(self, detected: str | None, sample: Any, where: str) -> None:
        """Fix the cursor type from the data when nothing declared it; an inferred "date"
        (from a date initial_value) becomes "timestamp" when the rows carry timestamps."""
        if detected is None:
            return
        if self.cursor_type is None:
            error = None if self.spec.is_callable else self.spec.lag_error(
                detected, f" (first value {sample!r} in {where})")
            if error is not None:
                raise error
            self.cursor_type = detected
        elif self.cursor_type == "date" and detected == "timestamp" and not self._type_explicit:
            self.cursor_type = "timestamp"

    # -- filtering (cursor/row_filter.py) --------------------------------------------------------

    def filter(self, items: Any) -> Any:
        """Keep the in-range, not-yet-loaded rows of `items`, in the same kind as given.

        dict rows, an iterable of dict rows or of pages -> a list of dicts; a pyarrow Table or
        RecordBatch -> the same; a pandas DataFrame -> a DataFrame; a pyspark DataFrame -> a lazy
        DataFrame; an iterable of tables or frames -> one table or frame. Iterables are pulled
        lazily and no further once can_close() (row_order), so an endless generator ends. Can be
        called many times per run; the live state carries over.
        """
        return RowFilter(self).filter(items)

    def filter_batches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Filter an iterable of batches lazily; stop pulling once can_close() (row_order).

        Batches are pages, tables, frames or single dict rows (these are grouped in chunks of
        row_filter.DICT_CHUNK). Empty local results are not yielded; Spark frames always are (lazy).
        """
        return RowFilter(self).filter_batches(batches)

    # -- what a filter engine outside this module (the Spark filter) reads and reports ----------------

    @property
    def decision_inputs(self) -> RangeSpec:
        """The run's constants every filter needs, in key space (range, missing policy, dedup)."""
        return RangeSpec(direction=self.spec.direction, **self._bounds())

    @property
    def cursor(self) -> Cursor:
        """The live cursor: last_value so far (a key) and the boundary of that value."""
        return self._cursor

    def type_after(self, detected: str) -> str:
        """The cursor type adopt_type(detected) would give, without adopting it yet."""
        ctype = self.cursor_type
        if ctype is None or (ctype == "date" and detected == "timestamp" and not self._type_explicit):
            return detected
        return ctype

    def advance(self, cursor: Cursor, start_out_of_range: bool, end_out_of_range: bool) -> None:
        """Take the cursor after a batch. A detected (not declared) "date" cursor whose values
        carry a time of day becomes "timestamp": storing a truncated date would re-read rows."""
        self._cursor = cursor
        self.start_out_of_range |= start_out_of_range
        self.end_out_of_range |= end_out_of_range
        last = cursor.last
        if (
            self.cursor_type == "date"
            and not self._type_explicit
            and isinstance(last, int)
            and last % 86_400_000_000
        ):
            self.cursor_type = "timestamp"

    def _bounds(self) -> dict[str, Any]:
        return {
            "start": self.start_key,
            "start_open": not self.start_closed,
            "end": self.end_key,
            "end_closed": self.end_closed,
            "on_missing": self.spec.on_cursor_value_missing,
            "dedup": self._dedup,
            "start_set": self._start_set,
        }

    @property
    def callable_spec(self) -> CallableSpec:
        """decision_inputs with the user's last_value_func, for a callable cursor."""
        return CallableSpec(func=self.spec.last_value_func, **self._bounds())  # type: ignore[arg-type]

    @property
    def errors(self) -> RowErrors:
        """The errors a row can cause, worded from the cursor as it stands now."""
        stored = self._given_state.cursor_type if self._given_state is not None else None
        return RowErrors(self.spec, self.cursor_type, self.dedup_key, stored)
