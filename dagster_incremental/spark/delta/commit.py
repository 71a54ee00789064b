"""A run's one Delta commit: its data change and its cursor in the same commit, made only if the
table still holds the cursor the run read.

How, with Delta's own means (verified on Delta 3.3.2, tests/spark/test_delta.py):
- the cursor rides in the commit's `userMetadata` (session conf
  `spark.databricks.delta.commitInfo.userMetadata`, which every statement's commit takes);
- the compare-and-set is Delta's idempotent write: every cursor-carrying commit names the
  library's application id and a version one past the one the table recorded for that id when
  the run checked its cursor (`spark.databricks.delta.write.txnAppId` / `txnVersion`). Delta
  applies a write only if its version is above the recorded one, and refuses one whose id
  another commit used meanwhile. So that recorded version is a counter every cursor-carrying
  commit advances: of two runs that checked at the same count, one commits; the other's
  statement is skipped or refused, and nothing of it is visible. A retried commit never applies
  twice. Writers that leave the cursor alone (a backfill) name no id and move no counter; a full
  refresh, which replaces the cursor whatever it was, moves the counter without checking it, so
  a run whose check passed before the refresh cannot commit after it.
Session confs are the session's, not a thread's: one statement at a time sets them (a lock).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dagster_incremental.cursor.state import state_json
from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.run_commit import BaseMoved, commit_fields, CursorGuard, StaleCursor
from dagster_incremental.spark.delta.log import Commit, DeltaLog
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import CommitInfo, WriteSpec

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
APP_ID = "dagster_incremental"  # the idempotent-write id of every cursor-carrying commit
CREATOR_WAIT_S = 30.0  # how long a run that lost a race to create the table waits for the winner's commit

_SESSION_CONF = threading.Lock()
_CONFLICTS = ("ConcurrentTransactionException", "ConcurrentAppendException", "ConcurrentDeleteReadException",
              "ConcurrentDeleteDeleteException", "ConcurrentWriteException", "MetadataChangedException",
              "ProtocolChangedException")
# The same conflicts by Delta's error classes: what a Spark Connect error carries (its Java class
# stays on the server) and what its message starts with ("[DELTA_CONCURRENT_APPEND...] ...").
_CONFLICT_CLASSES = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")


@dataclass(frozen=True)
class DeltaCommit:
    """The one commit a write makes on a Delta table (see the module's docstring)."""

    spec: WriteSpec
    commit_id: str
    properties: Mapping[str, str]
    started: datetime
    case_sensitive: bool
    guard: CursorGuard | None = None
    advances: bool = False  # moves the counter without a guard (a full refresh)
    made_commits: list[Commit] = dataclasses.field(default_factory=list)  # what `run` committed

    @classmethod
    def open(cls, case_sensitive: bool, spec: WriteSpec, info: CommitInfo, started: datetime | None,
             guard: CursorGuard | None) -> DeltaCommit:
        return cls(**commit_fields(case_sensitive, spec, info, started, guard))

    @property
    def table(self) -> TableRef:
        return self.spec.table

    @property
    def target(self) -> TableRef:
        """What the data statement writes: the table itself (Delta needs no branch)."""
        return self.spec.table

    @property
    def log(self) -> DeltaLog:
        assert self.table.location is not None, "a Delta table has a location"
        return DeltaLog(self.table.location)

    def unguarded(self) -> DeltaCommit:
        """For CREATE [OR REPLACE] TABLE ... AS SELECT (a create fails on an existing table)."""
        return dataclasses.replace(self, guard=None, made_commits=[])

    def advancing(self) -> DeltaCommit:
        """For a full refresh's overwrite: no cursor check, but the counter moves (raises
        BaseMoved when another cursor-carrying commit took the count first: write again)."""
        return dataclasses.replace(self, guard=None, advances=True, made_commits=[])

    def run(self, spark: Any, fn: Callable[[], Any]) -> Commit | None:
        """Run the statement in `fn` as this commit; the commit it made (None: it wrote nothing,
        e.g. an empty delete). Raises StaleCursor or BaseMoved under a guard, nothing written."""
        with _SESSION_CONF:
            before = self.log.current_version()
            with _session_conf(spark, self._conf(self.checked_count())):
                try:
                    fn()
                except Exception as exc:
                    if _is_conflict(exc) and (self.guard is not None or self.advances):
                        raise BaseMoved() from exc  # retried: the cursor check decides
                    if _is_conflict(exc):
                        raise ConcurrentRunError(
                            f"table {self.table.display}: another writer committed to the table while this "
                            "run was writing, so this run's commit was rejected and nothing was written. Re-run it.",
                            table=self.table.display,
                        ) from exc
                    raise
        made = self.own_commit(before)
        if made is not None:
            self.made_commits.append(made)
        return made

    def checked_count(self) -> int | None:
        """Under a guard: the table's count of cursor-carrying commits, read after checking it
        holds the run's cursor (raises StaleCursor); advancing: the count, unchecked; else None."""
        if self.guard is None:
            return (self.log.app_version(APP_ID) or 0) if self.advances else None
        log = self.log
        count = log.app_version(APP_ID)
        found = log.committed_cursor(self.guard.scope)
        if (found.snapshot_id if found else None) != self.guard.expected_snapshot_id:
            raise StaleCursor(found.run_id if found else None)
        return count if count is not None else 0

    def _conf(self, count: int | None) -> dict[str, str]:
        conf = {USER_METADATA: state_json(dict(self.properties))}
        if count is not None:
            conf.update({TXN_APP_ID: APP_ID, TXN_VERSION: str(count + 1)})
        return conf

    def created_by_another(self) -> bool:
        """After a lost race to create the table: whether the other creator's first commit is
        there, or comes within CREATOR_WAIT_S (then this run writes into the table as usual)."""
        return self.log.has_commit_within(CREATOR_WAIT_S)

    def made(self) -> Commit | None:
        """The commit this one's statement made (None: none yet, or it wrote nothing)."""
        return self.made_commits[-1] if self.made_commits else None

    def own_commit(self, before: int | None) -> Commit | None:
        """The commit carrying this commit's id among those after `before`. Under a guard, none
        means Delta skipped the write: another cursor-carrying commit came first (so too for an
        advancing one)."""
        from dagster_incremental.spark.run_commit import COMMIT_ID_PROPERTY

        for commit in reversed(self.log.commits_since(before)):
            if commit.properties.get(COMMIT_ID_PROPERTY) == self.commit_id:
                return commit
        if self.guard is not None or self.advances:
            raise BaseMoved()
        return None


@contextmanager
def _session_conf(spark: Any, conf: Mapping[str, str | None]) -> Iterator[None]:
    """Set `conf` on the session for one statement, and unset it after (a later statement,
    an ALTER included, must not carry this cursor)."""
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in (USER_METADATA, TXN_APP_ID, TXN_VERSION):
            spark.conf.unset(key)


def _is_conflict(error: BaseException) -> bool:
    """Delta refused the commit because another one came first (nothing of it was written): told
    by the Java class's name in the error, by its error class, or (Spark Connect) by the classes
    of the server's exceptions."""
    from dagster_incremental.spark.errors import error_classes, java_classes

    text = str(error)
    if any(name in text for name in _CONFLICTS):
        return True
    named = {*error_classes(error), *(c.rsplit(".", 1)[-1] for c in java_classes(error))}
    return any(n.startswith(_CONFLICT_CLASSES) or n in _CONFLICTS for n in named)
