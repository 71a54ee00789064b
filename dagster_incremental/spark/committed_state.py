"""The cursor a table commit carries, as either format reads it back (Iceberg: a snapshot's
summary, spark/iceberg/metadata.py and commit.py; Delta: a commit's userMetadata, spark/delta/log.py).
Pure Python: no pyspark at import."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dagster_incremental.spark.write_spec import RUN_ID_PROPERTY, SCOPE_PROPERTY, STATE_PROPERTY


@dataclass(frozen=True)
class CommittedState:
    """The cursor stored with a table commit (what the asset layer heals lost events from), read
    from the metadata files here or from the JVM's table object (commit.py) alike."""

    state: dict[str, Any]
    run_id: str | None
    scope: str | None
    snapshot_id: int
    committed_at: datetime  # timezone-aware UTC


def cursor_of(summary: Mapping[str, str], snapshot_id: int, timestamp_ms: int, scope: str | None) -> CommittedState | None:
    """The cursor a snapshot carries (of `scope`, when given), else None: one reading of the
    commit properties for the file reader here and the JVM reader in commit.py."""
    state = summary.get(STATE_PROPERTY)
    if state is None or (scope is not None and summary.get(SCOPE_PROPERTY) != scope):
        return None
    return CommittedState(
        state=json.loads(state),
        run_id=summary.get(RUN_ID_PROPERTY),
        scope=summary.get(SCOPE_PROPERTY),
        snapshot_id=snapshot_id,
        committed_at=datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc),
    )
