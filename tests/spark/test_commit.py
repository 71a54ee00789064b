"""The atomic cursor: snapshot properties on SQL commits (py4j), and reading the cursor back."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest
from pyspark.errors import AnalysisException

from dagster_incremental.spark.iceberg.commit import read_committed_state, with_commit_properties
from dagster_incremental.spark.run_commit import COMMIT_ID_PROPERTY, commit_properties
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import RUN_ID_PROPERTY, SCOPE_PROPERTY, STATE_PROPERTY, CommitInfo


def test_commit_properties_are_compact_sorted_json():
    props = commit_properties(CommitInfo(state={"b": 1, "a": "x"}, run_id="r1", scope="2024-01-01"), commit_id="c")
    assert props == {
        COMMIT_ID_PROPERTY: "c",
        STATE_PROPERTY: '{"a":"x","b":1}',
        RUN_ID_PROPERTY: "r1",
        SCOPE_PROPERTY: "2024-01-01",
    }
    assert commit_properties(CommitInfo(state=None)) == {}
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        commit_properties(CommitInfo(state={"v": object()}))


@pytest.fixture
def table(spark, request):
    name = TableRef("lake", ("commit",), request.node.name)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS `lake`.`commit`")
    spark.sql(f"CREATE TABLE {name} (id bigint, v string) USING iceberg")
    return name


def summaries(spark, table):
    rows = spark.sql(f"SELECT summary FROM {table}.`snapshots` ORDER BY committed_at").collect()
    return [dict(r.summary) for r in rows]


def current_properties(spark):
    return dict(spark.sparkContext._jvm.org.apache.iceberg.spark.CommitMetadata.commitProperties())


@pytest.fixture(params=["pinned-thread", "callback"])
def scope_mechanism(request, monkeypatch):
    """Both ways of scoping commit properties: this thread's JVM ThreadLocal set directly
    (pinned threads, the default) and Iceberg's withCommitProperties callback."""
    if request.param == "callback":
        monkeypatch.setattr("dagster_incremental.spark.iceberg.commit._pinned_properties_slot", lambda spark: None)
    return request.param


def test_sql_statement_commit_carries_properties(spark, table, scope_mechanism):
    """A SQL MERGE commits the cursor; the JVM scope is cleaned up afterwards."""
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    spark.createDataFrame([(1, "b"), (2, "c")], "id bigint, v string").createOrReplaceTempView("commit_src")
    statement = (
        f"MERGE INTO {table} AS t USING commit_src AS s ON t.id = s.id AND s.v <> :never "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    result = with_commit_properties(
        spark, {STATE_PROPERTY: '{"last_value":2}', RUN_ID_PROPERTY: "run-1"},
        lambda: spark.sql(statement, args={"never": "zzz"}) and "done",
    )
    assert result == "done"
    first, merge = summaries(spark, table)
    assert STATE_PROPERTY not in first
    assert merge[STATE_PROPERTY] == '{"last_value":2}' and merge[RUN_ID_PROPERTY] == "run-1"
    assert current_properties(spark) == {}
    assert sorted(tuple(r) for r in spark.table(table.sql).collect()) == [(1, "b"), (2, "c")]


def test_errors_keep_their_type_and_nothing_is_committed(spark, table, scope_mechanism):
    with pytest.raises(AnalysisException, match="UNRESOLVED_COLUMN"):
        with_commit_properties(spark, {"k": "v"}, lambda: spark.sql(f"INSERT INTO {table} SELECT nope, 'x'"))
    with pytest.raises(KeyError):
        with_commit_properties(spark, {"k": "v"}, lambda: {}["missing"])
    assert summaries(spark, table) == []
    assert current_properties(spark) == {}


def test_nested_scopes(spark, table, scope_mechanism):
    """Same properties nest (one scope); different ones refuse instead of losing the cursor."""
    def inner_same():
        return with_commit_properties(spark, {"k": "1"}, lambda: spark.sql(f"INSERT INTO {table} VALUES (1, 'x')"))

    with_commit_properties(spark, {"k": "1"}, inner_same)
    assert summaries(spark, table)[-1]["k"] == "1"

    def inner_other():
        return with_commit_properties(spark, {"k": "2"}, lambda: None)

    with pytest.raises(RuntimeError, match="nested commit-property scopes"):
        with_commit_properties(spark, {"k": "1"}, inner_other)
    assert current_properties(spark) == {}


def test_threads_commit_their_own_properties(spark, table, scope_mechanism):
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            with_commit_properties(spark, {"k": f"t{i}"}, lambda: spark.sql(f"INSERT INTO {table} VALUES ({i}, 't{i}')"))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # each commit carries the property of the thread that made it
    rows = spark.sql(
        f"SELECT summary['k'] AS k, summary['added-records'] AS n FROM {table}.`snapshots`"
    ).collect()
    assert sorted(r.k for r in rows) == ["t0", "t1", "t2"]
    by_value = {r.v: r.id for r in spark.table(table.sql).collect()}
    assert by_value == {"t0": 0, "t1": 1, "t2": 2}


def test_read_committed_state_picks_newest_matching_scope(spark, table):
    assert read_committed_state(spark, TableRef("lake", ("commit",), "no_such_table")) is None
    assert read_committed_state(spark, table) is None  # table without snapshots

    def insert(i: int, info: CommitInfo) -> None:
        with_commit_properties(spark, commit_properties(info), lambda: spark.sql(f"INSERT INTO {table} VALUES ({i}, 'x')"))

    insert(1, CommitInfo(state={"last_value": 1}, run_id="r1", scope="a"))
    insert(2, CommitInfo(state={"last_value": 2}, run_id="r2", scope="b"))
    insert(3, CommitInfo(state={"last_value": 3}, run_id="r3", scope="a"))
    insert(4, CommitInfo(state=None, run_id="backfill"))  # a backfill commit carries no cursor

    newest = read_committed_state(spark, table)
    assert (newest.state, newest.run_id, newest.scope) == ({"last_value": 3}, "r3", "a")
    scoped = read_committed_state(spark, table, scope="b")
    assert (scoped.state, scoped.run_id) == ({"last_value": 2}, "r2")
    assert read_committed_state(spark, table, scope="zzz") is None
    assert newest.committed_at.tzinfo is timezone.utc
    assert abs((datetime.now(timezone.utc) - newest.committed_at).total_seconds()) < 600
    current = spark.sql(f"SELECT snapshot_id, summary FROM {table}.`snapshots` ORDER BY committed_at").collect()
    assert newest.snapshot_id == current[2].snapshot_id
    assert json.loads(current[2].summary[STATE_PROPERTY]) == newest.state

    # rolled back history doesn't count: roll back to the first commit
    first = current[0].snapshot_id
    catalog, namespace, name = table.catalog, table.namespace[0], table.name
    spark.sql(f"CALL {catalog}.system.rollback_to_snapshot(table => '{namespace}.{name}', snapshot_id => {first})")
    assert read_committed_state(spark, table).run_id == "r1"
