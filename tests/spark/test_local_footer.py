"""The metrics the local writers commit for their data and delete files are exactly the ones
Iceberg's own ParquetUtil.fileMetrics reads from the same files: the bounds a scan prunes by,
the counts its metadata tables show."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dagster_incremental.spark.iceberg.commit import iceberg_table
from dagster_incremental.spark.iceberg.local.footer import FooterMetrics, footer_bytes
from dagster_incremental.spark.iceberg.local.target import local_path
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
METRICS = ("recordCount", "columnSizes", "valueCounts", "nullValueCounts", "nanValueCounts", "lowerBounds", "upperBounds")


def rows(ids, version: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}-{version}" if i % 3 else None for i in ids],
            "long_text": ["x" * 40 + str(i) for i in ids],  # past the default 16-character truncation
            "amount": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(12, 2)),
            "ratio": pa.array([math.nan if i % 7 == 0 else i / 3 for i in ids], pa.float64()),
            "updated_at": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i + version) for i in ids]),
            "day": [dt.date(2024, 1, 1 + i % 28) for i in ids],
            "tags": [{"k": i, "vs": [i, version]} for i in ids],
            "flag": [i % 2 == 0 for i in ids],
            "nothing": pa.nulls(len(ids)),
        }
    )


def files(spark, table: TableRef, content: int) -> list[str]:
    """Locations of the table's current data (content 0) or position delete (1) files."""
    query = f"SELECT file_path FROM {table.sql}.all_files WHERE content = {content}"
    return [r.file_path for r in spark.sql(query).collect()]


def assert_same_metrics(spark, iceberg, path: str, config) -> None:
    jvm = spark._jvm
    ours = FooterMetrics(jvm, config).of(local_path(path))
    icebergs = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(iceberg.io().newInputFile(path), config)
    for name in METRICS:
        mine, theirs = getattr(ours, name)(), getattr(icebergs, name)()
        assert theirs is not None, (name, path)
        assert (mine == theirs) if isinstance(theirs, int) else theirs.equals(mine), (name, path, str(mine), str(theirs))


def test_data_and_delete_files_carry_the_metrics_iceberg_reads_from_them(spark):
    table = TableRef("lake", (f"footer_{uuid.uuid4().hex[:6]}",), "t")
    writer = TableWriter(spark)
    spec = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))
    writer.write(spec, rows(list(range(1, 300)), 0), commit=CommitInfo(state={"v": 1}, run_id="r1"), deduplicated=True)
    writer.write(spec, rows([3, 30, 300, 301], 1), commit=CommitInfo(state={"v": 2}, run_id="r2"), deduplicated=True)

    iceberg = iceberg_table(spark, table)
    metrics = spark._jvm.org.apache.iceberg.MetricsConfig
    data, deletes = files(spark, table, 0), files(spark, table, 1)
    assert len(data) == 2 and len(deletes) == 1  # the first load, the change's rows, its deletes
    for path in data:
        assert_same_metrics(spark, iceberg, path, metrics.forTable(iceberg))
    assert_same_metrics(spark, iceberg, deletes[0], metrics.forPositionDelete(iceberg))


def test_a_file_without_a_parquet_footer_is_named(tmp_path):
    path = tmp_path / "not.parquet"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="not.parquet is not a Parquet file"):
        footer_bytes(str(path))


def test_the_footer_is_the_one_pyarrow_reads(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(rows(list(range(50)), 0), path)
    footer = footer_bytes(path)
    with open(path, "rb") as file:
        whole = file.read()
    assert whole.endswith(footer + len(footer).to_bytes(4, "little") + b"PAR1")
    assert pq.ParquetFile(path).metadata.serialized_size == len(footer)
