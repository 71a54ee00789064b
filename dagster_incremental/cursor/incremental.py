"""The cursor: `Incremental` (what an asset function's parameter is annotated with), its spec
(`incremental(...)` -> `IncrementalSpec`) and its bound run (`spec.bind(state)` -> `IncrementalRun`).

Why two classes: dlt's `Incremental` is config, transform, state and scheduler at once. Here the
spec is a frozen, validated value (safe to share, to put in a signature default, to `replace`), and
`spec.bind(state)` returns the run that owns the per-run mutable values (live last_value, the
boundary keys, the out-of-range flags). Both are an `Incremental`, so the parameter annotated
`Incremental` type-checks whether it holds the default spec or the bound run the asset passes.
The algorithm itself is in filter_core / filter_spark.

Example:
    spec = incremental("updated_at", initial_value="2024-01-01T00:00:00Z", primary_key="id")
    run = spec.bind(previous_state)          # None on the first run
    rows = run.filter(fetch(since=run.start_value))
    save(rows, state=run.state)              # persist run.state together with the data
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import (
    CONTENT,
    Boundary,
    DedupKey,
    _canonical,
    _short,
    canonical_json,
    row_dedup_key,
)
from dagster_incremental.cursor.paths import MISSING, CursorPath, parse_cursor_path
from dagster_incremental.errors import (
    CursorPathMissing,
    CursorStateMismatch,
    CursorTypeError,
    CursorValueNone,
    IncrementalConfigError,
)
from dagster_incremental.cursor.decide import (
    CallableSpec,
    Cursor,
    Decision,
    RangeSpec,
    decide,
    decide_callable,
)

STATE_VERSION = 2  # 2: boundary keys stored as the key values themselves (1: their JSON text)
LAST_VALUE_FUNCS = ("max", "min")
ON_MISSING = ("raise", "include", "exclude")
ROW_ORDERS = (None, "asc", "desc")
RANGES = ("open", "closed")
DICT_CHUNK = 1000  # single dict rows from filter_batches are filtered in chunks of this size


def _known(arg: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise IncrementalConfigError(
            f"{arg}={value!r} is not valid; allowed: {', '.join(repr(a) for a in allowed)}."
        )


def _func_name(func: Any) -> str:
    if isinstance(func, str):
        return func
    return f"callable:{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _normalise_pk(value: Any, arg: str = "primary_key") -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable):
        names = tuple(value)
        if all(isinstance(v, str) for v in names):
            return names
    raise IncrementalConfigError(
        f"{arg}={value!r} is not valid: give a column name, a sequence of column names, () to "
        "disable boundary dedup, or None to inherit the asset's primary key."
    )


class Incremental(abc.ABC):
    """A cursor as an asset function sees it: the values of its range, a filter, the state.

    An asset's parameter annotated `Incremental` receives the bound run (`IncrementalRun`); a
    spec (`IncrementalSpec`, from `incremental(...)`) answers as a run that has no state yet.
    """

    cursor_path: str

    @property
    @abc.abstractmethod
    def initial_value(self) -> Any:
        """The first run's start, also the floor for lag."""

    @property
    @abc.abstractmethod
    def end_value(self) -> Any:
        """The exclusive (or, with range_end="closed", inclusive) end of a bounded run, or None."""

    @property
    @abc.abstractmethod
    def start_value(self) -> Any:
        """Where this run starts: the previous last_value (lag-adjusted) or initial_value."""

    @property
    @abc.abstractmethod
    def last_value(self) -> Any:
        """The high-water mark so far: start_value before any row is filtered."""

    @property
    @abc.abstractmethod
    def is_backfill(self) -> bool:
        """True for a bounded, stateless run (end_value or a partition window)."""

    @property
    @abc.abstractmethod
    def state(self) -> dict[str, Any] | None:
        """The JSON-serialisable state to persist after the run (None before any run)."""

    @abc.abstractmethod
    def filter(self, items: Any) -> Any:
        """The in-range, not-yet-loaded rows of `items`, in the same kind as given."""

    @abc.abstractmethod
    def can_close(self) -> bool:
        """True once row_order says no more in-range rows can come."""


@dataclass(frozen=True)
class IncrementalSpec(Incremental):
    """A validated cursor definition. Build it with `incremental(...)`; bind it per run.

    `primary_key=None` means "inherit the asset's primary key" (content hash if it has none);
    `()` disables boundary dedup. `cursor_type` (keyword extra): None = detect, else one of
    "timestamp", "date", "number", "string", "epoch_seconds", "epoch_millis" (numbers in rows are
    instants).
    """

    cursor_path: str
    initial_value: Any = None
    end_value: Any = None
    last_value_func: str | Callable[[Sequence[Any]], Any] = "max"
    primary_key: tuple[str, ...] | None = None
    row_order: str | None = None
    on_cursor_value_missing: str = "raise"
    range_start: str = "closed"
    range_end: str = "open"
    lag: float | None = None
    cursor_type: str | None = None
    # derived at validation
    _path: CursorPath = field(init=False, repr=False, compare=False)
    _type: str | None = field(init=False, repr=False, compare=False)
    _initial_key: Any = field(init=False, repr=False, compare=False)
    _end_key: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "_path", parse_cursor_path(self.cursor_path))
        func = self.last_value_func
        if func is max or func is min:
            set_(self, "last_value_func", func.__name__)
        elif isinstance(func, str) or not callable(func):
            _known("last_value_func", func, [*LAST_VALUE_FUNCS, "a callable(sequence) -> value"])
        set_(self, "primary_key", _normalise_pk(self.primary_key))
        _known("on_cursor_value_missing", self.on_cursor_value_missing, ON_MISSING)
        _known("row_order", self.row_order, ROW_ORDERS)
        _known("range_start", self.range_start, RANGES)
        _known("range_end", self.range_end, RANGES)
        if self.cursor_type is not None:
            _known("cursor_type", self.cursor_type, [None, *cv.CURSOR_TYPES])
        if self.lag is not None:
            if isinstance(self.lag, bool) or not isinstance(self.lag, (int, float)) or self.lag < 0:
                raise IncrementalConfigError(
                    f"lag={self.lag!r} is not valid: give a number >= 0 (seconds for timestamps, "
                    "days for dates, native units for numbers) or None."
                )
            if self.is_callable:
                raise IncrementalConfigError(
                    f"lag={self.lag!r} cannot be used with a callable last_value_func "
                    f"({_func_name(func)}): lag needs 'max' or 'min'."
                )
        if self.end_value is not None and self.initial_value is None:
            raise IncrementalConfigError(
                f"end_value={self.end_value!r} was given without initial_value: a bounded range "
                "(backfill) needs both; set initial_value to the range start."
            )
        self._resolve_values()

    def _resolve_values(self) -> None:
        set_ = object.__setattr__
        if self.is_callable:
            set_(self, "_type", self.cursor_type)
            set_(self, "_initial_key", None)
            set_(self, "_end_key", None)
            if self.end_value is not None:
                try:
                    ok = self.last_value_func((self.end_value, self.initial_value)) == self.end_value
                except Exception as e:  # noqa: BLE001 - user function
                    raise IncrementalConfigError(
                        f"initial_value={self.initial_value!r} and end_value={self.end_value!r} are "
                        f"not comparable by last_value_func: {e}"
                    ) from e
                if not ok:
                    raise IncrementalConfigError(
                        f"end_value={self.end_value!r} is on the wrong side of initial_value="
                        f"{self.initial_value!r} for last_value_func {_func_name(self.last_value_func)}: "
                        "last_value_func((end_value, initial_value)) must return end_value."
                    )
            return
        types = {}
        for arg in ("initial_value", "end_value"):
            value = getattr(self, arg)
            if value is not None:
                t = cv.detect_type(value)
                if t is None:
                    raise IncrementalConfigError(
                        f"{arg}={value!r} (type {type(value).__name__}) cannot be a cursor value: use a "
                        "datetime, date, ISO-8601 string, number or string."
                    )
                types[arg] = t
        ctype = self.cursor_type
        if ctype is None and types:
            ctype = types.get("initial_value") or types["end_value"]
            if ctype == "date" and "timestamp" in types.values():
                ctype = "timestamp"
        if len(types) == 2 and self.cursor_type is None:
            fam = {("temporal" if t in cv.TEMPORAL_TYPES else t) for t in types.values()}
            if len(fam) > 1:
                raise IncrementalConfigError(
                    f"initial_value={self.initial_value!r} ({types['initial_value']}) and end_value="
                    f"{self.end_value!r} ({types['end_value']}) are not comparable: give both as the "
                    "same kind of value."
                )
        keys = {}
        for arg in ("initial_value", "end_value"):
            value = getattr(self, arg)
            keys[arg] = None
            if value is not None:
                try:
                    keys[arg] = cv.to_key(value, ctype)  # type: ignore[arg-type]
                except cv.KeyConversionError as e:
                    raise IncrementalConfigError(
                        f"{arg}={value!r} is not comparable with a {ctype} cursor: {e.reason}."
                    ) from e
        if self.lag is not None and ctype == "string":
            raise IncrementalConfigError(
                f"lag={self.lag!r} cannot be used with a string cursor ({self.cursor_path!r}); lag "
                "works for timestamps (seconds), dates (days) and numbers."
            )
        ik, ek = keys["initial_value"], keys["end_value"]
        if ek is not None:
            if (self.direction == "max" and ek < ik) or (self.direction == "min" and ek > ik):
                word = "lower" if self.direction == "max" else "higher"
                raise IncrementalConfigError(
                    f"end_value={self.end_value!r} is {word} than initial_value={self.initial_value!r}: "
                    f"with last_value_func={self.last_value_func!r} the range runs from initial_value "
                    f"{'up' if self.direction == 'max' else 'down'} to end_value; swap them."
                )
        set_(self, "_type", ctype)
        set_(self, "_initial_key", ik)
        set_(self, "_end_key", ek)

    # -- derived properties ------------------------------------------------------------------

    @property
    def is_callable(self) -> bool:
        return not isinstance(self.last_value_func, str)

    @property
    def direction(self) -> str:
        """ "max" or "min"; a callable counts as "max" for row_order purposes."""
        return self.last_value_func if isinstance(self.last_value_func, str) else "max"

    @property
    def path(self) -> CursorPath:
        return self._path

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

    def replace(self, **changes: Any) -> IncrementalSpec:
        """A copy with `changes` applied and validated again (None is a value, not "unset")."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self) if f.init}
        if unknown:
            raise IncrementalConfigError(f"Incremental.replace got unknown arguments: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def bind(
        self,
        state: Mapping[str, Any] | None = None,
        *,
        window: tuple[Any, Any] | None = None,
        stateless: bool = False,
        inherited_primary_key: str | Sequence[str] | None = None,
    ) -> IncrementalRun:
        """Start a run from `state` (None on the first run); see IncrementalRun."""
        return IncrementalRun(
            self,
            state,
            window=window,
            stateless=stateless,
            inherited_primary_key=inherited_primary_key,
        )


def incremental(
    cursor_path: str,
    initial_value: Any = None,
    end_value: Any = None,
    last_value_func: str | Callable[[Sequence[Any]], Any] = "max",
    primary_key: str | Sequence[str] | None = None,
    row_order: str | None = None,
    on_cursor_value_missing: str = "raise",
    range_start: str = "closed",
    range_end: str = "open",
    lag: float | None = None,
    *,
    cursor_type: str | None = None,
) -> IncrementalSpec:
    """Define an incremental cursor (dlt's `dlt.sources.incremental` vocabulary and defaults)."""
    return IncrementalSpec(
        cursor_path=cursor_path,
        initial_value=initial_value,
        end_value=end_value,
        last_value_func=last_value_func,
        primary_key=primary_key,  # type: ignore[arg-type]
        row_order=row_order,
        on_cursor_value_missing=on_cursor_value_missing,
        range_start=range_start,
        range_end=range_end,
        lag=lag,
        cursor_type=cursor_type,
    )


# ---------------------------------------------------------------------------------------------
# the bound run
# ---------------------------------------------------------------------------------------------


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
        spec: IncrementalSpec,
        state: Mapping[str, Any] | None,
        *,
        window: tuple[Any, Any] | None,
        stateless: bool,
        inherited_primary_key: str | Sequence[str] | None,
    ) -> None:
        self.spec = spec
        self.cursor_path = spec.cursor_path
        self._given_state = copy.deepcopy(dict(state)) if state is not None else None
        self._is_backfill = spec.end_value is not None or (window is not None and stateless)
        if stateless and window is None and spec.end_value is None:
            raise IncrementalConfigError("bind(stateless=True) needs a window=(start, end) or an end_value.")
        self._check_state(state)
        self.cursor_type: str | None = self._resolve_type(state)
        self._type_explicit = spec.cursor_type is not None
        inherited = _normalise_pk(inherited_primary_key, "inherited_primary_key") or None  # () = none
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
        self._resolve_range(state, window)

    # -- binding ---------------------------------------------------------------------------------

    def _check_state(self, state: Mapping[str, Any] | None) -> None:
        if state is None:
            return
        # A minimal state ({"last_value": ...}, e.g. written by hand or by an older layer) is
        # accepted; whatever identity fields a state has must match the spec.
        if not isinstance(state, Mapping) or state.get("version", STATE_VERSION) not in (1, STATE_VERSION):
            raise CursorStateMismatch(
                f"The stored cursor state {state!r} is not a version {STATE_VERSION} state of "
                "dagster_incremental; run a full refresh to start a new state."
            )
        spec = self.spec
        changes = []
        if "cursor_path" in state and state.get("cursor_path") != spec.cursor_path:
            changes.append(f"cursor_path {state.get('cursor_path')!r} -> {spec.cursor_path!r}")
        if "last_value_func" in state and state.get("last_value_func") != _func_name(spec.last_value_func):
            changes.append(
                f"last_value_func {state.get('last_value_func')!r} -> {_func_name(spec.last_value_func)!r}"
            )
        stype = state.get("cursor_type")
        if spec._type is not None and stype is not None and stype != spec._type:
            inferred_temporal = spec.cursor_type is None and {stype, spec._type} <= {"date", "timestamp"}
            if not inferred_temporal:
                changes.append(f"cursor_type {stype!r} -> {spec._type!r}")
        if changes:
            err = CursorStateMismatch(
                "The stored cursor state was made by a different cursor definition ("
                + "; ".join(changes)
                + "): its last_value cannot be used. Run a full refresh (replace the table and drop "
                "the stored state), or restore the previous definition."
            )
            err.changed = [c.split(" ", 1)[0] for c in changes]  # type: ignore[attr-defined]
            raise err

    def _resolve_type(self, state: Mapping[str, Any] | None) -> str | None:
        spec = self.spec
        if spec.cursor_type is not None:
            return spec.cursor_type
        stype = state.get("cursor_type") if state else None
        if spec._type is not None:
            if spec._type == "date" and stype == "timestamp":
                return "timestamp"
            return spec._type
        if stype == "string" and spec.lag is not None:
            raise IncrementalConfigError(
                f"lag={spec.lag!r} cannot be used with the string cursor {spec.cursor_path!r} (the "
                "stored state says the cursor is a string)."
            )
        return stype

    def _key(self, value: Any, what: str) -> Any:
        """A bound / state value as a key (for a callable: as the public value it compares)."""
        if self.spec.is_callable:
            return self._callable_public(value)
        if self.cursor_type is None:
            t = cv.detect_type(value)
            if t is None:
                raise IncrementalConfigError(f"{what}={value!r} cannot be a cursor value.")
            self._adopt_type(t, value, what)
        try:
            return cv.to_key(value, self.cursor_type)  # type: ignore[arg-type]
        except cv.KeyConversionError as e:
            raise IncrementalConfigError(
                f"{what}={value!r} is not comparable with the {self.cursor_type} cursor "
                f"{self.spec.cursor_path!r}: {e.reason}."
            ) from e

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
            return cv.key_to_public(cv.to_key(value, t), t)
        except cv.KeyConversionError:
            return value

    def _resolve_range(self, state: Mapping[str, Any] | None, window: tuple[Any, Any] | None) -> None:
        spec = self.spec
        if state is not None and state.get("initial_value") is not None:
            self._state_initial = self._key(state["initial_value"], "state initial_value")
        initial_key = None
        if spec.initial_value is not None:
            initial_key = (
                spec._initial_key if not spec.is_callable else self._key(spec.initial_value, "initial_value")
            )
        self._initial = initial_key
        end_key = None
        if spec.end_value is not None:
            end_key = spec._end_key if not spec.is_callable else self._key(spec.end_value, "end_value")
        start_open = spec.range_start == "open"
        end_closed = spec.range_end == "closed"
        from_state = False
        start = initial_key
        if not self.is_backfill and state and state.get("last_value") is not None:
            self._state_last = self._key(state["last_value"], "state last_value")
            start = self._state_last
            from_state = True
            if spec.lag is not None and self.cursor_type is not None:
                floor = initial_key if initial_key is not None else self._state_initial
                start = cv.apply_lag(start, spec.lag, self.cursor_type, spec.direction, floor)
                from_state = start == self._state_last
        if window is not None:
            if spec.is_callable or spec.direction != "max":
                raise IncrementalConfigError(
                    "bind(window=...) needs last_value_func='max' (windows are time ranges going up)."
                )
            ws, we = window
            ws_key = self._key(ws, "window start") if ws is not None else None
            we_key = self._key(we, "window end") if we is not None else None
            if ws_key is not None and (start is None or ws_key > start):
                start, start_open, from_state = ws_key, False, False  # the window start is inclusive
            if we_key is not None and (end_key is None or we_key <= end_key):
                end_key, end_closed = we_key, False  # the window end is exclusive
        self.start_key = start
        self.end_key = end_key
        self.start_closed = not start_open
        self.end_closed = end_closed
        # boundary
        stored = self._stored_boundary(state)
        self._start_set: Boundary | None = None
        boundary: Boundary | None = None
        if self._dedup:
            if from_state:
                if stored is not None and stored.value == start and not stored.overflow:
                    self._start_set = stored
                    boundary = stored
                else:
                    self.boundary_unverified = True
                    boundary = Boundary(start, frozenset(), True)
            else:
                boundary = Boundary(start)
        self._cursor = Cursor(start, boundary)

    def _stored_boundary(self, state: Mapping[str, Any] | None) -> Boundary | None:
        """The state's boundary if it can be trusted: same dedup key. A state whose dedup_key
        differs keeps its last_value but loses its boundary keys (rows at the start value are then
        all kept and flagged `boundary_unverified`)."""
        if not state or not isinstance(state.get("boundary"), Mapping):
            return None
        stored_key = state.get("dedup_key")
        mine = self.dedup_key if isinstance(self.dedup_key, str) else list(self.dedup_key)
        if stored_key != mine:
            return None
        b = state["boundary"]
        if b.get("value") is None:
            return None
        value = self._key(b["value"], "state boundary value")
        keys = b.get("keys") or ()
        if state.get("version", STATE_VERSION) != 1 and self.dedup_key != CONTENT:
            keys = (canonical_json(k) for k in keys)  # stored as values, compared as their JSON
        return Boundary(value, frozenset(keys), bool(b.get("overflow")))

    def _shown_keys(self, keys: frozenset[str]) -> list[Any]:
        """Boundary keys as the state stores them: primary-key values as they are (the UI shows
        ev_1, not its JSON text), content hashes as hex."""
        ordered = sorted(keys)
        return ordered if self.dedup_key == CONTENT else [json.loads(k) for k in ordered]

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
        """Live: start_value before any row, then last_value_func over the kept values."""
        return self._public(self._cursor.last)

    @property
    def end_value(self) -> Any:
        return self._public(self.end_key)

    @property
    def initial_value(self) -> Any:
        """The spec's initial_value, else the one recorded in the state (still the lag floor)."""
        return self._public(self._initial if self._initial is not None else self._state_initial)

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
        if self.is_backfill:
            return copy.deepcopy(self._given_state)
        spec = self.spec
        last = self._cursor.last
        if self._state_last is not None and (
            last is None
            or (spec.direction == "max" and not spec.is_callable and last < self._state_last)
            or (spec.direction == "min" and not spec.is_callable and last > self._state_last)
        ):
            last = self._state_last  # lag or a window never move the state backwards
        initial = self._state_initial if self._state_initial is not None else self._initial
        boundary = self._cursor.boundary
        out: dict[str, Any] = {
            "version": STATE_VERSION,
            "cursor_path": spec.cursor_path,
            "cursor_type": self.cursor_type,
            "last_value_func": _func_name(spec.last_value_func),
            "initial_value": self._canonical(initial),
            "last_value": self._canonical(last),
            "start_value": self._canonical(self.start_key),
            "dedup_key": self.dedup_key if isinstance(self.dedup_key, str) else list(self.dedup_key),
            "boundary": None,
        }
        if self._dedup and boundary is not None and boundary.value is not None and boundary.value == last:
            out["boundary"] = {
                "value": self._canonical(boundary.value),
                "keys": self._shown_keys(boundary.keys),
                "overflow": boundary.overflow,
            }
        return out

    # -- types ---------------------------------------------------------------------------------

    def _adopt_type(self, detected: str | None, sample: Any, where: str) -> None:
        """Fix the cursor type from the data when nothing declared it; an inferred "date"
        (from a date initial_value) becomes "timestamp" when the rows carry timestamps."""
        if detected is None:
            return
        if self.cursor_type is None:
            if self.spec.lag is not None and detected == "string" and not self.spec.is_callable:
                raise IncrementalConfigError(
                    f"lag={self.spec.lag!r} cannot be used with the string cursor "
                    f"{self.spec.cursor_path!r} (first value {sample!r} in {where})."
                )
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
            from dagster_incremental.cursor.spark_filter import filter_spark

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

    # -- per kind ------------------------------------------------------------------------------------

    def _apply(self, decision: Decision) -> np.ndarray:
        self._advance(decision.cursor, decision.start_out_of_range, decision.end_out_of_range)
        return decision.keep

    def _advance(self, cursor: Cursor, start_out_of_range: bool, end_out_of_range: bool) -> None:
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
        """The run's constants both filtering paths need (range, missing policy, dedup)."""
        return {
            "start": self.start_key,
            "start_open": not self.start_closed,
            "end": self.end_key,
            "end_closed": self.end_closed,
            "on_missing": self.spec.on_cursor_value_missing,
            "dedup": self._dedup,
            "start_set": self._start_set,
        }

    def _range_spec(self) -> RangeSpec:
        return RangeSpec(direction=self.spec.direction, **self._bounds())

    def _callable_spec(self) -> CallableSpec:
        return CallableSpec(func=self.spec.last_value_func, **self._bounds())  # type: ignore[arg-type]

    def _missing_error(self, row: Any, missing: bool, where: str) -> Exception:
        path = self.spec.cursor_path
        if missing:
            return CursorPathMissing(
                f"cursor_path {path!r} is missing in {where}: {_short(row)}. Fix the data, or set "
                "on_cursor_value_missing='include' (keep such rows) or 'exclude' (drop them)."
            )
        return CursorValueNone(
            f"cursor_path {path!r} is None in {where}: {_short(row)}. Fix the data, or set "
            "on_cursor_value_missing='include' (keep such rows) or 'exclude' (drop them)."
        )

    def _type_error(self, value: Any, row: Any, where: str, reason: str) -> CursorTypeError:
        return CursorTypeError(
            f"cursor_path {self.spec.cursor_path!r}: the value {value!r} (type {type(value).__name__}) "
            f"in {where} cannot be compared with the {self.cursor_type} cursor: {reason}. Row: "
            f"{_short(row)}. Convert the column to one type (or set cursor_type=...)."
        )

    # -- per kind: each builds one key array and hands it to filter_core.decide ---------------------

    def _keep(
        self,
        keys: pa.Array,
        rows_at: Callable[[np.ndarray], list[Any]],
        null_error: Callable[[int], Exception],
    ) -> np.ndarray:
        """filter_core.decide for one batch; `rows_at(indices)` gives rows to key (only boundary rows)."""
        dk = self.dedup_key

        def dedup_keys(idx: np.ndarray) -> list[str]:
            return [row_dedup_key(r, dk, where=f"row {i}") for i, r in zip(idx, rows_at(idx), strict=True)]

        return self._apply(decide(keys, self._range_spec(), self._cursor, dedup_keys, null_error))

    def _filter_rows(self, rows: list[Any]) -> list[Any]:
        return [rows[i] for i in self._row_indices(rows)] if rows else []

    def _row_indices(self, rows: list[Any]) -> np.ndarray:
        """Indices of the kept dict rows: cursor values extracted once, then one key array."""
        path = self.spec.path
        values = [row if path.is_whole_row else path.extract(row) for row in rows]

        def rows_at(idx: np.ndarray) -> list[Any]:
            return [rows[i] for i in idx]

        def null_error(i: int) -> Exception:
            return self._missing_error(rows[i], values[i] is MISSING, f"row {i}")

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
                    raise self._type_error(plain[i], row_at(i), f"row {i}", "it is not a scalar cursor value")
                self._adopt_type(detected, plain[i], f"row {i}")
        if self.cursor_type is None:
            return pa.nulls(len(plain), pa.int64())
        try:
            return cv.values_to_keys(plain, self.cursor_type)
        except cv.KeyConversionError as e:
            i = e.index or 0
            raise self._type_error(e.value, row_at(i), f"row {i}", e.reason) from None

    def _arrow_keys(self, col: pa.Array, row_at: Callable[[int], Any]) -> pa.Array:
        """An Arrow cursor column as keys (vectorised), detecting the type if needed."""
        if (self.cursor_type is None or self.cursor_type == "date") and col.null_count < len(col):
            detected = cv.detect_arrow_type(col)
            if detected is None:
                i = pc.indices_nonzero(col.is_valid())[0].as_py()
                raise self._type_error(
                    col[i].as_py(), row_at(i), f"row {i}", f"a {col.type} column cannot be a cursor"
                )
            self._adopt_type(detected, None, "the table")
        if self.cursor_type is None:
            return pa.nulls(len(col), pa.int64())
        try:
            return cv.arrow_to_keys(col, self.cursor_type)
        except cv.KeyConversionError as e:
            i = e.index or 0
            raise self._type_error(e.value, row_at(i), f"row {i}", e.reason) from None

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
                    public.append(cv.key_to_public(cv.to_key(v, ctype), ctype))
                except cv.KeyConversionError as e:
                    raise self._type_error(v, rows[i], f"row {i}", e.reason) from None
            values = public

        def type_error(i: int, e: Exception) -> Exception:
            return self._type_error(values[i], rows[i], f"row {i}", f"last_value_func raised {e!r}")

        dk = self.dedup_key

        def dedup_keys(idx: np.ndarray) -> list[str]:
            return [row_dedup_key(r, dk, where=f"row {i}") for i, r in zip(idx, rows_at(idx), strict=True)]

        return self._apply(
            decide_callable(values, self._callable_spec(), self._cursor, dedup_keys, null_error, type_error)
        )

    def _missing_column(self, n: int, columns: list[str], first_row: Callable[[], Any]) -> np.ndarray:
        """A table without the cursor column: every row is missing (raise / include / exclude)."""
        policy = self.spec.on_cursor_value_missing
        if n and policy == "raise":
            raise CursorPathMissing(
                f"cursor_path {self.spec.cursor_path!r}: the table has no column "
                f"{self.spec.path.column!r} (columns: {columns}); row 0: {_short(first_row())}. Fix the "
                "data, or set on_cursor_value_missing='include' / 'exclude'."
            )
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
        keep = self._keep(keys, rows_at, lambda i: self._missing_error(row_at(i), False, f"row {i} {where}"))
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
        keep = self._keep(keys, rows_at, lambda i: self._missing_error(row_at(i), False, f"row {i} {where}"))
        return df[keep]
