"""The row filters of a bound run: every input kind (dict rows, pages, Arrow, pandas, Spark)
through one keep/drop decision (decide.py), the run's live cursor advanced after each batch.

Why apart from the run (run.py): the run is the cursor's state (its range, live last_value,
boundary keys, what it stores); this module is how rows meet it, one function per input kind,
each building one key array. It reads and reports to the run's live side (`LiveCursor`,
live_cursor.py) by its shape (`FilteredRun`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import DedupKey, row_dedup_key
from dagster_incremental.cursor.decide import CallableSpec, Decision, decide, decide_callable
from dagster_incremental.cursor.paths import MISSING
from dagster_incremental.cursor.spark_filter import LiveRun, filter_spark
from dagster_incremental.errors import PrimaryKeyMissing

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


def _records(df: Any) -> list[dict]:
    """The frame's rows as dicts, a missing string as None (pandas 3's `str` columns hold NaN
    for it, which a cursor would take for a number rather than for a missing value)."""
    strings = [c for c, t in df.dtypes.items() if isinstance(t, sys.modules["pandas"].StringDtype)]
    if strings:
        df = df.astype({c: object for c in strings})
        df[strings] = df[strings].where(df[strings].notna(), None)
    return df.to_dict("records")


class FilteredRun(LiveRun, Protocol):
    """What the row filters read from the bound run beyond the Spark filter's needs."""

    def can_close(self) -> bool: ...
    @property
    def callable_spec(self) -> CallableSpec: ...


class RowFilter:
    """One bound run's filters (cheap: holds only the run, whose live state it advances)."""

    def __init__(self, run: FilteredRun) -> None:
        self.run = run

    # -- the kinds of input ---------------------------------------------------------------------

    def filter(self, items: Any) -> Any:
        """IncrementalRun.filter: the kept rows of `items`, in the kind given (one branch per kind)."""
        if _is_spark_df(items):
            return filter_spark(self.run, items)
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
                    if self.run.can_close():
                        return
                out = self.filter(item)
            if _is_spark_df(out) or len(out):
                yield out
            if self.run.can_close():
                return
        if pending:
            out = self._filter_rows(pending)
            if out:
                yield out

    # -- per kind: each builds one key array and hands it to decide.decide ---------------------

    def _applied(self, decision: Decision) -> np.ndarray:
        self.run.advance(decision.cursor, decision.start_out_of_range, decision.end_out_of_range)
        return decision.keep

    def _keep(
        self,
        keys: pa.Array,
        rows_at: Callable[[np.ndarray], list[Any]],
        null_error: Callable[[int], Exception],
    ) -> np.ndarray:
        """decide.decide for one batch; `rows_at(indices)` gives rows to key (only boundary rows)."""
        dk = self.run.dedup_key

        def dedup_keys(idx: np.ndarray) -> list[str]:
            return self._dedup_keys(dk, idx, rows_at(idx))

        return self._applied(decide(keys, self.run.decision_inputs, self.run.cursor, dedup_keys, null_error))

    def _dedup_keys(self, dk: DedupKey, idx: np.ndarray, rows: list[Any]) -> list[str]:
        """The primary-key texts of rows at the start value; a row without the key is named."""
        out = []
        for i, r in zip(idx, rows, strict=True):
            try:
                out.append(row_dedup_key(r, dk, where=f"row {i}"))
            except PrimaryKeyMissing as exc:
                columns = list(r) if isinstance(r, Mapping) else []
                raise self.run.errors.key_missing_error(exc.columns, columns, f"row {i}") from None
        return out

    def _filter_rows(self, rows: list[Any]) -> list[Any]:
        return [rows[i] for i in self._row_indices(rows)] if rows else []

    def _row_indices(self, rows: list[Any]) -> np.ndarray:
        """Indices of the kept dict rows: cursor values extracted once, then one key array."""
        path = self.run.spec.path
        values = [row if path.is_whole_row else path.extract(row) for row in rows]

        def rows_at(idx: np.ndarray) -> list[Any]:
            return [rows[i] for i in idx]

        def null_error(i: int) -> Exception:
            if all(v is MISSING for v in values) and isinstance(rows[i], Mapping):
                return self.run.errors.absent_column_error(list(dict.fromkeys(k for r in rows for k in r)), rows[i])
            return self.run.errors.missing_error(rows[i], values[i] is MISSING, f"row {i}")

        if self.run.spec.is_callable:
            return np.flatnonzero(self._decide_callable(values, rows, rows_at, null_error))
        plain = [None if v is MISSING else v for v in values]
        keys = self._python_keys(plain, rows.__getitem__)
        return np.flatnonzero(self._keep(keys, rows_at, null_error))

    def _python_keys(self, plain: list[Any], row_at: Callable[[int], Any]) -> pa.Array:
        """Python cursor values (None for missing) as keys, detecting the type if needed."""
        if self.run.cursor_type is None or self.run.cursor_type == "date":
            i = next((i for i, v in enumerate(plain) if v is not None), None)
            if i is not None:
                detected = cv.detect_type(plain[i])
                if detected is None:
                    raise self.run.errors.type_error(plain[i], row_at(i), f"row {i}", "it is not a scalar cursor value")
                self.run.adopt_type(detected, plain[i], f"row {i}")
        if self.run.cursor_type is None:
            return pa.nulls(len(plain), pa.int64())
        try:
            return cv.values_to_keys(plain, self.run.cursor_type, formats=self.run.spec.formats)
        except cv.KeyConversionError as e:
            i = e.index or 0
            raise self.run.errors.type_error(e.value, row_at(i), f"row {i}", e.reason) from None

    def _arrow_keys(self, col: pa.Array, row_at: Callable[[int], Any]) -> pa.Array:
        """An Arrow cursor column as keys (vectorised), detecting the type if needed."""
        if (self.run.cursor_type is None or self.run.cursor_type == "date") and col.null_count < len(col):
            detected = cv.detect_arrow_type(col)
            if detected is None:
                i = pc.indices_nonzero(col.is_valid())[0].as_py()
                raise self.run.errors.type_error(
                    col[i].as_py(), row_at(i), f"row {i}", f"a {col.type} column cannot be a cursor"
                )
            self.run.adopt_type(detected, None, "the table")
        if self.run.cursor_type is None:
            return pa.nulls(len(col), pa.int64())
        try:
            return cv.arrow_to_keys(col, self.run.cursor_type, self.run.spec.formats)
        except cv.KeyConversionError as e:
            i = e.index or 0
            raise self.run.errors.type_error(e.value, row_at(i), f"row {i}", e.reason) from None

    def _decide_callable(self, values, rows, rows_at, null_error) -> np.ndarray:
        """Values go to the user's function in public form (ISO strings as pendulum instants)."""
        ctype = self.run.cursor_type
        if ctype is None:
            first = next((v for v in values if v is not MISSING and v is not None), None)
            ctype = cv.detect_type(first) if first is not None else None
            if ctype is not None and ctype != "string":
                self.run.cursor_type = ctype
        if ctype not in (None, "string"):
            public = []
            for i, v in enumerate(values):
                if v is MISSING or v is None:
                    public.append(v)
                    continue
                try:
                    public.append(cv.key_to_public(cv.to_key(v, ctype, self.run.spec.formats), ctype))
                except cv.KeyConversionError as e:
                    raise self.run.errors.type_error(v, rows[i], f"row {i}", e.reason) from None
            values = public

        def type_error(i: int, e: Exception) -> Exception:
            return self.run.errors.type_error(values[i], rows[i], f"row {i}", f"last_value_func raised {e!r}")

        dk = self.run.dedup_key

        def dedup_keys(idx: np.ndarray) -> list[str]:
            return self._dedup_keys(dk, idx, rows_at(idx))

        return self._applied(
            decide_callable(values, self.run.callable_spec, self.run.cursor, dedup_keys, null_error, type_error)
        )

    def _missing_column(self, n: int, columns: list[str], first_row: Callable[[], Any]) -> np.ndarray:
        """A table without the cursor column: every row is missing (raise / include / exclude)."""
        policy = self.run.spec.on_cursor_value_missing
        if n and policy == "raise":
            raise self.run.errors.absent_column_error(columns, first_row())
        return np.full(n, policy == "include", dtype=bool)

    def _filter_arrow(self, table: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
        def rows_at(idx: Any) -> list[Any]:
            return table.take(pa.array(idx, pa.int64())).to_pylist()

        def row_at(i: int) -> Any:
            return table.slice(i, 1).to_pylist()[0]

        n = table.num_rows
        if self.run.spec.is_callable:
            keep = np.zeros(n, dtype=bool)
            keep[self._row_indices(table.to_pylist())] = True
            return table.filter(pa.array(keep, pa.bool_()))
        col = self.run.spec.path.arrow_column(table)
        if col is None:
            return table.filter(
                pa.array(self._missing_column(n, table.schema.names, lambda: row_at(0)), pa.bool_())
            )
        keys = self._arrow_keys(col, row_at)
        where = f"(column {self.run.spec.path.column!r})"
        keep = self._keep(keys, rows_at, lambda i: self.run.errors.missing_error(row_at(i), False, f"row {i} {where}"))
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
        if self.run.spec.is_callable:
            keep = np.zeros(n, dtype=bool)
            keep[self._row_indices(_records(df))] = True
            return df[keep]
        column = self.run.spec.path.column
        if column is None:
            self.run.spec.path.arrow_column(pa.table({}))  # raises: a frame needs a column, not "$"
        if column not in df.columns:
            return df[self._missing_column(n, list(df.columns), lambda: row_at(0))]
        try:
            col = self.run.spec.path.arrow_column(pa.Table.from_pandas(df[[column]], preserve_index=False))
            if col is None:  # a struct field that is not there
                return df[self._missing_column(n, list(df.columns), lambda: row_at(0))]
            keys = self._arrow_keys(col, row_at)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # an object column Arrow cannot type (mixed values): the dict rows' conversion
            values = [self.run.spec.path.extract(r) for r in df[[column]].to_dict("records")]
            plain = [None if v is MISSING or (isinstance(v, float) and v != v) else v for v in values]
            keys = self._python_keys(plain, row_at)
        where = f"(column {column!r})"
        keep = self._keep(keys, rows_at, lambda i: self.run.errors.missing_error(row_at(i), False, f"row {i} {where}"))
        return df[keep]
