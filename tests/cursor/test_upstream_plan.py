"""Which read of an upstream a downstream run takes, decided from the snapshot history alone."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dagster_incremental.cursor.upstream import Snapshot, changes_of, cut_read, plan_read
from dagster_incremental.errors import UpstreamRewritten


def chain(*operations: str, first_id: int = 100) -> list[Snapshot]:
    """A linear history: snapshot ids first_id, first_id+1, ... each the parent of the next."""
    return [Snapshot(first_id + i, first_id + i - 1 if i else None, op) for i, op in enumerate(operations)]


def test_first_run_reads_the_whole_table_and_an_unchanged_one_nothing():
    history = chain("append", "append")
    assert plan_read("lake.ns.orders", history, 101, None).kind == "full"
    unchanged = plan_read("lake.ns.orders", history, 101, 101)
    assert (unchanged.kind, unchanged.start, unchanged.end) == ("none", 101, 101)


def test_appends_and_compactions_read_appended_files_any_other_commit_reads_changes():
    history = chain("append", "append", "replace", "append", "overwrite", "delete")
    appended = plan_read("t", history, 103, 100)
    assert (appended.kind, appended.start, appended.end, appended.commits) == ("append", 100, 103, (101, 102, 103))
    assert plan_read("t", history, 104, 101).kind == "changes"
    assert plan_read("t", history, 105, 104).kind == "changes"


def test_a_replaced_table_names_the_table_the_snapshot_and_the_full_refresh():
    history = chain("append", "append") + [Snapshot(500, None, "overwrite")]  # CREATE OR REPLACE
    with pytest.raises(UpstreamRewritten, match=r"lake\.ns\.orders no longer has snapshot 101 .*full refresh") as err:
        plan_read("lake.ns.orders", history, 500, 101)
    assert (err.value.upstream, err.value.snapshot_id) == ("lake.ns.orders", 101)


def test_an_expired_cursor_snapshot_is_a_rewrite_not_an_empty_read():
    history = chain("append", "append", "append")[2:]  # 100 and 101 expired
    with pytest.raises(UpstreamRewritten):
        plan_read("t", history, 102, 101)


@given(st.lists(st.sampled_from(["append", "replace", "overwrite", "delete"]), min_size=1, max_size=12), st.data())
def test_any_cursor_in_the_history_reads_exactly_the_commits_after_it(operations, data):
    history = chain(*operations)
    current = history[-1].snapshot_id
    cursor = data.draw(st.sampled_from([s.snapshot_id for s in history]))
    read = plan_read("t", history, current, cursor)
    after = [s for s in history if s.snapshot_id > cursor]
    assert read.commits == tuple(s.snapshot_id for s in after)
    if not after:
        assert read.kind == "none"
    elif all(s.operation in ("append", "replace") for s in after):
        assert read.kind == "append"
    else:
        assert read.kind == "changes"


@given(st.lists(st.sampled_from(["append", "replace", "overwrite", "delete"]), min_size=2, max_size=12),
       st.integers(1, 5))
def test_slices_of_a_read_pass_through_its_commits_in_order_each_with_its_own_kind(operations, per_slice):
    history = chain("append", *operations)
    whole = plan_read("t", history, 100 + len(operations), 100)
    parts = cut_read(whole, per_slice)
    assert [c for p in parts for c in p.commits] == list(whole.commits)  # each commit read once, in order
    assert all(1 <= len(p.commits) <= per_slice for p in parts)
    assert [p.start for p in parts] == [100] + [p.end for p in parts[:-1]]  # each starts where one ended
    assert parts[-1].end == whole.end
    for part in parts:  # a slice of appends only reads appended files, even inside a "changes" read
        assert part.kind == plan_read("t", history, part.end, part.start).kind
    assert cut_read(whole, None) == [whole] and cut_read(plan_read("t", history, 101, None), 1)[0].kind == "full"


def test_changes_of_takes_a_key_path_and_refuses_an_empty_one():
    assert changes_of("shop/orders").asset == ("shop", "orders")
    assert changes_of(["shop", "orders"]).asset == ("shop", "orders")
    with pytest.raises(ValueError, match="changes_of"):
        changes_of("")
