"""The bound run (`spec.bind(state)` -> `IncrementalRun`): it owns what changes during a run (live
last_value, boundary keys, out-of-range flags) and filters every input kind through decide.py.
"""

from __future__ import annotations

import sys
from datetime import datetime
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import CONTENT, Boundary, DedupKey, _canonical, row_dedup_key
from dagster_incremental.cursor.decide import CallableSpec, Cursor, Decision, RangeSpec, decide, decide_callable
from dagster_incremental.cursor.paths import MISSING
from dagster_incremental.cursor.row_errors import RowErrors
from dagster_incremental.cursor.spark_filter import filter_spark
from dagster_incremental.cursor.definition import CursorDefinition, Incremental, func_name, normalise_pk
from dagster_incremental.cursor.state import CursorState, StoredBoundary
from dagster_incremental.errors import CursorStateMismatch, IncrementalConfigError, PrimaryKeyMissing

DICT_CHUNK = 1000  # single dict rows from filter_batches are filtered in chunks of this size


def _is_spark_df(obj: Any) -> bool:
    t = type(obj)
    return t.__name__ == "DataFrame" and t.__module__.startswith("pyspark.sql")


def _is_pandas_df(obj: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def _concat(batches: Iterable[Any]) -> Any:
    """The kept rows of filter_batches as one value: dict rows as a list, tables concatenated."""
    parts = list(batches)
    if all(isinstance(p, list) for p in parts):
        return [row for part in parts for row in part]
    if all(isinstance(p, (pa.Table, pa.RecordBatch)) for p in parts):
        return pa.concat_tables([pa.Table.from_batches([p]) if isinstance(p, pa.RecordBatch) else p for p in parts])
    if all(_is_pandas_df(p) for p in parts):
        return sys.modules["pandas"].concat(parts, ignore_index=True)
    kinds = sorted({type(p).__name__ for p in parts})
    raise TypeError(f"filter() got an iterable of mixed kinds ({', '.join(kinds)}): give one kind, or use filter_batches.")


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
        self._check_state(stored)
        self.cursor_type: str | None = self._resolve_type(stored)
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

    def _check_state(self, state: CursorState | None) -> None:
        """A minimal state ({"last_value": ...}, e.g. written by hand) is accepted; whatever
        identity fields a state has must match the spec."""
        if state is None:
            return
        spec = self.spec
        changes = []
        if state.recorded("cursor_path") and state.cursor_path != spec.cursor_path:
            changes.append(f"cursor_path {state.cursor_path!r} -> {spec.cursor_path!r}")
        func = func_name(spec.last_value_func)
        if state.recorded("last_value_func") and state.last_value_func != func:
            changes.append(f"last_value_func {state.last_value_func!r} -> {func!r}")
        stype = state.cursor_type
        if spec._type is not None and stype is not None and stype != spec._type:
            inferred_temporal = spec.cursor_type is None and {stype, spec._type} <= {"date", "timestamp"}
            if not inferred_temporal:
                changes.append(f"cursor_type {stype!r} -> {spec._type!r}")
        if changes:
            raise CursorStateMismatch(
                "The stored cursor state was made by a different cursor definition ("
                + "; ".join(changes)
                + "): its last_value cannot be used. Run a full refresh (replace the table and drop "
                "the stored state), or restore the previous definition.",
                changed=[c.split(" ", 1)[0] for c in changes],
            )

    def _resolve_type(self, state: CursorState | None) -> str | None:
        spec = self.spec
        if spec.cursor_type is not None:
            return spec.cursor_type
        stype = state.cursor_type if state else None
        if spec._type is not None:
            if spec._type == "date" and stype == "timestamp":
                return "timestamp"
            return spec._type
        error = spec.lag_error(stype, f" (the stored state says the cursor is a {stype})")
        if error is not None:
            raise error
        return stype

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

    # -- filtering -------------------------------------------------------------------------------

    def filter(self, items: Any) -> Any:
        """Keep the in-range, not-yet-loaded rows of `items`, in the same kind as given.

        dict rows, an iterable of dict rows or of pages -> a list of dicts; a pyarrow Table or
        RecordBatch -> the same; a pandas DataFrame -> a DataFrame; a pyspark DataFrame -> a lazy
        DataFrame; an iterable of tables or frames -> one table or frame. Iterables are pulled
        lazily and no further once can_close() (row_order), so an endless generator ends. Can be
        called many times per run; the live state carries over.
        """
        if _is_spark_df(items):
            return filter_spark(self, items)
        if isinstance(items, pa.Table):
            return self._filter_arrow(items)
        if isinstance(items, pa.RecordBatch):
            return self._filter_arrow(items)
        if _is_pandas_df(items):
            return self._filter_pandas(items)
        if isinstance(items, Mapping):
            return self._filter_rows([items])
        if isinstance(items, (list, tuple)) and all(isinstance(item, Mapping) for item in items):
            return self._filter_rows(list(items))  # one page
        if isinstance(items, Iterable) and not isinstance(items, (str, bytes)):
            # Pulled lazily, so row_order can stop an endless source (filter_batches stops pulling).
            return _concat(self.filter_batches(items))
        raise TypeError(
            f"filter() cannot take a {type(items).__name__}: give dict rows, pages of dict rows, a "
            "pyarrow Table/RecordBatch, a pandas DataFrame or a pyspark DataFrame."
        )

    def filter_batches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Filter an iterable of batches lazily; stop pulling once can_close() (row_order).

        Batches are pages, tables, frames or single dict rows (these are grouped in chunks of
        DICT_CHUNK). Empty local results are not yielded; Spark frames always are (lazy).
        """
        pending: list[Any] = []
        for item in batches:
            if isinstance(item, Mapping):
                pending.append(item)
                if len(pending) < DICT_CHUNK:
                    continue
                out = self._filter_rows(pending)
                pending = []
            else:
                if pending:
                    out_rows = self._filter_rows(pending)
                    pending = []
                    if out_rows:
                        yield out_rows
                    if self.can_close():
                        return
                out = self.filter(item)
            if _is_spark_df(out) or len(out):
                yield out
            if self.can_close():
                return
        if pending:
            out = self._filter_rows(pending)
            if out:
                yield out

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

    def _callable_spec(self) -> CallableSpec:
        return CallableSpec(func=self.spec.last_value_func, **self._bounds())  # type: ignore[arg-type]

    def _apply(self, decision: Decision) -> np.ndarray:
        self.advance(decision.cursor, decision.start_out_of_range, decision.end_out_of_range)
        return decision.keep

    @property
    def errors(self) -> RowErrors:
        """The errors a row can cause, worded from the cursor as it stands now."""
        stored = self._given_state.cursor_type if self._given_state is not None else None
        return RowErrors(self.spec, self.cursor_type, self.dedup_key, stored)

    # -- per kind: each builds one key array and hands it to decide.decide ---------------------

    def _keep(
        self,
        keys: pa.Array,
        rows_at: Callable[[np.ndarray], list[Any]],
        null_error: Callable[[int], Exception],
    ) -> np.ndarray:
        """decide.decide for one batch; `rows_at(indices)` gives rows to key (only boundary rows)."""
        dk = self.dedup_key

        def dedup_keys(idx: np.ndarray) -> list[str]:
            return self._dedup_keys(dk, idx, rows_at(idx))

        return self._apply(decide(keys, self.decision_inputs, self._cursor, dedup_keys, null_error))

    def _dedup_keys(self, dk: DedupKey, idx: np.ndarray, rows: list[Any]) -> list[str]:
        """The primary-key texts of rows at the start value; a row without the key is named."""
        out = []
        for i, r in zip(idx, rows, strict=True):
            try:
                out.append(row_dedup_key(r, dk, where=f"row {i}"))
            except PrimaryKeyMissing as exc:
                columns = list(r) if isinstance(r, Mapping) else []
                raise self.errors.key_missing_error(exc.columns, columns, f"row {i}", r) from None
        return out

    def _filter_rows(self, rows: list[Any]) -> list[Any]:
        return [rows[i] for i in self._row_indices(rows)] if rows else []

    def _row_indices(self, rows: list[Any]) -> np.ndarray:
        """Indices of the kept dict rows: cursor values extracted once, then one key array."""
        path = self.spec.path
        values = [row if path.is_whole_row else path.extract(row) for row in rows]

        def rows_at(idx: np.ndarray) -> list[Any]:
            return [rows[i] for i in idx]

        def null_error(i: int) -> Exception:
            if all(v is MISSING for v in values) and isinstance(rows[i], Mapping):
                return self.errors.absent_column_error(list(dict.fromkeys(k for r in rows for k in r)), rows[i])
            return self.errors.missing_error(rows[i], values[i] is MISSING, f"row {i}")

        if self.spec.is_callable:
            return np.flatnonzero(self._decide_callable(values, rows, rows_at, null_error))
        plain = [None if v is MISSING else v for v in values]
        keys = self._python_keys(plain, rows.__getitem__)
        return np.flatnonzero(self._keep(keys, rows_at, null_error))

    def _python_keys(self, plain: list[Any], row_at: Callable[[int], Any]) -> pa.Array:
        """Python cursor values (None for missing) as keys, detecting the type if needed."""
        if self.cursor_type is None or self.cursor_type == "date":
            i = next((i for i, v in enumerate(plain) if v is not None), None)
            if i is not None:
                detected = cv.detect_type(plain[i])
                if detected is None:
                    raise self.errors.type_error(plain[i], row_at(i), f"row {i}", "it is not a scalar cursor value")
                self.adopt_type(detected, plain[i], f"row {i}")
        if self.cursor_type is None:
            return pa.nulls(len(plain), pa.int64())
        try:
            return cv.values_to_keys(plain, self.cursor_type, formats=self.spec.formats)
        except cv.KeyConversionError as e:
            i = e.index or 0
            raise self.errors.type_error(e.value, row_at(i), f"row {i}", e.reason) from None

    def _arrow_keys(self, col: pa.Array, row_at: Callable[[int], Any]) -> pa.Array:
        """An Arrow cursor column as keys (vectorised), detecting the type if needed."""
        if (self.cursor_type is None or self.cursor_type == "date") and col.null_count < len(col):
            detected = cv.detect_arrow_type(col)
            if detected is None:
                i = pc.indices_nonzero(col.is_valid())[0].as_py()
                raise self.errors.type_error(
                    col[i].as_py(), row_at(i), f"row {i}", f"a {col.type} column cannot be a cursor"
                )
            self.adopt_type(detected, None, "the table")
        if self.cursor_type is None:
            return pa.nulls(len(col), pa.int64())
        try:
            return cv.arrow_to_keys(col, self.cursor_type, self.spec.formats)
        except cv.KeyConversionError as e:
            i = e.index or 0
            raise self.errors.type_error(e.value, row_at(i), f"row {i}", e.reason) from None

    def _decide_callable(self, values, rows, rows_at, null_error) -> np.ndarray:
        """Values go to the user's function in public form (ISO strings as pendulum instants)."""
        ctype = self.cursor_type
        if ctype is None:
            first = next((v for v in values if v is not MISSING and v is not None), None)
            ctype = cv.detect_type(first) if first is not None else None
            if ctype is not None and ctype != "string":
                self.cursor_type = ctype
        if ctype not in (None, "string"):
            public = []
            for i, v in enumerate(values):
                if v is MISSING or v is None:
                    public.append(v)
                    continue
                try:
                    public.append(cv.key_to_public(cv.to_key(v, ctype, self.spec.formats), ctype))
                except cv.KeyConversionError as e:
                    raise self.errors.type_error(v, rows[i], f"row {i}", e.reason) from None
            values = public

        def type_error(i: int, e: Exception) -> Exception:
            return self.errors.type_error(values[i], rows[i], f"row {i}", f"last_value_func raised {e!r}")

        dk = self.dedup_key

        def dedup_keys(idx: np.ndarray) -> list[str]:
            return self._dedup_keys(dk, idx, rows_at(idx))

        return self._apply(
            decide_callable(values, self._callable_spec(), self._cursor, dedup_keys, null_error, type_error)
        )

    def _missing_column(self, n: int, columns: list[str], first_row: Callable[[], Any]) -> np.ndarray:
        """A table without the cursor column: every row is missing (raise / include / exclude)."""
        policy = self.spec.on_cursor_value_missing
        if n and policy == "raise":
            raise self.errors.absent_column_error(columns, first_row())
        return np.full(n, policy == "include", dtype=bool)

    def _filter_arrow(self, table: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
        def rows_at(idx: Any) -> list[Any]:
            return table.take(pa.array(idx, pa.int64())).to_pylist()

        def row_at(i: int) -> Any:
            return table.slice(i, 1).to_pylist()[0]

        n = table.num_rows
        if self.spec.is_callable:
            keep = np.zeros(n, dtype=bool)
            keep[self._row_indices(table.to_pylist())] = True
            return table.filter(pa.array(keep, pa.bool_()))
        col = self.spec.path.arrow_column(table)
        if col is None:
            return table.filter(
                pa.array(self._missing_column(n, table.schema.names, lambda: row_at(0)), pa.bool_())
            )
        keys = self._arrow_keys(col, row_at)
        where = f"(column {self.spec.path.column!r})"
        keep = self._keep(keys, rows_at, lambda i: self.errors.missing_error(row_at(i), False, f"row {i} {where}"))
        return table.filter(pa.array(keep, pa.bool_()))

    def _filter_pandas(self, df: Any) -> Any:
        def rows_at(idx: Any) -> list[Any]:
            part = df.iloc[list(idx)]
            try:
                return pa.Table.from_pandas(part, preserve_index=False).to_pylist()
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed object columns
                return part.to_dict("records")

        def row_at(i: int) -> Any:
            return rows_at([i])[0]

        n = len(df)
        if self.spec.is_callable:
            keep = np.zeros(n, dtype=bool)
            keep[self._row_indices(df.to_dict("records"))] = True
            return df[keep]
        column = self.spec.path.column
        if column is None:
            self.spec.path.arrow_column(pa.table({}))  # raises: a frame needs a column, not "$"
        if column not in df.columns:
            return df[self._missing_column(n, list(df.columns), lambda: row_at(0))]
        try:
            col = self.spec.path.arrow_column(pa.Table.from_pandas(df[[column]], preserve_index=False))
            if col is None:  # a struct field that is not there
                return df[self._missing_column(n, list(df.columns), lambda: row_at(0))]
            keys = self._arrow_keys(col, row_at)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # an object column Arrow cannot type (mixed values): the dict rows' conversion
            values = [self.spec.path.extract(r) for r in df[[column]].to_dict("records")]
            plain = [None if v is MISSING or (isinstance(v, float) and v != v) else v for v in values]
            keys = self._python_keys(plain, row_at)
        where = f"(column {column!r})"
        keep = self._keep(keys, rows_at, lambda i: self.errors.missing_error(row_at(i), False, f"row {i} {where}"))
        return df[keep]
