"""Local batches appended to an Iceberg table without a Spark job."""

# Why: rows the asset function produced in this process (dicts, pages, Arrow, pandas) are Arrow
# already. Handing them to Spark copies them into the JVM, turns them into rows and re-encodes
# them with Spark's row-by-row Parquet writer: ~10 s of JVM CPU for a first load of 1M rows.
# pyarrow writes the same Parquet in a fraction of that. The files carry the table's Iceberg
# field ids, so they are ordinary data files of the table; Iceberg's Java API (a few py4j calls,
# no Spark job) reads their footers for the column metrics and commits them in ONE snapshot that
# carries the cursor, exactly as the Spark path does.
#
# Where it applies (`LocalAppend.open` says None otherwise and the writer uses Spark): a table
# whose files this process can write (spark/iceberg/storage.py: a folder on this machine, or S3
# through the settings of the table's own S3FileIO), unpartitioned, unsorted, Parquet, with
# column types Arrow and Iceberg agree on.

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dagster_incremental.spark.iceberg.local.footer import FooterMetrics
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.iceberg.local.target import PARQUET_FIELD_ID
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.storage import TableStorage

ROWS_PER_FILE = 2_000_000  # at most this many rows per Parquet file
ROWS_PER_THREAD = 250_000  # below this, one more writer thread costs more than it saves
_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "string": pa.string(),
    "binary": pa.binary(),
}
_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "uncompressed": "none"}


class Unsupported(Exception):
    """The table or batch needs the Spark path (said once, internally, never to the user)."""


def arrow_type(iceberg_type: Any) -> pa.DataType:
    """The Arrow type that Parquet-encodes as Iceberg expects, child field ids included."""
    if isinstance(iceberg_type, str):
        if iceberg_type in _PRIMITIVES:
            return _PRIMITIVES[iceberg_type]
        if iceberg_type.startswith("decimal("):
            precision, scale = (int(p) for p in iceberg_type[8:-1].split(","))
            return pa.decimal128(precision, scale)
        raise Unsupported(iceberg_type)
    kind = iceberg_type["type"]
    if kind == "struct":
        return pa.struct([arrow_field(f) for f in iceberg_type["fields"]])
    if kind == "list":
        element = _with_id(pa.field("element", arrow_type(iceberg_type["element"])), iceberg_type["element-id"])
        return pa.list_(element)
    if kind == "map":
        key = _with_id(pa.field("key", arrow_type(iceberg_type["key"]), nullable=False), iceberg_type["key-id"])
        value = _with_id(pa.field("value", arrow_type(iceberg_type["value"])), iceberg_type["value-id"])
        return pa.map_(key, value)
    raise Unsupported(kind)


def arrow_field(field: Mapping[str, Any]) -> pa.Field:
    return _with_id(pa.field(field["name"], arrow_type(field["type"]), nullable=True), field["id"])


def _with_id(field: pa.Field, field_id: int) -> pa.Field:
    return field.with_metadata({PARQUET_FIELD_ID: str(field_id)})


@dataclass
class LocalAppend:
    """One table's Java Iceberg object and what pyarrow needs to write its data files."""

    jvm: Any
    table: Any  # org.apache.iceberg.Table
    schema: pa.Schema  # the table's columns, with field ids
    data_dir: str  # a location (see TableStorage)
    compression: str
    compression_level: int | None
    storage: TableStorage

    @classmethod
    def open(cls, spark: Any, table: TableRef, iceberg: Any = None) -> LocalAppend | None:
        """The table, if its data files can be written from here (else None: use Spark).
        iceberg: its Java object when the caller holds it already."""
        from dagster_incremental.spark.iceberg.commit import iceberg_table, java_json

        jvm = spark._jvm
        iceberg = iceberg if iceberg is not None else iceberg_table(spark, table)
        location = str(iceberg.location())
        storage = TableStorage.of_table(jvm, iceberg)
        props = java_json(jvm, iceberg.properties())
        if storage is None or not iceberg.spec().isUnpartitioned() or not iceberg.sortOrder().isUnsorted():
            return None
        if props.get("write.format.default", "parquet").lower() != "parquet" or props.get("write.data.path"):
            return None
        codec = _CODECS.get(props.get("write.parquet.compression-codec", "zstd").lower())
        if codec is None:
            return None
        level = props.get("write.parquet.compression-level")
        fields = json.loads(str(jvm.org.apache.iceberg.SchemaParser.toJson(iceberg.schema())))["fields"]
        try:
            schema = pa.schema([arrow_field(f) for f in fields])
        except Unsupported:
            return None
        data_dir = storage.join(location, "data")
        return cls(jvm, iceberg, schema, data_dir, codec, int(level) if level else None, storage)

    def aligned(self, batch: pa.Table, case_sensitive: bool) -> pa.Table:
        """`batch` as exactly the table's columns (missing ones NULL), cast to its types.

        Call after schema_evolution fitted the table to the batch: every cast left is lossless.
        """
        key = (lambda n: n) if case_sensitive else str.lower
        by_name = {key(name): i for i, name in enumerate(batch.column_names)}
        columns = []
        for field in self.schema:
            index = by_name.get(key(field.name))
            if index is None:
                columns.append(pa.nulls(batch.num_rows, field.type))
            else:
                columns.append(batch.column(index).cast(field.type))
        return pa.Table.from_arrays(columns, schema=self.schema)

    def write_files(self, rows: LocalRows, case_sensitive: bool, paths: list[str]) -> list[Any]:
        """Write the rows as Parquet data files and return them as Iceberg DataFile objects,
        adding each file to `paths` before writing it (so a failure can remove them). Rows in
        memory are split over parallel threads (pyarrow frees the GIL); spilled rows stream
        chunk by chunk, memory staying flat."""
        start = len(paths)
        self._write_parquet(rows, case_sensitive, paths)
        return self._data_files(paths[start:])

    def _write_parquet(self, rows: LocalRows, case_sensitive: bool, paths: list[str]) -> None:
        self.storage.make_folder(self.data_dir)
        prefix = uuid.uuid4().hex
        if rows.spilled:
            pieces = (piece for chunk in rows.chunks() for piece in _slices(self.aligned(chunk, case_sensitive)))
            for number, group in enumerate(_files_of(pieces)):
                paths.append(self.storage.join(self.data_dir, f"{number:05d}-{prefix}.parquet"))
                self._write(group, paths[-1])
            return
        table = self.aligned(rows.table(), case_sensitive)
        threads = os.cpu_count() or 1
        count = max(min(threads, -(-table.num_rows // ROWS_PER_THREAD)), -(-table.num_rows // ROWS_PER_FILE), 1)
        step = -(-table.num_rows // count) if table.num_rows else 0
        parts = [[table.slice(i * step, step)] for i in range(count)]
        paths += [self.storage.join(self.data_dir, f"{i:05d}-{prefix}.parquet") for i in range(count)]
        with ThreadPoolExecutor(max_workers=min(count, threads)) as pool:
            list(pool.map(self._write, parts, paths[-count:]))

    def _write(self, chunks: Iterable[pa.Table], path: str) -> None:
        with self.storage.open_output(path) as sink, pq.ParquetWriter(
            sink,
            self.schema,
            compression=self.compression,
            compression_level=self.compression_level,
            coerce_timestamps="us",  # Iceberg's precision; statistics stay on: they become its metrics
        ) as writer:
            for chunk in chunks:
                writer.write_table(chunk)

    def commit(self, data_files: list[Any], properties: Mapping[str, str], *, only_if_empty: bool, branch: str | None = None) -> None:
        """ONE snapshot adding the data files and carrying `properties` (the cursor).

        only_if_empty: the rows are a merge table's first load, valid only while no other writer
        has added data since the table was created; Iceberg then validates exactly that and
        refuses the commit otherwise (the caller reports a concurrent run). branch: commit there
        (the run's compare-and-set branch), not on main.
        """
        iceberg, jvm = self.table, self.jvm
        if only_if_empty:
            operation = iceberg.newOverwrite()
            operation.conflictDetectionFilter(jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue())
            operation.validateNoConflictingData()
            add = operation.addFile
        else:
            operation = iceberg.newAppend()
            add = operation.appendFile
        for data_file in data_files:
            add(data_file)
        for key, value in properties.items():
            operation.set(key, value)
        if branch:
            operation.toBranch(branch)
        operation.commit()

    def _data_files(self, paths: list[str]) -> list[Any]:
        """The written files as Iceberg DataFile objects, metrics from their footers."""
        iceberg, jvm = self.table, self.jvm
        metrics = FooterMetrics(jvm, jvm.org.apache.iceberg.MetricsConfig.forTable(iceberg), self.storage.open_input)
        io, spec, data_files = iceberg.io(), iceberg.spec(), jvm.org.apache.iceberg.DataFiles
        built = []
        for path in paths:
            builder = data_files.builder(spec).withInputFile(io.newInputFile(path))
            built.append(builder.withFormat("parquet").withMetrics(metrics.of(path)).build())
        return built


def _slices(table: pa.Table) -> Iterator[pa.Table]:
    for start in range(0, max(table.num_rows, 1), ROWS_PER_FILE):
        yield table.slice(start, ROWS_PER_FILE)


def _files_of(chunks: Iterator[pa.Table]) -> Iterator[Iterator[pa.Table]]:
    """Chunks grouped into files of about ROWS_PER_FILE rows (each group consumed in turn)."""
    pending = next(chunks, None)
    while pending is not None:

        def group() -> Iterator[pa.Table]:
            nonlocal pending
            written = 0
            while pending is not None and (written == 0 or written + pending.num_rows <= ROWS_PER_FILE):
                written += pending.num_rows
                yield pending
                pending = next(chunks, None)

        yield group()
