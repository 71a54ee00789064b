"""Table maintenance the writer's own choices make necessary: compacting merge-on-read deletes."""

# Why: keyed merge tables are merge-on-read (see iceberg/table_create.strategy_properties): a change run writes its new rows and
# a small delete file instead of rewriting every data file an update touches (copy-on-write),
# which made a 10k-row upsert into 1M rows rewrite nearly the whole table each run. Readers then
# pay for the deleted positions (Iceberg keeps at most one delete file per data file, merging
# earlier ones at write time), so once they reach COMPACT_AT_DELETED_SHARE of the table's rows
# (and COMPACT_AT_DELETED_ROWS), or COMPACT_AT_DELETE_FILES delete files have piled up (more of
# them than data files: written by a partition-scoped writer), the IO manager folds them into the
# data files (Iceberg's rewrite_data_files on the files that have deletes, then
# rewrite_position_delete_files to drop the deletes left pointing at rewritten files): the
# rewrite copy-on-write did on every run, done once per many runs. A compaction is
# its own commit without a cursor; losing it loses nothing.

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # needs_compaction is asked after every commit, pyiceberg's too: no pyspark for it
    from pyspark.sql import SparkSession

from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteResult

COMPACT_AT_DELETE_FILES = 64
COMPACT_AT_DELETED_SHARE = 0.10
COMPACT_AT_DELETED_ROWS = 10_000  # below this, deletes cost readers next to nothing


def needs_compaction(result: WriteResult) -> bool:
    """Whether the table's delete files cost readers enough to fold them in now.

    The file count alone does not decide: one delete file per data file is what any scattered
    change leaves on a large table, and compacting then would rewrite the whole table for a few
    deleted rows; a reader pays per deleted row, and per file only where deletes pile up."""
    if not result.delete_files:
        return False
    share = result.position_deletes / max(result.row_count + result.position_deletes, 1)
    many_rows = result.position_deletes >= COMPACT_AT_DELETED_ROWS and share >= COMPACT_AT_DELETED_SHARE
    piled_up = result.delete_files >= COMPACT_AT_DELETE_FILES and result.delete_files > result.data_files
    return many_rows or piled_up


def compact(spark: SparkSession, table: TableRef) -> dict[str, Any]:
    """Rewrite the data files of `table` that carry delete files.

    Returns the procedure's result row as a dict (rewritten/added file counts...).
    """
    from dagster_incremental.spark.table_create import string_literal
    from dagster_incremental.spark.sql import qualified

    catalog = table.catalog
    name = string_literal(spark, table.in_catalog_sql)
    rows = spark.sql(
        f"CALL {qualified(catalog)}.system.rewrite_data_files(table => {name}, options => map("
        "'delete-file-threshold', '1'))"
    ).collect()
    # Delete files that point at rewritten data files linger (verified with Iceberg 1.10, also
    # with remove-dangling-deletes) and stay in the summary's total-position-deletes, which the
    # writer's row count relies on: rewriting the delete files drops them.
    spark.sql(
        f"CALL {qualified(catalog)}.system.rewrite_position_delete_files(table => {name}, "
        "options => map('rewrite-all', 'true'))"
    ).collect()
    return rows[0].asDict() if rows else {}
