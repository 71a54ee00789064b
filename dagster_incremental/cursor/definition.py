"""The cursor as declared: the options of `incremental(...)` validated into a frozen
`CursorDefinition` (which also says whether a stored state fits it), and `Incremental`, the type
an asset's parameter is annotated with.

A bound run reads the definition; the spec (`spec.py`) is the definition that binds to a run.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.bounds import bound_key, bound_type, check_bounds, check_callable_range, check_order
from dagster_incremental.cursor.paths import CursorPath, parse_cursor_path
from dagster_incremental.cursor.step import Step, number_needs_end, parse_step
from dagster_incremental.cursor.vocabulary import (
    CURSOR_TYPES,
    LAST_VALUE_FUNCS,
    ON_CURSOR_VALUE_MISSING,
    RANGE_BOUNDS,
    ROW_ORDERS,
    CursorType,
    LastValueFunc,
    OnCursorValueMissing,
    RangeBound,
    RowOrder,
)
from dagster_incremental.errors import CursorStateMismatch, IncrementalConfigError

if TYPE_CHECKING:
    from dagster_incremental.cursor.state import CursorState


def _known(arg: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise IncrementalConfigError(
            f"{arg}={value!r} is not valid; allowed: {', '.join(repr(a) for a in allowed)}."
        )


def func_name(func: Any) -> str:
    """How state and messages name a last_value_func: "max", or "callable:<module>.<name>"."""
    if isinstance(func, str):
        return func
    return f"callable:{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def normalise_pk(value: Any, arg: str = "primary_key") -> tuple[str, ...] | None:
    """A primary_key as given (a name, names, () or None) as a tuple of names, or None."""
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


def _valid_lag(lag: Any) -> bool:
    """A number >= 0, or an ISO-8601 duration (calendar months and years included)."""
    if isinstance(lag, str):
        return cv.parse_duration(lag) is not None
    return not isinstance(lag, bool) and isinstance(lag, (int, float)) and math.isfinite(lag) and lag >= 0


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

    @property
    def last_run(self) -> Any:
        """When the previous run of the asset committed the cursor in force (pendulum, UTC), or
        None (a first run, a full refresh, a spec that has run nothing)."""
        return None

    @abc.abstractmethod
    def filter(self, items: Any) -> Any:
        """The in-range, not-yet-loaded rows of `items`, in the same kind as given."""

    @abc.abstractmethod
    def can_close(self) -> bool:
        """True once row_order says no more in-range rows can come."""


@dataclass(frozen=True)
class CursorDefinition:
    """A validated cursor definition: the options as given, checked together, and what they imply
    (path, step, type, bounds as keys). `IncrementalSpec` is this plus the run it binds to.

    `primary_key=None` means "inherit the asset's primary key" (content hash if it has none);
    `()` disables boundary dedup. `cursor_type` (keyword extra): None = detect, else one of
    "timestamp", "date", "number", "string", "epoch_seconds", "epoch_millis" (numbers in rows are
    instants).
    """

    cursor_path: str
    initial_value: Any = None
    end_value: Any = None
    last_value_func: LastValueFunc | Callable[[Sequence[Any]], Any] = "max"
    primary_key: tuple[str, ...] | None = None
    row_order: RowOrder | None = None
    on_cursor_value_missing: OnCursorValueMissing = "raise"
    range_start: RangeBound = "closed"
    range_end: RangeBound = "open"
    lag: float | str | None = None
    cursor_type: CursorType | None = None
    step: str | float | None = None
    datetime_format: str | None = None
    cursor_datetime_formats: tuple[str, ...] | None = None
    # derived at validation
    _path: CursorPath = field(init=False, repr=False, compare=False)
    _step: Step | None = field(init=False, repr=False, compare=False)
    _type: str | None = field(init=False, repr=False, compare=False)
    _initial_key: Any = field(init=False, repr=False, compare=False)
    _end_key: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "_path", parse_cursor_path(self.cursor_path))
        self._check_formats()
        func = self.last_value_func
        if func is max or func is min:
            set_(self, "last_value_func", func.__name__)
        elif isinstance(func, str) or not callable(func):
            _known("last_value_func", func, [*LAST_VALUE_FUNCS, "a callable(sequence) -> value"])
        set_(self, "primary_key", normalise_pk(self.primary_key))
        _known("on_cursor_value_missing", self.on_cursor_value_missing, ON_CURSOR_VALUE_MISSING)
        _known("row_order", self.row_order, [None, *ROW_ORDERS])
        _known("range_start", self.range_start, RANGE_BOUNDS)
        _known("range_end", self.range_end, RANGE_BOUNDS)
        if self.cursor_type is not None:
            _known("cursor_type", self.cursor_type, [None, *CURSOR_TYPES])
        if self.lag is not None:
            if not _valid_lag(self.lag):
                raise IncrementalConfigError(
                    f"lag={self.lag!r} is not valid: give a number >= 0 (seconds for timestamps, "
                    "days for dates, native units for numbers), an ISO-8601 duration such as 'P1D' "
                    "or 'P1M' (dates and timestamps), or None."
                )
        if self.end_value is not None and self.initial_value is None:
            raise IncrementalConfigError(
                f"end_value={self.end_value!r} was given without initial_value: a bounded range "
                "(backfill) needs both; set initial_value to the range start."
            )
        if not self.is_callable:
            bounds = {"initial_value": self.initial_value, "end_value": self.end_value}
            check_bounds(self.cursor_path, bounds, self.cursor_type, self.formats)
        self._resolve_values()
        self._check_step()

    def _check_formats(self) -> None:
        """datetime_format / cursor_datetime_formats: strptime formats of a string cursor, which
        then is a timestamp cursor (or a date cursor, when cursor_type says so)."""
        given = self.cursor_datetime_formats
        if isinstance(given, str):
            given = (given,)
        formats = (self.datetime_format,) if self.datetime_format is not None else ()
        for fmt in [*formats, *(given or ())]:
            if not isinstance(fmt, str) or "%" not in fmt:
                raise IncrementalConfigError(
                    f"incremental({self.cursor_path!r}): the datetime format {fmt!r} is not valid: give a "
                    "strptime format such as '%d/%m/%Y %H:%M' (or a list of them in cursor_datetime_formats)."
                )
        if given is not None:
            object.__setattr__(self, "cursor_datetime_formats", tuple(given))
        if not self.formats:
            return
        if self.cursor_type is None:
            object.__setattr__(self, "cursor_type", "timestamp")
        elif self.cursor_type not in ("timestamp", "date"):
            raise IncrementalConfigError(
                f"incremental({self.cursor_path!r}): datetime formats parse a string cursor as instants; "
                f"cursor_type={self.cursor_type!r} cannot take them (use 'timestamp' or 'date', or drop it)."
            )

    @property
    def formats(self) -> tuple[str, ...]:
        """The strptime formats string cursor values are read with, in order (then ISO-8601)."""
        return tuple(dict.fromkeys([*((self.datetime_format,) if self.datetime_format else ()),
                                    *(self.cursor_datetime_formats or ())]))

    def _check_step(self) -> None:
        """step: valid, for a cursor going up, and (when the type is known now) fit for its type."""
        set_ = object.__setattr__
        set_(self, "_step", parse_step(self.step))
        if self._step is None:
            return
        if self.is_callable or self.direction != "max":
            raise IncrementalConfigError(
                f"step={self.step!r} needs last_value_func='max': slices cut a range going up "
                f"(got {func_name(self.last_value_func)})."
            )
        if self._type is not None:
            self._step.check(self._type, self.cursor_path)
        if self._type == "number" and self.end_value is None:
            raise IncrementalConfigError(number_needs_end(self.step, self.cursor_path))

    def _resolve_values(self) -> None:
        """The cursor type and the bounds as keys; a callable compares public values itself."""
        if self.is_callable:
            if self.end_value is not None:
                check_callable_range(self.function, self.initial_value, self.end_value, func_name(self.last_value_func))
            error = self.lag_error(self.cursor_type)
            if error is not None:
                raise error
            ctype, ik, ek = self.cursor_type, None, None
        else:
            ctype = bound_type(self.initial_value, self.end_value, self.cursor_type)
            ik = bound_key("initial_value", self.initial_value, ctype, self.formats)
            ek = bound_key("end_value", self.end_value, ctype, self.formats)
            error = self.lag_error(ctype)
            if error is not None:
                raise error
            check_order(self.direction, self.last_value_func, self.initial_value, self.end_value, ik, ek)
        set_ = object.__setattr__
        set_(self, "_type", ctype)
        set_(self, "_initial_key", ik)
        set_(self, "_end_key", ek)

    def lag_error(self, ctype: str | None, source: str = "") -> IncrementalConfigError | None:
        """Why lag cannot move a cursor of type `ctype` (`source` says where the type came
        from), or None: a string cursor takes no lag, an ISO-8601 lag needs a date or timestamp."""
        if self.lag is None or ctype is None:
            return None
        if ctype == "string":
            return IncrementalConfigError(
                f"lag={self.lag!r} cannot be used with a string cursor ({self.cursor_path!r}){source}; "
                "lag works for timestamps (seconds), dates (days) and numbers."
            )
        duration = cv.parse_duration(self.lag) if isinstance(self.lag, str) else None
        problem = cv.duration_problem(duration, ctype) if duration is not None else None
        if problem is not None:
            return IncrementalConfigError(f"lag={self.lag!r} on cursor {self.cursor_path!r}{source}: {problem}.")
        return None

    # -- a stored state against this definition ---------------------------------------------

    def check_state(self, state: CursorState | None) -> None:
        """Refuse a stored state made by another definition: its last_value would mean something
        else. A minimal state ({"last_value": ...}, e.g. written by hand) is accepted; whatever
        identity fields a state has must match."""
        if state is None:
            return
        changes = []
        if state.recorded("cursor_path") and state.cursor_path != self.cursor_path:
            changes.append(f"cursor_path {state.cursor_path!r} -> {self.cursor_path!r}")
        func = func_name(self.last_value_func)
        if state.recorded("last_value_func") and state.last_value_func != func:
            changes.append(f"last_value_func {state.last_value_func!r} -> {func!r}")
        stype = state.cursor_type
        if self._type is not None and stype is not None and stype != self._type:
            inferred_temporal = self.cursor_type is None and {stype, self._type} <= {"date", "timestamp"}
            if not inferred_temporal:
                changes.append(f"cursor_type {stype!r} -> {self._type!r}")
        if changes:
            raise CursorStateMismatch(
                "The stored cursor state was made by a different cursor definition ("
                + "; ".join(changes)
                + "): its last_value cannot be used. Run a full refresh (replace the table and drop "
                "the stored state), or restore the previous definition.",
                changed=[c.split(" ", 1)[0] for c in changes],
            )

    def cursor_type_with(self, state: CursorState | None) -> str | None:
        """The cursor type a run of this definition starts with: the declared one, else the one
        the values imply (a stored "timestamp" wins over an inferred "date"), else the state's
        (None: detected from the first row)."""
        if self.cursor_type is not None:
            return self.cursor_type
        stype = state.cursor_type if state else None
        if self._type is not None:
            if self._type == "date" and stype == "timestamp":
                return "timestamp"
            return self._type
        error = self.lag_error(stype, f" (the stored state says the cursor is a {stype})")
        if error is not None:
            raise error
        return stype

    # -- derived properties ------------------------------------------------------------------

    @property
    def is_callable(self) -> bool:
        return not isinstance(self.last_value_func, str)

    @property
    def function(self) -> Callable[[Sequence[Any]], Any]:
        """The user's last_value_func (only when is_callable)."""
        func = self.last_value_func
        if isinstance(func, str):
            raise TypeError(f"last_value_func={func!r} is not a callable")
        return func

    @property
    def direction(self) -> LastValueFunc:
        """ "max" or "min"; a callable counts as "max" for row_order purposes."""
        return self.last_value_func if isinstance(self.last_value_func, str) else "max"

    @property
    def path(self) -> CursorPath:
        return self._path

    @property
    def parsed_step(self) -> Step | None:
        return self._step

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` applied and validated again (None is a value, not "unset")."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self) if f.init}
        if unknown:
            raise IncrementalConfigError(f"Incremental.replace got unknown arguments: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)
