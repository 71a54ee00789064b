"""scd2 on real Spark + Iceberg: the full version history after every run.

Rows read back as (user columns..., _valid_from, _valid_to) with timestamps as UTC text; the row
hash is checked separately (test_row_hash_*).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from dagster_incremental.errors import DataShapeError, IncrementalConfigError
from dagster_incremental.spark.merge import merge_statement, prepare_batch
from dagster_incremental.spark.merge.scd2 import ROW_HASH, row_hash
from merge_helpers import S0, S1, S2, S3, T0, T1, T2, batch, new_table, rows_sorted, run_merge, spec_for, table_rows

pytestmark = pytest.mark.spark

KV = [("id", "int"), ("v", "string")]
KDV = [("id", "int"), ("day", "string"), ("v", "string")]


def scd2_spec(hint: str, **kwargs):
    return spec_for(new_table(f"scd2_{hint}"), "scd2", **kwargs)


@pytest.mark.parametrize("keys", [{}, {"primary_key": "id"}])
def test_full_snapshot_change_delete_and_unchanged(spark, keys):
    spec = scd2_spec("full", **keys)
    run_merge(spark, spec, KV, [(1, "a"), (2, "b"), (3, "c")], T0)
    assert table_rows(spark, spec.table) == [(1, "a", S0, None), (2, "b", S0, None), (3, "c", S0, None)]
    run_merge(spark, spec, KV, [(1, "a2"), (2, "b")], T1)  # 1 changed, 2 unchanged, 3 gone
    expected = rows_sorted([(1, "a", S0, S1), (1, "a2", S1, None), (2, "b", S0, None), (3, "c", S0, S1)])
    assert table_rows(spark, spec.table) == expected
    run_merge(spark, spec, KV, [(2, "b"), (1, "a2")], T2)  # nothing changed: a no-op
    assert table_rows(spark, spec.table) == expected


@pytest.mark.parametrize("keys", [{"merge_key": "id"}, {"primary_key": "id", "merge_key": "id"}])
def test_natural_merge_key_is_incremental(spark, keys):
    """Only entities in the batch can be retired: absent ones stay active."""
    spec = scd2_spec("natural", **keys)
    run_merge(spark, spec, KV, [(1, "a"), (2, "b")], T0)
    run_merge(spark, spec, KV, [(1, "a2")], T1)
    assert table_rows(spark, spec.table) == [(1, "a", S0, S1), (1, "a2", S1, None), (2, "b", S0, None)]
    run_merge(spark, spec, KV, [(3, "c")], T2)
    assert table_rows(spark, spec.table) == [
        (1, "a", S0, S1), (1, "a2", S1, None), (2, "b", S0, None), (3, "c", S2, None)]


@pytest.mark.parametrize("keys", [{"merge_key": "day"}, {"primary_key": "id", "merge_key": "day"}])
def test_partition_merge_key_retires_within_reloaded_partitions(spark, keys):
    spec = scd2_spec("partition", **keys)
    run_merge(spark, spec, KDV, [(1, "d1", "a"), (2, "d1", "b"), (3, "d2", "c")], T0)
    run_merge(spark, spec, KDV, [(1, "d1", "a")], T1)  # day d1 reloaded without 2; d2 untouched
    assert table_rows(spark, spec.table) == [(1, "d1", "a", S0, None), (2, "d1", "b", S0, S1), (3, "d2", "c", S0, None)]


def test_entity_moving_partition_retires_its_old_version(spark):
    """With a primary key the entity is found even outside the batch's merge_key values."""
    spec = scd2_spec("move", primary_key="id", merge_key="day")
    run_merge(spark, spec, KDV, [(1, "d1", "a"), (2, "d1", "b")], T0)
    run_merge(spark, spec, KDV, [(1, "d2", "a")], T1)
    assert table_rows(spark, spec.table) == [(1, "d1", "a", S0, S1), (1, "d2", "a", S1, None), (2, "d1", "b", S0, None)]


@pytest.mark.parametrize("keys", [{}, {"primary_key": "id"}])
def test_retired_key_that_comes_back_gets_a_new_version(spark, keys):
    spec = scd2_spec("reinsert", **keys)
    run_merge(spark, spec, KV, [(1, "a"), (2, "b")], T0)
    run_merge(spark, spec, KV, [(1, "a")], T1)
    run_merge(spark, spec, KV, [(1, "a"), (2, "b")], T2)
    assert table_rows(spark, spec.table) == [(1, "a", S0, None), (2, "b", S0, S1), (2, "b", S2, None)]


def test_user_row_version_column(spark):
    """The user's version decides; an attribute change without a new version is not recorded (as in dlt)."""
    spec = scd2_spec("rowversion", primary_key="id", scd2={"row_version_column_name": "ver"})
    fields = [("id", "int"), ("v", "string"), ("ver", "int")]
    run_merge(spark, spec, fields, [(1, "a", 1), (2, "b", 1)], T0)
    assert "_row_hash" not in spark.table(spec.table.sql).columns
    run_merge(spark, spec, fields, [(1, "a-silent", 1), (2, "b2", 2)], T1)
    assert table_rows(spark, spec.table) == [
        (1, "a", 1, S0, None), (2, "b", 1, S0, S1), (2, "b2", 2, S1, None)]


def test_user_row_version_without_primary_key_is_the_entity(spark):
    spec = scd2_spec("rowversion_nopk", scd2={"row_version_column_name": "ver"})
    fields = [("v", "string"), ("ver", "string")]
    run_merge(spark, spec, fields, [("a", "h1"), ("a-dup", "h1"), ("b", "h2")], T0)  # h1 twice: last seen
    run_merge(spark, spec, fields, [("b", "h2"), ("c", "h3")], T1)
    assert table_rows(spark, spec.table) == [("a-dup", "h1", S0, S1), ("b", "h2", S0, None), ("c", "h3", S1, None)]


def test_active_record_timestamp(spark):
    spec = scd2_spec("active_ts", primary_key="id", scd2={"active_record_timestamp": "9999-12-31"})
    high = "9999-12-31 00:00:00"
    run_merge(spark, spec, KV, [(1, "a"), (2, "b")], T0)
    assert table_rows(spark, spec.table) == [(1, "a", S0, high), (2, "b", S0, high)]
    text, args = run_merge(spark, spec, KV, [(1, "a2")], T1)
    assert args["active_to"] == datetime(9999, 12, 31, tzinfo=timezone.utc) and "9999" not in text
    assert table_rows(spark, spec.table) == [(1, "a", S0, S1), (1, "a2", S1, high), (2, "b", S0, S1)]


def test_boundary_timestamp_overrides_the_run_start(spark):
    spec = scd2_spec("boundary", primary_key="id", scd2={"boundary_timestamp": "2024-01-04T01:00:00+01:00"})
    run_merge(spark, spec, KV, [(1, "a")], T0)
    run_merge(spark, spec, KV, [(1, "a2")], T1)
    assert table_rows(spark, spec.table) == [(1, "a", S3, S3), (1, "a2", S3, None)]


@pytest.mark.parametrize("keys", [{}, {"primary_key": "id"}])
def test_hard_delete_retires_without_a_new_version(spark, keys):
    spec = scd2_spec("harddel", hard_delete_column="deleted_at", **keys)
    fields = [("id", "int"), ("v", "string"), ("deleted_at", "timestamp")]
    run_merge(spark, spec, fields, [(1, "a", None), (2, "b", None), (9, "ghost", T0)], T0)
    assert table_rows(spark, spec.table) == [(1, "a", None, S0, None), (2, "b", None, S0, None)]
    # A tombstone carries the row (no pk: the row's hash, without the flag, is the entity).
    run_merge(spark, spec, fields, [(1, "a", None), (2, "b", T1), (8, "never", T1)], T1)
    assert table_rows(spark, spec.table) == [(1, "a", None, S0, None), (2, "b", None, S0, S1)]
    run_merge(spark, spec, fields, [(1, "a", None), (2, "b", None)], T2)  # 2 comes back
    assert table_rows(spark, spec.table) == [(1, "a", None, S0, None), (2, "b", None, S0, S1), (2, "b", None, S2, None)]


def test_identical_duplicates_collapse_to_one_version(spark):
    spec = scd2_spec("identical")
    run_merge(spark, spec, KV, [(1, "a"), (1, "a"), (2, "b"), (1, "a")], T0)
    assert table_rows(spark, spec.table) == [(1, "a", S0, None), (2, "b", S0, None)]


@pytest.mark.parametrize("keys", [{}, {"primary_key": ("k1", "k2")}, {"merge_key": ("k1", "k2")}])
def test_compound_values_that_collide_as_strings_stay_apart(spark, keys):
    """("a", "bc") and ("ab", "c") are different entities (dlt's CONCAT merge_key: #4244)."""
    spec = scd2_spec("collide", **keys)
    fields = [("k1", "string"), ("k2", "string"), ("v", "int")]
    run_merge(spark, spec, fields, [("a", "bc", 1), ("ab", "c", 1)], T0)
    assert table_rows(spark, spec.table) == [("a", "bc", 1, S0, None), ("ab", "c", 1, S0, None)]
    run_merge(spark, spec, fields, [("a", "bc", 2), ("ab", "c", 1)], T1)
    assert table_rows(spark, spec.table) == [("a", "bc", 1, S0, S1), ("a", "bc", 2, S1, None), ("ab", "c", 1, S0, None)]


def test_prune_bounds_keep_other_partitions_untouched(spark):
    """A full snapshot of one partition retires absent rows of that partition only."""
    spec = scd2_spec("prune", primary_key="id", partition_by=("day",))
    run_merge(spark, spec, KDV, [(1, "d1", "a"), (2, "d2", "b"), (3, "d2", "c")], T0, prune=True, partition_by=["day"])
    text, args = run_merge(spark, spec, KDV, [(2, "d2", "b2")], T1, prune=True, partition_by=["day"])
    assert args["prune0_lo"] == "d2" and "t.`day` BETWEEN :prune0_lo AND :prune0_hi" in text
    assert table_rows(spark, spec.table) == [
        (1, "d1", "a", S0, None), (2, "d2", "b", S0, S1), (2, "d2", "b2", S1, None), (3, "d2", "c", S0, S1)]


def test_scd2_columns_must_not_be_in_the_batch(spark):
    spec = scd2_spec("clash", primary_key="id")
    with pytest.raises(DataShapeError, match="_valid_from"):
        prepare_batch(spec, batch(spark, [*KV, ("_valid_from", "timestamp")], []), run_started_at=T0)
    bad = scd2_spec("badts", scd2={"active_record_timestamp": "not a time"})
    with pytest.raises(IncrementalConfigError, match="active_record_timestamp"):
        prepare_batch(bad, batch(spark, KV, []), run_started_at=T0)
    with pytest.raises(IncrementalConfigError, match="active_record_timestamp"):
        merge_statement(bad, target=bad.table, source_view="v", columns=["id"], run_started_at=T0)


def test_row_hash_is_canonical_null_safe_and_column_by_column(spark):
    frame = batch(spark, [("a", "string"), ("b", "string"), ("n", "int"), ("big", "bigint")], [
        ("a", "bc", 1, 1), ("ab", "c", 1, 1), ("", None, None, None), (None, "", None, None), (None, None, None, None),
    ])
    hashes = [r[0] for r in frame.select(row_hash(frame, ["a", "b"])).collect()]
    assert len(set(hashes)) == 5 and all(len(h) == 64 for h in hashes)
    # The column order doesn't matter; int and bigint of the same value hash alike (type-stable).
    assert frame.select(row_hash(frame, ["b", "a"])).collect() == frame.select(row_hash(frame, ["a", "b"])).collect()
    as_int, as_bigint = (frame.withColumnRenamed(name, "k") for name in ("n", "big"))
    assert (as_int.select(row_hash(as_int, ["a", "k"])).collect()
            == as_bigint.select(row_hash(as_bigint, ["a", "k"])).collect())
    # The hard_delete flag is not part of the hash: a tombstone matches its row's version.
    spec = scd2_spec("hash", hard_delete_column="deleted")
    flagged = batch(spark, [*KV, ("deleted", "boolean")], [(1, "a", None), (1, "a", True)])
    prepared = prepare_batch(spec, flagged, run_started_at=T0)
    # Identical rows but the flag collapse to one survivor: the last seen (the tombstone).
    assert [tuple(r) for r in prepared.select("deleted", "__di_deleted").collect()] == [(True, True)]
    assert prepared.select(ROW_HASH).first()[0] == flagged.select(row_hash(flagged, ["id", "v"])).first()[0]
    assert prepared.where(F.col("__di_survivor")).count() == 1
