"""range_start / range_end x run kinds, property-based: the rows the cursor's filter keeps are
exactly the rows a window replace removes and writes, at every edge.

Hypothesis draws the bracket kinds (range_start open/closed, range_end open/closed), a run kind
(an incremental run, an `end_value` backfill, a partition range backfill), whether the cursor
has `step = "P1D"` (a sliced run), the disposition (append, upsert, delete-insert), a source of
rows whose cursor values sit on a half-day grid (so rows fall exactly on the range's start and
end), a second version of that source (rows changed, moved, deleted, added) and the range.

Each example loads the first version (an incremental run from before the grid, or a backfill of
every partition), then runs the drawn kind over the second version. After each run the table
equals a plain-Python model in which the filter keeps, for a range [S, E] with the drawn
brackets, `S <= t` (closed) or `S < t` (open) and `t < E` (open) or `t <= E` (closed), and a
window replace removes exactly the rows of the table that predicate holds for (a merge backfill
also the batch's keys elsewhere); an incremental run keeps `t > last_value`, or `t >= last_value`
without the keys already loaded at it (a changed row at last_value is not newer: dlt's dedup).
A partition's window is the partition's [start, end): a partition narrows the range to its window, start closed, end open, except that a window
starting at initial_value keeps the cursor's range_start.

Budget: DI_PROPERTY_EXAMPLES examples (default 4, the first Hypothesis's simplest) plus five fixed
edge cases that every run checks (EDGES): each bracket at a backfill's start and end, a partition
window at initial_value, an incremental run's last_value; e.g. DI_PROPERTY_EXAMPLES=40 for a
thorough run by hand.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import dagster as dg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attack_support import failure_text, table_exists
from catalogs import HADOOP_ONLY
from dagster_incremental import Incremental, incremental, incremental_asset

pytestmark = [pytest.mark.spark, HADOOP_ONLY]

EXAMPLES = int(os.environ.get("DI_PROPERTY_EXAMPLES", "4"))
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
HALF_DAY = 12 * 3600
DAYS = 7  # daily partitions base .. base + 6 days, all closed (they end by today 00:00 UTC)
GRID = 2 * DAYS  # cursor values base + k * 12h, k in 0..13
DISPOSITIONS = {
    "append": "append",
    "upsert": {"disposition": "merge", "strategy": "upsert"},
    "delete_insert": {"disposition": "merge", "strategy": "delete-insert"},
}


def _base() -> datetime:
    """Seven days before today 00:00 UTC: the grid ends before now, so an incremental run in
    daily slices has a few slices, and every partition is closed (a backfill)."""
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=DAYS)


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Example:
    range_start: str
    range_end: str
    kind: str  # "incremental" | "end_value" | "partition"
    sliced: bool
    disposition: str
    first: tuple[tuple[int, int, str], ...]  # (id, grid index, value)
    second: tuple[tuple[int, int, str], ...]
    bounds: tuple[int, int]  # end_value: grid indexes of S < E; partition: first and last day


@st.composite
def _examples(draw) -> Example:
    first = tuple((i, draw(st.integers(0, GRID - 1)), "v1") for i in range(1, draw(st.integers(2, 7)) + 1))
    second = []
    for i, k, _ in first:
        change = draw(st.sampled_from(["same", "changed", "moved", "deleted"]))
        if change == "same":
            second.append((i, k, "v1"))
        elif change == "changed":
            second.append((i, k, "v2"))
        elif change == "moved":
            second.append((i, draw(st.integers(0, GRID - 1)), "v2"))
    for i in range(len(first) + 1, len(first) + 1 + draw(st.integers(0, 3))):
        second.append((i, draw(st.integers(0, GRID - 1)), "new"))
    kind = draw(st.sampled_from(["incremental", "end_value", "partition"]))
    if kind == "partition":
        a = draw(st.integers(0, DAYS - 1))
        bounds = (a, draw(st.integers(a, DAYS - 1)))
    else:
        s = draw(st.integers(0, GRID - 1))
        bounds = (s, draw(st.integers(s + 1, GRID)))
    return Example(
        range_start=draw(st.sampled_from(["closed", "open"])),
        range_end=draw(st.sampled_from(["open", "closed"])),
        kind=kind,
        sliced=draw(st.booleans()),
        disposition=draw(st.sampled_from(sorted(DISPOSITIONS))),
        first=first,
        second=tuple(second),
        bounds=bounds,
    )


# -- the model -------------------------------------------------------------------------------------


def _kept(t: int, start: int | None, start_open: bool, end: int | None, end_closed: bool) -> bool:
    """The range [start, end) with the cursor's brackets (None: unbounded)."""
    if start is not None and (t <= start if start_open else t < start):
        return False
    return end is None or (t <= end if end_closed else t < end)


class Model:
    """The table as (id, cursor seconds, value) rows, and the live cursor."""

    def __init__(self, ex: Example, base: int, initial: int):
        self.ex, self.base, self.initial = ex, base, initial
        self.rows: list[tuple[int, int, str]] = []
        self.last: int | None = None
        self.boundary: set[int] = set()  # the keys loaded at `last`
        self.merge = ex.disposition != "append"

    def source(self, version) -> list[tuple[int, int, str]]:
        return [(i, self.base + k * HALF_DAY, v) for i, k, v in version]

    def incremental(self, version) -> None:
        if self.last is None:  # the first run starts at initial_value
            kept = [r for r in self.source(version) if _kept(r[1], self.initial, self.ex.range_start == "open", None, False)]
        elif self.ex.range_start == "open":
            kept = [r for r in self.source(version) if r[1] > self.last]
        else:  # closed: a key loaded at last_value already is left out there (dedup by primary
            # key, as dlt; a newer version has a newer cursor: cursor/decide.py)
            kept = [r for r in self.source(version) if r[1] > self.last or (r[1] == self.last and r[0] not in self.boundary)]
        self._write(kept, window=None)
        if kept:
            newest = max(r[1] for r in kept)
            if self.last is None or newest > self.last:
                self.last, self.boundary = newest, set()
            self.boundary |= {r[0] for r in kept if r[1] == self.last}

    def backfill(self, version, start: int, start_open: bool, end: int, end_closed: bool) -> None:
        window = (start, start_open, end, end_closed)
        self._write([r for r in self.source(version) if _kept(r[1], *window)], window)

    def partitions(self, version, first_day: int, last_day: int) -> None:
        """A range of partitions: one window per day, each narrowed as the cursor's range."""
        for day in range(first_day, last_day + 1):
            start, end = self.base + day * 2 * HALF_DAY, self.base + (day + 1) * 2 * HALF_DAY
            start_open = self.ex.range_start == "open" and start == self.initial  # else the window's start
            self.backfill(version, start, start_open, end, False)

    def _write(self, kept: list[tuple[int, int, str]], window: tuple | None) -> None:
        keys = {r[0] for r in kept}
        rows = self.rows
        if window is not None:
            rows = [r for r in rows if not _kept(r[1], *window)]  # the window replaced
        if self.merge:
            rows = [r for r in rows if r[0] not in keys]  # the batch's keys, wherever they were
        self.rows = rows + kept

    def table(self) -> list[tuple[int, int, str]]:
        return sorted(self.rows)


def _table(spark, io, name: str) -> list[tuple[int, int, str]]:
    if not table_exists(spark, io, name):
        return []
    frame = spark.table(io.table_name(dg.AssetKey(name)).sql).selectExpr("id", "CAST(unix_timestamp(ts) AS INT) AS t", "v")
    return sorted(tuple(r) for r in frame.collect())


# -- the property ----------------------------------------------------------------------------------


def check_example(spark, instance, io, config_file, ex: Example) -> None:
    base_dt = _base()
    base = int(base_dt.timestamp())
    partitioned = ex.kind == "partition"
    initial = base if partitioned else base - 2 * HALF_DAY  # a partitioned cursor starts at its first window
    name = f"range_{ex.kind}_{uuid.uuid4().hex[:8]}"
    model = Model(ex, base, initial)
    served: list[Any] = []

    options = {"range_start": ex.range_start, "range_end": ex.range_end, "step": "P1D" if ex.sliced else None}
    parts = dg.DailyPartitionsDefinition(start_date=base_dt.strftime("%Y-%m-%d"),
                                         end_date=(base_dt + timedelta(days=DAYS)).strftime("%Y-%m-%d"))

    @incremental_asset(name=name, primary_key="id", write_disposition=DISPOSITIONS[ex.disposition],
                       partitions_def=parts if partitioned else None, config_path=config_file)
    def asset(ts: Incremental = incremental("ts", initial_value=_iso(initial), **options)):
        return [{"id": i, "ts": _iso(t), "v": v} for i, t, v in model.source(served[-1])]

    def run(version, **kwargs) -> dg.ExecuteInProcessResult:
        served.append(version)
        result = dg.materialize([asset], instance=instance, resources={"io_manager": io},
                                raise_on_error=False, **{"run_config": QUIET, **kwargs})
        assert result.success, f"{ex}: {failure_text(result)}"
        return result

    def day(d: int) -> str:
        return (base_dt + timedelta(days=d)).strftime("%Y-%m-%d")

    # 1. the first version: an incremental run from before the grid, or every partition
    if partitioned:
        run(ex.first, tags={"dagster/asset_partition_range_start": day(0), "dagster/asset_partition_range_end": day(DAYS - 1)})
        model.partitions(ex.first, 0, DAYS - 1)
    else:
        run(ex.first)
        model.incremental(ex.first)
    assert _table(spark, io, name) == model.table(), f"{ex}: after the first load"

    # 2. the drawn run over the second version
    if ex.kind == "incremental":
        result = run(ex.second)
        model.incremental(ex.second)
        state = result.get_asset_materialization_events()[-1].materialization.metadata["dagster_incremental/state"].value
        assert state.get("last_value") == (_iso(model.last) if model.last is not None else None), f"{ex}: the cursor"
    elif ex.kind == "end_value":
        s, e = (base + k * HALF_DAY for k in ex.bounds)
        ops = {"ops": {name: {"config": {"initial_value": _iso(s), "end_value": _iso(e)}}}}
        run(ex.second, run_config={**QUIET, **ops})
        model.backfill(ex.second, s, ex.range_start == "open", e, ex.range_end == "closed")
    else:
        first_day, last_day = ex.bounds
        run(ex.second, tags={"dagster/asset_partition_range_start": day(first_day),
                             "dagster/asset_partition_range_end": day(last_day)})
        model.partitions(ex.second, first_day, last_day)
    assert _table(spark, io, name) == model.table(), f"{ex}: after the {ex.kind} run"


# Edges every run checks, whatever Hypothesis draws: rows exactly at a backfill's start and end
# (in and out of each bracket), at a partition window starting at initial_value with an open
# start, and at an incremental run's last_value, changed and unchanged.
EDGES = [
    Example("open", "closed", "end_value", True, "upsert", ((1, 2, "v1"), (2, 6, "v1"), (3, 4, "v1")),
            ((1, 2, "v2"), (2, 6, "v2"), (3, 4, "v2")), (2, 6)),
    Example("closed", "open", "end_value", False, "append", ((1, 2, "v1"), (2, 6, "v1")),
            ((1, 2, "v2"), (2, 6, "v2")), (2, 6)),
    Example("open", "closed", "partition", True, "delete_insert", ((1, 0, "v1"), (2, 2, "v1"), (3, 1, "v1")),
            ((1, 0, "v2"), (2, 2, "v2"), (3, 1, "v2")), (0, 1)),
    Example("closed", "closed", "incremental", False, "upsert", ((1, 3, "v1"), (2, 5, "v1")),
            ((1, 3, "v2"), (2, 5, "v2"), (3, 5, "new"), (4, 9, "new")), (0, 1)),
    Example("open", "open", "incremental", True, "append", ((1, 3, "v1"), (2, 5, "v1")),
            ((1, 3, "v1"), (2, 5, "v2"), (3, 5, "new"), (4, 9, "new")), (0, 1)),
]


@pytest.mark.parametrize("ex", EDGES, ids=[f"{e.kind}_{e.range_start}_{e.range_end}{'_sliced' if e.sliced else ''}" for e in EDGES])
def test_the_edges_of_each_run_kind(spark, instance, io_manager, config_file, ex):
    check_example(spark, instance, io_manager, config_file, ex)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ex=_examples())
def test_a_window_replace_covers_exactly_what_the_filter_keeps(spark, instance, io_manager, config_file, ex):
    check_example(spark, instance, io_manager, config_file, ex)
