"""A callable last_value_func on a Spark frame: the user's function runs on the executors, never
with the rows on the driver.
"""

from __future__ import annotations

# How: a pandas UDF turns each cursor value into the public value the function sees (pendulum
# for instants, as for every other kind) and classifies the row by dlt's rule, asked of the
# function: beyond end_value, below the start, at the start, or in range. The kept rows are a
# lazy `where`. The new last_value is the function over each partition's kept values
# (mapInPandas), then over those partial results and the run's last_value on the driver, so the
# function must be associative and commutative, as max and min are (dlt's examples are). The
# boundary keys of the new last_value are not collected: the state marks them unverified, and
# the next run keeps rows at its start value and lets an append writer drop those already loaded.

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import Boundary
from dagster_incremental.cursor.decide import Cursor

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

IN_RANGE, AT_START, BELOW, BEYOND, BAD, NULL = 1, 2, 3, 4, 5, 6


def public_values(values: Sequence[Any], ctype: str | None, formats: tuple[str, ...]) -> list[Any]:
    """Raw column values as the function sees them; a value that is not one of the cursor's
    type becomes the BAD marker (the caller reports it with its row)."""
    out: list[Any] = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v):
            out.append(None)
        elif ctype in (None, "string"):
            out.append(v)
        else:
            try:
                out.append(cv.key_to_public(cv.to_key(_plain(v), ctype, formats), ctype))
            except cv.KeyConversionError:
                out.append(_Bad)
    return out


class _Bad:
    """Marks a value that cannot be a cursor value of the run's type."""


def _plain(value: Any) -> Any:
    """pandas / numpy scalars as Python's (a naive pandas Timestamp is UTC: the session's zone)."""
    to_py = getattr(value, "to_pydatetime", None)
    if to_py is not None:
        return to_py()
    item = getattr(value, "item", None)
    return item() if item is not None and type(value).__module__ == "numpy" else value


def classify(func: Callable, p: Any, start: Any, start_open: bool, end: Any, end_closed: bool) -> int:
    """dlt's per-row range rule for a callable (decide._step without the sequential walk)."""
    if p is None:
        return NULL
    if p is _Bad:
        return BAD
    if end is not None and (func((p, end)) != end or (not end_closed and func((p,)) == end)):
        return BEYOND
    if start is not None and func((p, start)) == start:
        return AT_START if func((p,)) == start and not start_open else BELOW
    return IN_RANGE


def library_by_value() -> None:
    """The library's code in a UDF travels to Spark's Python workers by value, not by module
    name, so a Spark Connect server's or a cluster's workers need pandas and pyarrow, not
    dagster_incremental. Called before each UDF of the library is built."""
    from pyspark import cloudpickle

    import dagster_incremental

    cloudpickle.register_pickle_by_value(dagster_incremental)


def row_classes(col: Column, func: Callable, ctype: str | None, formats: tuple[str, ...], bounds: tuple) -> Column:
    """The class of each row (IN_RANGE ... NULL) as a pandas UDF over the cursor column."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    def _classes(values: pd.Series) -> pd.Series:
        publics = public_values(values.tolist(), ctype, formats)
        return pd.Series([classify(func, p, *bounds) for p in publics], dtype="int32")

    _classes.__annotations__ = {"values": pd.Series, "return": pd.Series}  # real classes, not strings
    library_by_value()
    return cast(Any, pandas_udf)(_classes, "int")(col)


def not_beyond(col: Column, func: Callable, ctype: str | None, formats: tuple[str, ...], last: Any) -> Column:
    """Whether each row's value is not past `last` by the function (pins the kept rows to the
    last_value just computed, as the max/min path does)."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    def _pinned(values: pd.Series) -> pd.Series:
        publics = public_values(values.tolist(), ctype, formats)
        return pd.Series([p is None or p is _Bad or func((p, last)) == last for p in publics], dtype=bool)

    _pinned.__annotations__ = {"values": pd.Series, "return": pd.Series}
    library_by_value()
    return cast(Any, pandas_udf)(_pinned, "boolean")(col)  # pandas has no stubs: no overload matches


def partial_lasts(df: DataFrame, col: Column, func: Callable, ctype: str | None, formats: tuple[str, ...]) -> list[Any]:
    """The function over each partition's values (JSON text: canonical for instants)."""
    import pandas as pd

    def _reduce(frames):
        values: list[Any] = []
        for frame in frames:
            values.extend(p for p in public_values(frame["v"].tolist(), ctype, formats) if p is not None)
        if values:
            result = func(tuple(values))
            if ctype not in (None, "string"):
                result = cv.key_to_canonical(cv.to_key(result, ctype), ctype)
            yield pd.DataFrame({"last": [json.dumps(result, default=str)]})

    library_by_value()
    rows = df.select(col.alias("v")).mapInPandas(_reduce, "last string").collect()
    return [json.loads(r["last"]) for r in rows]


def advance_callable(run: Any, func: Callable, partials: list[Any], below: bool, beyond: bool) -> Any:
    """Move the run's cursor by the partial results (in public form); returns the new last."""
    last = run.cursor.last
    publics = [run.public_of(p) for p in partials]
    if publics:
        last = func((*publics, last)) if last is not None else func(tuple(publics))
    boundary = run.cursor.boundary
    if boundary is not None and last is not None and last != boundary.value:
        boundary = Boundary(last, frozenset(), True)  # keys not collected: the next run verifies
    run.advance(Cursor(last, boundary), below, beyond)
    return last
