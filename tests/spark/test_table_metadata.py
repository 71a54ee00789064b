"""table_metadata: the cursor, current summary and schema read from the Hadoop catalog's files
must be exactly what Spark (commit.read_committed_state, TableWriter.unchanged, spark.table)
reports, and anything uncertain must be None rather than wrong."""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import json
import re
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from dagster_incremental.spark.iceberg import files as table_files, metadata as tm
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import STATE_PROPERTY

NS = "tm"


def _cursor(folder, scope=None):
    """The committed cursor read from the table's files (None: no table or no cursor)."""
    metadata = tm.read_metadata(folder)
    return metadata.committed_cursor(scope) if metadata is not None else None


def _summary(folder):
    metadata = tm.read_metadata(folder)
    return metadata.current_summary() if metadata is not None else None


def _schema(folder):
    metadata = tm.read_metadata(folder)
    return metadata.spark_schema() if metadata is not None else None


# -- the catalog conf ------------------------------------------------------------------------------


def hadoop_conf(warehouse: str, catalog: str = "lake", **extra: str) -> dict[str, str]:
    from dagster_incremental.spark.iceberg.session_setup import iceberg_catalog_conf

    return {**iceberg_catalog_conf(catalog, warehouse), **extra}


def test_location_of_a_local_hadoop_catalog(tmp_path, monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    wh = str(tmp_path)
    expected = tmp_path / "ns" / "sub" / "t"
    assert table_files.hadoop_table_location(hadoop_conf(wh), "lake", ["ns", "sub", "t"]) == expected
    for uri in (f"file://{wh}", f"file:{wh}", f"file://{wh}/", f"{wh}/"):
        assert table_files.hadoop_table_location(hadoop_conf(uri), "lake", ["ns", "sub", "t"]) == expected, uri
    assert table_files.hadoop_table_location(hadoop_conf(wh), "lake", ["we'ird ns", "a`b c"]) == tmp_path / "we'ird ns" / "a`b c"
    local_default = hadoop_conf(wh, **{"spark.hadoop.fs.defaultFS": "file:///"})
    assert table_files.hadoop_table_location(local_default, "lake", ["ns", "t"]) == tmp_path / "ns" / "t"


@pytest.mark.parametrize(
    "change",
    [
        {"spark.sql.catalog.lake.type": "hive"},
        {"spark.sql.catalog.lake.type": "rest"},
        {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkSessionCatalog"},
        {"spark.sql.catalog.lake.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog"},
        {"spark.sql.catalog.lake.io-impl": "org.apache.iceberg.aws.s3.S3FileIO"},
        {"spark.sql.catalog.lake.warehouse": "s3://bucket/warehouse"},
        {"spark.sql.catalog.lake.warehouse": "hdfs://nn:8020/warehouse"},
        {"spark.sql.catalog.lake.warehouse": "file://otherhost/warehouse"},
        {"spark.sql.catalog.lake.warehouse": "data/warehouse"},  # relative: the JVM's cwd decides
        {"spark.sql.catalog.lake.warehouse": "/tmp/a%20b"},
        {"spark.sql.catalog.lake.warehouse": ""},
        {"spark.hadoop.fs.defaultFS": "hdfs://nn:8020"},
        {"spark.sql.catalog.lake.hadoop.fs.defaultFS": "s3a://bucket"},
    ],
)
def test_anything_but_a_local_hadoop_catalog_is_none(tmp_path, change):
    conf = {**hadoop_conf(str(tmp_path)), **change}
    assert table_files.hadoop_table_location(conf, "lake", ["ns", "t"]) is None


def test_unknown_catalogs_and_unmappable_names_are_none(tmp_path, monkeypatch):
    conf = hadoop_conf(str(tmp_path))
    assert table_files.hadoop_table_location(conf, "other", ["ns", "t"]) is None
    assert table_files.hadoop_table_location({}, "lake", ["ns", "t"]) is None
    for parts in (["t"], ["ns", "a/b"], ["ns", ".."], ["ns", "a:b"], ["", "t"], ["ns", "50%"]):
        assert table_files.hadoop_table_location(conf, "lake", parts) is None, parts
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))  # core-site.xml may move fs.defaultFS
    assert table_files.hadoop_table_location(conf, "lake", ["ns", "t"]) is None
    assert table_files.hadoop_table_location(hadoop_conf(f"file://{tmp_path}"), "lake", ["ns", "t"]) is not None


# -- version resolution on synthetic metadata (no Spark) ----------------------------------------------


def metadata_json(version: int, *, snapshots=(), current=None) -> dict:
    """A minimal format-v2 metadata document; `version` is recorded in a property to tell files apart."""
    return {
        "format-version": 2,
        "location": "/x",
        "current-schema-id": 0,
        "schemas": [{"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}],
        "properties": {"v": str(version)},
        "current-snapshot-id": -1 if current is None else current,
        "snapshots": list(snapshots),
    }


def write_version(metadata_dir: Path, version: int, suffix: str = ".metadata.json", **kw) -> Path:
    metadata_dir.mkdir(parents=True, exist_ok=True)
    path = metadata_dir / f"v{version}{suffix}"
    data = json.dumps(metadata_json(version, **kw)).encode()
    path.write_bytes(gzip.compress(data) if ".gz" in suffix else data)
    return path


def version_read(table_dir: Path) -> int | None:
    metadata = tm.read_metadata(table_dir)
    if metadata is None:
        return None
    assert metadata.raw["properties"]["v"] == str(metadata.version)
    return metadata.version


def test_version_hint_then_newer_versions_win(tmp_path):
    meta = tmp_path / "metadata"
    for v in (1, 2, 3):
        write_version(meta, v)
    (meta / "version-hint.text").write_text("1")  # stale: a commit has not rewritten it yet
    assert version_read(tmp_path) == 3
    (meta / "version-hint.text").write_text("3\n")
    assert version_read(tmp_path) == 3
    (meta / "version-hint.text").unlink()  # a commit in progress deleted it: list the folder
    assert version_read(tmp_path) == 3
    (meta / "version-hint.text").write_text("")  # unreadable hint: list as Iceberg does
    (meta / "v9-not-a-version.metadata.json").write_text("{}")
    (meta / "vx.metadata.json").write_text("{}")
    (meta / "0f3e-uuid.metadata.json").write_text("{")  # a commit's temp file
    assert version_read(tmp_path) == 3


def test_gzip_and_legacy_gzip_versions(tmp_path):
    meta = tmp_path / "metadata"
    write_version(meta, 1, ".gz.metadata.json")
    write_version(meta, 2, ".metadata.json.gz")
    (meta / "version-hint.text").write_text("1")
    assert version_read(tmp_path) == 2
    write_version(meta, 3, ".gz.metadata.json")
    assert version_read(tmp_path) == 3


def test_missing_tables_and_untrustworthy_metadata_are_none(tmp_path, monkeypatch):
    assert tm.read_metadata(tmp_path / "nope") is None
    (tmp_path / "empty" / "metadata").mkdir(parents=True)
    assert tm.read_metadata(tmp_path / "empty") is None
    assert _cursor(tmp_path / "nope") is None
    assert _summary(tmp_path / "nope") is None and _schema(tmp_path / "nope") is None

    meta = tmp_path / "t" / "metadata"
    write_version(meta, 1)
    (meta / "version-hint.text").write_text("4")  # names a version that is not there
    assert tm.read_metadata(tmp_path / "t") is None
    (meta / "version-hint.text").write_text("1")
    assert version_read(tmp_path / "t") == 1
    (meta / "v2.metadata.json").write_text('{"format-version": 2, "loc')  # not whole
    assert tm.read_metadata(tmp_path / "t") is None
    (meta / "v2.gz.metadata.json").unlink(missing_ok=True)
    (meta / "v2.metadata.json").write_bytes(b"\x1f\x8b garbage")
    assert tm.read_metadata(tmp_path / "t") is None


def test_a_file_that_vanishes_mid_read_is_retried(tmp_path, monkeypatch):
    meta = tmp_path / "metadata"
    write_version(meta, 1)
    write_version(meta, 2)
    real = tm._load_json
    calls = []

    def flaky(path):
        calls.append(path.name)
        if len(calls) == 1:
            raise tm._Changing("vanished")
        return real(path)

    monkeypatch.setattr(tm, "_load_json", flaky)
    assert version_read(tmp_path) == 2 and calls == ["v2.metadata.json", "v2.metadata.json"]
    monkeypatch.setattr(tm, "_load_json", lambda path: (_ for _ in ()).throw(tm._Changing("always")))
    assert tm.read_metadata(tmp_path) is None


def test_lineage_walk_on_synthetic_snapshots(tmp_path):
    def snap(i, parent, **summary):
        return {"snapshot-id": i, "parent-snapshot-id": parent, "timestamp-ms": 1_700_000_000_000 + i,
                "summary": {"operation": "append", **summary}}

    state = {STATE_PROPERTY: '{"v":1}', "dagster_incremental.scope": "a"}
    snapshots = [snap(1, None, **state), snap(2, 1), snap(3, 2, **{STATE_PROPERTY: '{"v":3}'}), snap(4, 2)]
    write_version(tmp_path / "metadata", 1, snapshots=snapshots, current=4)  # 3 was rolled back
    metadata = tm.read_metadata(tmp_path)
    assert [s["snapshot-id"] for s in metadata.lineage()] == [4, 2, 1]
    cursor = metadata.committed_cursor()
    assert (cursor.state, cursor.scope, cursor.snapshot_id) == ({"v": 1}, "a", 1)
    assert cursor.committed_at == dt.datetime(2023, 11, 14, 22, 13, 20, 1000, tzinfo=dt.timezone.utc)
    assert metadata.committed_cursor("b") is None
    assert metadata.current_summary() == (4, {})
    cyclic = [snap(1, 2), snap(2, 1)]
    write_version(tmp_path / "metadata", 2, snapshots=cyclic, current=2)
    assert [s["snapshot-id"] for s in tm.read_metadata(tmp_path).lineage()] == [2, 1]


def test_spark_type_mapping():
    assert tm.spark_type("long") == "bigint" and tm.spark_type("timestamptz") == "timestamp"
    assert tm.spark_type("timestamp") == "timestamp_ntz" and tm.spark_type("decimal(9, 2)") == "decimal(9,2)"
    assert tm.spark_type("fixed[16]") == "binary" and tm.spark_type("uuid") == "string"
    nested = {"type": "map", "key": "string", "value": {"type": "list", "element": {
        "type": "struct", "fields": [{"name": "a b", "type": "int"}]}}}
    assert tm.spark_type(nested) == "map<string,array<struct<a b:int>>>"
    for unmapped in ("time", "timestamp_ns", "variant", "geometry", {"type": "union"}):
        with pytest.raises(ValueError):
            tm.spark_type(unmapped)


def test_importing_and_reading_needs_no_pyspark(tmp_path):
    write_version(tmp_path / "metadata", 1)
    code = (
        "import sys; from dagster_incremental.spark.iceberg import metadata as tm; "
        f"m = tm.read_metadata({str(tmp_path)!r}); "
        "assert m.current_summary() == (None, {}) and m.spark_schema() == (('id', 'bigint'),); "
        "assert 'pyspark' not in sys.modules and 'py4j' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- against real tables ---------------------------------------------------------------------------


@pytest.fixture
def location(spark):
    """table name -> its folder, from the running session's own conf."""
    conf = dict(spark.sparkContext.getConf().getAll())
    # A catalog's properties are set on the running session, not in the start conf.
    conf.update({k: spark.conf.get(k) for k in ("spark.sql.catalog.lake.type", "spark.sql.catalog.lake.warehouse")})

    def locate(table: TableRef) -> Path:
        path = table_files.hadoop_table_location(conf, table.catalog, [*table.namespace, table.name])
        assert path is not None
        return path

    return locate


@pytest.fixture
def table(request):
    return TableRef.for_asset("lake", NS, [re.sub(r"\W", "_", request.node.name)])


def info(n, scope=None):
    from dagster_incremental.spark.write_spec import CommitInfo

    return CommitInfo(state={"last_value": n}, run_id=f"run-{n}", scope=scope)


def spark_view(spark, table):
    """(committed state per scope, unchanged() result) as Spark reports them."""
    from dagster_incremental.spark.iceberg.commit import read_committed_state
    from dagster_incremental.spark.iceberg.writer import TableWriter

    states = {scope: read_committed_state(spark, table, scope) for scope in (None, "p1", "p2", "zzz")}
    return states, TableWriter(spark).unchanged(table)


def assert_matches_spark(spark, table, folder):
    """Every file-based answer equals Spark's, from one consistent read of the metadata."""
    states, unchanged = spark_view(spark, table)
    for scope, expected in states.items():
        assert _cursor(folder, scope) == expected, scope
    snapshot_id, summary = _summary(folder)
    assert snapshot_id == unchanged.snapshot_id
    live = int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0))
    assert int(summary.get("total-equality-deletes", 0)) == 0 and live == unchanged.row_count
    assert _schema(folder) == unchanged.schema
    iceberg = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table.sql)
    iceberg.refresh()
    current = iceberg.currentSnapshot()
    assert summary == (dict(current.summary()) if current is not None else {})
    return states


@pytest.mark.spark
def test_cursor_lineage_matches_spark_through_merges_scopes_and_a_rollback(spark, table, location):
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

    writer, folder = TableWriter(spark), location(table)
    schema = "id bigint, day date, v string"
    rows = lambda *ids: spark.createDataFrame([(i, dt.date(2024, 1, 1 + i % 3), f"v{i}") for i in ids], schema)  # noqa: E731
    append = WriteSpec(table=table, disposition="append")
    merge = WriteSpec(table=table, disposition="merge", strategy="upsert", primary_key=("id",))

    assert _cursor(folder) is None and tm.read_metadata(folder) is None  # no table yet
    writer.write(append, rows(1, 2), commit=info(1))
    assert_matches_spark(spark, table, folder)
    kept = writer.write(append, rows(3), commit=info(2, scope="p1")).snapshot_id
    writer.write(merge, rows(2, 4), commit=info(3, scope="p2"))  # merge-on-read: position deletes
    writer.write(append, rows(5), commit=CommitInfo(state=None, run_id="backfill"))  # no cursor
    states = assert_matches_spark(spark, table, folder)
    assert states[None].run_id == "run-3" and states["p1"].run_id == "run-2" and states["zzz"] is None

    spark.sql(f"CALL lake.system.rollback_to_snapshot(table => '{NS}.{folder.name}', snapshot_id => {kept})")
    states = assert_matches_spark(spark, table, folder)
    assert states[None].run_id == "run-2" and states["p2"] is None  # the merge left the lineage
    writer.write(merge, rows(1, 6), commit=info(5, scope="p2"))
    states = assert_matches_spark(spark, table, folder)
    assert states["p2"].snapshot_id == tm.read_metadata(folder).current_snapshot_id()
    assert _cursor(folder, "p1") == states["p1"]


NESTED = (
    "id bigint, n int, name string, ts timestamp, local timestamp_ntz, d double, f float, ok boolean, "
    "day date, raw binary, price decimal(10,2), big decimal(38,0), "
    "info struct<a:int,`two words`:struct<c:string,`x``y`:array<decimal(5,1)>>>, "
    "tags array<string>, items array<struct<k:string,v:bigint>>, props map<string,array<int>>, "
    "nested map<bigint,struct<p:double>>"
)


def nested_row(i: int) -> tuple:
    return (
        i, i, f"n{i}", dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 1, 12),
        i / 2, 1.5, True, dt.date(2024, 1, i), bytes([i]), Decimal("1.25"), Decimal(i),
        (i, ("c", [Decimal("1.5")])), ["a"], [("k", i)], {"p": [i]}, {i: (0.5,)},
    )


@pytest.mark.spark
def test_schema_and_summary_match_spark_for_nested_types_and_schema_evolution(spark, table, location):
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.write_spec import WriteSpec

    writer, folder = TableWriter(spark), location(table)
    spec = WriteSpec(table=table, disposition="append")
    result = writer.write(spec, spark.createDataFrame([nested_row(1)], NESTED), commit=info(1))
    assert _schema(folder) == result.schema
    assert_matches_spark(spark, table, folder)
    assert _schema(folder) == tuple((f.name, f.dataType.simpleString()) for f in spark.table(table.sql).schema.fields)

    # evolution: a new (hostile) column, int -> bigint, decimal widened; then a nested column added
    evolved = NESTED.replace("n int", "n bigint").replace("price decimal(10,2)", "price decimal(12,2)")
    evolved += ", `we``ird col` struct<q:timestamp_ntz>"
    row = (*nested_row(2), (dt.datetime(2024, 1, 2),))
    result = writer.write(spec, spark.createDataFrame([row], evolved), commit=info(2))
    assert dict(result.schema)["n"] == "bigint" and dict(result.schema)["price"] == "decimal(12,2)"
    assert _schema(folder) == result.schema
    assert_matches_spark(spark, table, folder)

    spark.sql(f"ALTER TABLE {table} ADD COLUMN info.extra map<string,string>")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN name TO title")
    spark.sql(f"ALTER TABLE {table} DROP COLUMN tags")
    assert_matches_spark(spark, table, folder)
    assert tm.read_metadata(folder).schema()["schema-id"] > 0


@pytest.mark.spark
def test_empty_table_and_missing_table(spark, table, location):
    folder = location(table)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `lake`.`{NS}`")
    spark.sql(f"CREATE TABLE {table} (id bigint, at timestamp) USING iceberg")
    assert _summary(folder) == (None, {}) and _cursor(folder) is None
    assert tm.read_metadata(folder) is not None  # a definitive "no cursor", not "unsure"
    assert_matches_spark(spark, table, folder)
    missing_table = dataclasses.replace(table, name=table.name + "_missing")
    missing = location(missing_table)
    assert not spark.catalog.tableExists(missing_table.sql)
    assert tm.read_metadata(missing) is None and _cursor(missing) is None


@pytest.mark.spark
def test_gzip_metadata_table(spark, table, location):
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.write_spec import WriteSpec

    folder = location(table)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `lake`.`{NS}`")
    spark.sql(
        f"CREATE TABLE {table} (id bigint, v string) USING iceberg "
        "TBLPROPERTIES ('write.metadata.compression-codec'='gzip', 'format-version'='2')"
    )
    writer = TableWriter(spark)
    spec = WriteSpec(table=table, disposition="append")
    for n in (1, 2):
        writer.write(spec, spark.createDataFrame([(n, "x")], "id bigint, v string"), commit=info(n, scope="p1"))
    names = sorted(p.name for p in (folder / "metadata").glob("v*.metadata.json"))
    assert names and all(n.endswith(".gz.metadata.json") for n in names), names
    newest = max(names, key=lambda n: int(n[1:].split(".")[0]))
    assert tm.read_metadata(folder).path.name == newest
    states = assert_matches_spark(spark, table, folder)
    assert states["p1"].run_id == "run-2"


@pytest.mark.spark
def test_hostile_identifiers_resolve_to_the_right_folder(spark, location):
    from dagster_incremental.spark.iceberg.writer import TableWriter
    from dagster_incremental.spark.write_spec import WriteSpec

    table = TableRef.for_asset("lake", "tm we'ird ns", ["It's", "a`b Table"])
    folder = location(table)
    TableWriter(spark).write(
        WriteSpec(table=table), spark.createDataFrame([(1, "x")], "`select` bigint, `a``b` string"), commit=info(1)
    )
    location_row = [r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect() if r.col_name == "Location"]
    assert Path(location_row[0].data_type.removeprefix("file:")) == folder
    assert_matches_spark(spark, table, folder)


@pytest.mark.spark
def test_committed_state_on_fifty_snapshots_takes_milliseconds(spark, table, location):
    from dagster_incremental.spark.iceberg.commit import read_committed_state, write_options
    from dagster_incremental.spark.run_commit import commit_properties
    from dagster_incremental.spark.write_spec import CommitInfo

    folder = location(table)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `lake`.`{NS}`")
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg")
    frame = spark.createDataFrame([(1,)], "id bigint")
    for n in range(50):  # the only scoped cursor is early: the walk crosses ~45 snapshots
        commit = info(n, scope="early") if n == 4 else CommitInfo(state={"n": n}) if n < 10 else CommitInfo(state=None)
        frame.writeTo(table.sql).options(**write_options(commit_properties(commit))).append()
    assert len(tm.read_metadata(folder).snapshots()) == 50

    timings = []
    for _ in range(20):
        started = time.perf_counter()
        state = _cursor(folder, "early")
        timings.append(time.perf_counter() - started)
    assert state == read_committed_state(spark, table, "early")
    assert _cursor(folder) == read_committed_state(spark, table)
    best, median = min(timings), sorted(timings)[len(timings) // 2]
    size = tm.read_metadata(folder).path.stat().st_size
    print(f"\ncommitted_state on 50 snapshots ({size} bytes of metadata): best {best * 1e3:.2f} ms, median {median * 1e3:.2f} ms")
    assert median < 0.1

    # a fresh process: import the module and read the cursor, no pyspark, no JVM
    code = (
        "import sys, time; t0 = time.perf_counter(); from dagster_incremental.spark.iceberg import metadata as tm; "
        f"t1 = time.perf_counter(); c = tm.read_metadata({str(folder)!r}).committed_cursor('early'); t2 = time.perf_counter(); "
        "assert c.run_id == 'run-4' and 'pyspark' not in sys.modules; "
        "print(f'{(t1 - t0) * 1e3:.1f} {(t2 - t1) * 1e3:.2f}')"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    print(f"fresh process: import {out[0]} ms, committed_cursor {out[1]} ms")


def _entry(operation: str, records: int, deletes: int, removed_data_files: int = 0, root: bool = False) -> tm.LineageEntry:
    summary = {"total-records": str(records), "total-position-deletes": str(deletes),
               "deleted-data-files": str(removed_data_files)}
    return tm.LineageEntry(operation, summary, root)


def test_provable_row_count_trusts_position_deletes_only_when_no_compaction_can_have_left_them_dangling():
    updates = [_entry("overwrite", 7, 2), _entry("overwrite", 5, 1), _entry("append", 4, 0, root=True)]
    assert tm.provable_row_count(updates) == 5
    # a user's rewrite_data_files kept the deletes of the files it removed: unproven, count
    user_compaction = [_entry("overwrite", 7, 5), _entry("replace", 4, 2, removed_data_files=2), *updates[1:]]
    assert tm.provable_row_count(user_compaction) is None
    # our compaction then drops the dangling deletes (total 0): later updates are exact again
    ours = [_entry("overwrite", 6, 2), _entry("replace", 4, 0), *user_compaction[1:]]
    assert tm.provable_row_count(ours) == 4
    assert tm.provable_row_count([_entry("overwrite", 7, 2)]) is None  # history cut by expiry
    assert tm.provable_row_count([]) == 0  # no snapshot: an empty table
