"""SparkTableIOManager: Dagster's side of the table writer.

Like Dagster's own DbIOManager, this class is small: it turns Dagster contexts into a table name,
a WriteSpec and a window, lets `TableWriter` do the Spark work in one atomic commit, and reports
what the commit did as materialization metadata (README: "What you see").
"""

from __future__ import annotations

import contextlib

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from dagster_incremental.dagster import config_use
from dagster_incremental.dagster import metadata as md
from dagster_incremental.errors import ConcurrentRunError, IncrementalConfigError
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.session import build_spark_session, spark_conf
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import (
    CommitInfo,
    IncrementalBatch,
    WindowReplace,
    WriteResult,
    WriteSpec,
)

_SESSION_LOCK = threading.Lock()
_PUBLISH_ATTEMPTS = 5  # a compare-and-set refused by writers that left the cursor alone is retried


class SparkTableIOManager(dg.ConfigurableIOManager):
    """Writes incremental assets to Spark tables (Iceberg by default) and reads them back.

    Each run's rows and its cursor state land in ONE table commit, so a run that wrote data but
    lost its Dagster event is recognised by the next run. Downstream assets get a pyspark
    DataFrame of the table (of the partition window, for partitioned downstream assets).

    Examples:
        .. code-block:: python

            import dagster as dg
            from dagster_incremental import SparkTableIOManager, incremental_asset, Incremental

            @incremental_asset(primary_key="id", write_disposition="merge")
            def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
                yield from fetch_orders(since=updated_at.start_value)

            defs = dg.Definitions(
                assets=[orders],
                resources={"io_manager": SparkTableIOManager.from_config("config/config.toml")},
            )
    """

    master: str = Field(default="local[*]", description="Spark master URL.")
    app_name: str = Field(default="dagster-incremental", description="Spark application name.")
    spark_config: dict[str, str] = Field(
        default_factory=dict, description="Extra Spark conf; wins over every default."
    )
    table_format: str = Field(default="iceberg", description='"iceberg" or "delta".')
    catalog: str = Field(default="lake", description="Spark catalog holding the tables.")
    namespace: str = Field(default="incremental", description="Namespace (database) of the tables.")
    warehouse: str = Field(
        default="data/warehouse", description="Warehouse folder or URI of the default catalog."
    )
    secrets_path: str | None = Field(
        default=None,
        description="secrets.toml whose [spark.conf] is added when the Spark session is built. "
        "Only the path is config (Dagster shows config in the UI); values are read then.",
    )

    config_path: str | None = Field(
        default=None,
        description="The config.toml this was built from: its [assets.<name>] sections are checked "
        "against the incremental assets defined with it when Dagster loads the code location.",
    )

    _session: Any = PrivateAttr(default=None)
    _starting: bool = PrivateAttr(default=False)

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> SparkTableIOManager:
        """Build from config.toml's `[spark]` and `[destination]` sections (and their env overrides)."""
        from dagster_incremental.settings.config import load_config
        from dagster_incremental.settings.secrets import SecretsFile

        cfg = load_config(path)
        return cls(
            master=cfg.spark.master,
            app_name=cfg.spark.app_name,
            spark_config={k: str(v) for k, v in cfg.spark.conf.items()},
            table_format=cfg.destination.format,
            catalog=cfg.destination.catalog,
            namespace=cfg.destination.namespace,
            warehouse=str(cfg.destination.warehouse),
            secrets_path=str(SecretsFile.beside(cfg).path),
            config_path=str(cfg.path),
        )

    def get_resource_definition(self) -> Any:
        """Dagster builds this when it loads the code location, after every module of it is
        imported: the moment the set of assets defined with config.toml is complete, so its asset
        sections are checked here (a misspelt one fails the load; README "Settings: one schema,
        checked before anything runs")."""
        config_use.check_sections_at_load(self.config_path)
        return super().get_resource_definition()

    # -- Spark -----------------------------------------------------------------------------------

    @property
    def spark(self):
        """The process's SparkSession for this destination (built once, on first use)."""
        if self._session is None:
            with _SESSION_LOCK:
                if self._session is None:
                    self._session = build_spark_session(self._spark_conf())
        return self._session

    def start_spark_in_background(self) -> None:
        """Start the session on a daemon thread, so the JVM starts while the asset function
        is still extracting; `spark` then waits for it. A failure surfaces at that first use."""
        from dagster_incremental.spark.java_check import java_binary

        if self._session is not None or self._starting or java_binary() is None:
            return  # without Java, the run's own first use says what to install
        self._starting = True
        import pyspark.sql  # noqa: F401 - imported here: two threads importing it at once deadlock-break into an ImportError

        def start() -> None:
            try:
                self.spark
            except Exception:  # noqa: BLE001 - raised again, in the run, by the next `spark`
                pass

        threading.Thread(target=start, name="dagster-incremental-spark-start", daemon=True).start()

    def _spark_conf(self) -> dict[str, str]:
        warehouse = self.warehouse
        if "://" not in warehouse and not warehouse.startswith("file:"):
            warehouse = str(Path(warehouse).resolve())
        from dagster_incremental.settings.secrets import with_secret_spark_conf

        return spark_conf(
            master=self.master,
            app_name=self.app_name,
            # secret conf is read here, at first use, and never kept in a field
            conf=with_secret_spark_conf(self.spark_config, self.secrets_path),
            table_format=self.table_format,
            catalog=self.catalog,
            warehouse=warehouse,
        )

    def _table_files(self, table: TableRef) -> tuple[bool, Any]:
        """The table's current metadata read from its files, without Spark.

        (True, metadata) when this catalog keeps its tables in local files we can read;
        metadata None then means "no such table". (False, None): ask Spark.
        """
        from dagster_incremental.spark.table_metadata import hadoop_table_location, read_metadata

        location = hadoop_table_location(self._spark_conf(), table.catalog, [*table.namespace, table.name])
        if location is None:
            return False, None
        if not (location / "metadata").is_dir():
            return True, None
        metadata = read_metadata(location)
        return metadata is not None, metadata

    @property
    def writer(self):
        from dagster_incremental.spark.writer import TableWriter

        if self.table_format != "iceberg":
            raise IncrementalConfigError(
                f'[destination] format = "{self.table_format}" is not supported yet; '
                'use format = "iceberg" (Delta Lake is planned).'
            )
        return TableWriter(self.spark)

    def table_name(self, asset_key: dg.AssetKey) -> TableRef:
        """`catalog`.`namespace`.`asset`, key-prefix parts joined with `__`."""
        return TableRef.for_asset(self.catalog, self.namespace, asset_key.path)

    def committed_state(self, asset_key: dg.AssetKey, scope: str | None = None):
        """The cursor stored with the table's newest commit (None if the table has none)."""
        return self._committed_state(self.table_name(asset_key), scope)

    def _committed_state(self, table: TableRef, scope: str | None):
        """From the table's metadata files when they are readable here: no JVM for a run that
        turns out to have nothing to write."""
        readable, metadata = self._table_files(table)
        if not readable:
            return self.writer.read_committed_state(table, scope=scope)
        fields = metadata.committed_cursor(scope) if metadata is not None else None
        if fields is None:
            return None
        from dagster_incremental.spark.commit import CommittedState

        return CommittedState(*fields)

    def _nothing_to_create(self, batch: IncrementalBatch) -> bool:
        """No rows, no schema and no table: the writer would create nothing and commit nothing."""
        if batch.data is not None or batch.window is not None or batch.full_refresh:
            return False
        readable, metadata = self._table_files(batch.spec.table)
        return readable and metadata is None

    def _unchanged(self, table: TableRef) -> WriteResult:
        """What a run that commits nothing reports: the table as it is (from its files when
        readable here, else from Spark)."""
        readable, metadata = self._table_files(table)
        if readable and metadata is None:
            return WriteResult(0, 0, 0, 0, None, ())
        if readable:
            snapshot_id, summary = metadata.current_summary()
            schema, rows = metadata.spark_schema(), metadata.row_count()
            if schema is not None and rows is not None:
                return WriteResult(0, 0, 0, rows, snapshot_id, schema)
        return self.writer.unchanged(table)

    def only_rewrites_left(self, asset_key: dg.AssetKey) -> bool:
        """Whether the asset's table has rows and every snapshot it still holds is a rewrite
        (Iceberg operation "replace": a compaction, no data change): the history that carried the
        cursor was expired by maintenance, not lost with the rows (a dropped and recreated table
        starts with an append or overwrite)."""
        table = self.table_name(asset_key)
        readable, metadata = self._table_files(table)
        if readable:
            if metadata is None:
                return False
            operations = [(snap.get("summary") or {}).get("operation") for snap in metadata.lineage()]
        else:
            if not self.writer.table_exists(table):
                return False
            operations = [row[0] for row in self.spark.sql(f"SELECT operation FROM {table.sql}.snapshots").collect()]
        return bool(operations) and set(operations) == {"replace"} and bool(self._unchanged(table).row_count)

    # -- asset checks ----------------------------------------------------------------------------

    def table_snapshot(self, table: TableRef) -> int | None:
        """The table's current snapshot id (None: no table yet): from its metadata files when
        readable here, so a run that wrote nothing still needs no JVM; else from Spark."""
        readable, metadata = self._table_files(table)
        if readable:
            return metadata.current_snapshot_id() if metadata is not None else None
        from dagster_incremental.spark.key_check import current_snapshot_id

        return current_snapshot_id(self.spark, table)

    def commits_since(self, table: TableRef, snapshot_id: int | None) -> list[tuple[str, dict[str, str]]] | None:
        """The table's commits after `snapshot_id` (see TableMetadata.commits_since), from its
        metadata files; None when they are not readable here or the snapshot is not an ancestor."""
        readable, metadata = self._table_files(table)
        if not readable or metadata is None:
            return None
        return metadata.commits_since(snapshot_id)

    def duplicate_keys(self, table: TableRef, keys: Sequence[str], **options: Any):
        """The primary_key_unique aggregation (spark/key_check.py) with this destination's session."""
        from dagster_incremental.spark.key_check import duplicate_keys

        return duplicate_keys(self.spark, table, keys, **options)

    def window_counts(self, spec: WriteSpec, snapshot_id: int, column: str, windows: Sequence[tuple[Any, Any]]) -> list:
        """What one commit changed in each window of `column` (spark/statistics.py), with this
        destination's session: a range run's figures per partition."""
        from dagster_incremental.spark.statistics import pairing_key, window_counts

        return window_counts(self.spark, spec.table, snapshot_id, column, windows, pairing_key(spec))

    # -- IOManager -------------------------------------------------------------------------------

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        if isinstance(obj, IncrementalBatch):
            try:
                self._write_batch(context, obj)
            finally:
                if isinstance(obj.data, LocalRows):  # rows spilled to disk: remove the files
                    obj.data.close()
            return
        if _is_spark_frame(obj):
            spec = self._spec_from_definition(context)
            window = None
            if context.has_asset_partitions:
                column = _meta_value(context.definition_metadata, "partition_expr") or spec.cursor_column
                if not column:
                    raise IncrementalConfigError(
                        f"asset {context.asset_key.to_user_string()} is partitioned, but SparkTableIOManager "
                        "does not know which column holds the partition's time; add it to the asset, e.g. "
                        '@asset(metadata={"partition_expr": "event_date"})'
                    )
                tw = context.asset_partitions_time_window
                window = WindowReplace(column=column, start=tw.start, end=tw.end)
            with self._commit_lock(spec.table):
                result = self.writer.write(
                    spec, obj, commit=CommitInfo(state=None, run_id=context.run_id), window=window
                )
            context.add_output_metadata(result_metadata(spec.table, result))
            return
        raise IncrementalConfigError(
            f"asset {context.asset_key.to_user_string()} returned a {type(obj).__name__}; "
            "SparkTableIOManager stores pyspark DataFrames (or the output of @incremental_asset)."
        )

    def _write_batch(self, context: dg.OutputContext, obj: IncrementalBatch) -> None:
        result, _ = self.commit_batch(obj, context.asset_key, context.log)
        context.add_output_metadata(result_metadata(obj.spec.table, result, obj.column_descriptions))

    def commit_batch(self, batch: IncrementalBatch, asset_key: dg.AssetKey, log: Any) -> tuple[WriteResult, int | None]:
        """Commit `batch` (rows and cursor in one commit, as handle_output does) and return what
        the commit did and the snapshot that now holds the batch's cursor: the new snapshot, or
        `batch.expected_snapshot_id` when there was nothing to commit. An asset run cut into
        slices commits all but its output this way, each slice expecting the previous one's."""
        current = self._refuse_stale_writer(asset_key, batch) if batch.check_stale else None
        if _nothing_to_commit(batch, current) or self._nothing_to_create(batch):
            # No rows and the table already holds this cursor (or there is no table and
            # nothing to create): a commit would change nothing, and Spark is not needed.
            return self._unchanged(batch.spec.table), batch.expected_snapshot_id
        with self._commit_lock(batch.spec.table):
            result = self._write_guarded(asset_key, batch)
            self._compact_if_needed(log, batch.spec.table, result)
        return result, result.snapshot_id

    def _write_guarded(self, asset_key: dg.AssetKey, batch: IncrementalBatch) -> WriteResult:
        """The writer's one commit; for a cursor-carrying run a compare-and-set on the snapshot
        the run read its cursor from (spark/branch_commit.py), whatever the catalog. A commit
        refused only because another writer moved the table without touching this cursor (a
        backfill, a compaction) is made again on the new snapshot."""
        from dagster_incremental.spark.branch_commit import BaseMoved, CursorGuard, StaleCursor

        guard = CursorGuard(batch.expected_snapshot_id, batch.commit.scope) if batch.check_stale else None
        for _ in range(_PUBLISH_ATTEMPTS):
            try:
                return self.writer.write(
                    batch.spec,
                    batch.data,
                    commit=batch.commit,
                    window=batch.window,
                    full_refresh=batch.full_refresh,
                    run_started_at=batch.run_started_at,
                    deduplicated=batch.deduplicated,
                    guard=guard,
                )
            except StaleCursor as exc:
                raise self._stale_error(asset_key, batch, exc.run_id) from None
            except BaseMoved:
                continue
        raise ConcurrentRunError(
            f"asset {asset_key.to_user_string()}: other writers committed to {batch.spec.table.display} "
            f"during each of this run's {_PUBLISH_ATTEMPTS} attempts to commit, so it wrote nothing. "
            "Re-run it; limit the asset's concurrency pool to 1 to have runs wait their turn.",
            asset=asset_key.to_user_string(), table=batch.spec.table.display,
        )

    def _commit_lock(self, table: TableRef):
        """The table's cross-process commit lock when its catalog keeps it in local (or mounted)
        files; elsewhere the catalog's own commit is the only guard (see README, Concurrency)."""
        from dagster_incremental.spark.commit_lock import table_commit_lock
        from dagster_incremental.spark.table_metadata import hadoop_table_location

        in_catalog = [*table.namespace, table.name]
        location = hadoop_table_location(self._spark_conf(), table.catalog, in_catalog)
        if location is None:
            return contextlib.nullcontext()
        return table_commit_lock(location.parents[len(in_catalog) - 1], in_catalog)

    def _compact_if_needed(self, log: Any, table: TableRef, result: WriteResult) -> None:
        """Fold merge-on-read delete files into the data (see maintenance). The run's data and
        cursor are committed already: a failed compaction is a warning, retried next run."""
        from dagster_incremental.spark import maintenance
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

    def _refuse_stale_writer(self, asset_key: dg.AssetKey, batch: IncrementalBatch):
        """Two runs that read the same cursor must not both commit: the second would load twice.
        Returns the committed state it checked (None: the table has none)."""
        current = self._committed_state(batch.spec.table, batch.commit.scope)
        current_id = current.snapshot_id if current is not None else None
        if current_id != batch.expected_snapshot_id:
            raise self._stale_error(asset_key, batch, current.run_id if current is not None else None)
        return current

    @staticmethod
    def _stale_error(asset_key: dg.AssetKey, batch: IncrementalBatch, other: str | None) -> ConcurrentRunError:
        return ConcurrentRunError(
            f"asset {asset_key.to_user_string()}: another run ({other or 'unknown'}) committed to "
            f"{batch.spec.table.display} after this run read its cursor, so this run wrote "
            "nothing (a run commits only if the table still holds the snapshot it read its cursor "
            "from). Re-run it to continue from the new cursor; to have runs of one asset wait their "
            "turn instead of failing, limit its concurrency pool to 1 (dagster.yaml: "
            "`concurrency: {pools: {default_limit: 1}}`).",
            asset=asset_key.to_user_string(), table=batch.spec.table.display, other_run=other,
        )

    def load_input(self, context: dg.InputContext):
        upstream = context.upstream_output
        key = upstream.asset_key if upstream is not None else context.asset_key
        frame = self.spark.table(self.table_name(key).sql)
        window_column = None
        if upstream is not None:
            meta = upstream.definition_metadata
            window_column = _meta_value(meta, md.DEF_WINDOW_COLUMN) or _meta_value(meta, "partition_expr")
            tenant_column = _meta_value(meta, md.DEF_PARTITION_COLUMN)
            if context.has_asset_partitions and tenant_column:
                from dagster_incremental.dagster.partition_scope import rows_of_partitions

                return rows_of_partitions(frame, context, tenant_column, window_column)
        if context.has_asset_partitions and window_column:
            from pyspark.sql import functions as F

            tw = context.asset_partitions_time_window
            col = F.col(_column_ref(window_column))
            frame = frame.where((col >= F.lit(tw.start)) & (col < F.lit(tw.end)))
        return frame

    def _spec_from_definition(self, context: dg.OutputContext) -> WriteSpec:
        settings = dict(_meta_value(context.definition_metadata, md.DEF_WRITE_SETTINGS) or {})
        settings.setdefault("disposition", "replace")
        return write_spec_from_settings(self.table_name(context.asset_key), settings)


def write_spec_from_settings(table: TableRef, settings: Mapping[str, Any]) -> WriteSpec:
    """A WriteSpec from the JSON-able settings kept in definition metadata."""
    from dagster_incremental.spark.write_spec import Scd2Options

    values = dict(settings)
    scd2 = values.pop("scd2", None) or {}
    for key in ("primary_key", "merge_key", "partition_by"):
        values[key] = tuple(values.get(key) or ())
    if values.get("dedup_sort"):
        values["dedup_sort"] = tuple(values["dedup_sort"])
    if "validity_column_names" in scd2:
        scd2["validity_column_names"] = tuple(scd2["validity_column_names"])
    return WriteSpec(table=table, scd2=Scd2Options(**scd2), **values)


def _nothing_to_commit(batch: IncrementalBatch, current: Any) -> bool:
    """A run without rows (not even a schema) whose cursor state is the one committed last."""
    from dagster_incremental.cursor.state import resumable, state_json

    if batch.data is not None or batch.window is not None or batch.full_refresh or current is None:
        return False
    if batch.commit.state is None or batch.commit.scope != current.scope:
        return False
    return state_json(resumable(batch.commit.state)) == state_json(resumable(current.state))


def result_metadata(table: TableRef, result: WriteResult, descriptions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a commit did, as materialization metadata (a sliced run reports its totals with it)."""
    return {
        md.ROWS_INSERTED: dg.MetadataValue.int(result.rows_inserted),
        md.ROWS_UPDATED: dg.MetadataValue.int(result.rows_updated),
        md.ROWS_DELETED: dg.MetadataValue.int(result.rows_deleted),
        md.ROW_COUNT: dg.MetadataValue.int(result.row_count),
        md.TABLE_NAME: dg.MetadataValue.text(table.display),
        md.COLUMN_SCHEMA: dg.MetadataValue.table_schema(md.table_schema(result.schema, descriptions)),
    }


def _meta_value(metadata: Mapping[str, Any] | None, key: str) -> Any:
    """A definition metadata value, unwrapped from Dagster's MetadataValue."""
    value = (metadata or {}).get(key)
    return getattr(value, "value", value)


def _is_spark_frame(obj: Any) -> bool:
    return any(c.__module__.startswith("pyspark.sql") and c.__name__ == "DataFrame" for c in type(obj).__mro__)


def _column_ref(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


__all__: Sequence[str] = ["SparkTableIOManager", "write_spec_from_settings"]
