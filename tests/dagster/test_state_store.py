"""reconcile: which cursor a run continues from when Dagster and the table disagree (no Spark).

The table is the truth about what was loaded; Dagster's state wins only as a runless reset
recorded after the table's commit, or when the table never held rows it could have lost.
"""

from __future__ import annotations

from datetime import datetime, timezone

from dagster_incremental.dagster.state_store import StoredState, reconcile
from dagster_incremental.spark.committed_state import CommittedState

T_COMMIT = datetime(2026, 1, 2, tzinfo=timezone.utc)
BEFORE, AFTER = T_COMMIT.timestamp() - 60, T_COMMIT.timestamp() + 60


def table(last_value: str, run_id: str = "run-1") -> CommittedState:
    return CommittedState({"last_value": last_value, "start_value": "a"}, run_id, None, 42, T_COMMIT)


def dagster(last_value: str, run_id: str | None, at: float, row_count: int | None = 3) -> StoredState:
    return StoredState({"last_value": last_value, "start_value": "b"}, "dagster", run_id, at, row_count=row_count)


def test_a_runs_newer_cursor_does_not_overrule_a_rolled_back_table():
    chosen = reconcile(dagster("v5", "run-2", AFTER), table("v3"))
    assert (chosen.source, chosen.state["last_value"], chosen.snapshot_id) == ("table", "v3", 42)
    assert chosen.overrules is not None and chosen.overrules.state["last_value"] == "v5"


def test_a_runless_reset_after_the_commit_wins():
    chosen = reconcile(dagster("v1", None, AFTER), table("v3"))
    assert (chosen.source, chosen.state["last_value"], chosen.overrules) == ("dagster", "v1", None)


def test_a_lost_event_is_healed_from_the_table():
    chosen = reconcile(dagster("v1", "run-0", BEFORE), table("v3"))
    assert (chosen.source, chosen.state["last_value"], chosen.overrules) == ("table", "v3", None)


def test_a_run_that_committed_nothing_agrees_with_the_table():
    chosen = reconcile(dagster("v3", "run-2", AFTER), table("v3"))  # only start_value differs
    assert chosen.overrules is None and chosen.state["last_value"] == "v3"


def test_a_table_without_cursor_is_only_trusted_when_nothing_could_be_lost():
    lost = reconcile(dagster("v5", "run-2", AFTER), None)
    assert lost.state is None and lost.overrules is not None and lost.overrules.run_id == "run-2"
    assert reconcile(dagster("v5", "run-2", AFTER, row_count=0), None).state["last_value"] == "v5"  # saw no rows
    assert reconcile(dagster("v5", None, AFTER), None).state["last_value"] == "v5"  # a seed
    assert reconcile(None, None).state is None
