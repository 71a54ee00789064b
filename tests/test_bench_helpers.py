"""The benchmark harness's pure helpers: the Arrow verification must agree with the workload's own
expectation (it replaces a dict compare that cannot hold 10M rows), and the compare ratios must
use medians per run."""

from __future__ import annotations

import pyarrow as pa

from bench.compare import ratios, summary
from bench.orders import expected_arrow, mismatches
from bench.workload import expected_table

ROWS, CHANGES, RUNS = 5_003, 100, 4


def test_expected_arrow_is_expected_table():
    want = expected_table(RUNS, ROWS, CHANGES)
    got = expected_arrow(RUNS, ROWS, CHANGES).to_pylist()
    assert [r["id"] for r in got] == sorted(want)
    for r in got:
        w = want[r["id"]]
        assert {**r, "updated_at": r["updated_at"].strftime("%Y-%m-%dT%H:%M:%SZ")} == w


def test_mismatches_finds_changed_and_missing_rows():
    table = expected_arrow(RUNS, ROWS, CHANGES)
    assert mismatches(table, table) == {}
    versions = table["version"].to_pylist()
    versions[7] += 1
    assert mismatches(table, table.set_column(4, "version", pa.array(versions))) == {"version": 1}
    assert "id" in mismatches(table, table.slice(1))


def test_summary_and_ratios_use_medians_per_run():
    ours = summary([{"seconds": [10, 2, 4], "total": 16}, {"seconds": [20, 4, 2], "total": 26}])
    assert ours == {"first": 15, "change": 3, "total": 21, "per_run": [15, 3, 3]}
    peer = summary([{"seconds": [10, 2, 1], "total": 13}])
    r = ratios(ours, peer)
    assert (r["first"], r["change"], r["worst_change"]) == (1.5, 2.0, 3.0)
