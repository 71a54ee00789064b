"""Local rows into their table without a Spark job: an append, or a keyed merge.

The one entry of the in-process path: the writer hands it the run's local rows and takes the
Spark path only when this says None (nothing was committed then).
"""

from __future__ import annotations

from typing import Any

from dagster_incremental.spark.iceberg.commit import PendingCommit
from dagster_incremental.spark.iceberg.local.append import LocalAppend
from dagster_incremental.spark.iceberg.local.merge import merge_local
from dagster_incremental.spark.local.rows import LocalRows
from dagster_incremental.spark.schema_evolution import creatable_schema, fit_table_to_rows, spark_schema_of_arrow
from dagster_incremental.spark.iceberg.figures import commit_result
from dagster_incremental.spark.iceberg.table_create import create_table, ensure_namespace
from dagster_incremental.spark.write_spec import HELPER_PREFIX, WriteResult, WriteSpec


def write_local(spark: Any, pending: PendingCommit, rows: LocalRows, *, exists: bool, deduplicated: bool) -> WriteResult | None:
    """`rows` appended (any append; the first load of a replace or keyed-merge table) or
    merged by key into an existing table, as the run's one commit; None: use Spark."""
    if _appends_only(pending.spec, exists, deduplicated, rows):
        return _append(spark, pending, rows)
    if exists and deduplicated and not pending.spec.delete_missing:  # that one compares every key: Spark
        return merge_local(spark, pending, rows)
    return None


def _append(spark: Any, pending: PendingCommit, rows: LocalRows) -> WriteResult | None:
    """Local rows appended by pyarrow + one Iceberg commit (see append.py); None when
    the table needs the Spark path (no data committed; the table may have been created,
    empty, or widened by schema evolution, which the Spark path then finds done)."""
    spec = pending.spec
    first_load = False
    if not spark.catalog.tableExists(spec.table.sql):
        if spec.partition_by:
            return None
        schema, _ = creatable_schema(spec.table, spark_schema_of_arrow(rows.schema))
        ensure_namespace(spark, spec.table)
        if not create_table(spark, pending, schema, if_not_exists=False):
            return None  # another writer created it first: merge/append the Spark way
        first_load = spec.disposition != "append"
    else:
        fit_table_to_rows(spark, spec.table, rows.schema, case_sensitive=pending.case_sensitive)
    target = LocalAppend.open(spark, spec.table)
    if target is None:
        return None
    paths: list[str] = []
    with pending.guarded(spark, written=paths, storage=target.storage):
        data_files = target.write_files(rows, pending.case_sensitive, paths)
        target.commit(data_files, pending.properties, only_if_empty=first_load, branch=pending.branch or None)
    return commit_result(spark, pending, kind="summary")


def _appends_only(spec: WriteSpec, exists: bool, deduplicated: bool, rows: LocalRows) -> bool:
    """Whether writing `rows` is adding its rows and nothing else: any append, or the first
    load of a replace or keyed-merge table (one row per key, no tombstones to apply)."""
    if any(c.startswith(HELPER_PREFIX) for c in rows.column_names):
        return False
    if spec.disposition == "append":
        return True
    if exists:
        return False
    if spec.disposition == "replace":
        return True
    return spec.keyed and deduplicated and spec.hard_delete_column is None
