"""Local rows appended or upserted by pyiceberg in the run's process: no JVM, no Spark session.

Why: Dagster starts each run in a new process, so a sensor's small change run paid ~3-5 s for a
JVM and a Spark session it never needed. When the table's catalog is one pyiceberg commits to
as the JVM does (a folder of this machine, the embedded default; a JDBC catalog's database; a
REST catalog: catalog_table.py), the batch is rows this process holds and the write is an
append or an upsert by primary key, pyiceberg writes the Parquet files and the snapshot. The
snapshot carries the cursor exactly as the Spark path's does, and the run commits only if the
table still holds the cursor it read: checked on the metadata the table was loaded from, and
that metadata's snapshot is the commit's base (the folder's commit lock; the catalog's
compare-and-set).

An upsert is copy-on-write here: every data file holding a batch key is rewritten without those
rows, in the same snapshot that adds the batch. That costs the rows of the files it touches, so
it is taken only up to a measured bound of them (lower when this process runs a JVM already) and
when none of those files has delete files;
changes scattered over a large table keep the position-delete path (local/merge.py). None from
`write_in_python` means "use the other paths"; nothing was written then.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.local.stage import as_local
from dagster_incremental.spark.iceberg.metadata import TableMetadata, live_row_count, pyiceberg_metadata
from dagster_incremental.spark.write_spec import HELPER_PREFIX, IncrementalBatch, WriteResult, WriteSpec

MAX_ROWS = 1_000_000  # batch rows written from memory by pyiceberg
# Rows of the data files an upsert may rewrite (copy-on-write), measured (1,000 changes, warm
# process): into 100,000 rows pyiceberg 0.4 - 1.0 s, the JVM's position deletes 0.7 - 2.7 s; into
# 300,000 about even; a JVM takes 3 - 5 s to start, so without one the rewrite wins far longer.
MAX_REWRITE_ROWS = 2_000_000  # when this process has no JVM yet
MAX_REWRITE_ROWS_WITH_JVM = 100_000  # when one runs already
_ROW = "__di_row"


class _Unsupported(Exception):
    """This batch or table takes the other paths (never shown to the user)."""


def takes(spec: WriteSpec) -> bool:
    """Whether this disposition can be committed by pyiceberg (the batch decides the rest)."""
    if importlib.util.find_spec("pyiceberg") is None:  # a dependency; an install may lack it
        return False
    if spec.partition_by or spec.delete_missing or spec.table_properties:
        return False
    if spec.disposition == "append":
        return True
    return spec.merge_strategy == "upsert" and spec.keyed and spec.hard_delete_column is None


def write_in_python(load: Callable[[], tuple[Any, TableMetadata] | None], batch: IncrementalBatch, case_sensitive: bool,
                    jvm_running: bool) -> WriteResult | None:
    """`batch` committed by pyiceberg into the table `load` returns (catalog_table.load's table
    and the metadata it was loaded from; called only for a batch pyiceberg may write); None: the
    other paths write it. Raises StaleCursor when the table no longer holds the cursor the run
    read. jvm_running: this process has a Spark session, which makes the position-delete path
    cheaper for all but small rewrites."""
    from dagster_incremental.spark.iceberg.local.catalog_table import CatalogMoved

    rows = _local_rows(batch)
    target = load() if rows is not None else None
    if rows is None or target is None:
        return None
    table, metadata = target
    spec = batch.spec
    if batch.check_stale:
        _refuse_stale(metadata, batch)
    try:
        _check_table(table)
        data = _conformed(rows.table(), table.schema().as_arrow(), case_sensitive)
        rewrite_bound = MAX_REWRITE_ROWS_WITH_JVM if jvm_running else MAX_REWRITE_ROWS
        with _system_memory_pool():
            counts = _commit(table, spec, data, _properties(batch), rewrite_bound)
    except (_Unsupported, CatalogMoved):
        # CatalogMoved: another writer committed since the table was loaded (its catalog
        # refused this commit, which wrote nothing): the JVM's guarded commit decides whether
        # that writer moved the cursor (the run fails) or not (committed on top of it).
        return None
    _refresh_spark_cache(spec.table.sql)
    return _result(pyiceberg_metadata(table), counts)


@contextlib.contextmanager
def _system_memory_pool() -> Iterator[None]:
    """pyiceberg's reads and writes on malloc's pool: Arrow's default pool keeps what its reader
    threads freed, measured at 40 MB more peak memory for a 1,000-row change into 20,000 rows."""
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


def _refresh_spark_cache(table_sql: str) -> None:
    """A Spark session of this process caches the table (a Connect session: the server, for this
    session): its next read must see this commit. Never starts a session."""
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if session is not None:
        session.catalog.refreshTable(table_sql)


def _local_rows(batch: IncrementalBatch) -> LocalRows | None:
    """The batch's rows when pyiceberg may write them: held in memory, not too many, no helper
    columns, and a write that is an append or an upsert of one row per key."""
    if batch.window is not None or batch.full_refresh or not takes(batch.spec):
        return None
    rows = as_local(batch.data)
    if rows is None or rows.spilled or not 0 < rows.num_rows <= MAX_ROWS:
        return None
    if any(c.startswith(HELPER_PREFIX) for c in rows.column_names):
        return None
    if batch.spec.disposition == "merge" and not batch.deduplicated:
        return None
    return rows


def _refuse_stale(metadata: TableMetadata, batch: IncrementalBatch) -> None:
    from dagster_incremental.spark.run_commit import StaleCursor

    current = metadata.committed_cursor(batch.commit.scope)
    if (current.snapshot_id if current is not None else None) != batch.expected_snapshot_id:
        raise StaleCursor(current.run_id if current is not None else None)


def _check_table(table: Any) -> None:
    """Tables pyiceberg writes exactly as Spark would: unpartitioned, unsorted Parquet."""
    metadata = table.metadata
    props = metadata.properties
    if not metadata.spec().is_unpartitioned() or metadata.sort_order().order_id != 0:
        raise _Unsupported("partitioned or sorted")
    if props.get("write.format.default", "parquet").lower() != "parquet":
        raise _Unsupported("not Parquet")
    if metadata.current_snapshot() is None:
        raise _Unsupported("no snapshot yet")


def _conformed(data: pa.Table, schema: pa.Schema, case_sensitive: bool) -> pa.Table:
    """`data` with exactly the table's columns, in its order and types. A batch with other
    columns (schema evolution) or a type Spark would not store as is (a widening, a date into a
    timestamp, a local date-time into an instant) takes the other paths, which decide it."""
    def norm(name: str) -> str:
        return name if case_sensitive else name.lower()

    by_name = {norm(name): name for name in data.column_names}
    if len(by_name) != data.num_columns or set(by_name) != {norm(f.name) for f in schema}:
        raise _Unsupported("other columns")
    columns = [data[by_name[norm(f.name)]] for f in schema]
    if not all(_exact_cast(c.type, f.type) for c, f in zip(columns, schema)):
        raise _Unsupported("a type to change")
    try:
        return pa.Table.from_arrays([c.cast(f.type, safe=True) for c, f in zip(columns, schema)], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _Unsupported(str(exc)) from None


def _exact_cast(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of `source` is the same value of `target` (what Spark's insert keeps)."""
    types = pa.types
    if source.equals(target) or types.is_null(source):
        return True
    if types.is_signed_integer(source) and types.is_signed_integer(target):
        return bool(source.bit_width <= target.bit_width)
    if types.is_floating(target) and target.bit_width == 64:
        return types.is_float32(source) or (types.is_signed_integer(source) and source.bit_width <= 32)
    if types.is_timestamp(source) and types.is_timestamp(target):
        return (source.tz is None) == (target.tz is None)  # a safe cast refuses a lost sub-microsecond
    pairs = ((types.is_string, types.is_large_string), (types.is_binary, types.is_large_binary))
    return any((a(source) or b(source)) and (a(target) or b(target)) for a, b in pairs)


def _properties(batch: IncrementalBatch) -> dict[str, str]:
    from dagster_incremental.spark.run_commit import commit_properties, new_commit_id

    return commit_properties(batch.commit, commit_id=new_commit_id())


def _commit(table: Any, spec: WriteSpec, data: pa.Table, properties: dict[str, str], rewrite_bound: int) -> tuple[int, int]:
    """One snapshot carrying `properties`; (rows inserted, rows updated)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    touched: list[Any] = []
    kept: list[pa.Table] = []
    updated = 0
    if spec.disposition == "merge":
        touched, kept, updated = _rewrites(table, data, list(spec.primary_key), rewrite_bound)
    with _removed_on_failure(table) as written:
        files = list(_dataframe_to_data_files(table.metadata, pa.concat_tables([data, *kept]), table.io))
        written.extend(f.file_path for f in files)
        with table.transaction() as transaction:
            update = transaction.update_snapshot(snapshot_properties=properties)
            with (update.overwrite() if touched else update.fast_append()) as producer:
                for task in touched:
                    producer.delete_data_file(task.file)
                for data_file in files:
                    producer.append_data_file(data_file)
    return data.num_rows - updated, updated


def _rewrites(table: Any, data: pa.Table, keys: Sequence[str], bound: int) -> tuple[list[Any], list[pa.Table], int]:
    """The data files holding a batch key, their rows without those keys, and how many table
    rows the batch replaces. _Unsupported when copy-on-write is the wrong tool."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    names = [_table_name(data.schema, k) for k in keys]
    if any(pa.types.is_floating(data.schema.field(n).type) for n in names):
        raise _Unsupported("a float key")  # equality on floats is the JVM's to decide, as before
    try:
        tasks = list(table.scan(row_filter=_key_range(data, names[0])).plan_files())
    except (TypeError, ValueError) as exc:  # a key type pyiceberg's filter does not take
        raise _Unsupported(str(exc)) from None
    if any(task.delete_files for task in tasks) or sum(t.file.record_count for t in tasks) > bound:
        raise _Unsupported("delete files, or too many rows to rewrite")
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    batch_keys = data.select(names)
    touched, kept, matched = [], [], []
    for task in tasks:
        rows = scan.to_table([task])
        hit = _matched_rows(rows.select(names), batch_keys)
        if len(hit):
            touched.append(task)
            kept.append(rows.filter(pc.invert(pc.is_in(_positions(rows.num_rows), value_set=hit))).cast(data.schema))
            matched.append(rows.select(names).take(hit))
    updated = sum(m.num_rows for m in matched)
    if matched and pa.concat_tables(matched).group_by(names).aggregate([]).num_rows != updated:
        raise _Unsupported("a key the table holds twice")  # Spark's MERGE updates both rows
    return touched, kept, updated


def _matched_rows(rows: pa.Table, keys: pa.Table) -> pa.Array:
    """Indices of `rows` whose key is one of `keys` (NULL keys never match)."""
    indexed = rows.append_column(_ROW, _positions(rows.num_rows))
    try:
        joined = indexed.join(keys, list(keys.column_names), join_type="inner")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _Unsupported(str(exc)) from None
    return joined[_ROW].combine_chunks()


def _positions(count: int) -> pa.Array:
    return pa.array(np.arange(count, dtype=np.int64))


def _key_range(data: pa.Table, column: str) -> Any:
    """The scan filter that prunes data files by the batch's key range (their column stats)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

    bounds = pc.min_max(data[column])
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    # (term, literal) is these predicates' constructor; their pydantic fields mislead mypy
    return And(GreaterThanOrEqual(column, low), LessThanOrEqual(column, high))  # type: ignore[call-arg, arg-type]


def _table_name(schema: pa.Schema, key: str) -> str:
    """The table's spelling of a primary-key column (the batch carries the table's names)."""
    for name in schema.names:
        if name.lower() == key.lower():
            return name
    raise _Unsupported(f"no key column {key}")


@contextlib.contextmanager
def _removed_on_failure(table: Any) -> Iterator[list[str]]:
    """Data files written for a commit that did not happen are deleted (best effort). When the
    catalog could not say whether it happened, they stay: the table may hold them now."""
    from pyiceberg.exceptions import CommitStateUnknownException

    written: list[str] = []
    try:
        yield written
    except CommitStateUnknownException as exc:
        raise RuntimeError(
            f"{table.name()}: the catalog did not say whether this run's commit was made ({exc}). "
            "The cursor is committed with the rows or not at all, so running the asset again is "
            "safe: it continues from whatever the table holds."
        ) from exc
    except BaseException:
        for path in written:
            with contextlib.suppress(Exception):
                table.io.delete(path)
        raise


def _result(after: TableMetadata, counts: tuple[int, int]) -> WriteResult:
    """What the commit did, from the metadata it committed."""
    snapshot_id, summary = after.current_summary()
    row_count = after.row_count()
    return WriteResult(
        rows_inserted=counts[0],
        rows_updated=counts[1],
        rows_deleted=0,
        row_count=row_count if row_count is not None else live_row_count(summary) or 0,
        snapshot_id=snapshot_id,
        schema=after.spark_schema() or (),
        delete_files=int(summary.get("total-delete-files", 0)),
        data_files=int(summary.get("total-data-files", 0)),
        position_deletes=int(summary.get("total-position-deletes", 0)),
    )
