"""The binary-search match of a file whose key column ascends finds exactly the rows Arrow's hash
join finds, for any keys, duplicates, NULLs and earlier deletes; a column that does not ascend, or
holds a NULL, is left to the join. (The whole local merge against Spark's MERGE is in
test_local_merge.py.)"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_incremental.spark.iceberg.local.target import _DEAD, _ROW, _match_ascending, _match_joined, _ordered_single_key

KEY = pa.field("id", pa.int64())
keys_ = st.lists(st.one_of(st.none(), st.integers(-20, 20)), max_size=40)


def batch_of(values: list[int | None]) -> pa.Table:
    n = len(values)
    return pa.table({"id": pa.array(values, pa.int64()), _DEAD: pa.array([False] * n),
                     _ROW: pa.array(np.arange(n, dtype=np.int64))})


def pairs(found: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    positions, rows = found
    assert positions.dtype == rows.dtype == np.int64  # row positions and indices for Arrow's take
    assert list(positions) == sorted(positions)
    return sorted(zip(positions.tolist(), rows.tolist()))


@settings(max_examples=300, deadline=None)
@given(stored=keys_, batch=keys_, sort=st.booleans(), data=st.data())
def test_the_binary_search_finds_what_the_join_finds(stored, batch, sort, data):
    if sort:
        stored = sorted(v for v in stored if v is not None)
    previous = np.array(sorted(data.draw(st.sets(st.integers(0, max(len(stored) - 1, 0)), max_size=len(stored)))),
                        dtype=np.int64) if stored else np.empty(0, dtype=np.int64)
    table = pa.table({"id": pa.array(stored, pa.int64())})
    rows = batch_of(batch)

    searched = _match_ascending(table.column(0), _ordered_single_key(rows, [KEY]), previous)
    joined = _match_joined(table, rows, previous)

    ascending = None not in stored and stored == sorted(stored)
    assert (searched is not None) == ascending
    if searched is not None:
        assert pairs(searched) == pairs(joined)


def test_a_column_that_does_not_ascend_is_left_to_the_join():
    table = pa.table({"id": pa.array([1, 3, 2], pa.int64())})
    assert _match_ascending(table.column(0), _ordered_single_key(batch_of([2]), [KEY]), np.empty(0, np.int64)) is None


def test_several_key_columns_or_a_string_key_use_the_join():
    assert _ordered_single_key(batch_of([1]), [KEY, pa.field("b", pa.int64())]) is None
    assert _ordered_single_key(batch_of([1]), [pa.field("id", pa.string())]) is None
