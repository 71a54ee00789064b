"""Arrow dedup of local merge batches keeps the same row per key as the Spark path."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_incremental.spark.local import dedup as local_dedup
from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.merge import prepare_batch, table_columns
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteSpec

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def spec(**kw) -> WriteSpec:
    kw.setdefault("primary_key", ("id",))
    return WriteSpec(table=TableRef("lake", ("t",), "x"), disposition="merge", strategy=kw.pop("strategy", "upsert"), **kw)


def reference(rows: list[dict], spec: WriteSpec) -> list[dict]:
    """merge/dedup.py's rule in plain Python: dedup_sort (NULL never wins), newest cursor (NULL
    never wins), last seen; survivors in arrival order."""
    best: dict[tuple, int] = {}

    def rank(i: int) -> tuple:
        row, out = rows[i], []
        if spec.dedup_sort:
            name, direction = spec.dedup_sort
            v = row[name]
            out.append((v is not None, (v if direction == "desc" else -v) if v is not None else 0))
        if spec.cursor_column:
            v = row[spec.cursor_column]
            out.append((v is not None, v if v is not None else T0))
        out.append(i)
        return tuple(out)

    for i, row in enumerate(rows):
        key = tuple(row[k] for k in spec.primary_key)
        if key not in best or rank(i) > rank(best[key]):
            best[key] = i
    return [rows[i] for i in sorted(best.values())]


row_st = st.fixed_dictionaries({
    "id": st.integers(0, 5),
    "region": st.sampled_from(["eu", "us"]),
    "seq": st.none() | st.integers(-3, 3),
    "ts": st.none() | st.integers(0, 4).map(lambda h: T0 + dt.timedelta(hours=h)),
    "v": st.text(max_size=2),
})
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("seq", pa.int64()),
                    ("ts", pa.timestamp("us", "UTC")), ("v", pa.string())])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(row_st, max_size=30),
    keys=st.sampled_from([("id",), ("id", "region")]),
    dedup=st.sampled_from([None, ("seq", "asc"), ("seq", "desc")]),
    cursor=st.sampled_from([None, "ts"]),
)
def test_dedup_keeps_the_row_the_rules_pick(rows, keys, dedup, cursor):
    s = spec(primary_key=keys, dedup_sort=dedup, cursor_column=cursor)
    out = local_dedup.deduplicate(pa.Table.from_pylist(rows, schema=SCHEMA), s)
    assert out.to_pylist() == reference(rows, s)


def test_same_survivors_as_the_spark_path(spark):
    rows = [
        {"id": 1, "region": "eu", "seq": 2, "ts": T0, "v": "a"},
        {"id": 1, "region": "eu", "seq": None, "ts": T0 + dt.timedelta(hours=1), "v": "b"},
        {"id": 2, "region": "us", "seq": 1, "ts": None, "v": "c"},
        {"id": 2, "region": "us", "seq": 1, "ts": T0, "v": "d"},
        {"id": 3, "region": "us", "seq": 1, "ts": T0, "v": "e"},
        {"id": 3, "region": "us", "seq": 1, "ts": T0, "v": "f"},
    ]
    for s in (spec(dedup_sort=("seq", "desc"), cursor_column="ts"), spec(cursor_column="ts"), spec()):
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        frame = spark.createDataFrame(table.to_pandas())
        prepared = prepare_batch(s, frame, run_started_at=T0)
        by_spark = sorted(r["v"] for r in prepared.select(*table_columns(prepared)).collect())
        assert sorted(local_dedup.deduplicate(table, s)["v"].to_pylist()) == by_spark


def test_null_key_is_named_by_its_position_never_its_other_values():
    table = pa.Table.from_pylist([{"id": 1, "v": "a"}, {"id": None, "v": "personal"}])
    with pytest.raises(DataShapeError, match=r"1 row\(s\) have NULL in primary_key column 'id', e.g. row 1 ") as e:
        local_dedup.deduplicate(table, spec())
    assert "personal" not in str(e.value)


def test_covers_only_one_row_per_key_strategies():
    cols = ["id", "v", "seq"]
    assert local_dedup.covers(spec(), cols)
    assert local_dedup.covers(spec(strategy="delete-insert"), cols)
    assert not local_dedup.covers(spec(strategy="delete-insert", merge_key=("v",)), cols)
    assert not local_dedup.covers(spec(strategy="scd2"), cols)
    assert not local_dedup.covers(spec(primary_key=()), cols)
    assert not local_dedup.covers(spec(primary_key=("missing",)), cols)  # the Spark path reports it
    assert not local_dedup.covers(spec(dedup_sort=("seq", "up")), cols)
    assert not local_dedup.covers(spec(), [*cols, "__di_x"])


def test_staging_dedups_local_batches_and_leaves_unsortable_keys_to_spark(spark):
    from types import SimpleNamespace

    from dagster_incremental.spark.local.stage import arrow_to_spark, stage_batches

    settings = SimpleNamespace(name="x")
    rows = [{"id": 1, "v": "a"}, {"id": 1, "v": "b"}, {"id": 2, "v": "c"}]
    staged = stage_batches(rows, {}, settings, spec())
    assert staged.deduplicated and sorted(staged.local.table()["v"].to_pylist()) == ["b", "c"]

    struct_keys = pa.table({"id": pa.array([{"a": 1}, {"a": 1}]), "v": ["a", "b"]})
    staged = stage_batches(struct_keys, {}, settings, spec())
    assert not staged.deduplicated and staged.local.num_rows == 2  # prepare_batch dedups in Spark
    frame = arrow_to_spark(spark, staged.local)
    prepared = prepare_batch(spec(), frame, run_started_at=T0)
    assert [r.v for r in prepared.select(*table_columns(prepared)).collect()] == ["b"]


def spilled(rows: list[dict], page: int) -> "LocalRows":
    """`rows` staged page by page, each page spilled to its own file (as a large batch is)."""
    from dagster_incremental.spark.local.rows import LocalRows

    staged = LocalRows(spill_bytes=1)
    for start in range(0, len(rows), page):
        staged.add(pa.Table.from_pylist(rows[start:start + page], schema=SCHEMA))
    return staged.finish()


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(row_st, min_size=1, max_size=30), page=st.integers(1, 7), cursor=st.sampled_from([None, "ts"]))
def test_a_spilled_batch_keeps_the_row_the_rules_pick_checked_a_file_at_a_time(rows, page, cursor):
    s = spec(cursor_column=cursor)
    staged = spilled(rows, page)
    staged.keep, decided = local_dedup.decide(staged, s)
    assert decided and staged.table().to_pylist() == reference(rows, s)
    ascending = all(a["id"] < b["id"] for a, b in zip(rows, rows[1:]))
    assert (staged.keep is None) == (ascending or len({r["id"] for r in rows}) == len(rows))


def test_past_max_sorted_rows_an_unordered_batch_is_left_to_spark_but_ascending_keys_are_not(monkeypatch):
    monkeypatch.setattr(local_dedup, "MAX_SORTED_ROWS", 4)
    base = {"region": "eu", "seq": 1, "ts": T0, "v": "a"}
    ascending = spilled([{**base, "id": i} for i in range(10)], page=3)
    assert local_dedup.decide(ascending, spec()) == (None, True)  # checked in one pass, any size
    repeated = spilled([{**base, "id": i % 5} for i in range(10)], page=3)
    assert local_dedup.decide(repeated, spec()) == (None, False)  # Spark's dedup decides
