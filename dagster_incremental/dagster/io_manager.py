"""SparkTableIOManager: Dagster's side of the destination's tables.

Like Dagster's own DbIOManager, this class is a thin shell: it turns Dagster contexts into a
table name, a WriteSpec and a window (a plain DataFrame asset's: dagster/output_context.py),
hands the work to the destination's `Tables` (Spark
and Iceberg, one atomic commit per run), and reports what the commit did as materialization
metadata (rendered in dagster/metadata.py; README: "What you see").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from dagster_incremental.dagster import config_use, progress
from dagster_incremental.dagster import metadata as md
from dagster_incremental.dagster.output_context import frame_spec, frame_window, meta_value, write_spec_from_settings
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.connect import refuse_connect_frame, refuse_connect_process
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.local.stage import is_spark_frame
from dagster_incremental.spark.session_conf import spark_conf
from dagster_incremental.spark.committed_state import CommittedState
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.destination import changes_for, tables_for
from dagster_incremental.spark.table_format import Log, Tables, UpstreamChanges
from dagster_incremental.spark.write_spec import IncrementalBatch, WindowReplace, WriteResult, WriteSpec

_SERVICE_LOCK = threading.Lock()


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

    _tables: Tables | None = PrivateAttr(default=None)

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> SparkTableIOManager:
        """Build from config.toml's `[spark]` and `[destination]` sections (and their env overrides)."""
        from dagster_incremental.settings.config import load_config
        from dagster_incremental.settings.secrets import SecretsFile

        cfg = load_config(path)
        remote = {"spark.remote": cfg.spark.remote} if cfg.spark.remote else {}  # PySpark's own key for it
        if not cfg.path.exists():  # only the default path may be missing (a named file must exist)
            import warnings

            from dagster_incremental.errors import IncrementalSettingsWarning

            warnings.warn(
                f"SparkTableIOManager.from_config(): no config file: {cfg.missing_file()}. Using the "
                f"defaults: Spark master {cfg.spark.master!r}, {cfg.destination.format} warehouse "
                f"{cfg.destination.warehouse}. Pass the file's path, or run from the folder that holds config/.",
                IncrementalSettingsWarning, stacklevel=2,
            )
        return cls(
            master=cfg.spark.master,
            app_name=cfg.spark.app_name,
            spark_config={**remote, **{k: str(v) for k, v in cfg.spark.conf.items()}},
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
        sections are checked here (a misspelt one fails the load; docs/configuration.md "Settings:
        one schema, checked before anything runs")."""
        config_use.check_sections_at_load(self.config_path)
        return super().get_resource_definition()

    # -- the destination's tables -----------------------------------------------------------------

    @property
    def tables(self) -> Tables:
        """The destination's tables, of its format (one per IO manager instance, built on first use)."""
        if self._tables is None:
            with _SERVICE_LOCK:
                if self._tables is None:
                    self._tables = tables_for(self._spark_conf, self.table_format, _absolute_warehouse(self.warehouse))
        return self._tables

    @property
    def spark(self) -> Any:
        """The process's SparkSession for this destination (built once, on first use)."""
        return self.tables.spark

    def start_spark_in_background(self, spec: WriteSpec | None = None) -> None:
        """Start the JVM while the asset function extracts, unless `spec`'s write needs none."""
        self.tables.start_in_background(spec)

    @property
    def spark_started(self) -> bool:
        return self.tables.spark_started

    def _spark_conf(self) -> dict[str, str]:
        """The session's flat conf; secrets are read here, at first use, never kept in a field."""
        from dagster_incremental.settings.secrets import with_secret_spark_conf
        from dagster_incremental.spark.session import note_destination

        note_destination(self.catalog, _absolute_warehouse(self.warehouse), _origin(self.config_path, self.catalog))
        return spark_conf(
            master=self.master,
            app_name=self.app_name,
            conf=with_secret_spark_conf(self.spark_config, self.secrets_path),
            table_format=self.table_format,
            catalog=self.catalog,
            warehouse=_absolute_warehouse(self.warehouse),
        )

    def upstream_changes(self) -> UpstreamChanges:
        """How this destination's format reads an upstream table's changes (`Changes`)."""
        return changes_for(lambda: self.tables.conf, self.table_format)

    def table_name(self, asset_key: dg.AssetKey) -> TableRef:
        """`catalog`.`namespace`.`asset`, key-prefix parts joined with `__` (a Delta table also
        carries its folder: <warehouse>/<namespace>/<table>)."""
        return self.tables.table(self.catalog, self.namespace, asset_key.path)

    # -- what the run loop and the checks ask ------------------------------------------------------

    def committed_state(self, asset_key: dg.AssetKey, scope: str | None = None) -> CommittedState | None:
        """The cursor stored with the table's newest commit (None if the table has none)."""
        return self.tables.committed_state(self.table_name(asset_key), scope)

    def commit_batch(self, batch: IncrementalBatch, asset_key: dg.AssetKey, log: Log) -> tuple[WriteResult, int | None]:
        """Commit `batch` (rows and cursor in one commit, as handle_output does); see
        Tables.commit. A run cut into slices commits all but its output this way. Says
        the commit before and after it (progress.py): a merge into a large table takes a while."""
        asset, table = asset_key.to_user_string(), batch.spec.table.display
        rows = getattr(batch.data, "num_rows", None)  # local rows know their count; a Spark frame doesn't
        progress.say(log, asset, f"committing {f'{rows:,} rows' if isinstance(rows, int) else 'the rows'} to {table}"
                     if batch.data is not None else f"committing to {table}")
        result, snapshot = self.tables.commit(batch, asset, log)
        if snapshot == batch.expected_snapshot_id:  # a commit makes a new snapshot
            progress.say(log, asset, f"nothing to commit: {table} and its cursor unchanged")
        else:
            progress.say(log, asset, f"committed {progress.rows_text(result)} to {table} (snapshot {snapshot})")
        return result, snapshot

    # -- IOManager -------------------------------------------------------------------------------

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        if isinstance(obj, IncrementalBatch):
            try:
                result, _ = self.commit_batch(obj, context.asset_key, context.log)
            except Exception as exc:
                explained = self.storage_error(exc, context.asset_key)
                if explained is None:
                    raise
                raise dg.Failure(description=f"asset {context.asset_key.to_user_string()}: {explained}",
                                 allow_retries=False) from None  # the Java trace names none of it
            finally:
                if isinstance(obj.data, LocalRows):  # rows spilled to disk: remove the files
                    obj.data.close()
            context.add_output_metadata(md.result_metadata(
                obj.spec.table, result, obj.column_descriptions,
                replaced=obj.spec.replaces_table(obj.window)))
            return
        over_connect = self.tables.over_connect  # then a Connect DataFrame is this destination's own kind
        refuse_connect_frame(obj, context.asset_key.to_user_string(), over_connect)  # before any statement reads it
        refuse_connect_process(context.asset_key.to_user_string(), over_connect)
        if not is_spark_frame(obj):
            raise IncrementalConfigError(
                f"asset {context.asset_key.to_user_string()} returned a {type(obj).__name__}; "
                "SparkTableIOManager stores pyspark DataFrames (or the output of @incremental_asset)."
            )
        spec = frame_spec(context, self.table_name(context.asset_key))
        window = frame_window(context, spec)
        result = self.tables.write_frame(spec, obj, context.run_id, window)
        context.add_output_metadata(
            md.result_metadata(spec.table, result, replaced=spec.replaces_table(window)))

    def storage_error(self, exc: BaseException, asset_key: dg.AssetKey) -> str | None:
        """A storage or catalog failure (no file system for the warehouse, access refused, server
        unreachable) as the table, the catalog, the likely cause and the keys that fix it."""
        from dagster_incremental.spark.errors import root_message, storage_problem

        try:
            conf = self._spark_conf()  # the keys the session was built with (no value is shown)
            table = self.table_name(asset_key).display
            storage = self.tables.storage(self.catalog, conf, _absolute_warehouse(self.warehouse))
        except Exception:  # noqa: BLE001 - the destination itself is misconfigured: its own error stands
            return None
        problem = storage_problem(exc, storage)
        return None if problem is None else f"table {table}: {problem} (the error: {root_message(exc)})"

    def load_input(self, context: dg.InputContext) -> Any:
        upstream = context.upstream_output
        key = upstream.asset_key if upstream is not None else context.asset_key
        window_column = None
        if upstream is not None:
            meta = upstream.definition_metadata
            window_column = meta_value(meta, md.DEF_WINDOW_COLUMN) or meta_value(meta, "partition_expr")
            tenant_column = meta_value(meta, md.DEF_PARTITION_COLUMN)
            if context.has_asset_partitions and tenant_column:
                from dagster_incremental.dagster.partition_scope import rows_of_partitions

                frame = self.tables.read(self.table_name(key))
                return rows_of_partitions(frame, context, tenant_column, window_column)
        window = None
        if context.has_asset_partitions and window_column:
            tw = context.asset_partitions_time_window
            window = WindowReplace(column=window_column, start=tw.start, end=tw.end)
        return self.tables.read(self.table_name(key), window)


def _absolute_warehouse(warehouse: str) -> str:
    """The warehouse as a URI or an absolute folder."""
    if "://" in warehouse or warehouse.startswith("file:"):
        return warehouse
    return str(Path(warehouse).resolve())


def _origin(config_path: str | None, catalog: str) -> str:
    """Where a destination is configured, as a message names it."""
    if not config_path:
        return f"SparkTableIOManager(catalog={catalog!r})"
    relative = os.path.relpath(config_path)
    return f"{config_path if relative.startswith('..') else relative} [destination]"


__all__: Sequence[str] = ["SparkTableIOManager", "write_spec_from_settings"]
