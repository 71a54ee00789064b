"""Local rows committed by pyiceberg without a JVM (spark/iceberg/local/python_write.py) into the tables of
each Iceberg catalog it commits to (the embedded default's Hadoop-layout folders, a JDBC catalog
on PostgreSQL over S3, a REST catalog over S3): for any history of appends and upserts, the same
table (read by Spark and by pyiceberg), cursor and figures as the JVM's paths give, and the same
compare-and-set."""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_incremental import SparkTableIOManager
from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.iceberg.local import python_write
from catalogs import PYICEBERG_COMMITS, hadoop_catalog
from dagster_incremental.spark.write_spec import CommitInfo, IncrementalBatch, WriteSpec

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("amount", pa.float64()), ("at", pa.timestamp("us", tz="UTC"))])
LOG = logging.getLogger("test_python_write")
ROWS = st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", "c"]),
                          st.one_of(st.none(), st.floats(-5, 5, allow_nan=False)),
                          st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(timezone.utc))),
                min_size=1, max_size=4, unique_by=lambda r: r[0])
HISTORY = st.lists(st.tuples(st.sampled_from(["append", "upsert"]), ROWS), min_size=1, max_size=4)


class Table:
    """One table of the test's namespace, written through its destination's tables (IcebergTables)."""

    def __init__(self, catalog, namespace: str, name: str, python: bool) -> None:
        self.catalog = catalog
        self.io: SparkTableIOManager = catalog.io_manager(namespace)
        self.ref = self.io.tables.table(catalog.name, namespace, [name])
        self.python = python
        self.snapshot: int | None = None

    def commit(self, monkeypatch, disposition: str, rows: list[tuple] | pa.Table, state: int, expected: int | None = None):
        spec = WriteSpec(table=self.ref, disposition="merge" if disposition == "upsert" else "append",
                         strategy="upsert" if disposition == "upsert" else None, primary_key=("id",))
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(
            [dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)
        batch = IncrementalBatch(spec=spec, data=data, commit=CommitInfo(state={"last_value": state}, run_id=f"r{state}"),
                                 check_stale=True, expected_snapshot_id=self.snapshot if expected is None else expected,
                                 deduplicated=True)
        with monkeypatch.context() as patch:
            if not self.python:
                patch.setattr(python_write, "write_in_python", lambda *args, **kwargs: None)
            result, self.snapshot = self.io.tables.commit(batch, "orders", LOG)
        return result

    def by_pyiceberg(self) -> bool:
        """Whether the newest snapshot was made by pyiceberg (the JVM's carry `engine-name`)."""
        return "engine-name" not in self.summary()

    def summary(self) -> dict[str, str]:
        """The newest snapshot's summary, as the table's catalog answers without a JVM."""
        return self.io.tables.files(self.ref).metadata.current_summary()[1]

    def delete_files(self) -> int:
        return int(self.summary().get("total-delete-files", 0))

    def rows_by_spark(self, spark) -> list[tuple]:
        return sorted((tuple(r) for r in spark.sql(f"SELECT id, v, amount, at FROM {self.ref.sql}").collect()), key=repr)

    def rows_by_pyiceberg(self) -> list[tuple]:
        from pyiceberg.table import StaticTable

        if self.catalog.kind == "hadoop":
            arrow = StaticTable.from_metadata(str(self.io.tables.files(self.ref).location)).scan().to_arrow()
        else:
            arrow = self.catalog.pyiceberg().load_table((*self.ref.namespace, self.ref.name)).scan().to_arrow()
        arrow = arrow.set_column(arrow.schema.get_field_index("at"), "at", arrow["at"].cast(pa.timestamp("us")))
        return sorted((tuple(r[c] for c in SCHEMA.names) for r in arrow.to_pylist()), key=repr)


@PYICEBERG_COMMITS
@settings(max_examples=int(os.environ.get("DI_PROPERTY_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(first=ROWS, history=HISTORY)
def test_any_history_gives_the_jvm_paths_table_cursor_and_figures(spark, catalog, monkeypatch, first, history):
    """The same batches into two tables, one where pyiceberg may commit and one where it may not:
    after each write the same rows (read by Spark and by pyiceberg), cursor and figures; every
    write pyiceberg can take exactly (all but an upsert of a key the table holds twice, after
    appends, or one touching the delete files a Spark MERGE left) was made by pyiceberg."""
    namespace = "pywrite_" + uuid.uuid4().hex[:6]
    ours, theirs = (Table(catalog, namespace, name, python) for name, python in (("ours", True), ("theirs", False)))
    for table in (ours, theirs):
        table.commit(monkeypatch, "upsert", first, 0)  # the first load creates the table (Spark)
    for state, (disposition, rows) in enumerate(history, start=1):
        held = [r[0] for r in ours.rows_by_spark(spark)]
        ambiguous = disposition == "upsert" and any(held.count(r[0]) > 1 for r in rows)
        # a Spark MERGE (of an ambiguous key) may leave delete files, which keep later upserts
        # on the JVM's path when they touch those files
        undecided = disposition == "upsert" and not ambiguous and ours.delete_files() > 0
        mine, spark_made = ours.commit(monkeypatch, disposition, rows, state), theirs.commit(monkeypatch, disposition, rows, state)
        if not undecided:
            assert ours.by_pyiceberg() is not ambiguous
        assert (mine.rows_inserted, mine.rows_updated, mine.rows_deleted, mine.row_count) == (
            spark_made.rows_inserted, spark_made.rows_updated, spark_made.rows_deleted, spark_made.row_count)
        assert mine.schema == spark_made.schema
        assert ours.rows_by_spark(spark) == theirs.rows_by_spark(spark) == ours.rows_by_pyiceberg()
        assert ours.io.tables.committed_state(ours.ref, None).state == {"last_value": state}
        assert ours.io.tables.committed_state(ours.ref, None).snapshot_id == mine.snapshot_id


@PYICEBERG_COMMITS
def test_a_run_whose_cursor_was_taken_commits_nothing(spark, catalog, monkeypatch):
    """Two runs read the same cursor; the second to commit is refused as stale, by pyiceberg's
    path as by the JVM's: the table keeps the first one's rows and cursor."""
    table = Table(catalog, "pywrite_" + uuid.uuid4().hex[:6], "orders", python=True)
    table.commit(monkeypatch, "upsert", [(1, "a", 1.0, datetime(2024, 1, 1))], 0)
    read = table.snapshot
    table.commit(monkeypatch, "upsert", [(1, "b", 2.0, datetime(2024, 1, 2))], 1, expected=read)
    assert table.by_pyiceberg()
    with pytest.raises(ConcurrentRunError, match="another run \\(r1\\) committed"):
        table.commit(monkeypatch, "upsert", [(2, "c", 3.0, datetime(2024, 1, 3))], 2, expected=read)
    assert [r[:2] for r in table.rows_by_spark(spark)] == [(1, "b")]
    assert table.io.tables.committed_state(table.ref, None).state == {"last_value": 1}


CHANGES = {
    "a new column": {"extra": pa.array(["x"])},
    "a long into a double column": {"amount": pa.array([2], pa.int64())},
    "a date-time without a zone into an instant column": {"at": pa.array([datetime(2024, 1, 2)], pa.timestamp("us"))},
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_batch_the_table_does_not_store_as_it_is_is_left_to_the_jvm(spark, spark_warehouse, monkeypatch, change):
    """pyiceberg commits only batches the table stores as they are; the others take the paths
    that evolve the schema or refuse the batch, with the same outcome as without pyiceberg."""
    namespace = "pywrite_" + uuid.uuid4().hex[:6]
    outcomes = []
    for name, python in (("ours", True), ("theirs", False)):
        table = Table(hadoop_catalog(spark_warehouse), namespace, name, python)
        table.commit(monkeypatch, "append", [(1, "a", 1.0, datetime(2024, 1, 1))], 0)
        columns = {"id": pa.array([2], pa.int64()), "v": pa.array(["b"]), "amount": pa.array([2.0]),
                   "at": pa.array([datetime(2024, 1, 2)], pa.timestamp("us", tz="UTC")), **CHANGES[change]}
        try:
            table.commit(monkeypatch, "append", pa.table(columns), 1)
            outcomes.append(sorted(map(tuple, spark.table(table.ref.sql).collect()), key=repr))
        except Exception as exc:  # noqa: BLE001 - the outcome compared is the error itself
            outcomes.append(f"{type(exc).__name__}: {exc}".replace(f"`{name}`", "`TABLE`"))
        assert not table.by_pyiceberg()
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("catalog", ["jdbc", "sqlite", "rest"], indirect=True)
def test_a_commit_the_catalog_refuses_is_not_made_again_on_the_other_runs_snapshot(spark, catalog, monkeypatch):
    """Another run commits its cursor between this run's load of the table and its commit (no
    table lock on a catalog service): the catalog refuses this run's commit, and it is not
    retried on top of the other run's snapshot (pyiceberg's own retry would load the rows twice):
    the run fails as stale and the table holds each row once, with the other run's cursor."""
    from dagster_incremental.spark.run_commit import commit_properties
    from dagster_incremental.spark.iceberg.local import catalog_table

    table = Table(catalog, "pywrite_" + uuid.uuid4().hex[:6], "orders", python=True)
    table.commit(monkeypatch, "append", [(1, "a", 1.0, datetime(2024, 1, 1, tzinfo=timezone.utc))], 0)
    read = table.snapshot
    load = catalog_table.load

    def load_then_another_run_commits(conf, files):
        loaded = load(conf, files)
        other = catalog.pyiceberg().load_table((*table.ref.namespace, table.ref.name))
        rows = pa.Table.from_pylist([{"id": 2, "v": "other", "amount": 2.0, "at": datetime(2024, 1, 2, tzinfo=timezone.utc)}],
                                    schema=other.schema().as_arrow())
        other.append(rows, snapshot_properties=commit_properties(CommitInfo(state={"last_value": 1}, run_id="r1")))
        return loaded

    monkeypatch.setattr(catalog_table, "load", load_then_another_run_commits)
    with pytest.raises(ConcurrentRunError, match="another run \\(r1\\) committed"):
        table.commit(monkeypatch, "append", [(3, "mine", 3.0, datetime(2024, 1, 3, tzinfo=timezone.utc))], 2, expected=read)
    monkeypatch.undo()
    assert [r[:2] for r in table.rows_by_spark(spark)] == [(1, "a"), (2, "other")]
    assert table.io.tables.committed_state(table.ref, None).state == {"last_value": 1}


@pytest.mark.parametrize("catalog", ["jdbc", "sqlite", "rest"], indirect=True)
def test_a_commit_after_another_runs_branch_snapshot_is_made_by_the_jvm_on_main(spark, catalog, monkeypatch):
    """Another run (the JVM's, which commits on its own branch first) adds a snapshot on its
    branch between this run's load of the table and its commit: `main` still holds the cursor
    this run read, but the branch snapshot took the sequence number this run's snapshot carries,
    so the catalog refuses pyiceberg's commit. The run is then committed on `main` by the JVM's
    guarded path, not failed with the catalog's refusal, and the branch's rows stay off `main`."""
    from dagster_incremental.spark.iceberg.commit import BRANCH_PREFIX
    from dagster_incremental.spark.run_commit import commit_properties
    from dagster_incremental.spark.iceberg.local import catalog_table

    table = Table(catalog, "pywrite_" + uuid.uuid4().hex[:6], "orders", python=True)
    table.commit(monkeypatch, "append", [(1, "a", 1.0, datetime(2024, 1, 1, tzinfo=timezone.utc))], 0)
    read = table.snapshot
    load = catalog_table.load
    refused = []

    def load_then_another_run_commits_on_its_branch(conf, files):
        loaded = load(conf, files)
        other = catalog.pyiceberg().load_table((*table.ref.namespace, table.ref.name))
        rows = pa.Table.from_pylist([{"id": 2, "v": "other", "amount": 2.0, "at": datetime(2024, 1, 2, tzinfo=timezone.utc)}],
                                    schema=other.schema().as_arrow())
        other.append(rows, snapshot_properties=commit_properties(CommitInfo(state={"last_value": 1}, run_id="r1")),
                     branch=BRANCH_PREFIX + "other")
        commit_table = loaded[0].catalog.commit_table

        def commit_and_record(*args):
            try:
                return commit_table(*args)
            except catalog_table.CatalogMoved as exc:
                refused.append(exc)
                raise

        monkeypatch.setattr(loaded[0].catalog, "commit_table", commit_and_record)
        return loaded

    monkeypatch.setattr(catalog_table, "load", load_then_another_run_commits_on_its_branch)
    table.commit(monkeypatch, "append", [(3, "mine", 3.0, datetime(2024, 1, 3, tzinfo=timezone.utc))], 2, expected=read)
    monkeypatch.undo()
    assert len(refused) == 1  # pyiceberg's commit was refused, and the JVM committed instead
    assert not table.by_pyiceberg()
    assert [r[:2] for r in table.rows_by_spark(spark)] == [(1, "a"), (3, "mine")]
    assert table.io.tables.committed_state(table.ref, None).state == {"last_value": 2}
