"""bench/workload.py must yield exactly the shared benchmark's rows, so our numbers and the peer's
are measured on the same data. When ../shared/bench/workload.py exists (beside this repository)
the two are compared row by row; otherwise bench/workload.py is checked against its documented
shape (determinism, page size, halves of updates and new ids, strictly newer cursors)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from bench import workload as ours

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench" / "workload.py"
ROWS, CHANGES, RUNS = 5_003, 101, 4  # odd sizes: the last page is short and the halves differ
# The documented shape (half updates, half NEW ids) holds for an even `changes` only: with an odd
# one the next run's first "new" id is the previous run's last new id (base advances by
# changes // 2). The shared workload does the same; the benchmarks use 10,000.
SHAPE_CHANGES = 100


def _load_shared():
    spec = importlib.util.spec_from_file_location("shared_bench_workload", SHARED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _all_pages(module, page: int = 1000):
    return [list(module.pages(run, ROWS, CHANGES, page)) for run in range(RUNS)]


# sha256 of json.dumps(pages of runs 0..3 of the shared workload at ROWS/CHANGES, sort_keys=True),
# recorded from ../shared/bench/workload.py on 2026-11-22: checked even where shared/ is absent.
SHARED_DIGEST = "3de53dda046114c7f6bb3d7808d04a641958f0b4805d7617ae5abedd9e529ad5"


def test_rows_identical_to_the_shared_workload():
    digest = hashlib.sha256(json.dumps(_all_pages(ours), sort_keys=True).encode()).hexdigest()
    assert digest == SHARED_DIGEST
    if not SHARED.is_file():
        return  # the recorded digest above is the comparison
    shared = _load_shared()
    for page in (1000, 7):
        assert _all_pages(ours, page) == _all_pages(shared, page)
    assert ours.expected_table(RUNS, ROWS, CHANGES) == shared.expected_table(RUNS, ROWS, CHANGES)
    assert ours.EPOCH == shared.EPOCH and ours.STATUSES == shared.STATUSES


def test_shared_workload_found_when_the_shared_folder_exists():
    # guards the path itself: a moved repository must not silently skip the comparison above
    if (Path(__file__).resolve().parents[2] / "shared").is_dir():
        assert SHARED.is_file(), f"expected the shared workload at {SHARED}"


def test_workload_is_deterministic_and_has_the_documented_shape():
    CHANGES = SHAPE_CHANGES  # noqa: N806
    first = [list(ours.pages(run, ROWS, CHANGES)) for run in range(RUNS)]
    again = [list(ours.pages(run, ROWS, CHANGES)) for run in range(RUNS)]
    assert first == again
    run0 = [r for p in first[0] for r in p]
    assert [len(p) for p in first[0]] == [1000] * (ROWS // 1000) + [ROWS % 1000]
    assert [r["id"] for r in run0] == list(range(ROWS))
    assert set(run0[0]) == {"id", "customer_id", "status", "amount", "version", "updated_at"}
    assert run0[0]["updated_at"] == "2024-01-01T00:00:00Z"
    assert all(r["version"] == 0 for r in run0)

    known = set(range(ROWS))
    newest = max(r["updated_at"] for r in run0)  # same format and zone: text order = time order
    for run in range(1, RUNS):
        rows = [r for p in first[run] for r in p]
        assert len(rows) == CHANGES
        updates = [r for r in rows if r["id"] in known]
        assert len(updates) == CHANGES // 2
        assert len(rows) - len(updates) == CHANGES - CHANGES // 2
        assert all(r["version"] == run for r in rows)
        assert min(r["updated_at"] for r in rows) > newest  # strictly newer than any earlier run
        newest = max(r["updated_at"] for r in rows)
        known |= {r["id"] for r in rows}

    table = ours.expected_table(RUNS, ROWS, CHANGES)
    assert len(table) == ROWS + (RUNS - 1) * (CHANGES - CHANGES // 2)
