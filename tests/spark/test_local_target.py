"""Which delete files the local merge can apply is decided from each scan task's JSON exactly as
Iceberg's ContentFileUtil decides it, and a data file carrying any other kind of delete hands the
merge to Spark: deletes naming several data files (partition granularity), deletion vectors
(format version 3), equality deletes."""

from __future__ import annotations

import json
import logging

import pytest

from dagster_incremental.spark.iceberg.commit import iceberg_table
from dagster_incremental.spark.iceberg.local.target import file_scoped_position_delete, json_enum, unusable_file
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec
from test_local_merge import SPARK_COMMIT, add_equality_delete, contents, new_table, rows, spec, summary

pytestmark = pytest.mark.spark

KINDS = {
    "file granularity (ours and Spark's)": {},
    "partition granularity": {"write.delete.granularity": "partition"},
    "deletion vectors": {"format-version": "3"},
}


def loaded_with_spark_deletes(spark, properties: dict) -> TableRef:
    """Three data files (a local first load, two appends) and a Spark DELETE of one row in each
    of two of them, written as `properties` make Iceberg write deletes."""
    table = new_table("deletes")
    writer = TableWriter(spark)
    properties = {"write.delete.mode": "merge-on-read", **properties}  # our tables' DELETE rewrites files
    writer.write(spec(table, table_properties=properties), rows([1, 2, 3]), commit=CommitInfo(state={"v": 1}), deduplicated=True)
    for ids in ([4, 5, 6], [7, 8, 9]):
        writer.write(WriteSpec(table=table, disposition="append"), rows(ids), commit=CommitInfo(state=None))
    spark.sql(f"DELETE FROM {table.sql} WHERE id IN (2, 5)")
    return table


def java_and_json_deletes(spark, table: TableRef) -> list[tuple[object, dict]]:
    """Every delete file of the current scan: (its Java DeleteFile, its JSON description)."""
    jvm, iceberg = spark._jvm, iceberg_table(spark, table)
    iceberg.refresh()
    tasks, found = iceberg.newScan().planFiles(), []
    iterator = tasks.iterator()
    while iterator.hasNext():
        task = iterator.next()
        described = json.loads(jvm.org.apache.iceberg.ScanTaskParser.toJson(task)).get("delete-files", [])
        listed = task.deletes()
        found += [(listed.get(i), described[i]) for i in range(listed.size())]
    tasks.close()
    return found


def icebergs_rule(spark, delete_file) -> bool:
    util = spark._jvm.org.apache.iceberg.util.ContentFileUtil
    return (str(delete_file.content()) == "POSITION_DELETES" and not util.isDV(delete_file)
            and util.isFileScoped(delete_file))


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_json_rule_is_icebergs_for_every_kind_of_delete(spark, kind, tmp_path):
    table = loaded_with_spark_deletes(spark, KINDS[kind])
    TableWriter(spark).write(spec(table), rows([1, 6], version=1), commit=CommitInfo(state={"v": 2}), deduplicated=True)
    add_equality_delete(spark, table, ids=[9], folder=tmp_path)

    found = java_and_json_deletes(spark, table)
    assert {json_enum(d["content"]) for _, d in found} == {"position-deletes", "equality-deletes"}
    rule = [file_scoped_position_delete(d) for _, d in found]
    assert rule == [icebergs_rule(spark, java) for java, _ in found]
    positional = [ok for ok, (_, d) in zip(rule, found) if json_enum(d["content"]) == "position-deletes"]
    assert all(positional) if kind.startswith("file") else not all(positional)


@pytest.mark.parametrize("kind", ["partition granularity", "deletion vectors"])
def test_deletes_the_local_merge_cant_apply_keep_sparks_merge(spark, kind, caplog):
    table = loaded_with_spark_deletes(spark, KINDS[kind])
    with caplog.at_level(logging.DEBUG, logger="dagster_incremental.spark.iceberg.local"):
        result = TableWriter(spark).write(spec(table), rows([1, 4, 20], version=1), commit=CommitInfo(state={"v": 2}), deduplicated=True)

    assert SPARK_COMMIT in summary(spark, table, result.snapshot_id)
    assert any("declined for" in m and table.namespace[0] in m for m in caplog.messages)
    assert ("not a file-scoped position delete file" if kind.startswith("partition") else "format version 3") in caplog.text
    versions = {r[0]: r[2] for r in contents(spark, table)}
    assert versions == {1: 1, 3: 0, 4: 1, 6: 0, 7: 0, 8: 0, 9: 0, 20: 1}


@pytest.mark.parametrize("spelling", ["1.10", "1.11+"])
def test_either_icebergs_json_spelling_gives_the_same_decision(spelling):
    """Iceberg 1.11 writes the REST spec's enums ("position-deletes", "parquet") where 1.10 wrote
    the Java names: both read alike, so the local merge applies on Spark 4.1 (Iceberg 1.12) too."""
    def word(name: str) -> str:
        return name if spelling == "1.10" else name.lower().replace("_", "-")

    data = {"content": word("DATA"), "file-path": "file:/t/data/a.parquet", "file-format": word("PARQUET")}
    scoped = {"content": word("POSITION_DELETES"), "file-format": word("PARQUET"), "file-path": "file:/t/data/a-deletes.parquet",
              "referenced-data-file": data["file-path"]}
    vector = {**scoped, "file-format": word("PUFFIN")}
    equality = {"content": word("EQUALITY_DELETES"), "file-format": word("PARQUET"), "file-path": "file:/t/data/e.parquet"}

    assert file_scoped_position_delete(scoped) and unusable_file(data, [scoped]) is None
    assert not file_scoped_position_delete(vector) and not file_scoped_position_delete(equality)
    assert "equality-deletes file (parquet)" in unusable_file(data, [scoped, equality])
    assert "position-deletes file (puffin)" in unusable_file(data, [vector])
    assert "is avro, not Parquet" in unusable_file({**data, "file-format": word("AVRO")}, [])
