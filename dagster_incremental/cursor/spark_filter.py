"""The decide.py decision as lazy pyspark Column expressions: a Spark DataFrame must never be
collected to the driver to be filtered.
"""

from __future__ import annotations

# The kept rows are a lazy `where(...)`; the new last_value, the NULL / bad-value checks and the
# out-of-range flags come from ONE aggregate; the boundary keys of the new max from one small job
# (limit cap+1). Boundary dedup at the start value splits the frame into the rows at the start
# value (keyed by a pandas_udf running the SAME Python key function as every other input kind) and
# the rest, then unions them.

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from dagster_incremental.cursor import boundary as _boundary
from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import CONTENT, DedupKey, row_dedup_key
from dagster_incremental.cursor.decide import Cursor, RangeSpec
from dagster_incremental.cursor.definition import CursorDefinition
from dagster_incremental.cursor.row_errors import RowErrors
from dagster_incremental.cursor.vocabulary import TEMPORAL_TYPES
from dagster_incremental.errors import IncrementalConfigError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame


class LiveRun(Protocol):
    """What the Spark filter reads from a bound run and reports back to it (the run's
    `LiveCursor` is one); the run calls this module, so this module names it by its shape only."""

    spec: CursorDefinition
    dedup_key: DedupKey
    cursor_type: str | None

    @property
    def is_backfill(self) -> bool: ...
    @property
    def decision_inputs(self) -> RangeSpec: ...
    @property
    def cursor(self) -> Cursor: ...
    def adopt_type(self, detected: str | None, sample: Any, where: str) -> None: ...
    def type_after(self, detected: str) -> str: ...
    def advance(self, cursor: Cursor, start_out_of_range: bool, end_out_of_range: bool) -> None: ...
    @property
    def errors(self) -> RowErrors: ...
    def public_of(self, value: Any) -> Any: ...


def _field(df: DataFrame, parts: tuple[Any, ...]) -> tuple[Column, Any] | None:
    """The cursor column and its Spark type, following struct fields; None when missing."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    name = parts[0]
    fields = {f.name: f for f in df.schema.fields}
    if name not in fields:
        return None
    col = F.col(f"`{name}`")
    dtype = fields[name].dataType
    for part in parts[1:]:
        if isinstance(part, int) or not isinstance(dtype, T.StructType):
            raise IncrementalConfigError(
                f"cursor_path {'.'.join(map(str, parts))!r}: a Spark frame supports a column or struct "
                f"fields, not list indices (column {name!r} is {dtype.simpleString()})."
            )
        sub = {f.name: f for f in dtype.fields}
        if part not in sub:
            return None
        col = col.getField(part)
        dtype = sub[part].dataType
    return col, dtype


def _detect(dtype: Any, df: DataFrame, col: Column) -> str | None:
    from pyspark.sql import types as T

    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return "timestamp"
    if isinstance(dtype, T.DateType):
        return "date"
    if isinstance(dtype, T.NumericType):
        return "number"
    if isinstance(dtype, T.StringType):
        first = df.where(col.isNotNull()).select(col.alias("v")).limit(1).collect()
        return cv.detect_type(first[0]["v"]) if first else None
    return None


_JAVA_PATTERN = {
    "Y": "yyyy", "y": "yy", "m": "MM", "d": "dd", "H": "HH", "I": "hh", "M": "mm", "S": "ss",
    "f": "SSSSSS", "p": "a", "b": "MMM", "B": "MMMM", "a": "EEE", "A": "EEEE", "j": "DDD",
    "z": "[XXX][XX]", "Z": "z", "%": "%",
}


def java_pattern(fmt: str) -> str:
    """A strptime format as Spark's datetime pattern (literal text quoted), or a
    ValueError naming a directive Spark has no pattern for."""
    import re

    out = []
    for literal, directive in re.findall(r"([^%]*)(%.|$)", fmt):
        if literal:
            out.append("'" + literal.replace("'", "''") + "'")
        if directive:
            code = directive[1]
            if code not in _JAVA_PATTERN:
                raise ValueError(f"the directive %{code} of {fmt!r} has no Spark pattern")
            out.append(_JAVA_PATTERN[code])
    return "".join(out)


def string_instants(col: Column, formats: tuple[str, ...]) -> Column:
    """A string column in strptime `formats` (first match wins, then ISO-8601) as a timestamp;
    NULL where nothing matches (the caller reports such values)."""
    from pyspark.sql import functions as F

    # try_: under ANSI mode (Spark 4's default) to_timestamp fails the job on the first bad value.
    parsed = [F.try_to_timestamp(col, F.lit(java_pattern(fmt))) for fmt in formats]
    return F.coalesce(*parsed, F.try_to_timestamp(col))


def _key_expr(col: Column, dtype: Any, ctype: str, formats: tuple[str, ...] = ()) -> Column | None:
    """The key (see values.py) as a Spark expression; None when the column can't be one."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if ctype in TEMPORAL_TYPES:
        if isinstance(dtype, T.TimestampType):
            return F.unix_micros(col)
        if isinstance(dtype, T.TimestampNTZType):
            # NTZ means UTC wall time; the library's Spark session runs in UTC.
            return F.unix_micros(col.cast("timestamp"))
        if isinstance(dtype, T.DateType):
            return F.unix_date(col).cast("long") * F.lit(86_400_000_000)
        if isinstance(dtype, T.StringType):
            return F.unix_micros(string_instants(col, formats))
        if ctype in ("epoch_seconds", "epoch_millis") and isinstance(dtype, T.NumericType):
            unit = 1_000_000 if ctype == "epoch_seconds" else 1_000
            if isinstance(dtype, T.IntegralType):
                return col.cast("long") * F.lit(unit)
            return F.round(col.cast("double") * F.lit(float(unit))).cast("long")
        return None
    if ctype == "number":
        if isinstance(dtype, T.IntegralType):
            return col.cast("long")
        if isinstance(dtype, T.NumericType):
            return col.cast("double")
        return None
    if ctype == "string":
        return col if isinstance(dtype, T.StringType) else None
    return None


def dedup_key_udf(columns: list[str], dedup_key: Any, session_tz: str):
    """A pandas_udf over struct(columns) returning each row's dedup key (boundary.row_dedup_key)."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.functions import pandas_udf

    from dagster_incremental.cursor.spark_callable import library_by_value

    def _keys(frame):
        frame = frame.copy()
        for name in frame.columns:
            s = frame[name]
            if pd.api.types.is_datetime64_dtype(s) and getattr(s.dt, "tz", None) is None:
                frame[name] = s.dt.tz_localize(session_tz)  # Spark hands naive session-zone values
        try:
            rows = pa.Table.from_pandas(frame, preserve_index=False).to_pylist()
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            rows = frame.to_dict("records")
        return pd.Series([row_dedup_key(r, dedup_key) for r in rows])

    from pyspark.sql import functions as F

    # real classes, not strings: this module uses `from __future__ import annotations`
    _keys.__annotations__ = {"frame": pd.DataFrame, "return": pd.Series}
    library_by_value()
    udf = pandas_udf(_keys, "string")  # type: ignore[call-overload]  # pyspark 3.5's stubs lack the type-hint form
    return udf(F.struct(*[F.col(f"`{c}`") for c in columns]))


class _Masks(NamedTuple):
    """The decision per row, as Spark columns over the cursor key."""

    key: Column
    valid: Column
    end_ok: Column
    start_ok: Column
    in_range: Column
    is_null: Column
    bad: Column  # a value that is not NULL but has no key (not a date / timestamp / number)


def filter_spark(run: LiveRun, df: DataFrame) -> DataFrame:
    """run.filter for a pyspark DataFrame: a lazy filtered frame; the run's cursor advances.

    Reads the run only through `decision_inputs`, `cursor`, `cursor_type`, `dedup_key`,
    `is_backfill` and `spec`; reports back through `adopt_type`, `advance` and its error builders.
    """
    spec = run.spec
    if spec.path.is_whole_row:
        raise IncrementalConfigError(f"cursor_path {spec.cursor_path!r}: a Spark frame needs a column.")
    inputs = run.decision_inputs
    found = _field(df, spec.path.parts)
    if found is None:
        return _without_cursor_column(run, df, inputs.on_missing)
    col, dtype = found
    if spec.is_callable:
        return _filter_callable(run, df, col, dtype)
    detected, key = _key_column(run, df, col, dtype)
    masks = _masks(col, dtype, key, inputs)
    row = _aggregate(df, col, masks, inputs.direction)
    if row["values"] and detected is not None:
        run.adopt_type(detected, None, "the Spark frame")
    _check_values(run, df, masks, row)
    dedup_cols = _dedup_columns(run, inputs, df)
    last = _advance(run, df, masks, row, inputs, dedup_cols)
    return _kept(run, df, masks, last, inputs, dedup_cols)


def _filter_callable(run: LiveRun, df: DataFrame, col: Column, dtype: Any) -> DataFrame:
    """run.filter for a callable last_value_func (see spark_callable): the function runs on the
    executors; one aggregate job for the flags, one for the partial last values."""
    from pyspark.sql import functions as F

    from dagster_incremental.cursor import spark_callable as sc

    spec, inputs = run.spec, run.decision_inputs
    if run.cursor_type is None:
        detected = _detect(dtype, df, col)
        if detected is not None:
            run.adopt_type(detected, None, "the Spark frame")
    func, ctype, formats = spec.function, run.cursor_type, spec.formats
    bounds = (inputs.start, inputs.start_open, inputs.end, inputs.end_closed)
    cls = sc.row_classes(col, func, ctype, formats, bounds)
    marked = df.withColumn("__di_class", cls)
    kind = F.col("__di_class")
    flags = marked.select(*(F.max((kind == c).cast("int")).alias(name) for c, name in
                            ((sc.BELOW, "below"), (sc.BEYOND, "beyond"), (sc.BAD, "bad"), (sc.NULL, "nulls")))).head(1)[0]
    if flags["bad"]:
        sample = marked.where(kind == sc.BAD).drop("__di_class").head(1)[0].asDict(recursive=True)
        raise run.errors.type_error(_get(sample, spec.path.parts), sample, "the Spark frame",
                             cv.no_format_matches(formats) if formats else f"it is not a {ctype} value")
    if flags["nulls"] and inputs.on_missing == "raise":
        sample = marked.where(kind == sc.NULL).drop("__di_class").head(1)[0].asDict()
        raise run.errors.missing_error(sample, False, f"a row of the Spark frame (column {spec.path.column!r})")
    in_range = kind.isin(sc.IN_RANGE, sc.AT_START)
    start_set = inputs.start_set
    if start_set is not None and start_set.keys and not inputs.start_open:  # rows the last run loaded
        tz = df.sparkSession.conf.get("spark.sql.session.timeZone", "UTC") or "UTC"
        keys = dedup_key_udf(_dedup_columns(run, inputs, df), run.dedup_key, tz)
        in_range = in_range & ~((kind == sc.AT_START) & keys.isin(sorted(start_set.keys)))
    partials = sc.partial_lasts(marked.where(in_range), col, func, ctype, formats)
    last = sc.advance_callable(run, func, partials, bool(flags["below"]), bool(flags["beyond"]))
    if not run.is_backfill:
        in_range = in_range & sc.not_beyond(col, func, ctype, formats, last) if last is not None else F.lit(False)
    keep_nulls = (kind == sc.NULL) if inputs.on_missing == "include" else F.lit(False)
    return marked.where(in_range | keep_nulls).drop("__di_class")


def _without_cursor_column(run: LiveRun, df: DataFrame, policy: str) -> DataFrame:
    """A frame without the cursor column: every row is missing (raise / include / exclude)."""
    from pyspark.sql import functions as F

    if policy == "raise":
        first = df.limit(1).collect()
        if first:
            raise run.errors.absent_column_error(df.columns, first[0].asDict())
        return df
    return df if policy == "include" else df.where(F.lit(False))


def _key_column(run: LiveRun, df: DataFrame, col: Column, dtype: Any) -> tuple[str | None, Column]:
    """(the type detected from the frame, the cursor key as a column). The type is adopted by the
    run only once a non-NULL value is seen, so an empty frame leaves the state empty dict rows do."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    detected = _detect(dtype, df, col) if run.cursor_type in (None, "date") else None
    ctype = run.type_after(detected) if detected is not None else run.cursor_type
    if ctype is None or isinstance(dtype, T.NullType):  # only NULL cursors
        key = F.lit(None).cast("long" if ctype in (None, *TEMPORAL_TYPES) else "double")
        if ctype == "string":
            key = F.lit(None).cast("string")
    else:
        try:
            expr = _key_expr(col, dtype, ctype, run.spec.formats)
        except ValueError as exc:  # a strptime directive Spark cannot parse
            raise IncrementalConfigError(
                f"cursor_path {run.spec.cursor_path!r}: {exc}; give the column as a timestamp, or use the "
                "directives %Y %y %m %d %H %I %M %S %f %p %b %B %a %A %j %z %Z."
            ) from None
        if expr is None:
            if detected is not None:
                run.adopt_type(detected, None, "the Spark frame")
            sample = df.where(col.isNotNull()).limit(1).collect()
            value = sample[0][run.spec.path.column] if sample else None
            raise run.errors.type_error(
                value,
                sample[0].asDict() if sample else None,
                "the Spark frame",
                f"a {dtype.simpleString()} column is not a {ctype} column",
            )
        key = expr
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        key = F.when(~F.isnan(col), key)
    return detected, key


def _masks(col: Column, dtype: Any, key: Column, inputs: RangeSpec) -> _Masks:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    mx = inputs.direction == "max"
    end_ok = start_ok = F.lit(True)
    if inputs.end is not None:
        end = F.lit(inputs.end)
        if mx:
            end_ok = (key <= end) if inputs.end_closed else (key < end)
        else:
            end_ok = (key >= end) if inputs.end_closed else (key > end)
    if inputs.start is not None:
        start = F.lit(inputs.start)
        if mx:
            start_ok = (key > start) if inputs.start_open else (key >= start)
        else:
            start_ok = (key < start) if inputs.start_open else (key <= start)
    valid = key.isNotNull()
    is_null = col.isNull()
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        is_null = is_null | F.isnan(col)  # NaN = NULL, as for every other kind
    return _Masks(key, valid, end_ok, start_ok, valid & end_ok & start_ok, is_null, ~is_null & key.isNull())


def _aggregate(df: DataFrame, col: Column, m: _Masks, direction: str) -> Any:
    """ONE job: the new extreme, the NULL / bad-value counts and the out-of-range flags."""
    from pyspark.sql import functions as F

    agg = F.max if direction == "max" else F.min
    return df.select(
        agg(F.when(m.in_range, m.key)).alias("ext"),
        F.sum(F.when(m.is_null, 1).otherwise(0)).alias("nulls"),
        F.sum(F.when(m.bad, 1).otherwise(0)).alias("bad"),
        F.max(F.when(m.valid & m.end_ok & ~m.start_ok, 1).otherwise(0)).alias("below"),
        F.max(F.when(m.valid & ~m.end_ok, 1).otherwise(0)).alias("beyond"),
        F.count(col).alias("values"),
    ).collect()[0]


def _check_values(run: LiveRun, df: DataFrame, m: _Masks, row: Any) -> None:
    """Raise for a value that is not a key, or a NULL cursor under on_cursor_value_missing='raise'."""
    path = run.spec.path
    if row["bad"]:
        sample = df.where(m.bad).limit(1).collect()[0]
        value = _get(sample.asDict(recursive=True), path.parts)
        formats = run.spec.formats
        reason = cv.no_format_matches(formats) if formats else "it is not an ISO-8601 date or timestamp"
        raise run.errors.type_error(value, sample.asDict(), "the Spark frame", reason)
    if row["nulls"] and run.decision_inputs.on_missing == "raise":
        null_row = df.where(m.is_null).limit(1).collect()[0].asDict()
        raise run.errors.missing_error(null_row, False, f"a row of the Spark frame (column {path.column!r})")


def _advance(
    run: LiveRun, df: DataFrame, m: _Masks, row: Any, inputs: RangeSpec, dedup_cols: list[str]
) -> Any:
    """Move the run's cursor past the frame; the boundary keys of a new extreme come from one
    small bounded job, keyed by the same Python function as every other kind. Returns last."""
    from pyspark.sql import functions as F

    mx = inputs.direction == "max"
    last, boundary = run.cursor.last, run.cursor.boundary
    ext = row["ext"]
    if ext is not None:
        if last is None or (ext > last if mx else ext < last):
            last = ext
        if inputs.dedup and boundary is not None and ext == last:
            at_max = df.where(m.in_range & (m.key == F.lit(ext))).select(*[F.col(f"`{c}`") for c in dedup_cols])
            rows = at_max.limit(_boundary.BOUNDARY_KEY_LIMIT + 1).collect()
            keys_fn = lambda: [row_dedup_key(python_row(r, at_max.schema), run.dedup_key) for r in rows]  # noqa: E731
            boundary = boundary.observe(ext, len(rows), keys_fn, inputs.direction)
    run.advance(Cursor(last, boundary), bool(row["below"]), bool(row["beyond"]))
    return last


def _kept(run: LiveRun, df: DataFrame, m: _Masks, last: Any, inputs: RangeSpec, dedup_cols: list[str]) -> DataFrame:
    """The lazy kept rows: in range (pinned to `last`), NULLs if included, boundary rows deduped."""
    from pyspark.sql import functions as F

    in_range = m.in_range
    if not run.is_backfill:
        # Pin the range to the last_value just computed: a live source may grow before the frame
        # is written, and rows beyond the stored last_value belong to the next run.
        if last is None:
            in_range = F.lit(False)
        else:
            in_range = in_range & ((m.key <= F.lit(last)) if inputs.direction == "max" else (m.key >= F.lit(last)))
    keep_nulls = m.is_null if inputs.on_missing == "include" else F.lit(False)
    start_set = inputs.start_set
    if start_set is None or not start_set.keys or inputs.start is None or inputs.start_open:
        return df.where(in_range | keep_nulls)
    at_start = in_range & (m.key == F.lit(inputs.start))
    rest = df.where((in_range & ~at_start) | keep_nulls)
    tz = df.sparkSession.conf.get("spark.sql.session.timeZone", "UTC") or "UTC"
    keyed = df.where(at_start).where(~dedup_key_udf(dedup_cols, run.dedup_key, tz).isin(sorted(start_set.keys)))
    return rest.unionByName(keyed)


def python_row(row: Any, schema: Any) -> dict[str, Any]:
    """A collected Row as the values Arrow would give: TimestampType values (which collect()
    renders as naive datetimes in the driver's local zone) become aware UTC datetimes."""
    return {f.name: _python_value(row[i], f.dataType) for i, f in enumerate(schema.fields)}


def _python_value(value: Any, dtype: Any) -> Any:
    import datetime as dt

    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(dtype, T.TimestampType) and isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc)
    if isinstance(dtype, T.StructType):
        return python_row(value, dtype)
    if isinstance(dtype, T.ArrayType):
        return [_python_value(v, dtype.elementType) for v in value]
    if isinstance(dtype, T.MapType):
        return {k: _python_value(v, dtype.valueType) for k, v in value.items()}
    return value


def _dedup_columns(run: LiveRun, inputs: RangeSpec, df: DataFrame) -> list[str]:
    if not inputs.dedup or run.dedup_key == CONTENT:
        return list(df.columns)
    missing = [c for c in run.dedup_key if c not in df.columns]
    if missing:
        raise run.errors.key_missing_error(missing, df.columns, "the Spark frame")
    return list(run.dedup_key)


def _get(row: dict, parts: tuple[Any, ...]) -> Any:
    value: Any = row
    for p in parts:
        value = value.get(p) if isinstance(value, dict) else None
    return value
