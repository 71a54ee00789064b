"""The bound run (`spec.bind(state)` -> `IncrementalRun`): what the asset function sees (the
range and live last_value as public values, the filters) and the state it leaves. Its start is
decided once (run_start.py), its live side is what the filters move (live_cursor.py), and every
conversion follows the cursor type as it stands (run_type.py).
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from dagster_incremental.cursor.boundary import CONTENT, Boundary, DedupKey
from dagster_incremental.cursor.live_cursor import LiveCursor
from dagster_incremental.cursor.row_filter import RowFilter
from dagster_incremental.cursor.definition import CursorDefinition, Incremental, func_name, normalise_pk
from dagster_incremental.cursor.run_start import RunStart
from dagster_incremental.cursor.run_type import RunType
from dagster_incremental.cursor.state import CursorState, StoredBoundary
from dagster_incremental.errors import IncrementalConfigError


def _dedup_key(spec: CursorDefinition, inherited_primary_key: str | Sequence[str] | None) -> DedupKey:
    """The key boundary rows are told apart by: the spec's, else the asset's, else the content."""
    inherited = normalise_pk(inherited_primary_key, "inherited_primary_key") or None  # () = none
    if spec.primary_key is not None:
        return spec.primary_key
    return inherited if inherited is not None else CONTENT


def _last_to_store(spec: CursorDefinition, last: Any, state_last: Any) -> Any:
    """The run's last_value, never behind the state's: lag or a window re-read older rows."""
    if state_last is None:
        return last
    if last is None or (
        not spec.is_callable
        and ((spec.direction == "max" and last < state_last) or (spec.direction == "min" and last > state_last))
    ):
        return state_last
    if spec.is_callable and spec.lag is not None:
        return spec.function((last, state_last))  # nor does lag with a callable
    return last


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
        self._types = RunType(spec, spec.cursor_type_with(stored))
        self.dedup_key: DedupKey = _dedup_key(spec, inherited_primary_key)
        dedup = self.dedup_key != () and spec.range_start == "closed" and not self.is_backfill and spec.lag is None
        start = RunStart(spec, stored, window, types=self._types, dedup_key=self.dedup_key, dedup=dedup,
                         is_backfill=self.is_backfill)
        self._start = start
        self.start_key, self.end_key = start.start_key, start.end_key
        self.start_closed, self.end_closed = start.start_closed, start.end_closed
        self.boundary_unverified = start.boundary_unverified
        self._live = LiveCursor(spec, self._types, start, is_backfill=self.is_backfill,
                                stored_type=stored.cursor_type if stored is not None else None)

    @property
    def cursor_type(self) -> str | None:
        """The cursor type as it stands now: declared, implied by the bounds or state, or detected."""
        return self._types.value

    @property
    def start_value(self) -> Any:
        """Constant for the run: the previous last_value (lag-adjusted) or initial_value."""
        return self._types.public(self.start_key)

    @property
    def last_value(self) -> Any:
        """Live: start_value before any row (a window starting past the state's last_value: that
        last_value), then last_value_func over the kept values."""
        return self._types.public(self._live.cursor.last)

    @property
    def end_value(self) -> Any:
        return self._types.public(self.end_key)

    @property
    def initial_value(self) -> Any:
        """The spec's initial_value, else the one recorded in the state (still the lag floor)."""
        start = self._start
        return self._types.public(start.initial if start.initial is not None else start.state_initial)

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
        return self._live.cursor.boundary

    def can_close(self) -> bool:
        """True once row_order says no more in-range rows can come (stop pulling pages)."""
        return self._live.can_close()

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
        start, boundary = self._start, self._live.cursor.boundary
        last = _last_to_store(self.spec, self._live.cursor.last, start.state_last)
        initial = start.state_initial if start.state_initial is not None else start.initial
        canonical = self._types.canonical
        stored = None
        if start.dedup and boundary is not None and boundary.value is not None and boundary.value == last:
            stored = StoredBoundary.of(canonical(boundary.value), boundary.keys, boundary.overflow, self.dedup_key)
        return CursorState(
            cursor_path=self.spec.cursor_path,
            cursor_type=self.cursor_type,
            last_value_func=func_name(self.spec.last_value_func),
            initial_value=canonical(initial),
            last_value=canonical(last),
            start_value=canonical(self.start_key),
            dedup_key=self.dedup_key,
            boundary=stored,
        )

    # -- filtering (cursor/row_filter.py) --------------------------------------------------------

    def filter(self, items: Any) -> Any:
        """Keep the in-range, not-yet-loaded rows of `items`, in the same kind as given.

        dict rows, an iterable of dict rows or of pages -> a list of dicts; a pyarrow Table or
        RecordBatch -> the same; a pandas DataFrame -> a DataFrame; a pyspark DataFrame -> a lazy
        DataFrame; an iterable of tables or frames -> one table or frame. Iterables are pulled
        lazily and no further once can_close() (row_order), so an endless generator ends. Can be
        called many times per run; the live state carries over.
        """
        return RowFilter(self._live).filter(items)

    def filter_batches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Filter an iterable of batches lazily; stop pulling once can_close() (row_order).

        Batches are pages, tables, frames or single dict rows (these are grouped in chunks of
        row_filter.DICT_CHUNK). Empty local results are not yielded; Spark frames always are (lazy).
        """
        return RowFilter(self._live).filter_batches(batches)
