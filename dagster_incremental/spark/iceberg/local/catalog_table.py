"""The table pyiceberg commits a run's rows to, loaded from its catalog without a JVM.

Why: pyiceberg's commit is a compare-and-set only through a catalog that checks it. Three are
read and committed here, each as the JVM commits to it: a Hadoop-layout folder on this machine
(the embedded default: `hadoop_commit.py`, under the table's commit lock), an Iceberg JDBC
catalog's database (`spark/iceberg/sql_catalog.py`: a conditional UPDATE of the metadata location) and
an Iceberg REST catalog (`spark/iceberg/rest_catalog.py`: the commit's requirement that `main` is still
the snapshot the run read). Any other catalog, or a table whose files pyiceberg could not reach
as the JVM does, is None: the JVM's paths write it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping
from typing import Any

from dagster_incremental.spark.iceberg.rest_catalog import RestCatalogConf, pyiceberg_catalog as rest_catalog
from dagster_incremental.spark.iceberg.sql_catalog import SqlCatalogConf, load_table
from dagster_incremental.spark.iceberg.files import TableFiles
from dagster_incremental.spark.iceberg.metadata import TableMetadata, pyiceberg_metadata
from dagster_incremental.spark.iceberg.storage import pyiceberg_io_properties

RESOLVING_FILE_IO = "org.apache.iceberg.io.ResolvingFileIO"  # a REST catalog's FileIO when the conf names none


class CatalogMoved(Exception):
    """The catalog refused the commit: another writer committed since the table was loaded.
    Nothing of this commit is in the table."""


class _OneAttempt:
    """A table's catalog whose refusal of a commit is final. pyiceberg retries a refused commit
    on top of the other writer's snapshot; for a run that read its cursor from the snapshot it
    loaded, that would load the same rows twice (the compare-and-set is the point)."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        from pyiceberg.exceptions import BadRequestError, CommitFailedException

        try:
            return self._catalog.commit_table(table, requirements, updates)
        except CommitFailedException as exc:
            raise CatalogMoved(str(exc)) from exc
        except (ValueError, BadRequestError) as exc:
            # Another writer's snapshot on a branch (a JVM run's compare-and-set branch) leaves
            # `main` where this run read it but takes the sequence number this commit's snapshot
            # carries: the SQL catalog refuses the update as a ValueError, a REST server as a bad
            # request. Both are refused before anything is written; a conflict when the table moved.
            if self._moved_since(table):
                raise CatalogMoved(str(exc)) from exc
            raise

    def _moved_since(self, table: Any) -> bool:
        """Whether the catalog's table has other metadata than `table` was loaded from."""
        try:
            return self._catalog.load_table(table.name()).metadata_location != table.metadata_location
        except Exception:  # noqa: BLE001 - unknown: the original error stands
            return False


def reachable(conf: Mapping[str, str], files: TableFiles) -> bool:
    """Whether pyiceberg could commit to this table, judged from settings alone (no I/O):
    an existing table, with a snapshot, in a catalog this module loads."""
    if files.metadata is None or files.metadata.current_snapshot_id() is None:
        return False
    if files.location is not None:
        return True
    return SqlCatalogConf.of(conf, files.table.catalog) is not None or _rest(conf, files) is not None


def load(conf: Mapping[str, str], files: TableFiles) -> tuple[Any, TableMetadata] | None:
    """(pyiceberg's table bound to a catalog that commits it once or raises CatalogMoved, its
    current metadata as read), or None: the JVM's paths write this table."""
    loaded = _load(conf, files)
    if loaded is not None:
        loaded[0].catalog = _OneAttempt(loaded[0].catalog)
    return loaded


def _load(conf: Mapping[str, str], files: TableFiles) -> tuple[Any, TableMetadata] | None:
    parts = (*files.table.namespace, files.table.name)
    if files.location is not None:
        with _collector_paused():  # it imports pyiceberg's catalog, table and Arrow FileIO modules
            from dagster_incremental.spark.iceberg.local import hadoop_commit

        return hadoop_commit.HadoopFolderCatalog().load(files.location, parts)
    sql = SqlCatalogConf.of(conf, files.table.catalog)
    if sql is not None:
        _, table = load_table(sql, parts)
        return (table, pyiceberg_metadata(table)) if table is not None else None
    rest = _rest(conf, files)
    if rest is None:
        return None
    try:
        table = rest_catalog(*rest).load_table(parts)
    except Exception:  # noqa: BLE001 - any failure here means "let the JVM write it", which reports it
        return None
    return table, pyiceberg_metadata(table)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused inside, when it was enabled (a caller, or another
    thread, that turned it off keeps it off). For a first import of pyiceberg's modules.

    Why: that import creates some 100,000 objects that live as long as the process, so the
    collector's passes during it free nothing; but they are many (75 measured), and in a Dagster
    run process (220,000 objects and more) they added one full collection to a change run:
    150 - 200 ms of collector time inside the import, 100 - 200 ms over the whole run. Paused,
    the new objects are scanned once, by the first pass after it; only garbage made during the
    import waits that long to be freed."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _rest(conf: Mapping[str, str], files: TableFiles) -> tuple[RestCatalogConf, dict[str, str]] | None:
    """The REST catalog's settings and pyiceberg's FileIO properties for the table's files."""
    rest = RestCatalogConf.of(conf, files.table.catalog)
    location = (files.metadata.raw.get("location") if files.metadata is not None else None) or ""
    if rest is None or not location:
        return None
    io = pyiceberg_io_properties(conf, files.table.catalog, location, default_io=RESOLVING_FILE_IO)
    return (rest, io) if io is not None else None
