"""Staging: whatever the user's function produced, filtered by its cursors, as one Spark DataFrame."""

# The function may yield dict rows, pages (lists) of dict rows, pyarrow Tables or RecordBatches,
# pandas DataFrames or pyspark DataFrames, or return any of those. Dict rows are grouped into
# pages so the cursor engine filters page by page (and `row_order` can stop the generator early);
# kept rows travel as Arrow and enter Spark in one conversion, never row by row.

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.connect import refuse_connect_frame, refuse_connect_process
from dagster_incremental.spark.local.rows import LocalRows

PAGE_SIZE = 1000  # dict rows yielded one by one are grouped into pages of this size
ROWS_PER_PARTITION = 100_000  # local rows per Spark partition (and so per data file written)


def iterate_output(output: Any, asset: str, connect_ok: bool = False) -> Iterator[Any]:
    """Turn the function's result into an iterator of batches (pages, tables or frames). Where a
    batch enters the library: a Spark Connect DataFrame is refused here, before any filter reads it
    (unless the destination runs over Connect: `connect_ok`)."""
    if output is None:
        return iter(())
    refuse_connect_frame(output, asset, connect_ok)
    if _is_batch(output):
        return iter((output,))
    if isinstance(output, Mapping):
        return iter(([dict(output)],))
    if isinstance(output, list):
        if not output:
            return iter(())
        if all(isinstance(r, Mapping) for r in output):
            return iter((output,))
        return _batches(iter(output), asset, connect_ok)
    if isinstance(output, Iterable) and not isinstance(output, (str, bytes)):
        return _batches(iter(output), asset, connect_ok)
    raise DataShapeError(_not_a_row(asset, output))


def _batches(items: Iterator[Any], asset: str, connect_ok: bool) -> Iterator[Any]:
    """Group loose dict rows into pages; pass pages and tables through; reject anything else."""
    page: list[dict] = []
    for item in items:
        if isinstance(item, Mapping):
            page.append(item)  # type: ignore[arg-type]
            if len(page) >= PAGE_SIZE:
                yield page
                page = []
            continue
        if page:
            yield page
            page = []
        if item is None or (isinstance(item, list) and not item):
            continue
        if isinstance(item, list):
            bad = next((r for r in item if not isinstance(r, Mapping)), None)
            if bad is not None:
                raise DataShapeError(_not_a_row(asset, bad, inside_page=True))
            yield item
        elif _is_batch(item):
            refuse_connect_frame(item, asset, connect_ok)
            yield item
        else:
            raise DataShapeError(_not_a_row(asset, item))
    if page:
        yield page


def _not_a_row(asset: str, value: Any, inside_page: bool = False) -> str:
    where = "a page (list) holding" if inside_page else "a"
    if isinstance(value, (str, bytes, int, float)):  # a stray value: quoted, cut short
        shown = repr(value) if len(repr(value)) <= 120 else repr(value)[:117] + "..."
    else:  # a row of another shape (a tuple, an object): never quoted, it may hold personal data
        shown = f"{len(value)} values" if hasattr(value, "__len__") else "not a row"
    return (
        f"asset {asset!r}: the function yielded {where} {type(value).__name__} ({shown}); yield dict rows, "
        "lists of dict rows, pyarrow Tables, pandas DataFrames or a pyspark DataFrame"
    )


def is_spark_frame(obj: Any) -> bool:
    return _kind(obj) == "spark"


def _is_batch(obj: Any) -> bool:
    return _kind(obj) is not None


def _kind(obj: Any) -> str | None:
    for cls in type(obj).__mro__:
        module = cls.__module__
        if module.startswith("pyarrow") and cls.__name__ in ("Table", "RecordBatch"):
            return "arrow"
        if module.startswith("pandas") and cls.__name__ == "DataFrame":
            return "pandas"
        if module.startswith("pyspark.sql") and cls.__name__ == "DataFrame":
            return "spark"
    return None


@dataclass(frozen=True)
class Staged:
    """The staged batch: local rows (Arrow, spilled to disk when large) and/or lazy pyspark frames.

    Local rows stay in Arrow until the writer decides how to write them: the table writer can
    append them without a Spark job, and only converts them when Spark must read them (a MERGE).
    `deduplicated`: the local dedup already decided one row per primary key.
    """

    local: LocalRows | None = None
    frames: tuple[Any, ...] = ()
    deduplicated: bool = False

    def data(self, spark_provider: Any) -> Any:
        """What the writer takes: the LocalRows when all rows are local, else one pyspark frame
        (`spark_provider()` is only called then: a local batch needs no Spark session)."""
        if not self.frames:
            return self.local
        frames = list(self.frames)
        if self.local is not None:
            frames.insert(0, arrow_to_spark(spark_provider(), self.local))
        frame = frames[0]
        for other in frames[1:]:
            frame = frame.unionByName(other, allowMissingColumns=True)
        return frame


def stage_batches(
    output: Any, runs: Mapping[str, Any], settings: Any, spec: Any, on_first_rows: Any = None,
    collect_frames_up_to: int = 0, connect_ok: bool = False,
) -> Staged:
    """Filter the function's output through every bound cursor and stage it for the writer.

    Dict pages become Arrow before the cursor filter (one vectorised pass instead of one Python
    step per row) whenever every cursor is a top-level column; a page Arrow can't type goes the
    dict way, whose errors name the row. `on_first_rows()` is called once, when the first kept
    rows arrive (the caller starts Spark then, while the source is still extracting).
    collect_frames_up_to: a Spark DataFrame of at most this many rows is collected and staged
    as local rows (a transformation of an upstream's few changes: the local merge then matches
    its keys without a Spark MERGE over the whole target). connect_ok: the destination runs over
    Spark Connect, so Connect DataFrames and a process marked as Connect are its own.
    """
    import pyarrow as pa

    from dagster_incremental.spark.local import dedup
    batches: Iterator[Any] = iterate_output(output, settings.name, connect_ok)
    if all(_top_level_cursor(run) for run in runs.values()):
        batches = (_page_as_arrow(b) if isinstance(b, list) else b for b in batches)
    for run in runs.values():
        batches = run.filter_batches(batches)
    rows = LocalRows(prepare=lambda table: _typed_cursor_columns_arrow(table, runs))
    local = False
    frames = []
    for batch in batches:
        if _shapeless(batch):
            continue  # no rows and no columns (an empty table or frame): nothing to stage
        if on_first_rows is not None:
            on_first_rows()
            on_first_rows = None
        kind = _kind(batch)
        if kind == "spark":
            batch = _typed_cursor_columns(batch, runs)
            collected = small_frame_as_arrow(batch, collect_frames_up_to) if collect_frames_up_to else None
            if collected is None:
                frames.append(batch)
                continue
            batch, kind = collected, "arrow"
        if kind == "arrow":
            rows.add(batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch]))
        elif kind == "pandas":
            rows.add(pa.Table.from_pandas(batch, preserve_index=False))
        elif batch:
            rows.add(_page_to_arrow(batch, settings.name))
        local = True
    refuse_connect_process(settings.name, connect_ok)  # the function may have made a Connect session while it ran
    if not local:
        return Staged(frames=tuple(frames))
    rows.finish()
    deduplicated = False
    if not frames and dedup.covers(spec, rows.column_names):
        rows.keep, deduplicated = dedup.decide(rows, spec)
    # (the engine already pinned Spark sources to the last_value it computed)
    return Staged(local=rows, frames=tuple(frames), deduplicated=deduplicated)


def _shapeless(batch: Any) -> bool:
    """A batch with no columns (so no rows): `pa.table({})`, an empty pandas DataFrame."""
    kind = _kind(batch)
    if kind == "spark":
        return not batch.columns
    if kind in ("arrow", "pandas"):
        return len(batch.columns) == 0
    return not batch


def small_frame_as_arrow(frame: Any, max_rows: int) -> Any:
    """`frame`'s rows as one Arrow table when it has 1..max_rows rows (one Spark job, stopped
    after max_rows + 1 rows); None when it is empty or larger (then it stays a Spark frame)."""
    import pyarrow as pa

    from dagster_incremental.spark.connect import is_connect

    if is_connect(frame):  # Arrow straight from the server (no JVM here for _collect_as_arrow)
        table = frame.limit(max_rows + 1).toArrow()
        return table if 0 < table.num_rows <= max_rows else None
    batches = frame.limit(max_rows + 1)._collect_as_arrow()
    rows = sum(b.num_rows for b in batches)
    if not 0 < rows <= max_rows:
        return None
    return pa.Table.from_batches(batches)


def _top_level_cursor(run: Any) -> bool:
    path = getattr(getattr(run, "spec", None), "cursor_path", None)
    if not path:
        return False
    return not any(c in path for c in ".$[*") and not run.spec.is_callable


def _page_as_arrow(page: list[dict]) -> Any:
    """A page as an Arrow table, or the page itself when Arrow can't type it."""
    import pyarrow as pa

    try:
        return rows_to_arrow(page)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return page


def rows_to_arrow(page: list[dict]):
    """Dict rows as an Arrow table with every column any row has. (`Table.from_pylist` takes
    the columns of the first row only: an optional field missing there would vanish.)"""
    import pyarrow as pa

    if not page:
        return pa.table({})
    return pa.Table.from_struct_array(pa.array(page))


def _page_to_arrow(page: list[dict], asset: str):
    import pyarrow as pa

    try:
        return rows_to_arrow(page)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        column = _conflicting_column(page)
        if column is None:
            column, value = _unstorable_value(page)
            if column is not None:
                shown = repr(value)[:120]
                raise DataShapeError(
                    f"asset {asset!r}: column {column!r} holds a {type(value).__name__} ({shown}), which "
                    "can't be stored in a table; yield str, int, float, bool, date/datetime, Decimal, "
                    f"bytes, or lists/dicts of those ({exc})"
                ) from exc
        raise DataShapeError(
            f"asset {asset!r}: rows disagree on the type of column {column!r} ({exc}); "
            "every row must give a column values of one type"
        ) from exc


def _unstorable_value(page: list[dict]) -> tuple[str | None, Any]:
    """The first column (and value) Arrow cannot convert even on its own (only on the error path)."""
    import pyarrow as pa

    for row in itertools.islice(page, 10_000):
        for key, value in row.items():
            try:
                pa.array([value])
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return key, value
    return None, None


def _conflicting_column(page: list[dict]) -> str | None:
    types: dict[str, set[type]] = {}
    for row in itertools.islice(page, 10_000):
        for key, value in row.items():
            if value is not None:
                types.setdefault(key, set()).add(type(value))
    for key, seen in types.items():
        if len(seen - {int, float}) > 1 or (len(seen) > 1 and not seen <= {int, float}):
            return key
    return None


def as_local(obj: Any) -> LocalRows | None:
    """Rows held in this process (LocalRows or a pyarrow Table) as LocalRows; None for anything
    else (a Spark DataFrame, no rows)."""
    if isinstance(obj, LocalRows):
        return obj
    return LocalRows.of(obj) if _kind(obj) == "arrow" else None


def arrow_to_spark(spark, rows: Any):
    """Local rows as a Spark DataFrame, chunk by chunk (explicit schema, no per-row Python)."""
    from dagster_incremental.spark.connect import is_connect
    from dagster_incremental.spark.schema_evolution import spark_ready_schema, spark_schema_of_arrow

    over_connect = is_connect(spark)  # no SparkContext, no RDD: partitions by row count alone
    takes_arrow = _takes_arrow()
    rows = _rows(rows)
    schema = spark_ready_schema(rows.schema)
    spark_schema = spark_schema_of_arrow(schema)
    frame = None
    for chunk in rows.chunks():
        data = chunk.cast(schema) if takes_arrow else chunk.cast(schema).to_pandas()
        part = spark.createDataFrame(data, schema=spark_schema)
        # Spark makes one partition per Arrow batch (10,000 rows): 100 tasks and 100 small files
        # for 1M rows. Partitions of ~ROWS_PER_PARTITION write the same rows 3-5x faster
        # (measured); not fewer: a local partition's rows travel inside its task.
        if over_connect:
            part = part.coalesce(max(1, -(-chunk.num_rows // ROWS_PER_PARTITION)))  # never more, no shuffle
        else:
            wanted = max(spark.sparkContext.defaultParallelism, -(-chunk.num_rows // ROWS_PER_PARTITION))
            part = part.coalesce(wanted) if part.rdd.getNumPartitions() > wanted else part
        frame = part if frame is None else frame.unionByName(part)
    return frame


def _takes_arrow() -> bool:
    """PySpark 4 makes a DataFrame from a pyarrow Table itself (classic and Connect); 3.5 from
    pandas. Why not pandas on 4: under pandas 3 a text column of several Arrow batches stays a
    chunked array, which Connect's serializer refuses and the classic session converts row by
    row in Python (its Arrow path gives up on it)."""
    from pyspark import __version__

    return int(__version__.split(".", 1)[0]) >= 4


def _timestamp_cursor_columns(columns: list[str], runs: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Top-level columns that hold a timestamp cursor, with the datetime formats of its text."""
    out = []
    for run in runs.values():
        spec = getattr(run, "spec", None)
        path = getattr(spec, "cursor_path", None)
        if path and path in columns and getattr(run, "cursor_type", None) == "timestamp":
            out.append((path, tuple(getattr(spec, "formats", ()))))
    return out


def _typed_cursor_columns_arrow(table, runs: Mapping[str, Any]):
    """Text in a timestamp cursor column (ISO-8601, or the cursor's datetime formats) becomes a
    UTC timestamp while still in Arrow (the cursor engine's own parser: offsets honoured, no
    offset = UTC), so local dedup
    compares instants and Spark gets a typed column."""
    import pyarrow as pa

    from dagster_incremental.cursor.values import arrow_to_keys

    for name, formats in _timestamp_cursor_columns(table.column_names, runs):
        column = table[name]
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            micros = arrow_to_keys(column, "timestamp", formats)
            table = table.set_column(
                table.schema.get_field_index(name), name, micros.cast(pa.timestamp("us", "UTC"))
            )
    return table


def _typed_cursor_columns(frame, runs: Mapping[str, Any]):
    """Text in a timestamp cursor column (ISO-8601, or the cursor's datetime formats) is stored
    as a real timestamp.

    Window replaces, partition pruning and downstream SQL then compare instants, not text.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    from dagster_incremental.cursor.spark_filter import string_instants

    for path, formats in _timestamp_cursor_columns(frame.columns, runs):
        if isinstance(frame.schema[path].dataType, StringType):
            frame = frame.withColumn(path, string_instants(F.col(f"`{path}`"), formats))
    return frame


def _rows(rows: Any) -> LocalRows:
    local = as_local(rows)
    if local is None:
        raise TypeError(f"expected local rows (LocalRows or a pyarrow Table), got {type(rows).__name__}")
    return local
