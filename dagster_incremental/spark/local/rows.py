"""The rows an asset function produced in this process, as Arrow, in bounded memory."""

# Why: a first load of 10M rows held whole costs gigabytes of Python memory. Rows arrive page by
# page; once the pending pages pass SPILL_BYTES they are written to an Arrow IPC file in a
# temporary folder, and every consumer (the dedup decision, the Parquet writer, the hand-over to
# Spark) reads them back one chunk at a time. Batches below that size, the common case, never
# touch the disk. Pages may disagree on columns and types (a column missing in some, int in one
# and float in another): the rows' schema is their permissive union, and each chunk is read back
# in it.

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

SPILL_BYTES = 128 << 20  # pending Arrow bytes kept in memory before they go to a spill file


class LocalRows:
    """Arrow tables added one by one; read back as chunks of one schema, survivors only."""

    def __init__(self, prepare: Callable[[pa.Table], pa.Table] = lambda t: t, spill_bytes: int | None = None):
        self._prepare = prepare  # applied to each chunk before it is kept (e.g. typing the cursor)
        self._spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        self._memory: pa.Table | None = None  # all rows, when nothing was spilled
        self._files: list[tuple[Path, int]] = []  # spill files and their row counts
        self._schemas: list[pa.Schema] = []
        self._folder: Path | None = None
        self.keep: np.ndarray | None = None  # dedup survivors (None: every row)

    @classmethod
    def of(cls, table: pa.Table) -> LocalRows:
        rows = cls()
        rows.add(table)
        return rows.finish()

    # -- filling ---------------------------------------------------------------------------------

    def add(self, table: pa.Table) -> None:
        table = _micro_timestamps(table)
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= self._spill_bytes:
            self._spill()

    def finish(self) -> LocalRows:
        """No more rows: what is pending stays in memory if nothing was spilled."""
        if self._files:
            self._spill()
        elif self._pending:
            self._memory = self._prepare(pa.concat_tables(self._pending, promote_options="permissive"))
            self._schemas = [self._memory.schema]
            self._pending = []
        return self

    def _spill(self) -> None:
        if not self._pending:
            return
        chunk = self._prepare(pa.concat_tables(self._pending, promote_options="permissive"))
        self._pending, self._pending_bytes = [], 0
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="dagster_incremental_rows_"))
            weakref.finalize(self, shutil.rmtree, self._folder, True)
        path = self._folder / f"{len(self._files):05d}.arrow"
        # One record batch per file: each column is then one contiguous run of the file, and a
        # reader of a few columns (the dedup's keys) maps only their pages. With a record batch
        # per source page, every column's buffers sat between the others' and mapping one column
        # brought nearly every page of the file into memory.
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, chunk.schema) as writer:
            writer.write_table(chunk.combine_chunks())
        self._files.append((path, chunk.num_rows))
        self._schemas.append(chunk.schema)

    # -- reading ---------------------------------------------------------------------------------

    @property
    def spilled(self) -> bool:
        return bool(self._files)

    @property
    def schema(self) -> pa.Schema:
        if len(self._schemas) == 1:
            return self._schemas[0]
        return pa.unify_schemas(self._schemas, promote_options="permissive")

    @property
    def column_names(self) -> list[str]:
        return self.schema.names

    @property
    def num_rows(self) -> int:
        """Rows after the dedup decision."""
        total = self._memory.num_rows if self._memory is not None else sum(n for _, n in self._files)
        return total if self.keep is None else int(self.keep.sum())

    def columns(self, names: list[str]) -> pa.Table:
        """These columns of every row (before dedup): what the dedup decision reads. In
        memory: the whole table (no copy), so error messages can show whole rows."""
        if self._memory is not None:
            return self._memory
        wanted = pa.schema([self.schema.field(name) for name in names])
        return pa.concat_tables([_conform(_select(chunk, names), wanted) for chunk in self._stored(names)])

    def column_chunks(self, name: str) -> Iterator[pa.ChunkedArray | None]:
        """One column of every row (before dedup), a stored chunk at a time (None where a chunk
        lacks it): a pass over a column in the memory of one chunk's share of it."""
        for chunk in self._stored([name]):
            yield chunk[name] if name in chunk.column_names else None

    def chunks(self) -> Iterator[pa.Table]:
        """The surviving rows, chunk by chunk, each in `schema`."""
        schema, offset = self.schema, 0
        for chunk in self._stored():
            size = chunk.num_rows
            if self.keep is not None:
                chunk = chunk.filter(pa.array(self.keep[offset : offset + size]))
            offset += size
            yield _conform(chunk, schema)

    def table(self) -> pa.Table:
        """All surviving rows in memory (small batches, or where a consumer needs them whole)."""
        return pa.concat_tables(list(self.chunks())) if self._files else next(self.chunks())

    def close(self) -> None:
        """Remove the spill files (also done when the object is collected)."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _stored(self, names: list[str] | None = None) -> Iterator[pa.Table]:
        """The kept chunks as stored (only the columns `names` of spilled ones, when given)."""
        if self._memory is not None:
            yield self._memory
            return
        # Memory-mapped: a column read back is a view of the file. Read into memory, each batch's
        # whole body is one buffer that the selected columns keep alive, so the dedup columns of
        # a 100M-row load held every column (~6 GB).
        for path, _ in self._files:
            with pa.memory_map(str(path), "r") as source:
                reader = pa.ipc.open_file(source)
                if names is None:
                    yield reader.read_all()
                    continue
                present = [n for n in names if n in reader.schema.names]
                yield pa.Table.from_batches(
                    [reader.get_batch(i).select(present) for i in range(reader.num_record_batches)],
                    schema=pa.schema([reader.schema.field(n) for n in present]),
                )


def _select(chunk: pa.Table, names: list[str]) -> pa.Table:
    return chunk.select([n for n in names if n in chunk.column_names])


def _conform(chunk: pa.Table, schema: pa.Schema) -> pa.Table:
    """A chunk with the rows' final schema: columns cast, the ones it lacks as nulls."""
    if chunk.schema == schema:
        return chunk
    columns = [
        chunk[f.name].cast(f.type) if f.name in chunk.column_names else pa.nulls(chunk.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _micro_timestamps(table: pa.Table) -> pa.Table:
    """Nanosecond timestamp columns (pandas' default) in microseconds, finer digits dropped, as
    the cursor keys them: the table can hold no finer, and a raw cast would refuse the rows."""
    from dagster_incremental.cursor.values import timestamps_in_micros

    for index, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            table = table.set_column(index, field.name, timestamps_in_micros(table.column(index)))
    return table
