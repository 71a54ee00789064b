"""A run's branch over Spark Connect (spark/iceberg/branch.py: CatalogBranch), taken and dropped
through the table's catalog by pyiceberg, here a JDBC catalog on a SQLite file (no JVM): a run
that does not publish leaves no branch behind, also when another writer commits while it drops
it, and also when what fails comes after the branch was taken."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

from catalogs import sqlite_catalog
from dagster_incremental.spark.iceberg.branch import CatalogBranch, new_branch_name
from dagster_incremental.spark.iceberg.commit import PendingCommit
from dagster_incremental.spark.iceberg.over_connect import CatalogTables
from dagster_incremental.spark.run_commit import CursorGuard
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteSpec

NO_CURSOR_YET = CursorGuard(expected_snapshot_id=None, scope=None)


@pytest.fixture
def lake(tmp_path):
    """A JDBC catalog on a SQLite file holding table `ns.orders` with one snapshot (no cursor),
    as the run's process reaches it (`tables`) and as another writer does (`other`)."""
    catalog = sqlite_catalog(str(tmp_path))
    other = catalog.pyiceberg()
    other.create_namespace("ns")
    other.create_table(("ns", "orders"), schema=pa.schema([("id", pa.int64())])).append(pa.table({"id": [1]}))
    return CatalogTables(catalog.spark_config), other, TableRef(catalog=catalog.name, namespace=("ns",), name="orders")


def refs(other) -> list[str]:
    return sorted(other.load_table(("ns", "orders")).metadata.refs)


def test_a_branch_is_dropped_although_another_writer_commits_while_it_is(lake, monkeypatch):
    """The other writer (the run that won the race, publishing) commits after the catalog read
    the table for this run's removal of its branch and before it wrote: the catalog refuses the
    removal, which is made again on the newer table."""
    from pyiceberg.catalog.sql import SqlCatalog

    tables, other, table = lake
    branch = CatalogBranch(tables.snapshots(table), table, new_branch_name(), "c1", refresh_server=lambda: None)
    branch.take(NO_CURSOR_YET)
    assert refs(other) == sorted(["main", branch.name])
    commit, read, moved = SqlCatalog.commit_table, SqlCatalog.load_table, []

    def read_then_another_writer_commits(catalog, identifier):
        found = read(catalog, identifier)
        other.load_table(("ns", "orders")).manage_snapshots().create_tag(branch.base, "other").commit()
        return found

    def commit_once_refused(catalog, *args):
        if catalog is other or moved:
            return commit(catalog, *args)
        moved.append(True)
        with monkeypatch.context() as inside:  # the catalog's read of the table it commits to
            inside.setattr(catalog, "load_table", lambda identifier: read_then_another_writer_commits(catalog, identifier))
            return commit(catalog, *args)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_once_refused)
    branch.abandon()
    assert moved and refs(other) == ["main", "other"]


class _ServerGone:
    """A Spark Connect session whose server stopped answering after the run branched."""

    class catalog:  # noqa: N801 - the attribute pyspark's session has
        @staticmethod
        def tableExists(name):  # noqa: N802 - pyspark's name
            raise ConnectionError("the Spark Connect server went away")


def test_a_failure_after_the_branch_was_taken_drops_it(lake):
    """Over Connect the run asks the server to see its new branch right after taking it; when
    that fails the run fails with that error, and the branch is dropped (not left to a later
    publish's day-old sweep)."""
    tables, other, table = lake
    pending = PendingCommit(spec=WriteSpec(table=table, disposition="append"), commit_id="c1", properties={},
                            started=datetime.now(timezone.utc), case_sensitive=False, guard=NO_CURSOR_YET,
                            branch=new_branch_name(), catalog=tables)
    with pytest.raises(ConnectionError, match="went away"), pending.guarded(_ServerGone()):
        pytest.fail("the data commit was reached")
    assert refs(other) == ["main"]
