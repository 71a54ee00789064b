"""The compare-and-set of a cursor-carrying commit, on the Hadoop and on a JDBC catalog, without
the file lock: a run whose cursor is no longer the newest is refused before it writes, and a run
whose base moved while it wrote is refused at publishing; the table and its cursor stay as the
other writer left them, for every write kind (local append, Spark append, MERGE, window)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from dagster_incremental.spark.iceberg.commit import BRANCH_PREFIX, RunBranch
from dagster_incremental.spark.run_commit import BaseMoved, CursorGuard, StaleCursor
from dagster_incremental.spark.iceberg.commit import iceberg_table, read_committed_state
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.iceberg.writer import TableWriter
from dagster_incremental.spark.write_spec import CommitInfo, WindowReplace, WriteSpec
from catalogs import ICEBERG_ONLY

pytestmark = [pytest.mark.spark, ICEBERG_ONLY]  # Iceberg's own commit machinery

KINDS = {
    "local-append": (dict(disposition="append"), None),
    "spark-upsert": (dict(disposition="merge", strategy="upsert", primary_key=("id",)), None),
    "window": (dict(disposition="append"), WindowReplace(column="updated", start=0, end=100)),
}


def _table(catalog) -> TableRef:
    return TableRef(catalog.name, ("cas_" + uuid.uuid4().hex[:8],), "t")


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "updated": pa.array(ids, pa.int64())})


def _state(spark, table: TableRef) -> tuple[list[int], int]:
    spark.sql(f"REFRESH TABLE {table.sql}")
    ids = sorted(r.id for r in spark.table(table.sql).collect())
    return ids, iceberg_table(spark, table).currentSnapshot().snapshotId()


def _refs(spark, table: TableRef) -> list[str]:
    return [str(n) for n in iceberg_table(spark, table).refs().keySet() if str(n).startswith(BRANCH_PREFIX)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_on_a_stale_cursor_is_refused_and_writes_nothing(kind, spark, catalog):
    options, window = KINDS[kind]
    table, writer = _table(catalog), TableWriter(spark)
    spec = WriteSpec(table=table, **options)
    first = writer.write(spec, _rows([1, 2]), commit=CommitInfo(state={"last_value": 2}, run_id="first"))
    writer.write(spec, _rows([3]), commit=CommitInfo(state={"last_value": 3}, run_id="winner"),
                 guard=CursorGuard(first.snapshot_id, None))
    before = _state(spark, table)

    # a run that read the first cursor commits after the winner: refused, nothing written
    with pytest.raises(StaleCursor) as refused:
        writer.write(spec, _rows([3, 4]), commit=CommitInfo(state={"last_value": 4}, run_id="loser"),
                     window=window, guard=CursorGuard(first.snapshot_id, None))
    assert refused.value.run_id == "winner"
    assert _state(spark, table) == before
    assert _refs(spark, table) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_whose_base_moved_while_it_wrote_is_not_published(kind, spark, catalog, monkeypatch):
    """The check passed, then another writer committed before the publish: the catalog's atomic
    commit refuses it (the file lock alone would have let a Spark append rebase onto it)."""
    options, window = KINDS[kind]
    table, writer = _table(catalog), TableWriter(spark)
    spec = WriteSpec(table=table, **options)
    first = writer.write(spec, _rows([1, 2]), commit=CommitInfo(state={"last_value": 2}, run_id="first"))
    publish = RunBranch.publish

    def another_writer_first(self):
        monkeypatch.setattr(RunBranch, "publish", publish)  # the other writer publishes normally
        writer.write(spec, _rows([3]), commit=CommitInfo(state={"last_value": 3}, run_id="winner"),
                     guard=CursorGuard(first.snapshot_id, None))
        self.other = _state(spark, table)
        return publish(self)

    monkeypatch.setattr(RunBranch, "publish", another_writer_first)
    with pytest.raises(BaseMoved):
        writer.write(spec, _rows([3, 4]), commit=CommitInfo(state={"last_value": 4}, run_id="loser"),
                     window=window, guard=CursorGuard(first.snapshot_id, None))
    ids, _ = _state(spark, table)
    assert ids == [1, 2, 3], "the refused run's rows reached the table"
    assert _refs(spark, table) == []


def test_an_empty_table_gets_a_first_snapshot_to_branch_at(spark, catalog):
    table, writer = _table(catalog), TableWriter(spark)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql}")
    spark.sql(f"CREATE TABLE {table.sql} (id bigint, updated bigint) USING iceberg")
    spec = WriteSpec(table=table, disposition="append")
    result = writer.write(spec, _rows([1]), commit=CommitInfo(state={"last_value": 1}, run_id="r"),
                          guard=CursorGuard(None, None))
    assert _state(spark, table) == ([1], result.snapshot_id)


def _history(spark, table: TableRef) -> list[int]:
    """Every snapshot that was ever main's, in order (the table's snapshot log)."""
    iceberg = iceberg_table(spark, table)
    iceberg.refresh()
    return [int(entry.snapshotId()) for entry in iceberg.history()]


def _race_for_an_empty_table(spark, catalog, monkeypatch, moment: str):
    """Two first loads of a table created empty: the loser reads the table (no snapshot), then
    the winner commits, at `moment`: right after the loser's read, or just before the loser's
    commit of main's first snapshot. Returns (table, writer, spec, the winner's result and the
    history right after it)."""
    table, writer = _table(catalog), TableWriter(spark)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql}")
    spark.sql(f"CREATE TABLE {table.sql} (id bigint, updated bigint) USING iceberg")
    spec = WriteSpec(table=table, disposition="append")
    won: dict = {}

    def the_winner_commits() -> None:
        won["result"] = writer.write(spec, _rows([1, 2]), commit=CommitInfo(state={"last_value": 2}, run_id="winner"),
                                     guard=CursorGuard(None, None))
        won["history"] = _history(spark, table)

    if moment == "after-the-loser-read":
        ops = RunBranch._ops

        class ThenTheWinner:
            def __init__(self, real):
                self.real = real

            def refresh(self):
                base = self.real.refresh()
                monkeypatch.setattr(RunBranch, "_ops", ops)
                the_winner_commits()
                return base

        monkeypatch.setattr(RunBranch, "_ops", property(lambda self: ThenTheWinner(ops.fget(self))))
    else:
        commit = RunBranch._commit

        def winner_first(self, base, builder):
            monkeypatch.setattr(RunBranch, "_commit", commit)
            the_winner_commits()
            return commit(self, base, builder)

        monkeypatch.setattr(RunBranch, "_commit", winner_first)
    with pytest.raises(StaleCursor) as refused:
        writer.write(spec, _rows([1, 2]), commit=CommitInfo(state={"last_value": 2}, run_id="loser"),
                     guard=CursorGuard(None, None))
    assert refused.value.run_id == "winner"
    return table, writer, spec, won["result"], won["history"]


@pytest.mark.parametrize("moment", ["after-the-loser-read", "before-the-loser-commits"])
def test_a_run_that_lost_the_race_for_an_empty_table_commits_no_snapshot(moment, spark, catalog, monkeypatch):
    """Before: the loser's empty first snapshot was an append, which Iceberg retried onto the
    winner's newer main: an empty commit without a cursor after the winner's."""
    table, _, _, won, history = _race_for_an_empty_table(spark, catalog, monkeypatch, moment)
    assert _history(spark, table) == history, "the losing run committed a snapshot to main"
    assert history[-1] == won.snapshot_id
    assert _state(spark, table) == ([1, 2], won.snapshot_id)
    assert _refs(spark, table) == []


def test_expiring_all_but_the_current_snapshot_after_a_race_keeps_the_winners_cursor(spark, catalog, monkeypatch):
    """Routine maintenance after a race for an empty table: the cursor is the winner's current
    snapshot's, so the next run continues from it and loads nothing twice."""
    table, writer, spec, won, _ = _race_for_an_empty_table(spark, catalog, monkeypatch, "after-the-loser-read")
    ident = ".".join((*table.namespace, table.name))
    spark.sql(f"CALL {table.catalog}.system.expire_snapshots(table => '{ident}', "
              "older_than => TIMESTAMP '9999-12-31 00:00:00', retain_last => 1)")
    committed = read_committed_state(spark, table)
    assert committed is not None and (committed.state, committed.run_id) == ({"last_value": 2}, "winner")
    third = writer.write(spec, _rows([3]), commit=CommitInfo(state={"last_value": 3}, run_id="third"),
                         guard=CursorGuard(committed.snapshot_id, None))
    assert _state(spark, table) == ([1, 2, 3], third.snapshot_id)
    assert read_committed_state(spark, table).state == {"last_value": 3}
