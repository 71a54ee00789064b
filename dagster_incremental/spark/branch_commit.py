"""The compare-and-set of a run's commit, made by the catalog's own atomic commit.

Why a branch: Iceberg retries a refused commit on top of the newest snapshot (an append
re-applied onto another run's append loads the same rows twice), and every attempt, the first
included, starts from a fresh read of the table; so no table property makes a plain write
fail when the table moved after the run read its cursor. Instead the run's one data commit
(Spark append, overwrite or MERGE; the local append's Java commit) goes onto a private branch
taken at the snapshot the run checked, and `main` is then moved to that branch's head by ONE
catalog commit whose base is exactly that snapshot's metadata, without retry. Every Iceberg
catalog makes that commit atomic against its base (JDBC: `UPDATE ... WHERE metadata_location =
<base>`; Hive: a lock and the same check; Glue: the table version; REST: `assert-ref-snapshot-id`),
so a run whose base moved is refused and `main` never sees its snapshot. The Hadoop catalog's
metadata rename on a local disk is not atomic: there the file lock stays (io_manager).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from dagster_incremental.spark import errors as spark_errors
from dagster_incremental.spark.commit import java_json
from dagster_incremental.spark.table_metadata import CursorFields, cursor_of
from dagster_incremental.spark.table_ref import TableRef

BRANCH_PREFIX = "dagster_incremental_"  # a run's private branch; removed when it is published
TAKE_ATTEMPTS = 10  # branching is retried when other writers commit meanwhile (never publishing)
LEFTOVER_MS = 24 * 3600 * 1000  # a run's branch older than this was left by a killed run


@dataclass(frozen=True)
class CursorGuard:
    """What the run read: the snapshot holding its scope's cursor (None: no cursor yet)."""

    expected_snapshot_id: int | None
    scope: str | None


class StaleCursor(Exception):
    """Another run committed a cursor of this scope after this run read its own: nothing written."""

    def __init__(self, run_id: str | None) -> None:
        super().__init__(f"another run ({run_id or 'unknown'}) committed a newer cursor")
        self.run_id = run_id


class BaseMoved(Exception):
    """Another writer moved `main` while this run wrote on its branch: nothing published."""


def branch_ref(table: TableRef, name: str) -> TableRef:
    """The branch as a Spark identifier (`catalog`.`ns`.`table`.`branch_<name>`)."""
    return dataclasses.replace(table, namespace=(*table.namespace, table.name), name=f"branch_{name}")


def new_branch_name() -> str:
    return BRANCH_PREFIX + uuid.uuid4().hex


class RunBranch:
    """One run's branch: taken at the checked snapshot, published to main by compare-and-set."""

    def __init__(self, iceberg: Any, jvm: Any, name: str) -> None:
        self.iceberg, self.jvm, self.name = iceberg, jvm, name
        self.base: int | None = None

    def take(self, guard: CursorGuard) -> None:
        """Check the cursor against main's newest state and branch there, in one metadata
        commit on the state checked (raises StaleCursor). Retried when another writer committed
        first: the check is then made again on the newer state."""
        for _ in range(TAKE_ATTEMPTS):
            base = self._ops.refresh()
            head = base.currentSnapshot()
            if head is None:  # a table created empty: give main a first (empty) snapshot to branch at
                self.iceberg.refresh()
                self.iceberg.newAppend().commit()
                continue
            found = _newest_cursor(self.jvm, base, head, guard.scope)
            if (found.snapshot_id if found else None) != guard.expected_snapshot_id:
                raise StaleCursor(found.run_id if found else None)
            ref = self.jvm.org.apache.iceberg.SnapshotRef.branchBuilder(head.snapshotId()).build()
            if self._commit(base, self._builder(base).setRef(self.name, ref)):
                self.base = head.snapshotId()
                return
        raise BaseMoved()

    def publish(self) -> None:
        """Move main to the branch's head, only if main is still the snapshot branched at.

        One catalog commit on the exact base just read, never retried; this run's branch and
        day-old ones of runs killed before publishing are removed in it.
        """
        base = self._ops.refresh()
        main, ref = base.currentSnapshot(), base.ref(self.name)
        if main is None or main.snapshotId() != self.base or ref is None:
            raise BaseMoved()
        head = base.snapshot(ref.snapshotId())
        if head.parentId() != self.base:
            raise BaseMoved()
        builder = self._builder(base).setBranchSnapshot(head.snapshotId(), "main")
        for name in _leftovers(self.jvm, base, head.timestampMillis()) + [self.name]:
            builder.removeRef(name)
        if not self._commit(base, builder):
            raise BaseMoved()

    def abandon(self) -> None:
        """Drop the branch of a commit that was not published (best effort: a later publish
        removes a day-old one too)."""
        try:
            for _ in range(TAKE_ATTEMPTS):
                base = self._ops.refresh()
                if base.ref(self.name) is None or self._commit(base, self._builder(base).removeRef(self.name)):
                    return
        except Exception:  # noqa: BLE001 - the run's own error matters, not this cleanup
            pass

    @property
    def _ops(self) -> Any:
        return self.iceberg.operations()

    def _builder(self, base: Any) -> Any:
        return self.jvm.org.apache.iceberg.TableMetadata.buildFrom(base)

    def _commit(self, base: Any, builder: Any) -> bool:
        """One catalog commit of `builder` on exactly `base`; False when another writer
        committed first (the catalog refused it, nothing changed)."""
        try:
            self._ops.commit(base, builder.build())
        except Exception as exc:
            if spark_errors.is_commit_conflict(exc):
                return False
            raise
        finally:
            self.iceberg.refresh()  # Spark's cached table object sees the branch / new main
        return True


def _leftovers(jvm: Any, metadata: Any, now_ms: int) -> list[str]:
    """Branches of runs killed between branching and publishing, a day old: no run lives that long."""
    names = []
    for name in java_json(jvm, metadata.refs().keySet()):
        ref = metadata.ref(name)
        if str(name).startswith(BRANCH_PREFIX) and now_ms - metadata.snapshot(ref.snapshotId()).timestampMillis() > LEFTOVER_MS:
            names.append(str(name))
    return names


def _newest_cursor(jvm: Any, metadata: Any, snapshot: Any, scope: str | None) -> CursorFields | None:
    """The newest cursor (of `scope`) in the lineage ending at `snapshot` (of `metadata`)."""
    while snapshot is not None:
        fields = cursor_of(java_json(jvm, snapshot.summary()), snapshot.snapshotId(), snapshot.timestampMillis(), scope)
        if fields is not None:
            return fields
        parent = snapshot.parentId()
        snapshot = metadata.snapshot(parent) if parent is not None else None
    return None
