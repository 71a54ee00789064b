"""Per-tenant cursors: static partitions (tenants) and tenant x day partitions.

A time-window asset keeps one cursor, its open window's. With static partitions each partition
key (a tenant, a region, a source) keeps its own cursor, as Airbyte keeps per-partition state:
the run of a tenant binds and commits under the tenant's scope (the table snapshot's scope
property, the materialization of that partition), so it never moves another tenant's cursor.
Every write it makes is confined to the rows whose `partition_column` holds the tenant's key:
its window replaces, full refresh and replace disposition delete nothing of other tenants, and
its merge keys hold the column, so a MERGE cannot match another tenant's row.

Tenant x day (a MultiPartitionsDefinition of one static and one time-window dimension) combines
both: each tenant's open day continues from its own cursor, its closed days are backfills that
replace that tenant's rows of the day.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from dagster_incremental.errors import DataShapeError, IncrementalConfigError
from dagster_incremental.settings.vocabulary import STRATEGIES



@dataclass(frozen=True)
class TenantPartitions:
    """How an asset's static (or static x time) partitions map to cursors and rows."""

    column: str  # the table column holding the static partition key
    static_dimension: str | None = None  # tenant x day: the static dimension's name
    time_dimension: str | None = None  # tenant x day: the time dimension's name

    def tenant(self, partition_key: Any) -> str:
        """The static part of a partition key (a tenant x day key holds both)."""
        if self.static_dimension is None:
            return str(partition_key)
        return partition_key.keys_by_dimension[self.static_dimension]


def tenant_partitions(asset: str, partitions_def: Any, partition_column: str | None) -> TenantPartitions | None:
    """The asset's tenant partitions (None: unpartitioned or time windows), checked now: a
    partitions_def the library cannot map to cursors fails the code location naming the asset."""
    if partitions_def is None or isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        if partition_column is not None:
            raise IncrementalConfigError(
                f"asset {asset!r}: partition_column {partition_column!r} names the column of a static "
                "partition (a tenant); this asset has "
                + ("no partitions" if partitions_def is None else "time-window partitions only")
                + ": drop partition_column, or partition the asset by a StaticPartitionsDefinition"
            )
        return None
    if isinstance(partitions_def, dg.StaticPartitionsDefinition):
        if not partition_column:
            raise IncrementalConfigError(
                f"asset {asset!r}: static partitions need partition_column, the table column that holds "
                f"the partition key (e.g. partition_column=\"tenant\"), so a run of one partition writes "
                "only that partition's rows"
            )
        return TenantPartitions(column=partition_column)
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return _tenant_by_time(asset, partitions_def, partition_column)
    raise IncrementalConfigError(
        f"asset {asset!r}: partitions_def {type(partitions_def).__name__} cannot carry a cursor per "
        "partition; use a TimeWindowPartitionsDefinition (days), a StaticPartitionsDefinition (tenants) "
        "or a MultiPartitionsDefinition of one static and one time-window dimension (tenant x day)"
    )


def _tenant_by_time(asset: str, partitions_def: dg.MultiPartitionsDefinition, partition_column: str | None) -> TenantPartitions:
    dims = partitions_def.partitions_defs
    static = [d for d in dims if isinstance(d.partitions_def, dg.StaticPartitionsDefinition)]
    timed = [d for d in dims if isinstance(d.partitions_def, dg.TimeWindowPartitionsDefinition)]
    if len(static) != 1 or len(timed) != 1:
        shown = ", ".join(f"{d.name}: {type(d.partitions_def).__name__}" for d in dims)
        raise IncrementalConfigError(
            f"asset {asset!r}: a MultiPartitionsDefinition needs one static and one time-window dimension "
            f"(tenant x day), got {shown}"
        )
    return TenantPartitions(
        column=partition_column or static[0].name, static_dimension=static[0].name, time_dimension=timed[0].name
    )


def check_keys(asset: str, tenants: TenantPartitions | None, strategy: str | None,
               primary_key: Sequence[str], merge_key: Sequence[str]) -> None:
    """A MERGE of one tenant's rows matches on its keys: without the tenant column in them it
    could update or retire another tenant's row with the same id."""
    if tenants is None or strategy not in STRATEGIES:
        return
    column = tenants.column
    if strategy == "scd2" and not merge_key:
        raise IncrementalConfigError(
            f"asset {asset!r}: scd2 on static partitions needs merge_key holding {column!r} (without it a "
            "batch of one tenant would retire every other tenant's current rows)"
        )
    for name, keys in (("primary_key", primary_key), ("merge_key", merge_key)):
        if keys and column not in keys:
            raise IncrementalConfigError(
                f"asset {asset!r}: {name} {list(keys)!r} must include the partition column {column!r}: "
                f"the {strategy} MERGE of one partition's rows matches on it, and without the column it "
                f"could change another partition's row with the same key (use {[column, *keys]!r})"
            )


def check_window_rows(asset: str, partitions_def: Any, tenants: TenantPartitions | None, window_column: str | None,
                      cursors: Mapping[str, Any], place: str) -> None:
    """A run of a time window replaces the table's rows of that window, so it must know the
    column whose value places a row in a window: without one a re-run would load the window's
    rows a second time (a replace asset would wipe the other windows). Refused at definition."""
    timed = isinstance(partitions_def, dg.TimeWindowPartitionsDefinition) or (
        tenants is not None and tenants.time_dimension is not None)
    if not timed or window_column is not None:
        return
    nested = [f"{name!r} (cursor_path {spec.cursor_path!r})" for name, spec in cursors.items()]
    found = (f"its incremental argument {', '.join(nested)} is a nested path, not a column" if nested
             else "it has no `Incremental` parameter and no window_column")
    raise IncrementalConfigError(
        f"asset {asset!r}: a run of one of its time-window partitions replaces the table's rows of that "
        f"window, but {found}, so nothing tells which rows belong to a window (a re-run would load them "
        f"twice). Set window_column = \"<column>\" in {place} (or window_column=\"<column>\" in "
        "@incremental_asset), the column whose value places a row in a window; or add an `Incremental` "
        "parameter whose cursor_path is a top-level column, e.g. updated_at: Incremental = incremental(\"updated_at\")"
    )


def tenant_keys(tenants: TenantPartitions, partitions_def: Any) -> list[str]:
    """Every tenant's key (the static dimension's, for tenant x day)."""
    if tenants.static_dimension is None:
        return list(partitions_def.get_partition_keys())
    return list(partitions_def.get_partitions_def_for_dimension(tenants.static_dimension).get_partition_keys())


def open_partition(tenants: TenantPartitions, partitions_def: Any, tenant: str) -> str:
    """The partition that holds the tenant's live cursor: the tenant's own, or its newest day."""
    if tenants.time_dimension is None:
        return tenant
    assert tenants.static_dimension is not None, "tenant x day partitions name both dimensions"
    days = partitions_def.get_partitions_def_for_dimension(tenants.time_dimension)
    return str(dg.MultiPartitionKey({tenants.time_dimension: days.get_last_partition_key(),
                                     tenants.static_dimension: tenant}))


def rows_of_partitions(frame: Any, context: Any, column: str, window_column: str | None) -> Any:
    """The rows of a tenant asset that a downstream's input covers: its tenants' rows (of its
    days, for tenant x day, when the cursor is a plain column)."""
    from pyspark.sql import functions as F

    from dagster_incremental.spark.sql import in_window, quote

    tenants = tenant_partitions(context.asset_key.to_user_string(), context.asset_partitions_def, column)
    if tenants is None:  # the upstream's partitions are not tenants: nothing to narrow by
        return frame
    keys = {tenants.tenant(key) for key in _partition_keys(context)}
    frame = frame.where(F.col(quote(column)).isin(sorted(keys)))
    if tenants.time_dimension is not None and window_column:
        tw = context.asset_partitions_time_window
        frame = frame.where(in_window(F.col(quote(window_column)), tw.start, tw.end))
    return frame


def _partition_keys(context: Any) -> list[Any]:
    """The upstream partition keys of an input, as keys (MultiPartitionKey for tenant x day)."""
    keys = list(context.asset_partition_keys)
    parts = context.asset_partitions_def
    if isinstance(parts, dg.MultiPartitionsDefinition):
        return [parts.get_partition_key_from_str(str(key)) for key in keys]
    return keys


# -- one run --------------------------------------------------------------------------------------


def tenant_plan(asset: str, tenants: TenantPartitions, context: Any, config: Any, disposition: str) -> dict[str, Any]:
    """The Plan fields of a run of one tenant partition (see run.Plan)."""
    keys = list(context.partition_keys)
    if len(keys) != 1:
        raise dg.Failure(
            f"asset {asset}: a run covers one partition of its tenants, this one was launched for "
            f"{len(keys)} ({keys[0]} ... {keys[-1]}); launch a backfill, which runs each partition on its "
            "own (the asset's backfill policy)",
            allow_retries=False,
        )
    key = keys[0]
    rows_of = (tenants.column, tenants.tenant(context.partition_key))
    if tenants.time_dimension is not None:
        return _day_plan(key, context, config, rows_of)
    if config.initial_value is not None and config.end_value is None:
        raise dg.Failure("initial_value in run config needs end_value too (a backfill of [initial_value, end_value))")
    if config.end_value is not None:
        overrides = {"end_value": config.end_value}
        if config.initial_value is not None:
            overrides["initial_value"] = config.initial_value
        # scope: the tenant's cursor is read (and reported, unchanged), never written
        return dict(mode="backfill", scope=key, window_replace=True, stateless=True, overrides=overrides,
                    rows_of=rows_of)
    # a replace asset replaces the tenant's rows on every run; a full refresh restarts its cursor
    replaces = config.full_refresh or disposition == "replace"
    return dict(mode="incremental", scope=key, restart=config.full_refresh, window_replace=replaces, rows_of=rows_of)


def _day_plan(key: str, context: Any, config: Any, rows_of: tuple[str, str]) -> dict[str, Any]:
    """Tenant x day: the tenant's open day continues its cursor, its closed days are backfills."""
    if config.end_value or config.initial_value:
        raise dg.Failure(
            "initial_value/end_value run config is for unpartitioned and static-partitioned assets; "
            "launch a backfill of the tenant's days instead"
        )
    tw = context.partition_time_window
    window = (tw.start, tw.end)
    if window_is_open(tw.end):
        return dict(mode="incremental", scope=str(key), window=window, restart=config.full_refresh, rows_of=rows_of)
    return dict(mode="backfill", window=window, window_replace=True, stateless=True, rows_of=rows_of)


def utc_now() -> datetime:
    """The clock the open-window rule reads (one place, so a test can pin it at noon)."""
    return datetime.now(timezone.utc)


def window_is_open(end: datetime) -> bool:
    """A window that has not ended yet still receives rows: only there a cursor lives; a run of
    an ended window is a stateless backfill of it."""
    return end > utc_now()


def check_rows(asset: str, frame: Any, rows_of: tuple[str, str] | None) -> None:
    """Refuse a batch holding rows of another partition (or none): they would land outside the
    partition and no later run of it could replace them. Nothing is written yet."""
    if frame is None or rows_of is None:
        return
    from dagster_incremental.spark.local.stage import is_spark_frame

    column, tenant = rows_of
    if column not in (frame.columns if is_spark_frame(frame) else frame.column_names):
        raise DataShapeError(
            f"asset {asset}: the rows of partition {tenant!r} have no column {column!r} (the asset's "
            "partition_column); give every row its partition key. Nothing was written."
        )
    found = _other_value(frame, column, tenant)
    if found is not _NONE:
        raise DataShapeError(
            f"asset {asset}: a run of partition {tenant!r} got a row whose {column!r} is {found!r}; a run "
            "may only load rows of its own partition (filter the rows in the asset). Nothing was written."
        )


_NONE = object()


def _other_value(frame: Any, column: str, tenant: str) -> Any:
    """A value of `column` other than `tenant` (NULL included), else _NONE: one Spark job on
    a DataFrame, one Arrow comparison on local rows."""
    from dagster_incremental.spark.local.stage import is_spark_frame

    if is_spark_frame(frame):
        from pyspark.sql import functions as F

        ref = F.col("`" + column.replace("`", "``") + "`")
        found = frame.where(ref.isNull() | (ref.cast("string") != F.lit(tenant))).select(ref).limit(1).collect()
        return found[0][0] if found else _NONE
    import pyarrow.compute as pc

    values = frame.columns([column]).column(column)
    same = pc.fill_null(pc.equal(values.cast("string"), tenant), False)
    if pc.all(same).as_py():
        return _NONE
    return values.filter(pc.invert(same)).slice(0, 1).to_pylist()[0] if len(values) else _NONE
