"""The rows an upstream changed between two snapshots, on merge-on-read and copy-on-write tables,
with compaction in between: only net changes, never a row an Iceberg rewrite merely moved."""

from __future__ import annotations

import uuid

import pytest

from dagster_incremental.cursor.upstream import plan_read
from dagster_incremental.spark.iceberg.changes import IcebergChanges
from dagster_incremental.spark.upstream_changes import read_changes
from dagster_incremental.spark.table_ref import TableRef

pytestmark = pytest.mark.spark


def changes_since(spark, table: TableRef, cursor):
    iceberg_changes = IcebergChanges()  # classic mode: the driver's Table object, no catalog conf
    history, current = iceberg_changes.snapshot_history(spark, table)
    read = plan_read(table.display, history, current, cursor)
    return read.kind, sorted(tuple(r) for r in read_changes(iceberg_changes, spark, table, read).collect()), current


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_updates_deletes_and_compaction_give_the_net_change(spark, mode):
    table = TableRef.parse(f"lake.changes_{uuid.uuid4().hex[:8]}.t")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{table.namespace[0]}")
    spark.sql(f"CREATE TABLE {table.sql} (id bigint, v string) USING iceberg TBLPROPERTIES "
              f"('format-version'='2', 'write.merge.mode'='{mode}', 'write.delete.mode'='{mode}')")
    spark.sql(f"INSERT INTO {table.sql} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    kind, rows, first = changes_since(spark, table, None)
    assert (kind, rows) == ("full", [(1, "a", "INSERT"), (2, "b", "INSERT"), (3, "c", "INSERT")])

    spark.sql(f"INSERT INTO {table.sql} VALUES (4, 'd')")
    kind, rows, appended = changes_since(spark, table, first)
    assert (kind, rows) == ("append", [(4, "d", "INSERT")])

    spark.createDataFrame([(2, "B"), (5, "e")], "id bigint, v string").createOrReplaceTempView("batch")
    spark.sql(f"MERGE INTO {table.sql} t USING batch s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"DELETE FROM {table.sql} WHERE id = 3")
    spark.sql(f"CALL lake.system.rewrite_data_files(table => '{table.namespace[0]}.t', options => map('rewrite-all', 'true'))")
    kind, rows, _ = changes_since(spark, table, appended)
    # the rows the rewrites only moved (1 and 4; for copy-on-write also the rest of each file) are not changes
    assert (kind, rows) == ("changes", [(2, "B", "INSERT"), (2, "b", "DELETE"), (3, "c", "DELETE"), (5, "e", "INSERT")])
