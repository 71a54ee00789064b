"""What every format's one commit carries and how its compare-and-set refuses: the commit's
properties (the cursor, the run, the scope, a fresh commit id), the guard a run commits under,
and the two refusals (a newer cursor; a base moved by a writer that left the cursor alone).

Format-neutral: Iceberg (spark/iceberg/commit.py) and Delta (spark/delta/commit.py) each make
the one commit their own way from these."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dagster_incremental.cursor.state import state_json
from dagster_incremental.spark.write_spec import RUN_ID_PROPERTY, SCOPE_PROPERTY, STATE_PROPERTY, CommitInfo, WriteSpec


# A fresh id per write: finds exactly the snapshot our write made, even with concurrent writers.
COMMIT_ID_PROPERTY = "dagster_incremental.commit_id"


def new_commit_id() -> str:
    return uuid.uuid4().hex


def commit_properties(info: CommitInfo, *, commit_id: str | None = None) -> dict[str, str]:
    """The snapshot properties for `info` (state as compact, key-sorted JSON).

    Raises TypeError before anything is written when the state isn't JSON-serialisable.
    """
    props: dict[str, str] = {}
    if commit_id is not None:
        props[COMMIT_ID_PROPERTY] = commit_id
    if info.state is not None:
        try:
            props[STATE_PROPERTY] = state_json(info.state)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"the cursor state {info.state!r} is not JSON-serialisable: {exc}") from exc
    if info.run_id is not None:
        props[RUN_ID_PROPERTY] = str(info.run_id)
    if info.scope is not None:
        props[SCOPE_PROPERTY] = str(info.scope)
    return props


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


def case_sensitive(setting: Callable[[str, str], Any]) -> bool:
    """Whether the session compares column names case-sensitively (`setting`: its conf's get)."""
    return str(setting("spark.sql.caseSensitive", "false")).lower() == "true"


def commit_fields(case_sensitive: bool, spec: WriteSpec, info: CommitInfo, started: datetime | None,
                  guard: CursorGuard | None) -> dict[str, Any]:
    """What every format's commit starts with: a fresh id, the properties it carries (state
    validated), the run's start, the session's case sensitivity and the guard."""
    commit_id = new_commit_id()
    return {
        "spec": spec,
        "commit_id": commit_id,
        "properties": commit_properties(info, commit_id=commit_id),
        "started": started or datetime.now(timezone.utc),
        "case_sensitive": case_sensitive,
        "guard": guard,
    }
