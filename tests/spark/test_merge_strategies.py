"""delete-insert and upsert on real Spark + Iceberg: the full table after every run.

Each test owns its table; `run_merge` plays the writer (prepare, create, view, one MERGE).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.merge import merge_statement, prepare_batch
from merge_helpers import S0, S1, T0, T1, batch, new_table, rows_sorted, run_merge, spec_for, table_rows

pytestmark = pytest.mark.spark

BOTH = ["delete-insert", "upsert"]
KV = [("id", "int"), ("v", "string")]
KVD = [("id", "int"), ("v", "string"), ("deleted", "boolean")]


# --- dedup ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", BOTH)
def test_duplicate_keys_in_a_batch_last_row_seen_wins(spark, strategy):
    """dlt's upsert inserts both duplicates and then fails with a cardinality error (MRG-16)."""
    spec = spec_for(new_table(f"dup_{strategy}"), strategy, primary_key="id")
    run_merge(spark, spec, KV, [(1, "a"), (2, "b"), (1, "a2"), (1, "a3")])
    assert table_rows(spark, spec.table) == [(1, "a3"), (2, "b")]
    run_merge(spark, spec, KV, [(2, "b2"), (3, "c"), (2, "b3"), (3, "c2")])
    assert table_rows(spark, spec.table) == [(1, "a3"), (2, "b3"), (3, "c2")]


@pytest.mark.parametrize("strategy", BOTH)
@pytest.mark.parametrize(("direction", "winner"), [("desc", "baz"), ("asc", "foo")])
def test_dedup_sort_keeps_highest_or_lowest(spark, strategy, direction, winner):
    spec = spec_for(new_table(f"sort_{direction}_{strategy}"), strategy, primary_key="id",
                    dedup_sort=("seq", direction))
    fields = [("id", "int"), ("v", "string"), ("seq", "int")]
    # A NULL sort value never wins, whatever the direction; it arrives last here.
    run_merge(spark, spec, fields, [(1, "bar", 2), (1, "foo", 1), (1, "baz", 3), (1, "nul", None)])
    seq = {"foo": 1, "baz": 3}[winner]
    assert table_rows(spark, spec.table) == [(1, winner, seq)]


@pytest.mark.parametrize("strategy", BOTH)
def test_newest_cursor_wins_over_arrival_order(spark, strategy):
    spec = spec_for(new_table(f"cursor_{strategy}"), strategy, primary_key="id", cursor_column="updated")
    fields = [("id", "int"), ("v", "string"), ("updated", "timestamp")]
    run_merge(spark, spec, fields, [(1, "new", T1), (1, "old", T0), (2, "x", None), (2, "y", T0)])
    assert table_rows(spark, spec.table) == [(1, "new", S1), (2, "y", S0)]


@pytest.mark.parametrize("strategy", BOTH)
@pytest.mark.parametrize(("rows", "expected"), [
    ([(1, "a", 1, None), (1, "a", 2, True)], []),  # the latest record is a delete: key removed
    ([(1, "a", 2, None), (1, "a", 1, True)], [(1, "a", 2, None)]),  # the latest is an insert
])
def test_dedup_sort_decides_between_insert_and_delete(spark, strategy, rows, expected):
    spec = spec_for(new_table(f"sortdel_{strategy}"), strategy, primary_key="id", dedup_sort=("seq", "desc"),
                    hard_delete_column="deleted")
    fields = [("id", "int"), ("v", "string"), ("seq", "int"), ("deleted", "boolean")]
    run_merge(spark, spec, fields, [(1, "old", 0, None)])
    run_merge(spark, spec, fields, rows)
    assert table_rows(spark, spec.table) == expected


# --- hard deletes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", BOTH)
def test_boolean_hard_delete_with_primary_key(spark, strategy):
    spec = spec_for(new_table(f"hd_bool_{strategy}"), strategy, primary_key="id", hard_delete_column="deleted")
    run_merge(spark, spec, KVD, [(1, "a", None), (2, "b", False), (3, "c", None), (9, "ghost", True)])
    # The tombstone for unknown key 9 inserts nothing (dlt's upsert inserts it: MRG-17).
    assert table_rows(spark, spec.table) == [(1, "a", None), (2, "b", False), (3, "c", None)]
    rows = [(1, "a", True), (2, "b2", False), (3, "c2", None), (4, "d", None), (8, "x", True)]
    run_merge(spark, spec, KVD, rows)
    assert table_rows(spark, spec.table) == [(2, "b2", False), (3, "c2", None), (4, "d", None)]


@pytest.mark.parametrize("strategy", BOTH)
def test_timestamp_hard_delete_deletes_on_any_value(spark, strategy):
    spec = spec_for(new_table(f"hd_ts_{strategy}"), strategy, primary_key="id", hard_delete_column="deleted_at")
    fields = [("id", "int"), ("v", "string"), ("deleted_at", "timestamp")]
    run_merge(spark, spec, fields, [(1, "a", None), (2, "b", None), (3, "c", T0)])
    assert table_rows(spark, spec.table) == [(1, "a", None), (2, "b", None)]
    run_merge(spark, spec, fields, [(1, "a", T1), (2, "b2", None)])
    assert table_rows(spark, spec.table) == [(2, "b2", None)]


def test_hard_delete_with_merge_key_deletes_the_group(spark):
    """dlt: a tombstone's merge_key selects rows to delete like any batch row's."""
    spec = spec_for(new_table("hd_mk"), merge_key="day", hard_delete_column="deleted")
    fields = [("id", "int"), ("day", "string"), ("deleted", "boolean")]
    run_merge(spark, spec, fields, [(1, "d1", None), (2, "d1", None), (3, "d2", None)])
    assert table_rows(spark, spec.table) == [(1, "d1", None), (2, "d1", None), (3, "d2", None)]
    run_merge(spark, spec, fields, [(1, "d1", False), (2, "d1", True)])
    assert table_rows(spark, spec.table) == [(1, "d1", False), (3, "d2", None)]
    run_merge(spark, spec, fields, [(3, "d2", True)])
    assert table_rows(spark, spec.table) == [(1, "d1", False)]


def test_no_keys_appends_without_tombstones(spark):
    spec = spec_for(new_table("hd_nokeys"), hard_delete_column="deleted")
    run_merge(spark, spec, KVD, [(1, "a", None), (1, "a", None), (2, "b", True)])
    assert table_rows(spark, spec.table) == [(1, "a", None), (1, "a", None)]
    text, _ = run_merge(spark, spec, KVD, [(1, "a", False), (3, "c", True)])
    assert "WHEN MATCHED" not in text and "ON FALSE" in text
    assert table_rows(spark, spec.table) == [(1, "a", False), (1, "a", None), (1, "a", None)]


# --- delete-insert by merge key -------------------------------------------------------------------


def test_reloading_a_day_replaces_it_entirely(spark):
    spec = spec_for(new_table("mk_day"), merge_key="day")
    fields = [("id", "int"), ("day", "date"), ("v", "string")]
    from datetime import date

    d1, d2 = date(2024, 1, 1), date(2024, 1, 2)
    run_merge(spark, spec, fields, [(1, d1, "a"), (2, d1, "b"), (3, d2, "c"), (3, d2, "c")])
    assert table_rows(spark, spec.table) == [(1, d1, "a"), (2, d1, "b"), (3, d2, "c"), (3, d2, "c")]
    run_merge(spark, spec, fields, [(1, d1, "a2"), (4, d1, "d")])  # id 2 vanished from day 1
    assert table_rows(spark, spec.table) == [(1, d1, "a2"), (3, d2, "c"), (3, d2, "c"), (4, d1, "d")]


def test_primary_key_or_merge_key_deletes_and_losing_duplicates_still_scope(spark):
    """pk OR merge_key, with a target row matched both ways (no cardinality error)."""
    spec = spec_for(new_table("pk_or_mk"), primary_key="id", merge_key="day")
    fields = [("id", "int"), ("day", "string"), ("v", "string")]
    run_merge(spark, spec, fields, [(1, "d1", "a"), (2, "d1", "b"), (3, "d2", "c"), (4, "d3", "d")])
    # id 1 moves to d2 (its d1 row goes by pk; all of d2 goes by merge_key); id 5's losing
    # duplicate names d3, which is reloaded too (dlt deletes by every batch row's merge_key).
    run_merge(spark, spec, fields, [(1, "d2", "a2"), (5, "d3", "lost"), (5, "d1", "e")])
    assert table_rows(spark, spec.table) == [(1, "d2", "a2"), (5, "d1", "e")]


def test_compound_keys_compare_column_by_column(spark):
    spec = spec_for(new_table("compound"), primary_key=("k1", "k2"), merge_key=("m1", "m2"))
    fields = [("k1", "string"), ("k2", "string"), ("m1", "string"), ("m2", "string"), ("v", "int")]
    run_merge(spark, spec, fields, [("a", "bc", "x", "yz", 1), ("ab", "c", "xy", "z", 2)])
    assert table_rows(spark, spec.table) == [("a", "bc", "x", "yz", 1), ("ab", "c", "xy", "z", 2)]
    run_merge(spark, spec, fields, [("a", "bc", "q", "q", 3)])
    assert table_rows(spark, spec.table) == [("a", "bc", "q", "q", 3), ("ab", "c", "xy", "z", 2)]
    run_merge(spark, spec, fields, [("b", "b", "xy", "z", 4)])
    assert table_rows(spark, spec.table) == [("a", "bc", "q", "q", 3), ("b", "b", "xy", "z", 4)]


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "keys", "null_row", "bad"), [
    ("delete-insert", {"primary_key": "id"}, (None, "d1", "no key"), "id"),
    ("upsert", {"primary_key": ("id", "day")}, (2, None, "no key"), "day"),
    ("delete-insert", {"primary_key": "id", "merge_key": "day"}, (3, None, "no key"), "day"),
    ("scd2", {"primary_key": "id"}, (None, "d1", "no key"), "id"),
    ("scd2", {"merge_key": "day"}, (3, None, "no key"), "day"),
])
def test_null_key_is_rejected_before_anything_is_written(spark, strategy, keys, null_row, bad):
    spec = spec_for(new_table(f"nullkey_{strategy}"), strategy, **keys)
    fields = [("id", "int"), ("day", "string"), ("v", "string")]
    run_merge(spark, spec, fields, [(1, "d1", "a")])
    before = table_rows(spark, spec.table, drop=())
    rows = [(2, "d1", "b"), null_row]
    with pytest.raises(DataShapeError) as raised:
        run_merge(spark, spec, fields, rows)
    message = str(raised.value)
    assert repr(bad) in message and f"{bad!r}: None" in message and "1 row(s)" in message
    assert "no key" not in message  # the row's key columns only, never its other values
    assert table_rows(spark, spec.table, drop=()) == before


@pytest.mark.parametrize(("kwargs", "fields", "match"), [
    ({"primary_key": "nope"}, KV, "primary_key column"),
    ({"primary_key": "id", "hard_delete_column": "gone"}, KV, "hard_delete column"),
    ({"primary_key": "id", "dedup_sort": ("seq", "desc")}, KV, "dedup_sort column"),
    ({"primary_key": "id"}, [*KV, ("__di_x", "int")], "reserved prefix"),
])
def test_configured_columns_must_be_in_the_batch(spark, kwargs, fields, match):
    spec = spec_for(new_table("cols"), **kwargs)
    with pytest.raises(DataShapeError, match=match):
        prepare_batch(spec, batch(spark, fields, []), run_started_at=T0)


# --- pruning and parameters -----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", BOTH)
def test_prune_bounds_are_parameters_and_keep_results(spark, strategy):
    spec = spec_for(new_table(f"prune_{strategy}"), strategy, primary_key=("id", "day"), partition_by=("day",))
    fields = [("id", "int"), ("day", "string"), ("v", "string")]
    pruned = {"prune": True, "partition_by": ["day"]}
    run_merge(spark, spec, fields, [(1, "d1", "a"), (1, "d2", "b"), (2, "d3", "c")], **pruned)
    text, args = run_merge(spark, spec, fields, [(1, "d2", "b2"), (3, "d2", "x")], **pruned)
    assert args == {"prune0_lo": "d2", "prune0_hi": "d2"}
    assert "t.`day` BETWEEN :prune0_lo AND :prune0_hi" in text and "'d2'" not in text
    assert table_rows(spark, spec.table) == [(1, "d1", "a"), (1, "d2", "b2"), (2, "d3", "c"), (3, "d2", "x")]


# --- hostile identifiers --------------------------------------------------------------------------

HOSTILE = [("select", "int"), ("a`b", "string"), ("from", "string"), ("it's", "boolean"), ("two words", "int"),
           ("v", "string")]


@pytest.mark.parametrize("strategy", ["delete-insert", "upsert", "insert-only", "scd2"])
def test_hostile_column_names_through_every_strategy(spark, strategy):
    spec = spec_for(new_table(f"hostile_{strategy}"), strategy, primary_key=("select", "a`b"),
                    merge_key=("from",) if strategy not in ("upsert", "insert-only") else (), hard_delete_column="it's",
                    dedup_sort=("two words", "desc"))
    run_merge(spark, spec, HOSTILE, [
        (1, "x", "f1", None, 1, "old"), (1, "x", "f1", None, 2, "new"), (2, "y", "f1", None, 1, "keep"),
        (3, "z", "f2", None, 1, "gone"), (9, "q", "f2", True, 1, "ghost"),
    ], run_started_at=T0)
    drop = ("_row_hash",)
    v1 = [(1, "x", "f1", None, 2, "new"), (2, "y", "f1", None, 1, "keep"), (3, "z", "f2", None, 1, "gone")]
    if strategy == "scd2":
        assert table_rows(spark, spec.table, drop) == rows_sorted([(*r, S0, None) for r in v1])
    else:
        assert table_rows(spark, spec.table, drop) == v1
    run_merge(spark, spec, HOSTILE, [(1, "x", "f1", False, 3, "newer"), (3, "z", "f2", True, 1, "gone")],
              run_started_at=T1)
    if strategy == "delete-insert":  # f1 reloaded (2 vanishes), 3 deleted
        expected = [(1, "x", "f1", False, 3, "newer")]
    elif strategy == "upsert":
        expected = [(1, "x", "f1", False, 3, "newer"), (2, "y", "f1", None, 1, "keep")]
    elif strategy == "insert-only":  # no new key: nothing changes
        expected = v1
    else:  # scd2 with merge_key: 1 changed, 2 absent in reloaded f1 (retired), 3 hard-deleted
        expected = [(1, "x", "f1", None, 2, "new", S0, S1), (2, "y", "f1", None, 1, "keep", S0, S1),
                    (3, "z", "f2", None, 1, "gone", S0, S1), (1, "x", "f1", False, 3, "newer", S1, None)]
    assert table_rows(spark, spec.table, drop) == rows_sorted(expected)


# --- property: upsert and delete-insert agree with a plain-Python reference -----------------------

_event = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), st.booleans())
_history = st.lists(st.lists(_event, max_size=5), min_size=1, max_size=3)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=_history)
def test_upsert_and_delete_insert_match_a_reference(spark, history):
    tables = {s: spec_for(new_table(f"prop_{s}"), s, primary_key="id", hard_delete_column="deleted") for s in BOTH}
    reference: dict[int, str] = {}
    for run in history:
        for key, value, deleted in run:  # the last event of a key in a batch wins
            if deleted:
                reference.pop(key, None)
            else:
                reference[key] = value
        rows = [(key, value, deleted) for key, value, deleted in run]
        expected = sorted((key, value, False) for key, value in reference.items())
        for spec in tables.values():
            run_merge(spark, spec, KVD, rows)
            assert table_rows(spark, spec.table) == expected


# --- insert-only ----------------------------------------------------------------------------------


def test_insert_only_inserts_new_keys_and_never_touches_existing_rows(spark):
    """dlt's insert-only: a key already in the table keeps its first row; a tombstone is only
    left out of the insert (it deletes nothing); duplicates in a batch keep the last row seen."""
    spec = spec_for(new_table("insert_only"), "insert-only", primary_key="id", hard_delete_column="deleted")
    run_merge(spark, spec, KVD, [(1, "a", None), (2, "b", None), (2, "b2", None), (9, "ghost", True)])
    assert table_rows(spark, spec.table) == [(1, "a", None), (2, "b2", None)]
    text, _ = run_merge(spark, spec, KVD, [(1, "A", None), (2, "b", True), (3, "c", None), (3, "c2", None)])
    assert "WHEN MATCHED" not in text
    assert table_rows(spark, spec.table) == [(1, "a", None), (2, "b2", None), (3, "c2", None)]
