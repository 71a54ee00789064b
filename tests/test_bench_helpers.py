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


def test_spark_jobs_groups_jobs_by_run_with_rows_read_and_shuffled(tmp_path):
    """The job list of `bench.orders --jobs`: each job in the run whose time window holds its
    submission, named by its SQL plan (root and scans), with the rows its tasks read and shuffled."""
    import json

    from bench.common import spark_jobs

    plan = {"simpleString": "WriteDelta x", "children": [{"simpleString": "BatchScan lake.bench.orders[id]", "children": []}]}
    events = [
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart", "executionId": 3, "sparkPlanInfo": plan},
        {"Event": "SparkListenerJobStart", "Job ID": 7, "Submission Time": 5_000, "Stage IDs": [11, 12],
         "Stage Infos": [{"Number of Tasks": 2}, {"Number of Tasks": 4}], "Properties": {"spark.sql.execution.id": "3"}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 11, "Task Metrics": {"Input Metrics": {"Records Read": 600}}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 11, "Task Metrics": {
            "Input Metrics": {"Records Read": 400}, "Shuffle Write Metrics": {"Shuffle Records Written": 1000}}},
        {"Event": "SparkListenerJobEnd", "Job ID": 7, "Completion Time": 7_500},
        {"Event": "SparkListenerJobStart", "Job ID": 8, "Submission Time": 20_000, "Stage IDs": [13],
         "Stage Infos": [{"Number of Tasks": 1}], "Properties": {"callSite.short": "count at x.py:1"}},
        {"Event": "SparkListenerJobEnd", "Job ID": 8, "Completion Time": 20_250},
    ]
    (tmp_path / "app-1").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    runs = spark_jobs(tmp_path, [(4.0, 10.0), (10.0, 30.0), (30.0, 40.0)])
    assert runs == [
        [{"job": 7, "what": "WriteDelta x | BatchScan lake.bench.orders[id]", "tasks": 6, "rows_read": 1000,
          "shuffle_rows_written": 1000, "seconds": 2.5}],
        [{"job": 8, "what": "count at x.py:1", "tasks": 1, "rows_read": 0, "shuffle_rows_written": 0, "seconds": 0.25}],
        [],
    ]


def test_phase_timer_attributes_a_new_peak_to_the_phase_that_made_it():
    import numpy as np

    from bench.common import PhaseTimer, py_peak_rss_mb, py_rss_mb

    timer = PhaseTimer()
    above_peak = int((py_peak_rss_mb() - py_rss_mb() + 64) * 2**20)  # 64 MB past the peak so far
    grow = timer.wrap("grow", lambda: int(np.ones(above_peak // 8).sum()))
    small = timer.wrap("small", lambda: 1)
    grow()
    small()
    peaks = timer.reset_peaks()
    assert set(peaks) <= {"py:grow", "arrow:grow"}
    assert 32 <= peaks["py:grow"] <= 96
    assert timer.reset_peaks() == {}


def test_interleaved_ways_take_turns_going_first_and_record_their_seconds():
    from bench.common import interleaved

    order, seconds = [], {"a": [], "b": []}
    ways = {"a": lambda: order.append("a") or 1, "b": lambda: order.append("b") or 2}
    assert interleaved(ways, 1, seconds) == {"a": 1, "b": 2}
    assert interleaved(ways, 2, seconds) == {"a": 1, "b": 2}
    assert order == ["a", "b", "b", "a"]
    assert [len(v) for v in seconds.values()] == [2, 2] and all(s >= 0 for v in seconds.values() for s in v)
