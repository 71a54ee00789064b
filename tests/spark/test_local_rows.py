"""LocalRows: rows past the memory limit go to disk and come back as the same rows, in one
schema, survivors only; a page's own columns and types may differ from the next one's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_incremental.spark.local.rows import LocalRows


def pages(n_pages: int, size: int = 50) -> list[pa.Table]:
    return [pa.table({"id": np.arange(p * size, (p + 1) * size), "v": [f"r{p}"] * size}) for p in range(n_pages)]


@pytest.mark.parametrize("spill_bytes", [1, 2_000, 1 << 30], ids=["every-page", "some-pages", "in-memory"])
def test_rows_come_back_whole_and_in_order_however_they_were_kept(spill_bytes):
    rows = LocalRows(spill_bytes=spill_bytes)
    for page in pages(7):
        rows.add(page)
    rows.finish()
    assert rows.spilled == (spill_bytes < 1 << 30)
    assert rows.table().equals(pa.concat_tables(pages(7)))
    assert rows.num_rows == 350 and max(c.num_rows for c in rows.chunks()) <= 350
    rows.close()


def test_pages_that_disagree_on_columns_and_types_come_back_in_their_union():
    rows = LocalRows(spill_bytes=1)
    rows.add(pa.table({"id": [1], "amount": pa.array([2], pa.int64())}))
    rows.add(pa.table({"id": [2], "amount": [2.5], "note": ["x"]}))
    rows.add(pa.table({"id": [3], "note": pa.nulls(1)}))
    rows.finish()
    assert rows.schema == pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("note", pa.string())])
    assert rows.table().to_pylist() == [
        {"id": 1, "amount": 2.0, "note": None},
        {"id": 2, "amount": 2.5, "note": "x"},
        {"id": 3, "amount": None, "note": None},
    ]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=300), st.sampled_from([1, 2_000, 1 << 30]))
def test_the_survivor_mask_keeps_exactly_the_marked_rows(mask, spill_bytes):
    n = len(mask)
    rows = LocalRows(spill_bytes=spill_bytes)
    for start in range(0, n, 37):
        rows.add(pa.table({"id": np.arange(start, min(n, start + 37))}))
    rows.finish()
    rows.keep = np.array(mask)
    assert rows.table()["id"].to_pylist() == [i for i in range(n) if mask[i]]
    assert rows.num_rows == sum(mask)
    assert rows.columns(["id"]).num_rows == n  # the dedup decision sees every row


def test_the_prepare_step_runs_once_per_kept_chunk_and_spill_files_are_removed():
    seen = []
    rows = LocalRows(prepare=lambda t: seen.append(t.num_rows) or t.append_column("x", pa.array([1] * t.num_rows)), spill_bytes=1)
    for page in pages(3):
        rows.add(page)
    rows.finish()
    assert seen == [50, 50, 50] and rows.column_names == ["id", "v", "x"]
    folder = rows._folder
    assert folder is not None and any(folder.iterdir())
    rows.close()
    assert not folder.exists()


def test_a_column_missing_from_a_pages_first_row_is_kept():
    """Optional fields: Arrow's from_pylist would take the first row's columns only."""
    from types import SimpleNamespace

    from dagster_incremental.cursor.spec import incremental
    from dagster_incremental.spark.local.stage import stage_batches
    from dagster_incremental.spark.table_ref import TableRef
    from dagster_incremental.spark.write_spec import WriteSpec

    page = [{"id": 1, "at": 1}, {"id": 2, "at": 2, "note": "late field"}, {"id": 3, "at": 3, "extra": 1.5}]
    for runs in ({}, {"at": incremental("at", initial_value=0).bind(None)}):
        staged = stage_batches([page], runs, SimpleNamespace(name="orders"), WriteSpec(table=TableRef("l", ("n",), "t")))
        assert staged.local.table().to_pylist() == [
            {"id": 1, "at": 1, "note": None, "extra": None},
            {"id": 2, "at": 2, "note": "late field", "extra": None},
            {"id": 3, "at": 3, "note": None, "extra": 1.5},
        ]


def test_the_dedup_columns_of_spilled_rows_cost_no_copy_of_the_other_columns():
    """The dedup decision reads the key columns of every row; reading them back from the spill
    files must not bring the other columns into memory (a 100M-row first load kept all of them,
    ~6 GB), and the columns stay readable after the files are removed."""
    wide = "x" * 200
    rows = LocalRows(spill_bytes=1 << 20)
    for p in range(20):  # ~2 MB of wide text per page, spilled page by page
        rows.add(pa.table({"id": np.arange(p * 10_000, (p + 1) * 10_000), "text": [wide] * 10_000}))
    rows.finish()
    assert rows.spilled
    before = pa.total_allocated_bytes()
    keys = rows.columns(["id"])
    allocated = pa.total_allocated_bytes() - before
    rows.close()
    assert allocated < 10 << 20  # the text alone is 40 MB
    assert keys.column_names == ["id"] and keys["id"].to_numpy().tolist() == list(range(200_000))
