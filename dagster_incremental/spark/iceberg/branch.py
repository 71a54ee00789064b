"""A run's private branch (its name, and when a branch is a killed run's leftover), and the
branch's compare-and-set made through the table's catalog by pyiceberg in the run's process:
`CatalogBranch`, for a destination written over Spark Connect, where this process has no
Spark driver. commit.RunBranch is the same protocol through Iceberg's Java API in the driver.

The protocol (see commit.py's "the run's branch"): take the branch at `main`'s head once the
cursor there is the one the run read; the run's one data commit goes onto the branch; publish
moves `main` to the branch's head in ONE catalog commit that requires `main` to be the snapshot
branched at (pyiceberg's `assert-ref-snapshot-id`; a JDBC catalog's conditional UPDATE), never
retried. A run whose base moved is refused and `main` never sees its snapshot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from dagster_incremental.spark.iceberg.snapshots import CatalogSnapshots
from dagster_incremental.spark.run_commit import COMMIT_ID_PROPERTY, BaseMoved, CursorGuard, StaleCursor
from dagster_incremental.spark.table_ref import TableRef

BRANCH_PREFIX = "dagster_incremental_"  # a run's private branch; removed when it is published
TAKE_ATTEMPTS = 10  # branching is retried when other writers commit meanwhile (never publishing)
LEFTOVER_MS = 24 * 3600 * 1000  # a run's branch older than this was left by a killed run


def branch_ref(table: TableRef, name: str) -> TableRef:
    """The branch as a Spark identifier (`catalog`.`ns`.`table`.`branch_<name>`)."""
    return dataclasses.replace(table, namespace=(*table.namespace, table.name), name=f"branch_{name}")


def new_branch_name() -> str:
    return BRANCH_PREFIX + uuid.uuid4().hex


def is_leftover(name: str, branch_ms: int, now_ms: int) -> bool:
    """A run's branch a day old: its run was killed between branching and publishing."""
    return name.startswith(BRANCH_PREFIX) and now_ms - branch_ms > LEFTOVER_MS


class CatalogBranch:
    """One run's branch of `table` through pyiceberg (see the module's docstring).
    `refresh_server`: makes the Spark server see what this process committed to the catalog."""

    def __init__(self, snapshots: CatalogSnapshots, table: TableRef, name: str, commit_id: str,
                 refresh_server: Callable[[], None]) -> None:
        self.snapshots, self.table, self.name, self.commit_id = snapshots, table, name, commit_id
        self.refresh_server = refresh_server
        self.base: int | None = None

    def take(self, guard: CursorGuard) -> None:
        """Check the cursor on `main`'s newest state and branch at its head (raises StaleCursor);
        a table created empty gets its first snapshot first."""
        from dagster_incremental.spark.iceberg.local.catalog_table import CatalogMoved

        for _ in range(TAKE_ATTEMPTS):
            table, metadata = self._loaded()
            head = metadata.current_snapshot_id()
            if head is None:
                self._first_snapshot(table)
                continue
            found = metadata.committed_cursor(guard.scope)
            if (found.snapshot_id if found else None) != guard.expected_snapshot_id:
                raise StaleCursor(found.run_id if found else None)
            try:
                table.manage_snapshots().create_branch(head, self.name).commit()
            except CatalogMoved:
                continue
            self.base = head
            self.refresh_server()
            return
        raise BaseMoved()

    def publish(self) -> None:
        """Move `main` to the branch's head, only if `main` is still the snapshot branched at;
        this branch and day-old leftovers are removed in the same commit."""
        from dagster_incremental.spark.iceberg.local.catalog_table import CatalogMoved

        table, metadata = self._loaded()
        ref = (metadata.raw.get("refs") or {}).get(self.name)
        head = self.snapshots.get(ref["snapshot-id"]) if ref else None
        if metadata.current_snapshot_id() != self.base or head is None or head.parent_id != self.base:
            raise BaseMoved()
        if head.summary.get(COMMIT_ID_PROPERTY) != self.commit_id:
            raise _untagged(self.table)
        update = table.manage_snapshots().set_current_snapshot(snapshot_id=head.snapshot_id)
        for name in self._leftovers(int(head.committed_at.timestamp() * 1000)) + [self.name]:
            update = update.remove_branch(name)
        try:
            update.commit()
        except CatalogMoved:
            raise BaseMoved() from None
        finally:
            self.refresh_server()

    def abandon(self) -> None:
        """Drop the branch of a commit that was not published, again on the newer table when
        another writer committed meanwhile (the run that won a race, publishing); best effort:
        a later publish removes a day-old one too."""
        from dagster_incremental.spark.iceberg.local.catalog_table import CatalogMoved

        with contextlib.suppress(Exception):
            for _ in range(TAKE_ATTEMPTS):
                table, metadata = self._loaded()
                if self.name not in (metadata.raw.get("refs") or {}):
                    return
                with contextlib.suppress(CatalogMoved):
                    table.manage_snapshots().remove_branch(self.name).commit()
                    return

    def _loaded(self) -> tuple[Any, Any]:
        self.snapshots.refresh()
        if self.snapshots.table is None or self.snapshots.metadata is None:
            raise BaseMoved()  # the table was dropped meanwhile
        return self.snapshots.table, self.snapshots.metadata

    def _first_snapshot(self, table: Any) -> None:
        """Give `main` an empty first snapshot, only while it has none (pyiceberg's append
        requires `main` to be where it was loaded; a refused one wrote nothing)."""
        import pyarrow as pa

        from dagster_incremental.spark.iceberg.local.catalog_table import CatalogMoved

        with contextlib.suppress(CatalogMoved):
            table.append(pa.Table.from_pylist([], schema=table.schema().as_arrow()))

    def _leftovers(self, now_ms: int) -> list[str]:
        metadata = self.snapshots.metadata
        refs = (metadata.raw.get("refs") or {}) if metadata is not None else {}
        found = []
        for name, ref in refs.items():
            snapshot = self.snapshots.get(ref.get("snapshot-id"))
            if name != self.name and snapshot is not None and is_leftover(name, int(snapshot.committed_at.timestamp() * 1000), now_ms):
                found.append(name)
        return found


def _untagged(table: TableRef) -> Exception:
    """The server's Iceberg put no session snapshot property on the commit: it would carry no cursor."""
    from dagster_incremental.errors import IncrementalConfigError

    return IncrementalConfigError(
        f"table {table.display}: the Spark Connect server's Iceberg did not put the run's cursor on its commit "
        "(the session's spark.sql.iceberg.snapshot-property.* settings, which Iceberg reads from version 1.11 "
        "on). Give the server an Iceberg Spark runtime of 1.11 or later. Nothing was written: the commit stayed "
        "on the run's own branch, which was removed.")
