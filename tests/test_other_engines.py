"""docs/other-engines.md's recipes for reading the tables without Dagster: pyiceberg (no JVM), DuckDB through
pyiceberg's Arrow scan, and Spark, all see the rows an upsert asset left after a change run (the
change run's position deletes included)."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest

from dagster_incremental import Incremental, SparkTableIOManager, incremental_asset

pytestmark = pytest.mark.spark

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
FIRST = [{"id": i, "status": "new", "updated_at": f"2026-01-0{i}T00:00:00Z"} for i in (1, 2, 3)]
CHANGES = [{"id": 2, "status": "paid", "updated_at": "2026-01-05T00:00:00Z"},
           {"id": 4, "status": "new", "updated_at": "2026-01-06T00:00:00Z"}]
EXPECTED = [(1, "new"), (2, "paid"), (3, "new"), (4, "new")]


@pytest.fixture
def orders_table(spark, spark_warehouse, instance, tmp_path, monkeypatch) -> tuple[str, str]:
    """(the table's folder in the default Hadoop warehouse, its Spark name) after two runs; the
    change run writes position deletes (as a change scattered over a large table does)."""
    from dagster_incremental.spark.iceberg.local import python_write

    monkeypatch.setattr(python_write, "MAX_REWRITE_ROWS", 0)
    monkeypatch.setattr(python_write, "MAX_REWRITE_ROWS_WITH_JVM", 0)
    namespace = "engines_" + uuid.uuid4().hex[:6]
    config = tmp_path / "config.toml"
    config.write_text('[assets.orders.updated_at]\ncursor_path = "updated_at"\n'
                      'initial_value = "2026-01-01T00:00:00Z"\n')
    batches = [FIRST, CHANGES]

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=str(config))
    def orders(updated_at: Incremental):
        yield from batches.pop(0)

    io = SparkTableIOManager(catalog="lake", namespace=namespace, warehouse=spark_warehouse)
    for _ in range(2):
        assert dg.materialize([orders], instance=instance, resources={"io_manager": io}, run_config=QUIET).success
    return str(Path(spark_warehouse) / namespace / "orders"), f"lake.{namespace}.orders"


def test_pyiceberg_duckdb_and_spark_read_the_table(spark, orders_table):
    folder, name = orders_table
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(folder)  # the folder: its metadata/version-hint.text names the newest
    arrow = table.scan(selected_fields=("id", "status")).to_arrow().sort_by("id")
    assert list(zip(arrow["id"].to_pylist(), arrow["status"].to_pylist())) == EXPECTED

    con = table.scan().to_duckdb(table_name="orders")
    assert con.execute("SELECT id, status FROM orders ORDER BY id").fetchall() == EXPECTED

    assert [tuple(r) for r in spark.table(name).select("id", "status").orderBy("id").collect()] == EXPECTED
