"""A Hadoop-layout Iceberg table on this machine, loaded and committed by pyiceberg: no JVM.

Why: the embedded default keeps its tables as Iceberg's Java HadoopCatalog lays them out
(`<table>/metadata/vN.metadata.json` and `version-hint.text`), and pyiceberg has no catalog for
that layout. pyiceberg builds the snapshot, its manifests and the next metadata; this module only
places the metadata file exactly where HadoopTableOperations does: `v{N+1}.metadata.json`,
created only if absent (a hard link, so a second writer of that version fails instead of
overwriting it), then the version hint. It runs under the table's commit lock
(spark/iceberg/files.py), which every writer of this library takes, Spark's included.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.update import update_table_metadata

from dagster_incremental.spark.iceberg.metadata import VERSION_HINT, TableMetadata, read_metadata


class HadoopFolderCatalog(NoopCatalog):
    """Commits to Hadoop-layout tables in local folders (the only thing it does)."""

    def __init__(self) -> None:
        super().__init__("dagster_incremental_hadoop")

    def load(self, folder: Path, identifier: tuple[str, ...]) -> tuple[Table, TableMetadata] | None:
        """The table as its current metadata file says, and that file as read (None: no table,
        or not readable now)."""
        current = read_metadata(folder)
        if current is None or current.path.name != f"v{current.version}.metadata.json":
            return None  # a gzip-coded table: Java's path keeps its codec
        metadata = TableMetadataUtil.parse_obj(dict(current.raw))
        table = Table(identifier, metadata=metadata, metadata_location=_uri(current.path), io=PyArrowFileIO(), catalog=self)
        return table, current

    def commit_table(self, table: Table, requirements: tuple[Any, ...], updates: tuple[Any, ...]) -> CommitTableResponse:
        base = Path(_local_path(table.metadata_location))
        metadata_dir = base.parent
        current = read_metadata(metadata_dir.parent)
        if current is None or current.path != base:
            raise CommitFailedException(f"{table.name()}: the table moved on from {base.name}")
        for requirement in requirements:
            requirement.validate(table.metadata)
        new = update_table_metadata(table.metadata, updates, metadata_location=table.metadata_location)
        target = metadata_dir / f"v{current.version + 1}.metadata.json"
        _create_once(metadata_dir, target, lambda path: ToOutputFile.table_metadata(new, table.io.new_output(path)))
        _replace(metadata_dir / VERSION_HINT, str(current.version + 1))  # no newline, as Java writes it
        return CommitTableResponse(metadata=new, **{"metadata-location": _uri(target)})

    @staticmethod
    def _delete_old_metadata(io: Any, base: Any, metadata: Any) -> None:
        """Old metadata files stay, as Java's Hadoop tables keep them by default."""


def _create_once(folder: Path, target: Path, write: Any) -> None:
    """Write a temporary file, then link it to `target`: fails if `target` exists."""
    temporary = folder / f".{uuid.uuid4().hex}.metadata.json.tmp"
    write(str(temporary))
    try:
        os.link(temporary, target)
    except FileExistsError:
        raise CommitFailedException(f"{target.name} was written by another commit") from None
    finally:
        temporary.unlink(missing_ok=True)


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{uuid.uuid4().hex}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _uri(path: Path) -> str:
    """A local file as Java's Hadoop tables name it (`file:/...`, not percent-encoded)."""
    return f"file:{path}"


def _local_path(uri: str) -> str:
    for prefix in ("file://", "file:"):
        if uri.startswith(prefix):
            return uri[len(prefix):]
    return uri
