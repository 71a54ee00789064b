"""The cursor engine over every input kind: kept rows and state across consecutive runs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pendulum
import pyarrow as pa
import pytest
from inputs import KINDS, canonical, kind_params, result_kind_ok, to_kind

from dagster_incremental.cursor import boundary as boundary_mod
from dagster_incremental.errors import (
    CursorPathMissing,
    CursorStateMismatch,
    CursorTypeError,
    CursorValueNone,
    IncrementalConfigError,
    PrimaryKeyMissing,
)
from dagster_incremental.cursor.run import IncrementalRun
from dagster_incremental.cursor.spec import Incremental, incremental

LOCAL = ("dicts", "pages", "arrow", "pandas")


@pytest.fixture(params=kind_params())
def kind(request):
    return request.param


@pytest.fixture
def convert(kind, request):
    """rows -> the input kind under test (the Spark kind uses the one shared session)."""
    spark = request.getfixturevalue("spark") if kind == "spark" else None

    def _convert(rows, schema=None):
        return to_kind(rows, kind, spark, schema)

    return _convert


def run_filter(run: IncrementalRun, rows, convert, kind=None):
    out = run.filter(convert(rows))
    if kind is not None:
        assert result_kind_ok(out, kind)
    return canonical(out)


def ids(rows):
    return sorted(r["id"] for r in rows)


def rows_of(values, start_id=0, col="ts"):
    return [{"id": start_id + i, col: v} for i, v in enumerate(values)]


# ---------------------------------------------------------------------------------------------
# consecutive runs, state, boundary dedup
# ---------------------------------------------------------------------------------------------


def test_consecutive_runs_carry_state(kind, convert):
    spec = incremental("ts", initial_value=3, primary_key="id")
    run1 = spec.bind(None)
    assert (run1.start_value, run1.last_value, run1.is_backfill) == (3, 3, False)
    kept = run_filter(run1, rows_of([1, 3, 3, 5, 5, 2]), convert, kind)
    assert ids(kept) == [1, 2, 3, 4]
    assert run1.last_value == 5
    state1 = run1.state
    assert json.loads(json.dumps(state1)) == state1
    assert state1["last_value"] == 5 and state1["start_value"] == 3 and state1["initial_value"] == 3
    assert state1["boundary"] == {"value": 5, "keys": [3, 4], "overflow": False}

    run2 = spec.bind(state1)
    assert (run2.start_value, run2.last_value) == (5, 5)
    # id 3/4 at 5 were loaded; id 9 at 5 is new; id 3 at 6 is a newer version of a boundary key
    kept = run_filter(
        run2, [{"id": 3, "ts": 5}, {"id": 9, "ts": 5}, {"id": 4, "ts": 5}, {"id": 3, "ts": 6}], convert
    )
    assert kept == [{"id": 3, "ts": 6}, {"id": 9, "ts": 5}]
    assert run2.state["last_value"] == 6 and run2.state["boundary"]["keys"] == [3]

    run3 = spec.bind(run2.state)
    kept = run_filter(run3, [{"id": 3, "ts": 6}, {"id": 4, "ts": 4}, {"id": 7, "ts": 7}], convert)
    assert kept == [{"id": 7, "ts": 7}]
    assert run3.state["last_value"] == 7


def test_newer_version_of_boundary_key_is_never_dropped(kind, convert):
    """dlt's Arrow path (INC-56) drops c@5 because c@3 was deduped; we remove by (cursor==start AND key)."""
    spec = incremental("ts", initial_value=0, primary_key="pk")
    run1 = spec.bind()
    run_filter(run1, [{"pk": "c", "ts": 3}], convert)
    run2 = spec.bind(run1.state)
    kept = run_filter(run2, [{"pk": "c", "ts": 3}, {"pk": "c", "ts": 5}, {"pk": "d", "ts": 4}], convert)
    assert kept == [{"pk": "c", "ts": 5}, {"pk": "d", "ts": 4}]


def test_boundary_dedup_by_content(kind, convert):
    t = "2024-01-01T10:00:00Z"
    spec = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")
    run1 = spec.bind()
    first = [{"id": 1, "updated_at": t, "v": "a"}, {"id": 2, "updated_at": t, "v": "b"}]
    assert len(run_filter(run1, first, convert)) == 2
    assert run1.state["dedup_key"] == "content" and len(run1.state["boundary"]["keys"]) == 2
    run2 = spec.bind(run1.state)
    again = [{"id": 1, "updated_at": t, "v": "a"}, {"id": 2, "updated_at": t, "v": "changed"}]
    kept = run_filter(run2, again, convert)
    assert kept == [{"id": 2, "updated_at": t, "v": "changed"}]
    # the max did not move: the boundary is the old set plus the kept row at that value
    assert len(run2.state["boundary"]["keys"]) == 3
    run3 = spec.bind(run2.state)
    assert run_filter(run3, first + again, convert) == []


def test_content_keys_are_identical_across_kinds(kind, convert):
    rows = [
        {"id": 1, "ts": dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc), "amount": 1.5, "note": None},
        {"id": 2, "ts": dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc), "amount": 2.0, "note": "x"},
    ]
    spec = incremental("ts")
    ref = spec.bind()
    ref.filter([dict(r) for r in rows])
    run = spec.bind()
    run_filter(run, rows, convert)
    assert run.state == ref.state


def test_nested_rows_give_identical_keys_across_kinds(kind, convert):
    utc = dt.timezone.utc
    rows = [
        {"id": 1, "meta": {"ts": dt.datetime(2024, 1, 1, 10, tzinfo=utc), "tags": ["a"]}, "m": 1.5},
        {"id": 2, "meta": {"ts": dt.datetime(2024, 1, 1, 11, tzinfo=utc), "tags": []}, "m": None},
    ]
    spec = incremental("meta.ts", initial_value="2024-01-01T10:00:00Z")
    ref = spec.bind()
    ref.filter([dict(r) for r in rows])
    run = spec.bind()
    assert len(run_filter(run, rows, convert)) == 2
    assert run.state == ref.state
    again = spec.bind(run.state)
    assert run_filter(again, rows, convert) == []  # 11:00 deduped by content, 10:00 below start


def test_inherited_primary_key_and_precedence():
    rows = [{"id": 1, "ts": 5, "v": "a"}]
    spec = incremental("ts", initial_value=0)
    assert spec.bind(inherited_primary_key="id").state["dedup_key"] == ["id"]
    assert spec.bind(inherited_primary_key=["id", "v"]).state["dedup_key"] == ["id", "v"]
    assert spec.bind().state["dedup_key"] == "content"
    assert spec.bind(inherited_primary_key=[]).state["dedup_key"] == "content"
    explicit = spec.replace(primary_key="v")
    assert explicit.bind(inherited_primary_key="id").state["dedup_key"] == ["v"]
    run = spec.bind(inherited_primary_key="id")
    run.filter(rows)
    assert run.state["boundary"]["keys"] == [1]
    run2 = spec.bind(run.state, inherited_primary_key="id")
    assert run2.filter([{"id": 1, "ts": 5, "v": "changed"}]) == []


@pytest.mark.parametrize("k", LOCAL)
def test_primary_key_empty_disables_dedup(k):
    spec = incremental("ts", initial_value=0, primary_key=())
    run1 = spec.bind()
    run1.filter(to_kind(rows_of([5, 5]), k))
    assert run1.state["dedup_key"] == [] and run1.state["boundary"] is None
    run2 = spec.bind(run1.state)
    assert ids(canonical(run2.filter(to_kind(rows_of([5, 5]), k)))) == [0, 1]


@pytest.mark.parametrize("k", ["dicts", "arrow", "pandas"])
def test_primary_key_missing(k):
    run = incremental("ts", primary_key="nope").bind()
    with pytest.raises(PrimaryKeyMissing, match="nope"):
        run.filter(to_kind(rows_of([1, 2]), k))


@pytest.mark.spark
def test_primary_key_missing_spark(spark):
    run = incremental("ts", primary_key="nope").bind()
    with pytest.raises(PrimaryKeyMissing, match="nope"):
        run.filter(to_kind(rows_of([1, 2]), "spark", spark))


def test_bounded_boundary_state_never_loses_rows(kind, convert):
    n = 5000
    spec = incremental("ts", initial_value=0, primary_key="id")
    run1 = spec.bind()
    kept = run_filter(run1, rows_of([7] * n), convert)
    assert len(kept) == n
    state = run1.state
    assert state["boundary"] == {"value": 7, "keys": [], "overflow": True}
    assert len(json.dumps(state)) < 1000
    assert run1.boundary_unverified is False

    run2 = spec.bind(state)
    assert run2.boundary_unverified is True and run2.boundary_value == 7
    # every row at the start value is kept (the writer anti-joins them); nothing is lost
    kept = run_filter(run2, rows_of([7] * n + [8, 8]), convert)
    assert len(kept) == n + 2
    assert run2.state["boundary"] == {"value": 8, "keys": [n, n + 1], "overflow": False}
    run3 = spec.bind(run2.state)
    assert run3.boundary_unverified is False
    assert ids(run_filter(run3, rows_of([8, 8, 8], start_id=n - 1), convert)) == [n - 1]


def test_overflow_accumulates_when_max_does_not_move(monkeypatch):
    monkeypatch.setattr(boundary_mod, "BOUNDARY_KEY_LIMIT", 3)
    spec = incremental("ts", initial_value=0, primary_key="id")
    run1 = spec.bind()
    run1.filter(rows_of([5, 5]))
    assert run1.state["boundary"]["keys"] == [0, 1]
    run2 = spec.bind(run1.state)
    assert ids(run2.filter(rows_of([5, 5, 5, 5]))) == [2, 3]  # 0 and 1 deduped; 2 and 3 new
    assert run2.state["boundary"] == {"value": 5, "keys": [], "overflow": True}  # 4 keys > 3
    run3 = spec.bind(run2.state)
    assert run3.boundary_unverified
    assert ids(run3.filter(rows_of([5, 5]))) == [0, 1]
    assert run3.state["boundary"]["overflow"] is True


def test_dedup_key_change_drops_boundary_keys():
    spec = incremental("ts", initial_value=0, primary_key="id")
    run1 = spec.bind()
    run1.filter(rows_of([5, 5]))
    changed = spec.replace(primary_key=("id", "ts"))
    run2 = changed.bind(run1.state)
    assert run2.boundary_unverified and run2.boundary_value == 5
    assert ids(run2.filter(rows_of([5, 5]))) == [0, 1]


# ---------------------------------------------------------------------------------------------
# end_value: stateless backfills
# ---------------------------------------------------------------------------------------------


def test_end_value_chunks_in_any_order_leave_state_alone(kind, convert):
    history = rows_of(list(range(0, 30)))
    live = incremental("ts", initial_value=0, primary_key="id").bind()
    live.filter([dict(r) for r in history[:20]])
    stored = live.state
    seen: list[dict] = []
    for lo, hi in [(20, 30), (0, 10), (10, 20)]:
        run = incremental("ts", initial_value=lo, end_value=hi, primary_key="id").bind(stored)
        assert run.is_backfill and (run.start_value, run.end_value) == (lo, hi)
        seen += run_filter(run, history, convert)
        assert run.state == stored
    assert sorted(r["id"] for r in seen) == list(range(30))  # [a,b) chunks never overlap
    run = incremental("ts", initial_value=0, end_value=5).bind(None)
    run_filter(run, history, convert)
    assert run.state is None


def test_backfill_ignores_lag_and_dedup():
    spec = incremental("ts", initial_value=5, end_value=8, lag=3, primary_key="id")
    live = incremental("ts", initial_value=0, primary_key="id").bind()
    live.filter(rows_of([5, 5]))
    run = spec.bind(live.state)
    assert run.start_value == 5
    assert ids(run.filter(rows_of([4, 5, 5, 7, 8]))) == [1, 2, 3]


# ---------------------------------------------------------------------------------------------
# range_start / range_end: dlt's table (reference section 2.6)
# ---------------------------------------------------------------------------------------------

RANGE_CASES = [
    (dict(initial_value=5), list(range(5, 12))),
    (dict(initial_value=5, range_start="open"), list(range(6, 12))),
    (dict(initial_value=5, last_value_func="min"), list(range(1, 6))),
    (dict(initial_value=5, last_value_func="min", range_start="open"), list(range(1, 5))),
    (dict(initial_value=5, end_value=10), list(range(5, 10))),
    (dict(initial_value=5, end_value=10, range_end="closed"), list(range(5, 11))),
    (dict(initial_value=10, end_value=5, last_value_func="min"), list(range(6, 11))),
    (dict(initial_value=10, end_value=5, last_value_func="min", range_end="closed"), list(range(5, 11))),
]


@pytest.mark.parametrize("args, expected", RANGE_CASES)
def test_range_table(kind, convert, args, expected):
    run = incremental("ts", primary_key="id", **args).bind()
    kept = run_filter(run, rows_of(list(range(11, 0, -1))), convert)
    assert sorted(r["ts"] for r in kept) == expected


@pytest.mark.parametrize("k", KINDS[:4])
def test_repeated_values_open_and_closed(k):
    data = rows_of([0, 0, 1, 1, 1, 1, 2, 2])
    open_ = incremental("ts", initial_value=0, range_start="open").bind()
    assert [r["ts"] for r in canonical(open_.filter(to_kind(data, k)))] == [1, 1, 1, 1, 2, 2]
    assert open_.state["boundary"] is None  # open start disables dedup
    closed = incremental("ts", initial_value=0).bind()
    assert len(canonical(closed.filter(to_kind(data, k)))) == 8
    ones = incremental("ts", initial_value=1, range_start="open").bind()
    assert canonical(ones.filter(to_kind(rows_of([1, 1, 1, 1]), k))) == []


def test_open_start_next_run_excludes_last_value():
    spec = incremental("ts", initial_value=0, range_start="open")
    run1 = spec.bind()
    run1.filter(rows_of([1, 2, 2]))
    run2 = spec.bind(run1.state)
    assert [r["ts"] for r in run2.filter(rows_of([2, 2, 3]))] == [3]


# ---------------------------------------------------------------------------------------------
# row_order: early stop on endless sources
# ---------------------------------------------------------------------------------------------


def _pages(start, step, k, pulled):
    """Endless pages of 10 values from `start` going by `step`, as kind `k`."""
    import itertools

    for p in itertools.count():
        pulled.append(p)
        values = [start + step * (p * 10 + i) for i in range(10)]
        yield to_kind(rows_of(values, start_id=p * 10), k)


@pytest.mark.parametrize("k", ["pages", "arrow", "pandas"])
def test_row_order_desc_stops_on_endless_generator(k):
    pulled: list[int] = []
    run = incremental("ts", initial_value=10, row_order="desc").bind()
    out = [r for batch in run.filter_batches(_pages(48, -1, k, pulled)) for r in canonical(batch)]
    assert sorted(r["ts"] for r in out) == list(range(10, 49))
    assert pulled == [0, 1, 2, 3] and run.can_close()


@pytest.mark.parametrize("k", ["pages", "arrow", "pandas"])
def test_row_order_asc_stops_on_endless_generator(k):
    pulled: list[int] = []
    run = incremental("ts", initial_value=22, end_value=45, row_order="asc").bind()
    out = [r for batch in run.filter_batches(_pages(22, 1, k, pulled)) for r in canonical(batch)]
    assert sorted(r["ts"] for r in out) == list(range(22, 45))
    assert pulled == [0, 1, 2] and run.can_close()


@pytest.mark.parametrize("k", ["pages", "arrow", "pandas"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_filter_pulls_an_endless_generator_lazily_and_stops(k, order):
    """filter() itself (not only filter_batches) stops pulling once row_order says so."""
    pulled: list[int] = []
    if order == "asc":
        run = incremental("ts", initial_value=22, end_value=45, row_order="asc").bind()
        out, expected = run.filter(_pages(22, 1, k, pulled)), list(range(22, 45))
    else:
        run = incremental("ts", initial_value=10, row_order="desc").bind()
        out, expected = run.filter(_pages(48, -1, k, pulled)), list(range(10, 49))
    assert sorted(r["ts"] for r in canonical(out)) == expected
    assert len(pulled) <= 4 and run.can_close()
    assert result_kind_ok(out, "dicts" if k == "pages" else k)


def test_filter_of_endless_single_rows_stops_after_one_chunk():
    import itertools

    pulled = []

    def rows():
        for i in itertools.count():
            pulled.append(i)
            yield {"id": i, "ts": i}

    run = incremental("ts", initial_value=0, end_value=50, row_order="asc").bind()
    assert [r["ts"] for r in run.filter(rows())] == list(range(50))
    assert len(pulled) <= 1000


def test_row_order_with_min_and_single_dict_rows():
    import itertools

    pulled = []

    def rows():  # endless single dict rows going down
        for i in itertools.count():
            pulled.append(i)
            yield {"id": i, "ts": 100 - i}

    run = incremental("ts", initial_value=100, end_value=50, last_value_func="min", row_order="asc").bind()
    out = [r for batch in run.filter_batches(rows()) for r in batch]
    assert [r["ts"] for r in out] == list(range(100, 50, -1))
    assert len(pulled) <= 1000  # one chunk of single rows at most


def test_row_order_desc_stops_at_deduped_start_and_open_start():
    spec = incremental("ts", initial_value=0, row_order="desc", primary_key="id")
    run1 = spec.bind()
    run1.filter(rows_of([5]))
    run2 = spec.bind(run1.state)
    pulled = []

    def pages():
        pulled.append(1)
        yield rows_of([7, 6])
        pulled.append(2)
        yield rows_of([5])  # the deduped boundary row: nothing below can be new
        pulled.append(3)
        yield rows_of([4])

    assert [r["ts"] for b in run2.filter_batches(pages()) for r in b] == [7, 6]
    assert pulled == [1, 2]
    opened = incremental("ts", initial_value=5, row_order="desc", range_start="open").bind()
    pulled.clear()
    assert [r["ts"] for b in opened.filter_batches(pages()) for r in b] == [7, 6]
    assert pulled == [1, 2]


def test_without_row_order_everything_is_pulled():
    run = incremental("ts", initial_value=5).bind()
    batches = list(run.filter_batches([rows_of([9]), rows_of([1]), rows_of([7])]))
    assert [r["ts"] for b in batches for r in b] == [9, 7] and not run.can_close()


# ---------------------------------------------------------------------------------------------
# lag
# ---------------------------------------------------------------------------------------------


def test_lag_ints(kind, convert):
    spec = incremental("ts", initial_value=2, lag=3, primary_key="id")
    run1 = spec.bind()
    run_filter(run1, rows_of(list(range(0, 11))), convert)
    assert run1.state["last_value"] == 10 and run1.state["boundary"] is None
    run2 = spec.bind(run1.state)
    assert run2.start_value == 7
    kept = run_filter(run2, rows_of(list(range(5, 13))), convert)
    assert sorted(r["ts"] for r in kept) == list(range(7, 13))  # re-read window [7, 10]
    run3 = spec.bind(run2.state)
    assert run3.start_value == 9
    run_filter(run3, rows_of([9, 10]), convert)
    assert run3.state["last_value"] == 12  # never moves backwards
    floor = spec.replace(lag=100).bind(run2.state)
    assert floor.start_value == 2  # never below initial_value


def test_lag_iso_strings_with_offsets(kind, convert):
    spec = incremental("ts", initial_value="2024-01-01T00:00:00Z", lag=3600)
    run1 = spec.bind()
    run_filter(run1, [{"ts": "2024-01-01T12:00:00+02:00"}], convert)
    assert run1.state["last_value"] == "2024-01-01T10:00:00Z"
    run2 = spec.bind(run1.state)
    assert run2.start_value == pendulum.datetime(2024, 1, 1, 9)
    rows = [
        {"ts": "2024-01-01T10:30:00+02:00"},
        {"ts": "2024-01-01T09:30:00+00:00"},
        {"ts": "2024-01-01T05:00:00-05:00"},
    ]
    kept = run_filter(run2, rows, convert)
    assert sorted(r["ts"] for r in kept) == ["2024-01-01T05:00:00-05:00", "2024-01-01T09:30:00+00:00"]
    assert run2.state["last_value"] == "2024-01-01T10:00:00Z"


def test_lag_dates(kind, convert):
    spec = incremental("day", initial_value=dt.date(2024, 1, 1), lag=2)
    run1 = spec.bind()
    run_filter(run1, [{"day": dt.date(2024, 1, d)} for d in (1, 5, 10)], convert)
    assert run1.state["last_value"] == "2024-01-10" and run1.state["cursor_type"] == "date"
    run2 = spec.bind(run1.state)
    assert run2.start_value == pendulum.date(2024, 1, 8) and isinstance(run2.start_value, pendulum.Date)
    kept = run_filter(run2, [{"day": dt.date(2024, 1, d)} for d in (7, 8, 9, 11)], convert)
    assert len(kept) == 3 and run2.state["last_value"] == "2024-01-11"


def test_lag_as_an_iso_duration(kind, convert):
    """lag = "P1D" is one day behind last_value, as lag=86400 is; "P1M" one calendar month (the
    day clamped to the month's end); never below initial_value; the state never moves back."""
    spec = incremental("ts", initial_value="2024-01-01T00:00:00Z", lag="P1D", primary_key="id")
    run1 = spec.bind()
    run_filter(run1, [{"id": 1, "ts": "2024-03-31T12:00:00Z"}], convert)
    run2 = spec.bind(run1.state)
    assert run2.start_value == pendulum.datetime(2024, 3, 30, 12)
    assert run2.start_value == spec.replace(lag=86400).bind(run1.state).start_value
    kept = run_filter(run2, [{"id": 1, "ts": "2024-03-31T12:00:00Z"}, {"id": 2, "ts": "2024-03-30T11:00:00Z"},
                             {"id": 3, "ts": "2024-03-30T13:00:00Z"}], convert)
    assert sorted(r["id"] for r in kept) == [1, 3] and run2.state["last_value"] == "2024-03-31T12:00:00Z"
    assert spec.replace(lag="P1M").bind(run1.state).start_value == pendulum.datetime(2024, 2, 29, 12)
    assert spec.replace(lag="P1Y").bind(run1.state).start_value == pendulum.datetime(2024, 1, 1)  # the floor
    day = incremental("day", initial_value=dt.date(2024, 1, 1), lag="P1W").bind({"last_value": "2024-03-10",
                                                                                  "cursor_type": "date"})
    assert day.start_value == pendulum.date(2024, 3, 3)


def test_an_iso_lag_going_down_moves_forward():
    run = incremental("ts", initial_value="2025-01-01T00:00:00Z", last_value_func="min", lag="P1M").bind(
        {"last_value": "2024-01-31T00:00:00Z"})
    assert run.start_value == pendulum.datetime(2024, 2, 29)


@pytest.mark.parametrize(("kwargs", "rows", "match"), [
    (dict(initial_value=0), None, "lag='P1D' on cursor 'ts': an ISO-8601 duration needs a date or timestamp"),
    (dict(initial_value=dt.date(2024, 1, 1)), None, "lag='PT6H' on cursor 'ts': a date cursor moves in whole days"),
    (dict(), [{"ts": 5}], r"lag='P1D' on cursor 'ts' \(first value 5 in row 0\): an ISO-8601 duration needs"),
    (dict(lag="1 day"), None, "lag='1 day' is not valid: give a number >= 0"),
])
def test_an_iso_lag_that_does_not_fit_the_cursor(kwargs, rows, match):
    lag = kwargs.pop("lag", "PT6H" if isinstance(kwargs.get("initial_value"), dt.date) else "P1D")
    with pytest.raises(IncrementalConfigError, match=match):
        run = incremental("ts", lag=lag, **kwargs).bind()
        run.filter(rows)


def test_lag_with_zero_last_value_is_not_falsy():
    spec = incremental("ts", initial_value=-10, lag=2)
    run1 = spec.bind()
    run1.filter(rows_of([0]))
    assert run1.state["last_value"] == 0
    run2 = spec.bind(run1.state)
    assert run2.start_value == -2
    run2.filter(rows_of([-1]))
    assert run2.state["last_value"] == 0


# ---------------------------------------------------------------------------------------------
# missing / None cursors
# ---------------------------------------------------------------------------------------------

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


def test_none_cursor_raise(kind, convert):
    run = incremental("ts", initial_value=0).bind()
    with pytest.raises(CursorValueNone, match="'ts'") as e:
        run.filter(convert([{"id": 1, "ts": 3}, {"id": 2, "ts": None}], SCHEMA))
    assert ("Spark frame" if kind == "spark" else "in row 1") in str(e.value)  # no key: where it is


@pytest.mark.parametrize("policy, expected", [("include", [1, 2, 3]), ("exclude", [1, 3])])
def test_none_cursor_include_exclude(kind, convert, policy, expected):
    spec = incremental("ts", initial_value=0, on_cursor_value_missing=policy)
    run = spec.bind()
    kept = run_filter(run, [{"id": 1, "ts": 3}, {"id": 2, "ts": None}, {"id": 3, "ts": 1}], convert)
    assert ids(kept) == expected
    assert run.state["last_value"] == 3  # a NULL never moves last_value
    run2 = spec.bind(run.state)
    assert ids(run_filter(run2, [{"id": 4, "ts": None}], convert, kind)) == (
        [4] if policy == "include" else []
    )
    assert run2.state["last_value"] == 3


def test_missing_cursor_in_dict_rows():
    rows = [{"id": 1, "ts": 3}, {"id": 2}, {"id": 3, "ts": None}]
    with pytest.raises(CursorPathMissing, match=r"'ts' is missing in row 1\. "):
        incremental("ts").bind().filter(rows)
    with pytest.raises(CursorValueNone, match="row 0"):
        incremental("ts").bind().filter(rows[2:])
    assert ids(incremental("ts", on_cursor_value_missing="include").bind().filter(rows)) == [1, 2, 3]
    assert ids(incremental("ts", on_cursor_value_missing="exclude").bind().filter(rows)) == [1]


@pytest.mark.parametrize("policy, expected", [("include", [1, 2]), ("exclude", [])])
def test_missing_column_counts_as_missing_for_every_row(kind, convert, policy, expected):
    rows = [{"id": 1, "other": 3}, {"id": 2, "other": 4}]
    with pytest.raises(CursorPathMissing, match="ts"):
        incremental("ts").bind().filter(convert(rows))
    run = incremental("ts", initial_value=0, on_cursor_value_missing=policy).bind()
    assert ids(run_filter(run, rows, convert)) == expected
    assert run.state["last_value"] == 0


# ---------------------------------------------------------------------------------------------
# typed comparison
# ---------------------------------------------------------------------------------------------


def test_mixed_offset_iso_strings(kind, convert):
    """dlt compares these as text and keeps 11:00+02:00 (09:00Z) while dropping 09:30Z."""
    spec = incremental("ts", initial_value="2024-01-01T10:00:00+00:00")
    run = spec.bind()
    rows = [
        {"id": 1, "ts": "2024-01-01T11:00:00+02:00"},  # 09:00Z: before
        {"id": 2, "ts": "2024-01-01T09:30:00Z"},  # before
        {"id": 3, "ts": "2024-01-01T06:00:00-05:00"},  # 11:00Z: after
        {"id": 4, "ts": "2024-01-01T10:00:00"},  # naive = UTC: at the start
    ]
    assert ids(run_filter(run, rows, convert)) == [3, 4]
    assert run.state["last_value"] == "2024-01-01T11:00:00Z"
    assert run.last_value == pendulum.datetime(2024, 1, 1, 11)
    assert isinstance(run.start_value, pendulum.DateTime)


def test_datetime_values_any_zone(kind, convert):
    paris = pendulum.timezone("Europe/Paris")
    spec = incremental("ts", initial_value=dt.datetime(2024, 1, 1, 10))  # naive = UTC
    rows = [
        {"id": 1, "ts": dt.datetime(2024, 1, 1, 10, 30, tzinfo=paris)},  # 09:30Z
        {"id": 2, "ts": dt.datetime(2024, 1, 1, 11, 30, tzinfo=paris)},  # 10:30Z
    ]
    run = spec.bind()
    assert ids(run_filter(run, rows, convert)) == [2]
    assert run.state["last_value"] == "2024-01-01T10:30:00Z"


def test_incomparable_int_row_with_datetime_cursor():
    run = incremental("ts", initial_value=dt.datetime(2024, 1, 1)).bind()
    with pytest.raises(CursorTypeError, match=r"'ts'.*5.*int.* in row 1 of the batch .*timestamp") as e:
        run.filter([{"id": 1, "ts": "2024-01-02T00:00:00Z"}, {"id": 2, "ts": 5}])
    assert (e.value.cursor_path, e.value.value) == ("ts", 5)


@pytest.mark.parametrize("kind", ["dicts", "arrow", "pandas"])
def test_a_row_error_names_the_column_key_and_value_never_the_other_columns(kind):
    """Rows hold personal data and run logs travel: an error names the cursor column, the row's
    primary key and the offending value, never the row's other values."""
    import pandas as pd

    good = {"id": 1, "ts": "2024-01-02T00:00:00Z", "email": "alice@example.com"}
    rows = [good, {"id": 2, "ts": "next tuesday", "email": "bob@example.com"}]
    batch = {"dicts": rows, "arrow": pa.Table.from_pylist(rows), "pandas": pd.DataFrame(rows)}[kind]
    run = incremental("ts", initial_value="2024-01-01T00:00:00Z", primary_key="id").bind()
    with pytest.raises(CursorTypeError) as e:
        run.filter(batch)
    message = str(e.value)
    assert "'ts'" in message and "'next tuesday'" in message and "primary key id=2" in message
    assert "example.com" not in message, message
    missing = incremental("ts", primary_key="id").bind()
    with pytest.raises(CursorPathMissing) as e:
        missing.filter([{"id": 1, "ts": 3, "email": "a@example.com"}, {"id": 7, "email": "b@example.com"}])
    assert "primary key id=7" in str(e.value) and "example.com" not in str(e.value), str(e.value)


def test_non_iso_string_with_timestamp_cursor(kind, convert):
    run = incremental("ts", initial_value="2024-01-01T00:00:00Z").bind()
    with pytest.raises(CursorTypeError, match=r"'ts'.*yesterday.*str"):
        run.filter(convert([{"id": 1, "ts": "2024-01-02T00:00:00Z"}, {"id": 2, "ts": "yesterday"}]))


def test_mixed_int_and_str_in_one_column():
    with pytest.raises(CursorTypeError, match=r"'a'.*str.* in row 1 of the batch"):
        incremental("ts").bind().filter([{"ts": 1}, {"ts": "a"}])
    import pandas as pd

    with pytest.raises(CursorTypeError, match="'a'"):
        incremental("ts").bind().filter(pd.DataFrame({"ts": [1, "a"]}, dtype=object))


def test_int_column_with_timestamp_cursor_in_a_table(kind, convert):
    run = incremental("ts", cursor_type="timestamp").bind()
    with pytest.raises(CursorTypeError, match="ts"):
        run.filter(convert(rows_of([1, 2])))


def test_epoch_cursor_types(kind, convert):
    spec = incremental(
        "ts", initial_value="2024-01-01T10:00:00Z", cursor_type="epoch_seconds", primary_key="id"
    )
    t10 = 1_704_103_200
    run = spec.bind()
    assert run.start_value == t10
    assert ids(run_filter(run, rows_of([t10 - 1, t10, t10 + 60]), convert)) == [1, 2]
    assert run.state["last_value"] == t10 + 60 and run.state["cursor_type"] == "epoch_seconds"
    run2 = spec.replace(lag=60).bind(run.state)
    assert run2.start_value == t10


def test_type_detection_order():
    # explicit cursor_type beats the initial_value's type
    run = incremental("ts", initial_value="2024-01-01", cursor_type="timestamp").bind()
    assert run.cursor_type == "timestamp"
    # initial_value's type; a date initial value meets timestamp rows: timestamps win
    run = incremental("ts", initial_value="2024-01-01").bind()
    assert run.cursor_type == "date"
    assert len(run.filter([{"ts": "2024-01-01T10:00:00Z"}])) == 1
    assert run.cursor_type == "timestamp" and run.state["last_value"] == "2024-01-01T10:00:00Z"
    # then the state's type, then the first value
    run2 = incremental("ts").bind(run.state)
    assert run2.cursor_type == "timestamp" and run2.start_value == pendulum.datetime(2024, 1, 1, 10)
    fresh = incremental("ts").bind()
    assert fresh.cursor_type is None and fresh.start_value is None
    fresh.filter([{"ts": "abc"}, {"ts": "abd"}])
    assert fresh.cursor_type == "string" and fresh.state["last_value"] == "abd"


def test_string_cursor_compares_as_text(kind, convert):
    run = incremental("ts", initial_value="b", cursor_type="string").bind()
    assert ids(run_filter(run, rows_of(["a", "b", "c", "ba"]), convert)) == [1, 2, 3]
    assert run.state["last_value"] == "c"


# ---------------------------------------------------------------------------------------------
# last_value_func
# ---------------------------------------------------------------------------------------------


def test_min_last_value_func(kind, convert):
    spec = incremental("ts", initial_value=10, last_value_func="min", primary_key="id")
    run1 = spec.bind()
    assert ids(run_filter(run1, rows_of([12, 10, 7, 7, 9]), convert)) == [1, 2, 3, 4]
    assert run1.last_value == 7 and run1.state["boundary"]["keys"] == [2, 3]
    run2 = spec.bind(run1.state)
    assert ids(
        run_filter(
            run2, [{"id": 2, "ts": 7}, {"id": 8, "ts": 7}, {"id": 9, "ts": 8}, {"id": 5, "ts": 3}], convert
        )
    ) == [5, 8]


def test_callable_last_value_func_dicts_arrow_pandas():
    def newest(values):
        return max(values)

    spec = incremental("ts", initial_value=3, last_value_func=newest, primary_key="id")
    data = rows_of([1, 3, 5, 5, 2])
    for k in LOCAL:
        run = spec.bind()
        assert ids(canonical(run.filter(to_kind(data, k)))) == [1, 2, 3]
        assert run.last_value == 5 and run.state["last_value"] == 5
        assert run.state["last_value_func"].endswith("newest")
        run2 = spec.bind(run.state)
        assert ids(canonical(run2.filter(to_kind(rows_of([5, 5, 6], start_id=2), k)))) == [4]


def test_callable_sees_instants_and_whole_row():
    seen = []

    def latest(values):
        seen.extend(values)
        return max(values)

    run = incremental("ts", initial_value="2024-01-01T10:00:00Z", last_value_func=latest).bind()
    kept = run.filter([{"ts": "2024-01-01T11:00:00+02:00"}, {"ts": "2024-01-01T06:00:00-05:00"}])
    assert kept == [{"ts": "2024-01-01T06:00:00-05:00"}]
    assert all(isinstance(v, pendulum.DateTime) for v in seen)
    assert run.state["last_value"] == "2024-01-01T11:00:00Z"

    def by_event(values):  # a per-event-type high-water mark with cursor_path "$"
        out = {}
        for v in values:
            for k, t in v.items() if "type" not in v else [(v["type"], v["t"])]:
                out[k] = max(out.get(k, t), t)
        return out

    run = incremental("$", last_value_func=by_event, primary_key=()).bind()
    run.filter([{"type": "a", "t": 1}, {"type": "b", "t": 5}, {"type": "a", "t": 3}])
    assert run.state["last_value"] == {"a": 3, "b": 5}


def newest_func():
    """A custom last_value_func, defined inside a function: Spark's workers get it by value
    (a module-level function travels by reference, so its module must be importable there)."""

    def newest(values):
        return max(values)

    return newest


def test_callable_on_every_kind_keeps_the_same_rows_and_state(kind, convert):
    """A custom last_value_func on a Spark frame runs on the executors and keeps the rows and
    the last_value every other kind keeps (instants reach it as pendulum values)."""
    spec = incremental("ts", initial_value="2024-01-02T00:00:00Z", last_value_func=newest_func(), primary_key="id")
    run = spec.bind()
    rows = [{"id": 1, "ts": "2024-01-01T00:00:00Z"}, {"id": 2, "ts": "2024-01-03T00:00:00Z"},
            {"id": 3, "ts": "2024-01-05T00:00:00+02:00"}, {"id": 4, "ts": None}]
    with pytest.raises(CursorValueNone, match="cursor_path 'ts' is None"):
        spec.bind().filter(convert(rows))
    assert ids(run_filter(run, rows[:3], convert, kind)) == [2, 3]
    assert run.state["last_value"] == "2024-01-04T22:00:00Z" and run.last_value == pendulum.datetime(2024, 1, 4, 22)
    run2 = spec.bind(run.state)
    later = [{"id": 3, "ts": "2024-01-05T00:00:00+02:00"}, {"id": 5, "ts": "2024-01-06T00:00:00Z"}]
    kept = ids(run_filter(run2, later, convert, kind))
    if kind == "spark":  # its boundary keys were not collected: the boundary row is kept and
        assert kept == [3, 5] and run2.boundary_unverified  # flagged for the writer's anti-join
    else:
        assert kept == [5] and not run2.boundary_unverified
    assert run2.state["last_value"] == "2024-01-06T00:00:00Z"


def test_callable_with_lag_rereads_the_window_and_never_moves_back(kind, convert):
    """lag with a custom last_value_func: the start moves back in the values' own order (a
    callable counts as "max"), not below initial_value; the stored cursor never moves back."""
    spec = incremental("n", initial_value=0, last_value_func=newest_func(), lag=3)
    run = spec.bind({"last_value": 10})
    assert run.start_value == 7
    assert sorted(r["n"] for r in run_filter(run, [{"n": 6}, {"n": 8}, {"n": 12}], convert, kind)) == [8, 12]
    assert run.state["last_value"] == 12
    again = spec.bind({"last_value": 10})
    run_filter(again, [{"n": 8}], convert, kind)
    assert again.state["last_value"] == 10
    assert spec.bind({"last_value": 2}).start_value == 0
    days = incremental("ts", initial_value="2024-01-01T00:00:00Z", last_value_func=newest_func(), lag="P1D")
    assert days.bind({"last_value": "2024-03-10T06:00:00Z"}).start_value == pendulum.datetime(2024, 3, 9, 6)


# ---------------------------------------------------------------------------------------------
# constructor and state errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(end_value=5), "end_value=5 was given without initial_value"),
        (dict(initial_value=10, end_value=5), "end_value=5 is lower than initial_value=10"),
        (
            dict(initial_value=5, end_value=10, last_value_func="min"),
            "end_value=10 is higher than initial_value=5",
        ),
        (dict(initial_value=5, end_value="2024-01-01T00:00:00Z"), "not comparable"),
        (dict(initial_value="a", end_value=3, cursor_type="string"), "end_value=3 is not a valid string"),
        (dict(initial_value="a", end_value=3), "initial_value='a' is not an ISO-8601 date or datetime"),
        (dict(last_value_func="median"), "last_value_func='median' is not valid; allowed: 'max', 'min'"),
        (dict(last_value_func=3), "last_value_func=3"),
        (
            dict(on_cursor_value_missing="skip"),
            "on_cursor_value_missing='skip' is not valid; allowed: 'raise'",
        ),
        (dict(row_order="up"), "row_order='up' is not valid; allowed: None, 'asc', 'desc'"),
        (dict(range_start="half"), "range_start='half' is not valid; allowed: 'closed', 'open'"),
        (dict(range_end="x"), "range_end='x' is not valid"),
        (dict(lag=-1), "lag=-1 is not valid"),
        (dict(lag="1"), "lag='1' is not valid"),
        (dict(lag=1, initial_value="abc", cursor_type="string"), "lag=1 cannot be used with a string cursor"),
        (dict(lag=1, cursor_type="string"), "lag=1 cannot be used with a string cursor"),
        (dict(lag=1, initial_value="abc", cursor_type="string", last_value_func=lambda v: max(v)),
         "lag=1 cannot be used with a string cursor"),
        (dict(cursor_type="datetime"), "cursor_type='datetime' is not valid"),
        (dict(initial_value="abc", cursor_type="timestamp"), "initial_value='abc' is not a valid timestamp"),
        (dict(initial_value=object()), "cannot be a cursor value"),
        (dict(primary_key=5), "primary_key=5 is not valid"),
    ],
)
def test_constructor_errors(kwargs, match):
    with pytest.raises(IncrementalConfigError, match=match):
        incremental("ts", **kwargs)


def test_lag_on_string_cursor_detected_from_data():
    run = incremental("ts", lag=1).bind()
    with pytest.raises(IncrementalConfigError, match="string cursor"):
        run.filter([{"ts": "abc"}])


def test_spec_is_frozen_and_replace_revalidates():
    spec = incremental("ts", initial_value=5)
    assert isinstance(spec, Incremental)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.initial_value = 3  # type: ignore[misc]
    assert spec.replace(initial_value=None).initial_value is None  # None is a value, not "unset"
    assert spec.replace(lag=None).lag is None
    with pytest.raises(IncrementalConfigError, match="end_value=1 is lower"):
        spec.replace(end_value=1)
    with pytest.raises(IncrementalConfigError, match="unknown"):
        spec.replace(nope=1)
    assert incremental("ts", last_value_func=max).last_value_func == "max"
    assert incremental("ts", primary_key=["a", "b"]).primary_key == ("a", "b")


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(cursor_path="updated"), "cursor_path 'ts' -> 'updated'"),
        (dict(last_value_func="min"), "last_value_func 'max' -> 'min'"),
        (dict(cursor_type="string", initial_value="a"), "cursor_type 'number' -> 'string'"),
        (dict(initial_value="2024-01-01T00:00:00Z"), "cursor_type 'number' -> 'timestamp'"),
    ],
)
def test_cursor_state_mismatch(change, match):
    run = incremental("ts", initial_value=0).bind()
    run.filter(rows_of([5]))
    args = dict(cursor_path="ts", initial_value=0) | change
    with pytest.raises(CursorStateMismatch, match=match) as e:
        incremental(**args).bind(run.state)
    assert "full refresh" in str(e.value)
    assert e.value.changed == [match.split(" ", 1)[0]]
    with pytest.raises(CursorStateMismatch, match="version"):
        incremental("ts").bind({"version": 99, "last_value": 5})


def test_minimal_state_is_accepted():
    run = incremental("ts", primary_key="id").bind({"last_value": 5})
    assert run.start_value == 5 and run.boundary_unverified  # no boundary keys: rows at 5 are kept
    assert ids(run.filter(rows_of([4, 5, 6]))) == [1, 2]
    assert run.state["version"] == 2 and run.state["last_value"] == 6


def test_initial_value_ignored_once_state_exists():
    run1 = incremental("ts", initial_value=0).bind()
    run1.filter(rows_of([5]))
    run2 = incremental("ts", initial_value=100).bind(run1.state)
    assert run2.start_value == 5 and run2.state["initial_value"] == 0
    assert ids(run2.filter(rows_of([4, 6]))) == [1]


# ---------------------------------------------------------------------------------------------
# windows (Dagster time partitions)
# ---------------------------------------------------------------------------------------------

DAY = [{"id": h, "ts": f"2024-01-01T{h:02d}:00:00Z"} for h in range(24)]


def test_window_stateless_backfill(kind, convert):
    live = incremental("ts", initial_value="2024-01-01T00:00:00Z", primary_key="id").bind()
    live.filter([dict(r) for r in DAY[:20]])
    spec = incremental("ts", initial_value="2024-01-01T02:00:00Z", primary_key="id")
    run = spec.bind(live.state, window=("2024-01-01T00:00:00Z", "2024-01-01T06:00:00Z"), stateless=True)
    assert run.is_backfill and run.state == live.state
    assert run.start_value == pendulum.datetime(2024, 1, 1, 2)  # the spec's initial_value clamps too
    assert run.end_value == pendulum.datetime(2024, 1, 1, 6)
    assert ids(run_filter(run, DAY, convert)) == [2, 3, 4, 5]
    none = spec.bind(None, window=(dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 1, 12)), stateless=True)
    assert ids(run_filter(none, DAY, convert)) == [10, 11] and none.state is None


def test_window_stateful_open_partition(kind, convert):
    spec = incremental("ts", initial_value="2024-01-01T00:00:00Z", primary_key="id")
    window = ("2024-01-01T08:00:00Z", "2024-01-01T16:00:00Z")
    run1 = spec.bind(None, window=window)
    assert not run1.is_backfill and run1.start_value == pendulum.datetime(2024, 1, 1, 8)
    assert ids(run_filter(run1, DAY[:12], convert)) == [8, 9, 10, 11]
    assert run1.state["last_value"] == "2024-01-01T11:00:00Z"
    run2 = spec.bind(run1.state, window=window)
    assert run2.start_value == pendulum.datetime(2024, 1, 1, 11)
    assert ids(run_filter(run2, DAY, convert)) == [12, 13, 14, 15]  # 11 deduped; 16+ is after the window
    assert run2.state["last_value"] == "2024-01-01T15:00:00Z"
    old = spec.bind(run2.state, window=("2024-01-01T20:00:00Z", "2024-01-02T00:00:00Z"))
    assert old.start_value == pendulum.datetime(2024, 1, 1, 20)


def test_window_needs_max():
    with pytest.raises(IncrementalConfigError, match="window"):
        incremental("ts", last_value_func="min").bind(window=(1, 2))
    with pytest.raises(IncrementalConfigError, match="stateless"):
        incremental("ts").bind(stateless=True)


# ---------------------------------------------------------------------------------------------
# input kinds and calling conventions
# ---------------------------------------------------------------------------------------------


def test_filter_returns_the_kind_given(kind, convert):
    run = incremental("ts", initial_value=2).bind()
    out = run.filter(convert(rows_of([1, 2, 3])))
    assert result_kind_ok(out, kind)
    assert ids(canonical(out)) == [1, 2]


def test_other_calling_conventions():
    run = incremental("ts", initial_value=2).bind()
    assert run.filter({"id": 1, "ts": 3}) == [{"id": 1, "ts": 3}]
    assert run.filter({"id": 2, "ts": 1}) == []
    assert run.filter(r for r in rows_of([5, 1])) == [{"id": 0, "ts": 5}]
    batch = pa.RecordBatch.from_pylist(rows_of([6, 1]))
    out = run.filter(batch)
    assert isinstance(out, pa.RecordBatch) and out.to_pylist() == [{"id": 0, "ts": 6}]
    assert run.last_value == 6 and run.start_value == 2  # state carried across calls
    assert run.filter([]) == []
    empty = run.filter(pa.table({"id": pa.array([], pa.int64()), "ts": pa.array([], pa.int64())}))
    assert empty.num_rows == 0
    with pytest.raises(TypeError):
        run.filter(5)


def test_filter_batches_is_lazy():
    pulled = []

    def source():
        for p in range(3):
            pulled.append(p)
            yield rows_of([p * 10 + 5], start_id=p)

    run = incremental("ts", initial_value=0).bind()
    gen = run.filter_batches(source())
    assert pulled == []
    assert next(gen) == [{"id": 0, "ts": 5}] and pulled == [0]
    assert list(gen) == [[{"id": 1, "ts": 15}], [{"id": 2, "ts": 25}]]
    assert run.state["last_value"] == 25


@pytest.mark.spark
def test_spark_filter_is_lazy_and_batches(spark):
    df = to_kind(rows_of([1, 5, 9]), "spark", spark)
    run = incremental("ts", initial_value=4).bind()
    batches = list(run.filter_batches([df, to_kind(rows_of([10], start_id=3), "spark", spark)]))
    assert all(type(b).__name__ == "DataFrame" for b in batches)
    assert sorted(r["ts"] for b in batches for r in canonical(b)) == [5, 9, 10]
    assert run.state["last_value"] == 10


def test_package_exports_the_function_in_any_import_order():
    import subprocess
    import sys

    code = (
        "from dagster_incremental import Incremental, IncrementalRun, incremental\n"
        "assert callable(incremental) and isinstance(incremental('ts'), Incremental)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_detected_date_cursor_with_times_becomes_timestamp(kind, convert):
    rows = [{"id": 1, "ts": "2024-01-01"}, {"id": 2, "ts": "2024-01-01T10:30:00Z"}]
    run = incremental("ts").bind()
    assert len(run_filter(run, rows, convert)) == 2
    assert run.state["cursor_type"] == "timestamp" and run.state["last_value"] == "2024-01-01T10:30:00Z"


@pytest.mark.spark
def test_spark_range_is_pinned_to_the_computed_last_value(spark):
    """A live table that grows between filter() and the write: rows beyond the stored last_value
    belong to the next run, so the lazy frame must not return them now."""
    import uuid

    table = f"lake.engine_tests.src_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id bigint, ts bigint) USING iceberg")
    try:
        spark.sql(f"INSERT INTO {table} VALUES (1, 5), (2, 7)")
        source = spark.table(table)
        spec = incremental("ts", initial_value=0, primary_key="id")
        run = spec.bind()
        out = run.filter(source)
        spark.sql(f"INSERT INTO {table} VALUES (3, 9)")
        assert ids(canonical(out)) == [1, 2] and run.state["last_value"] == 7
        nxt = spec.bind(run.state)
        assert ids(canonical(nxt.filter(spark.table(table)))) == [3]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_boundary_keys_are_stored_as_values_and_states_of_version_1_still_dedup():
    spec = incremental("at", primary_key="id", initial_value=1)
    run = spec.bind(None)
    run.filter([{"id": "ev_1", "at": 5}, {"id": "ev_2", "at": 5}, {"id": "ev_0", "at": 4}])
    assert run.state["boundary"]["keys"] == ["ev_1", "ev_2"]  # what the UI shows: no JSON-in-JSON
    assert run.state["version"] == 2
    again = [{"id": "ev_1", "at": 5}, {"id": "ev_3", "at": 5}]
    assert spec.bind(run.state).filter(again) == [{"id": "ev_3", "at": 5}]
    old = {**run.state, "version": 1, "boundary": {**run.state["boundary"], "keys": ['"ev_1"', '"ev_2"']}}
    assert spec.bind(old).filter(again) == [{"id": "ev_3", "at": 5}]


def test_last_run_is_given_by_the_caller_and_shown_as_utc():
    spec = incremental("ts", initial_value=5)
    assert spec.last_run is None and spec.bind({"last_value": 7}).last_run is None
    at = dt.datetime(2024, 3, 1, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    run = spec.bind({"last_value": 7}, last_run=at)
    assert run.last_run == pendulum.datetime(2024, 3, 1, 12) and run.last_run.timezone_name == "UTC"


# ---------------------------------------------------------------------------------------------
# string cursors in other formats (Airbyte's datetime_format / cursor_datetime_formats)
# ---------------------------------------------------------------------------------------------

DMY = ["%d/%m/%Y %H:%M", "%d/%m/%Y"]


def test_day_first_strings_compare_as_instants_on_every_kind(kind, convert):
    """As text, "31/12/2023" > "05/01/2024"; as instants it is older. Each value is read by the
    first format that matches; the state is stored as ISO-8601 UTC."""
    spec = incremental("ts", initial_value="01/12/2023", cursor_datetime_formats=DMY, primary_key="id")
    run1 = spec.bind()
    rows = [{"id": 1, "ts": "31/12/2023 23:30"}, {"id": 2, "ts": "05/01/2024"}, {"id": 3, "ts": "30/11/2023"}]
    assert ids(run_filter(run1, rows, convert, kind)) == [1, 2]
    assert run1.state["last_value"] == "2024-01-05T00:00:00Z" and run1.state["cursor_type"] == "timestamp"
    run2 = spec.bind(run1.state)
    assert run2.start_value == pendulum.datetime(2024, 1, 5)
    later = [{"id": 2, "ts": "05/01/2024"}, {"id": 4, "ts": "06/01/2024 08:00"}, {"id": 5, "ts": "04/01/2024"}]
    assert ids(run_filter(run2, later, convert, kind)) == [4]
    assert run2.state["last_value"] == "2024-01-06T08:00:00Z"


def test_a_value_no_format_matches_names_the_column_and_value(kind, convert):
    run = incremental("ts", datetime_format="%d/%m/%Y").bind()
    with pytest.raises(CursorTypeError, match=r"cursor_path 'ts': the value '2024/01/31' .* matches none of the "
                                              r"cursor_datetime_formats \['%d/%m/%Y'\] and is not ISO-8601"):
        run.filter(convert([{"ts": "05/01/2024"}, {"ts": "2024/01/31"}]))


def test_iso_values_and_offsets_are_read_beside_the_formats(kind, convert):
    spec = incremental("ts", initial_value="2024-01-01", datetime_format="%Y-%m-%d %H:%M:%S%z")
    run = spec.bind()
    rows = [{"ts": "2024-01-05 10:00:00+0200"}, {"ts": "2024-01-05T09:00:00Z"}]
    run_filter(run, rows, convert)
    assert run.state["last_value"] == "2024-01-05T09:00:00Z"  # 10:00+02:00 is 08:00 UTC


def test_datetime_format_errors():
    with pytest.raises(IncrementalConfigError, match="the datetime format 'dd/MM/yyyy' is not valid"):
        incremental("ts", datetime_format="dd/MM/yyyy")
    with pytest.raises(IncrementalConfigError, match="cursor_type='number' cannot take them"):
        incremental("ts", datetime_format="%d/%m/%Y", cursor_type="number")
    with pytest.raises(IncrementalConfigError, match="initial_value='2024/01/31'"):
        incremental("ts", datetime_format="%Y/%d/%m", initial_value="2024/01/31")
    spec = incremental("ts", datetime_format="%Y/%d/%m", initial_value="2024/31/01")
    assert spec.cursor_type == "timestamp" and spec.start_value == pendulum.datetime(2024, 1, 31)
