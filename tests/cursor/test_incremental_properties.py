"""Property tests: every input kind agrees with a plain-Python model of the semantics, ISO offsets
don't matter, and any split of a growing history into runs never loses or duplicates a row."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inputs import canonical, to_kind

from dagster_incremental.cursor import boundary as boundary_mod
from dagster_incremental.cursor.spec import incremental

LOCAL = ("dicts", "pages", "arrow", "pandas")


@st.composite
def scenarios(draw):
    n1 = draw(st.integers(0, 12))
    n2 = draw(st.integers(0, 12))
    values = st.one_of(st.none(), st.integers(0, 6)) if draw(st.booleans()) else st.integers(0, 6)
    ts1 = draw(st.lists(values, min_size=n1, max_size=n1))
    ts2 = draw(st.lists(values, min_size=n2, max_size=n2))
    # a few ids repeat between runs (same row re-sent, or a newer version of it)
    rows1 = [{"id": i, "ts": t, "v": draw(st.sampled_from("ab"))} for i, t in enumerate(ts1)]
    rows2 = [{"id": draw(st.integers(0, n1 + n2)), "ts": t, "v": draw(st.sampled_from("ab"))} for t in ts2]
    func = draw(st.sampled_from(["max", "min"]))
    initial = draw(st.one_of(st.none(), st.integers(0, 6)))
    end = None
    if initial is not None and draw(st.booleans()):
        end = draw(st.integers(initial, 7)) if func == "max" else draw(st.integers(-1, initial))
    args = dict(
        initial_value=initial,
        end_value=end,
        last_value_func=func,
        primary_key=draw(st.sampled_from([None, "id", ()])),
        range_start=draw(st.sampled_from(["closed", "open"])),
        range_end=draw(st.sampled_from(["closed", "open"])),
        on_cursor_value_missing="include",
    )
    return args, rows1, rows2


def model(args, runs):
    """The semantics in plain Python (ints only): kept rows per run and the final last value."""
    import hashlib
    import json

    mx = args["last_value_func"] == "max"
    beyond = (lambda a, b: a > b) if mx else (lambda a, b: a < b)
    pk = args["primary_key"]

    def key(r):
        if pk == "id":
            return json.dumps(r["id"])
        return hashlib.sha256(
            json.dumps(
                {k: v for k, v in r.items() if v is not None}, sort_keys=True, separators=(",", ":")
            ).encode()
        ).hexdigest()

    backfill = args["end_value"] is not None
    dedup = pk != () and args["range_start"] == "closed" and not backfill
    last, keys = None, set()
    out = []
    for rows in runs:
        start = args["initial_value"] if backfill or last is None else last
        start_keys = keys if dedup and start == last else set()
        run_last, kept = start, []
        for r in rows:
            v = r["ts"]
            if v is None:
                kept.append(r)
                continue
            if args["end_value"] is not None:
                e = args["end_value"]
                if beyond(v, e) or (v == e and args["range_end"] == "open"):
                    continue
            if start is not None:
                if beyond(start, v) or (v == start and args["range_start"] == "open"):
                    continue
                if v == start and key(r) in start_keys:
                    continue
            kept.append(r)
            if run_last is None or beyond(v, run_last):
                run_last = v
        if not backfill:
            at = {key(r) for r in kept if r["ts"] is not None and r["ts"] == run_last}
            keys = (start_keys | at) if run_last == start else at
            last = run_last
        out.append(kept)
    return out, last


def _norm(rows):
    return canonical([{k: v for k, v in r.items() if v is not None} for r in rows])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_local_kind_matches_the_model(scenario):
    args, rows1, rows2 = scenario
    expected, expected_last = model(args, [rows1, rows2])
    spec = incremental("ts", **args)
    states = {}
    for k in LOCAL:
        run1 = spec.bind()
        kept1 = canonical(run1.filter(to_kind(rows1, k))) if rows1 else []
        run2 = spec.bind(run1.state)
        kept2 = canonical(run2.filter(to_kind(rows2, k))) if rows2 else []
        assert kept1 == _norm(expected[0]), k
        assert kept2 == _norm(expected[1]), k
        states[k] = run2.state
        if args["end_value"] is None:
            assert run2.state["last_value"] == expected_last
    assert all(s == states["dicts"] for s in states.values())


@pytest.mark.spark
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_spark_matches_dicts(spark, scenario):
    args, rows1, rows2 = scenario
    spec = incremental("ts", **args)
    ref1 = spec.bind()
    ref_kept = canonical(ref1.filter(rows1)) if rows1 else []
    ref2 = spec.bind(ref1.state)
    ref_kept2 = canonical(ref2.filter(rows2)) if rows2 else []
    import pyarrow as pa

    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
    run1 = spec.bind()
    assert canonical(run1.filter(to_kind(rows1, "spark", spark, schema))) == ref_kept
    run2 = spec.bind(run1.state)
    assert canonical(run2.filter(to_kind(rows2, "spark", spark, schema))) == ref_kept2
    assert run2.state == ref2.state


OFFSETS = st.integers(-12 * 60, 14 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 48 * 3600), OFFSETS), min_size=1, max_size=15),
    st.integers(0, 48 * 3600),
    st.sampled_from(LOCAL),
)
def test_iso_offsets_never_change_the_result(points, start, k):
    """The same instants as ISO strings in random offsets keep the same rows as in UTC."""
    base = dt.datetime(2024, 3, 30, tzinfo=dt.timezone.utc)
    utc = [{"id": i, "ts": (base + dt.timedelta(seconds=s)).isoformat()} for i, (s, _) in enumerate(points)]
    mixed = [
        {"id": i, "ts": (base + dt.timedelta(seconds=s)).astimezone(z).isoformat()}
        for i, (s, z) in enumerate(points)
    ]
    initial = (base + dt.timedelta(seconds=start)).strftime("%Y-%m-%dT%H:%M:%SZ")
    spec = incremental("ts", initial_value=initial, primary_key="id")
    a, b = spec.bind(), spec.bind()
    kept_utc = {r["id"] for r in canonical(a.filter(to_kind(utc, k)))}
    kept_mixed = {r["id"] for r in canonical(b.filter(to_kind(mixed, k)))}
    assert kept_utc == kept_mixed == {i for i, (s, _) in enumerate(points) if s >= start}
    assert a.state == b.state


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=40),  # gaps between consecutive ts (0 = same ts)
    st.lists(st.integers(0, 40), max_size=6),  # where the source is read (history so far)
    st.sampled_from(["id", None]),
    st.integers(1, 4),  # boundary key limit (small, to exercise overflow)
    st.sampled_from(["dicts", "arrow", "pandas"]),
)
def test_any_split_into_runs_never_loses_or_duplicates(gaps, cuts, pk, limit, k):
    """A growing, sorted history read as "rows with ts >= start_value" by consecutive runs and
    appended (anti-joining unverified boundary rows, as the writer does) equals the history."""
    ts, history = 0, []
    for i, g in enumerate(gaps):
        ts += g
        history.append({"id": i, "ts": ts, "v": f"r{i}"})
    spec = incremental("ts", primary_key=pk)
    table: list[dict] = []
    state = None
    with mock.patch.object(boundary_mod, "BOUNDARY_KEY_LIMIT", limit):
        for cut in [*sorted(cuts), len(history)]:
            run = spec.bind(state)
            since = run.start_value
            source = [r for r in history[:cut] if since is None or r["ts"] >= since]
            kept = canonical(run.filter(to_kind(source, k))) if source else []
            if run.boundary_unverified:
                loaded = {r["id"] for r in table if r["ts"] == run.boundary_value}
                kept = [r for r in kept if not (r["ts"] == run.boundary_value and r["id"] in loaded)]
            table += kept
            state = run.state
    assert sorted(r["id"] for r in table) == list(range(len(history)))
