"""A local batch appended or upserted into its Delta table by delta-rs, in this process: no Spark
job. The writer takes the Spark path whenever this says None (nothing was committed then).

Why: a sensor's change run of a few hundred rows spent most of its time in Delta's MERGE job
(about 3 s warm), and a first load in Delta's CREATE TABLE ... AS SELECT; delta-rs makes the same
commits in well under a second. The commit is the one the Spark path makes: the cursor in
`userMetadata`; into an existing table, the idempotent-write counter moved by one and the
compare-and-set enforced by committing exactly at the version the cursor was checked on (no
retry: a version another writer took fails the commit, BaseMoved, checked again). A new table
gets the schema Spark's CREATE ... AS SELECT would give it (all columns nullable, untyped ones
left out), and a run that loses the race to create it writes into the winner's table as the
Spark path does. On S3 it runs under the table's commit lease, as every write does.

Taken for: an append, and an upsert or a delete-insert on the primary key alone whose batch is
already one row per key and has no tombstones, into an unpartitioned table without table
properties or column mapping (new, or existing with columns the batch fits without a change); a
merge into an existing table of at most MAX_MERGE_ROWS held in memory (not spilled), when
delta-rs (`deltalake`, the `delta` extra) is installed. The Spark path evolves schemas and runs
every other strategy.
"""

from __future__ import annotations

import functools
import importlib.util
import operator
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.cursor.state import state_json
from dagster_incremental.spark.run_commit import BaseMoved
from dagster_incremental.spark.delta.column_mapping import mapped, needs_mapping
from dagster_incremental.spark.delta.commit import APP_ID, DeltaCommit
from dagster_incremental.spark.delta.log import Commit
from dagster_incremental.spark.delta.storage import on_s3, s3_settings
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.schema_evolution import creatable_schema, spark_schema_of_arrow
from dagster_incremental.spark.statistics import Counts, keyed_counts
from dagster_incremental.spark.write_spec import HELPER_PREFIX, WriteResult, WriteSpec

# Larger upserts into an existing table take Spark's MERGE: delta-rs reads the files a merge
# touches into this process. Measured on 1M-row tables (bench/README.md, "Session 17"): 100k
# changes 0.45 s vs Spark's 16 - 26 s, 1M changes 1.0 s vs 71 s, this process's memory the same.
# Appends and first loads have no bound: a batch spilled to disk streams from its spill files.
# 1M rows 0.45 s vs 90 s for Spark's CREATE ... AS SELECT.
MAX_MERGE_ROWS = 1_000_000


def write_in_process(pending: DeltaCommit, rows: LocalRows, *, deduplicated: bool, time_zone: str) -> WriteResult | None:
    """`rows` appended or upserted by delta-rs as the write's one commit; None: use Spark.
    `time_zone`: the session's, in which Spark reads a timestamp without a zone."""
    spec = pending.spec
    if not _takes(spec, rows, deduplicated):
        return None
    try:
        from deltalake import DeltaTable
    except ImportError:  # without the `delta` extra: every write is Spark's
        return None

    assert spec.table.location is not None, "a Delta table has a location"
    options = storage_options(spec.table.location)
    if pending.log.current_version() is None:
        try:
            return _create(pending, rows, options, time_zone)
        except _CreatedByAnother:
            pass  # written into as usual: the cursor check decides
    if spec.disposition == "merge" and (rows.spilled or rows.num_rows > MAX_MERGE_ROWS):
        return None
    current = pending.log.current_version()
    if current is not None and mapped(pending.log.configuration(current)):
        return None  # column mapping: Spark writes the files under the physical names
    try:
        target = DeltaTable(spec.table.location, storage_options=options)
    except Exception:  # noqa: BLE001 - a table delta-rs cannot open: Spark writes it
        return None
    data = _data(rows, pa.schema(target.schema().to_arrow()), time_zone)
    if data is None:
        return None
    before = target.version()
    held = _held_keys(pending, before, data) if _replaces_keys(spec) else 0
    if held is None:
        return None  # the table's keys can't be read here: Spark's path writes and counts it
    count = pending.checked_count()  # raises StaleCursor under a guard whose cursor moved
    if not _commit(pending, target, data, count):
        return None
    return _result(pending, before, held, data)


class _CreatedByAnother(Exception):
    """Another run created the table first (nothing of this run's was committed)."""


def _create(pending: DeltaCommit, rows: LocalRows, options: dict[str, str], time_zone: str) -> WriteResult | None:
    """The table created with `rows` as its first commit, in the schema Spark's CREATE ... AS
    SELECT gives it; None: Spark creates it (a type delta-rs does not write, table properties).
    Like Spark's, the creating commit carries the cursor but checks none."""
    from deltalake import CommitProperties, Schema, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError

    spec, location = pending.spec, pending.spec.table.location
    assert location is not None, "a Delta table has a location"
    if spec.table_properties or needs_mapping(rows.column_names):
        return None  # Spark creates it (with column mapping when its names need it)
    schema, untyped = creatable_schema(spec.table, spark_schema_of_arrow(rows.schema))
    try:
        table_schema = pa.schema(Schema.from_json(schema.json()).to_arrow())
    except Exception:  # noqa: BLE001 - a Spark type delta-rs lacks: Spark creates the table
        return None
    data = _data(rows, table_schema, time_zone, leave_out=untyped)
    if data is None:
        return None
    properties = CommitProperties(custom_metadata={"userMetadata": state_json(dict(pending.properties))})
    try:
        write_deltalake(location, data, mode="error", storage_options=options, commit_properties=properties)
    except DeltaProtocolError:
        return None
    except (CommitFailedError, DeltaError) as exc:
        lost = isinstance(exc, CommitFailedError) or "already exists" in str(exc)
        if lost and pending.created_by_another():
            raise _CreatedByAnother() from exc
        raise
    return _result(pending, None)


def may_take(spec: WriteSpec) -> bool:
    """Whether delta-rs may commit this write (the batch decides the rest): then a run does not
    start Spark ahead of its commit, which would cost a JVM it likely never uses."""
    if importlib.util.find_spec("deltalake") is None or spec.partition_by or spec.table_properties:
        return False
    return spec.disposition == "append" or _keyed_merge(spec)


def _keyed_merge(spec: WriteSpec) -> bool:
    """An upsert, or a delete-insert on the primary key alone, without hard deletes or
    delete_missing: the merges delta-rs makes here."""
    return (spec.disposition == "merge" and spec.merge_strategy in ("upsert", "delete-insert") and spec.keyed
            and not spec.delete_missing and spec.hard_delete_column is None)


def _takes(spec: WriteSpec, rows: LocalRows, deduplicated: bool) -> bool:
    if rows.num_rows == 0:
        return False
    if any(c.startswith(HELPER_PREFIX) for c in rows.column_names) or spec.partition_by:
        return False
    if spec.disposition == "append":
        return True
    return _keyed_merge(spec) and deduplicated and set(spec.primary_key) <= set(rows.column_names)


def _data(rows: LocalRows, table_schema: pa.Schema, time_zone: str,
          leave_out: tuple[str, ...] = ()) -> pa.Table | pa.RecordBatchReader | None:
    """The rows (but the columns `leave_out`) in the table's columns and types: in memory a
    table, spilled a stream of the spill files one at a time; None when they do not fit."""
    if not rows.spilled:
        return _fitted(rows.table().drop_columns(list(leave_out)), table_schema, time_zone)
    if not _fits(pa.schema([f for f in rows.schema if f.name not in leave_out]), table_schema):
        return None
    batches = (batch for chunk in rows.chunks()
               for batch in _conformed(chunk.drop_columns(list(leave_out)), table_schema, time_zone).to_batches())
    return pa.RecordBatchReader.from_batches(table_schema, batches)


def _fitted(batch: pa.Table, table_schema: pa.Schema, time_zone: str) -> pa.Table | None:
    """`batch` conformed to the table's schema; None when it does not fit (Spark evolves the
    table, or refuses the change)."""
    if not _fits(batch.schema, table_schema):
        return None
    try:
        return _conformed(batch, table_schema, time_zone)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _fits(schema: pa.Schema, table_schema: pa.Schema) -> bool:
    """Whether every column is one the table has, of the same Spark type."""
    return set(schema.names) <= set(table_schema.names) and all(
        _same_type(field.type, table_schema.field(field.name).type) for field in schema)


def _conformed(batch: pa.Table, table_schema: pa.Schema, time_zone: str) -> pa.Table:
    """`batch` with the table's columns and types: absent columns null, a timestamp without a
    zone read in `time_zone` (as Spark reads it). Raises where a value does not convert."""
    columns = []
    for field in table_schema:
        if field.name not in batch.column_names:
            columns.append(pa.nulls(batch.num_rows, field.type))
            continue
        column = batch.column(field.name)
        if pa.types.is_timestamp(column.type) and column.type.tz is None and field.type.tz is not None:
            column = pc.assume_timezone(column, timezone=time_zone)
        columns.append(column.cast(field.type, safe=True))
    return pa.Table.from_arrays(columns, schema=table_schema)


def _same_type(batch: pa.DataType, table: pa.DataType) -> bool:
    """The same Spark type: equal, an all-null column, a timestamp of another unit or zone (or
    none) into a zoned one, or the other string layout."""
    if batch == table or pa.types.is_null(batch):
        return True
    if pa.types.is_timestamp(batch) and pa.types.is_timestamp(table):
        return table.tz is not None or batch.tz is None
    strings = [pa.types.is_string, pa.types.is_large_string, getattr(pa.types, "is_string_view", lambda t: False)]
    return any(t(batch) for t in strings) and any(t(table) for t in strings)


def _commit(pending: DeltaCommit, target: Any, data: pa.Table | pa.RecordBatchReader, count: int | None) -> bool:
    """Commit `data`; False when delta-rs cannot write this table (a table feature it lacks):
    nothing was written, Spark writes it."""
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaProtocolError

    guarded = count is not None
    properties = CommitProperties(
        custom_metadata={"userMetadata": state_json(dict(pending.properties))},
        app_transactions=[Transaction(APP_ID, count + 1)] if count is not None else None,
        max_commit_retries=0 if guarded else None,  # a guarded commit lands at the checked version or not at all
    )
    spec = pending.spec
    try:
        if spec.disposition == "append":
            write_deltalake(target, data, mode="append", commit_properties=properties)
            return True
        assert isinstance(data, pa.Table), "a merge's batch is held in memory"
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in spec.primary_key)
        if spec.merge_strategy == "delete-insert":
            _delete_insert(target, data, spec.primary_key, on, properties)
        else:
            target.merge(data, on, source_alias="s", target_alias="t", commit_properties=properties) \
                .when_matched_update_all().when_not_matched_insert_all().execute()
        return True
    except CommitFailedError as exc:
        if guarded:
            raise BaseMoved() from exc  # another commit took the version: checked again
        raise
    except DeltaProtocolError:
        return False


_DELETE_ROW = f"{HELPER_PREFIX}delete_row"


def _delete_insert(target: Any, data: pa.Table, keys: Sequence[str], on: str, properties: Any) -> None:
    """delete-insert as Spark's MERGE makes it (spark/merge/delete_insert.py), in one MERGE: the
    batch's rows to insert, which match nothing, and its keys as rows that delete every row of
    the table holding one of them."""
    key_rows = {name: data.column(name) if name in keys else pa.nulls(data.num_rows, data.schema.field(name).type)
                for name in data.column_names}
    inserts = data.append_column(_DELETE_ROW, pa.repeat(False, data.num_rows))
    schema = pa.schema([field.with_nullable(True) for field in inserts.schema])  # a key row's other columns are NULL
    deletes = pa.table({**key_rows, _DELETE_ROW: pa.repeat(True, data.num_rows)}, schema=schema)
    source = pa.concat_tables([inserts.cast(schema), deletes])
    target.merge(source, f"{on} AND s.`{_DELETE_ROW}`", source_alias="s",
                 target_alias="t", commit_properties=properties) \
        .when_matched_delete() \
        .when_not_matched_insert_all(predicate=f"NOT s.`{_DELETE_ROW}`", except_cols=[_DELETE_ROW]).execute()


def _result(pending: DeltaCommit, before: int | None, held: int = 0,
            batch: pa.Table | pa.RecordBatchReader | None = None) -> WriteResult:
    """The figures of the commit just made, from its own metrics in the log (no JVM). `held`: a
    delete-insert's batch keys the table held at `before` (counted again on the version the
    commit followed, when an unguarded commit landed later)."""
    made = pending.own_commit(before)
    assert made is not None, "the in-process commit is in the log"
    pending.made_commits.append(made)
    log = pending.log
    rows, columns = log.row_count(made.version), log.schema(made.version)
    if batch is not None and _replaces_keys(pending.spec) and made.version - 1 != before:
        again = _held_keys(pending, made.version - 1, batch)
        held = again if again is not None else held
    counts = _counts(made, pending.spec, held)
    assert rows is not None and columns is not None, "delta-rs records row counts and the schema"
    return WriteResult(rows_inserted=counts.inserted, rows_updated=counts.updated, rows_deleted=counts.deleted,
                       row_count=rows, snapshot_id=made.version, schema=columns)


def _counts(made: Commit, spec: WriteSpec, held: int) -> Counts:
    """What delta-rs's operation metrics say the commit did (a WRITE's rows are all inserted).
    A delete-insert counts as the Spark path's does (`held`: its batch keys the table held)."""
    if made.operation != "MERGE":
        return Counts(inserted=made.count("num_added_rows"))
    if spec.merge_strategy == "delete-insert":
        removed = made.count("num_target_rows_deleted")
        return keyed_counts(made.count("num_target_rows_inserted"), (held, 0), removed=removed)
    return Counts(inserted=made.count("num_target_rows_inserted"), updated=made.count("num_target_rows_updated"))


def _replaces_keys(spec: WriteSpec) -> bool:
    """A delete-insert: it removes every row of a batch key, however many the table holds."""
    return spec.disposition == "merge" and spec.merge_strategy == "delete-insert"


def _held_keys(pending: DeltaCommit, version: int, batch: pa.Table | pa.RecordBatchReader) -> int | None:
    """How many rows of `batch` (one per key) have a key the table held at `version`: only its
    key columns read, filtered by the batch's keys (a NULL key matches nothing). None: delta-rs
    cannot read them so (Spark's path then writes the batch, and counts it)."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    location, keys = pending.spec.table.location, list(pending.spec.primary_key)
    if location is None or not isinstance(batch, pa.Table):
        return None
    try:
        table = DeltaTable(location, version=version, storage_options=storage_options(location) or None)
        dataset = table.to_pyarrow_dataset()
        wanted = batch.select(keys).drop_null().cast(pa.schema([dataset.schema.field(k) for k in keys]))
        only_wanted = functools.reduce(operator.and_, (ds.field(k).isin(wanted[k]) for k in keys))
        found = dataset.to_table(columns=keys, filter=only_wanted)
        return wanted.join(found.group_by(keys).aggregate([]), keys=keys, join_type="left semi").num_rows
    except Exception:  # noqa: BLE001 - a table or type this read does not take: Spark's path counts it
        return None


def storage_options(location: str) -> dict[str, str]:
    """delta-rs's options for a table on S3 (the session's S3A settings); commits there are
    ordered by the table's commit lease, so delta-rs's own S3 locking is not needed."""
    if not on_s3(location):
        return {}
    settings = s3_settings()
    options = {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    if settings.endpoint:
        options.update(AWS_ENDPOINT_URL=settings.endpoint, AWS_ALLOW_HTTP="true",
                       AWS_VIRTUAL_HOSTED_STYLE_REQUEST="false" if settings.path_style else "true")
    for key, value in (("AWS_REGION", settings.region), ("AWS_ACCESS_KEY_ID", settings.access_key),
                       ("AWS_SECRET_ACCESS_KEY", settings.secret_key), ("AWS_SESSION_TOKEN", settings.session_token)):
        if value:
            options[key] = value
    return options
