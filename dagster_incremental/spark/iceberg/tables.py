"""One destination's Iceberg tables: how a table is found now (its files, read once per call),
its writer, its history, and the commit pyiceberg makes in the run's process when it can.

The session, the run's one commit and its compare-and-set loop are format-neutral
(spark/tables.py); spark/delta/tables.py is the sibling for Delta. Questions a run can answer
from the table's files (no cursor change, no rows) never start Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.errors import Storage
from dagster_incremental.spark.iceberg.files import TableFiles
from dagster_incremental.spark.table_format import Log
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.tables import NO_TABLE, SparkTables, stale_error
from dagster_incremental.spark.write_spec import IncrementalBatch, WriteResult, WriteSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_incremental.spark.iceberg.over_connect import CatalogTables
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.key_check import DuplicateKeys


class IcebergTables(SparkTables["IcebergNow"]):
    """One destination's Iceberg tables in its Spark catalog (see the module's docstring)."""

    # Over Connect in a JDBC or REST catalog (spark/iceberg/over_connect.py); others refused per table.
    connect_refusal = None

    def table(self, catalog: str, namespace: str, key_path: Sequence[str]) -> TableRef:
        """The table of the asset whose key is `key_path`."""
        return TableRef.for_asset(catalog, namespace, key_path)

    def storage(self, catalog: str, conf: Mapping[str, str], warehouse: str) -> Storage:
        """The catalog a storage error names, its type, its warehouse, and what to do when Spark
        has no file system for that warehouse (a Hadoop catalog writes through one)."""
        prefix = f"spark.sql.catalog.{catalog}"
        kind = conf.get(f"{prefix}.type") or ("custom" if f"{prefix}.catalog-impl" in conf else "hadoop")
        warehouse = conf.get(f"{prefix}.warehouse") or warehouse
        scheme = warehouse.split("://", 1)[0] if "://" in warehouse else "this"
        return Storage(catalog, kind, warehouse, (
            f"{scheme}:// paths, and a {kind} catalog keeps its tables through one. For tables on S3 use a "
            f'catalog service with Iceberg\'s S3FileIO: in config.toml [spark.conf], "{prefix}.type" = "rest" '
            f'(or "jdbc") with "{prefix}.uri", and "{prefix}.io-impl" = "org.apache.iceberg.aws.s3.S3FileIO" '
            "(docs/clusters-and-catalogs.md); or set [destination] warehouse to a local folder."))

    @property
    def writer(self) -> TableWriter:
        from dagster_incremental.spark.iceberg.writer import TableWriter

        return TableWriter(self.spark, self._catalog_over_connect)

    @property
    def _catalog_over_connect(self) -> CatalogTables | None:
        """Over Spark Connect, the catalog as pyiceberg reaches it here; None in classic mode."""
        from dagster_incremental.spark.iceberg.over_connect import CatalogTables

        return CatalogTables(self.session.conf) if self.over_connect else None

    def refuse_table_over_connect(self, table: TableRef) -> None:
        """Over Spark Connect, a table whose catalog this process cannot reach with pyiceberg
        (a Hadoop catalog's folder, a Glue or Hive catalog) is refused before anything is written."""
        catalog = self._catalog_over_connect
        if catalog is not None and not catalog.reaches(table.catalog):
            from dagster_incremental.spark.connect import refuse_connect
            from dagster_incremental.spark.iceberg.over_connect import refusal

            refuse_connect(self.session.conf, refusal(table.catalog))

    def files(self, table: TableRef) -> TableFiles:
        """The table's files as they are now (read once; see TableFiles)."""
        return TableFiles.find(self.session.conf, table)

    def now(self, table: TableRef) -> IcebergNow:
        return IcebergNow(self, self.files(table))

    # -- history -----------------------------------------------------------------------------------

    def only_rewrites_left(self, table: TableRef) -> bool:
        """Whether the table has rows and every snapshot it still holds is a rewrite (Iceberg
        operation "replace": a compaction, no data change): the history that carried the cursor
        was expired by maintenance, not lost with the rows (a dropped and recreated table starts
        with an append or overwrite)."""
        files = self.files(table)
        if files.missing:
            return False
        if files.metadata is not None:
            operations = [(snap.get("summary") or {}).get("operation") for snap in files.metadata.lineage()]
        elif self.writer.table_exists(table):
            operations = [row[0] for row in self.spark.sql(f"SELECT operation FROM {table.sql}.snapshots").collect()]
        else:
            return False
        return bool(operations) and set(operations) == {"replace"} and bool(IcebergNow(self, files).unchanged().row_count)

    def snapshot(self, table: TableRef) -> int | None:
        """The table's current snapshot id (None: no table yet)."""
        files = self.files(table)
        if files.readable:
            return files.metadata.current_snapshot_id() if files.metadata is not None else None
        if not self.spark.catalog.tableExists(table.sql):
            return None
        from dagster_incremental.spark.iceberg.commit import iceberg_table

        current = iceberg_table(self.spark, table).currentSnapshot()  # the driver's Iceberg: no Spark job
        return current.snapshotId() if current is not None else None

    def commits_since(self, table: TableRef, snapshot_id: int | None) -> list[tuple[str, dict[str, str]]] | None:
        """The table's commits after `snapshot_id` (see TableMetadata.commits_since); None when
        its files are not readable here or the snapshot is not an ancestor."""
        metadata = self.files(table).metadata
        return metadata.commits_since(snapshot_id) if metadata is not None else None

    # -- the checks' figures -----------------------------------------------------------------------

    def duplicate_keys_without_jvm(self, table: TableRef, keys: Sequence[str], *, snapshot_id: int | None,
                                   current: tuple[str, Any] | None, examples: int) -> DuplicateKeys | None:
        """duplicate_keys counted in this process by pyiceberg and pyarrow (spark/local/key_check.py);
        None: the table's catalog is not one pyiceberg reads here, or Spark must count it."""
        from dagster_incremental.spark.iceberg.local import catalog_table
        from dagster_incremental.spark.local.key_check import iceberg_duplicates

        files = self.files(table)
        loaded = catalog_table.load(self.session.conf, files) if catalog_table.reachable(self.session.conf, files) else None
        if loaded is None:
            return None
        return iceberg_duplicates(loaded[0], keys, snapshot_id=snapshot_id, current=current, examples=examples)

    def window_counts(self, spec: WriteSpec, snapshot_id: int, column: str, windows: Sequence[tuple[Any, Any]]) -> list:
        """What one commit changed in each window of `column`: a range run's figures per partition."""
        from dagster_incremental.spark.iceberg.figures import window_counts
        from dagster_incremental.spark.statistics import pairing_key

        return window_counts(self.spark, spec.table, snapshot_id, column, windows, pairing_key(spec),
                             snapshots=self.writer.snapshots(spec.table))

    # -- the commit --------------------------------------------------------------------------------

    def write_in_process(self, batch: IncrementalBatch, asset: str, now: IcebergNow) -> WriteResult | None:
        """The commit made by pyiceberg when the table's catalog is one it commits to and the
        batch is local rows it can write (spark/iceberg/local/python_write.py); None: the writer's."""
        files = now.files
        if not self._may_commit(batch.spec, files):
            return None
        from dagster_incremental.spark.iceberg.local import catalog_table
        from dagster_incremental.spark.iceberg.local.python_write import write_in_python
        from dagster_incremental.spark.run_commit import StaleCursor

        try:
            return write_in_python(lambda: catalog_table.load(self.session.conf, files), batch, self._case_sensitive,
                                   jvm_running=self.spark_started)
        except StaleCursor as exc:
            raise stale_error(asset, batch.spec.table, exc.run_id) from None

    def may_commit_in_process(self, spec: WriteSpec) -> bool:
        return self._may_commit(spec, self.files(spec.table))

    def _may_commit(self, spec: WriteSpec, files: TableFiles) -> bool:
        """Whether the table and disposition let pyiceberg commit local rows (the batch decides
        the rest: see python_write.py)."""
        from dagster_incremental.spark.iceberg.local import catalog_table
        from dagster_incremental.spark.iceberg.local.python_write import takes

        return takes(spec) and catalog_table.reachable(self.session.conf, files)

    @property
    def _case_sensitive(self) -> bool:
        return str(self.session.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"

    def after_commit(self, log: Log, table: TableRef, result: WriteResult) -> None:
        """Fold merge-on-read delete files into the data (see maintenance). The run's data and
        cursor are committed already: a failed compaction is a warning, retried next run."""
        from dagster_incremental.spark.iceberg import maintenance

        if not maintenance.needs_compaction(result):
            return
        try:
            done = maintenance.compact(self.spark, table)
        except Exception as exc:  # noqa: BLE001 - maintenance must not fail a committed run
            log.warning(f"{table.display}: compaction of delete files failed, retried next run: {exc}")
            return
        log.info(
            f"{table.display}: folded {result.position_deletes} deleted rows "
            f"({result.delete_files} delete files) into the data files: {done}"
        )


@dataclass(frozen=True)
class IcebergNow:
    """An Iceberg table as its files show it now (spark/tables.py's `TableNow`); where they are
    not readable here, the writer asks Spark."""

    tables: IcebergTables
    files: TableFiles

    @property
    def missing(self) -> bool:
        return self.files.missing

    def committed_state(self, scope: str | None) -> CommittedState | None:
        """From the files when readable here, so a run that has nothing to write needs no JVM."""
        if not self.files.readable:
            return self.tables.writer.read_committed_state(self.files.table, scope=scope)
        return self.files.metadata.committed_cursor(scope) if self.files.metadata is not None else None

    def holds(self, columns: pa.Schema) -> bool:
        """The table's metadata (readable here) has every one of `columns` (or it is untyped)."""
        import pyarrow as pa

        held = self.files.metadata.spark_schema() if self.files.metadata is not None else None
        if held is None:
            return False
        names = {name.lower() for name, _ in held}
        return all(f.name.lower() in names or pa.types.is_null(f.type) for f in columns)

    def unchanged(self) -> WriteResult:
        if self.files.missing:
            return NO_TABLE
        metadata = self.files.metadata
        if metadata is not None:
            snapshot_id, _ = metadata.current_summary()
            schema, rows = metadata.spark_schema(), metadata.row_count()
            if schema is not None and rows is not None:
                return WriteResult(0, 0, 0, rows, snapshot_id, schema)
        return self.tables.writer.unchanged(self.files.table)

    def commit_lock(self) -> AbstractContextManager[object]:
        return self.files.commit_lock()
