"""The example sources of the `definitions` code location: deterministic, moving forward, half-open.

The assets built on them are only as trustworthy as these sources: a source whose windows
overlap, whose clock goes back or whose client reads ahead would make the engine look wrong.
"""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.error
import urllib.request
from datetime import date, datetime, timedelta, timezone

import pytest

from definitions.sources import event_files, events_api, iso_utc, iso_utc_ceil, shop_db, to_utc

CANONICAL = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _rows(pages) -> list[dict]:
    return [row for page in pages for row in page]


def _table(path, name: str) -> list[tuple]:
    with sqlite3.connect(path) as con:
        return con.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall()


# ------------------------------------------------------------------------------ time helpers


def test_time_helpers_compare_instants_not_text():
    assert iso_utc("2024-03-01T12:15:00+02:00") == "2024-03-01T10:15:00Z"
    assert iso_utc(datetime(2024, 3, 1, 10, 15)) == "2024-03-01T10:15:00Z"  # naive means UTC
    assert iso_utc(date(2024, 3, 1)) == "2024-03-01T00:00:00Z"
    assert iso_utc_ceil("2024-03-01T10:15:00.000001Z") == "2024-03-01T10:15:01Z"
    assert iso_utc_ceil("2024-03-01T10:15:00Z") == "2024-03-01T10:15:00Z"
    with pytest.raises(ValueError, match="ISO-8601"):
        to_utc("yesterday")


# ---------------------------------------------------------------------------------- shop db


@pytest.fixture
def shop(tmp_path):
    return shop_db.create_shop(tmp_path / "shop.db", orders=120, customers=20, seed=7)


def test_create_shop_is_deterministic(tmp_path):
    a = shop_db.create_shop(tmp_path / "a.db", seed=7)
    b = shop_db.create_shop(tmp_path / "b.db", seed=7)
    c = shop_db.create_shop(tmp_path / "c.db", seed=8)
    for table in ("orders", "customers", "meta"):
        assert _table(a, table) == _table(b, table)
    assert _table(a, "orders") != _table(c, "orders")
    assert len(_table(a, "orders")) == 200 and len(_table(a, "customers")) == 50


def test_create_shop_rows_are_realistic_and_canonical(shop):
    orders = _rows(shop_db.fetch_orders(shop))
    assert len(orders) == 120
    assert all(CANONICAL.match(o["created_at"]) and CANONICAL.match(o["updated_at"]) for o in orders)
    assert all(o["updated_at"] >= o["created_at"] for o in orders)
    assert any(o["updated_at"] > o["created_at"] for o in orders)  # some moved along already
    assert {type(o["is_deleted"]) for o in orders} == {bool}
    assert {o["status"] for o in orders} <= set(shop_db._NEXT_STATUS)
    customers = shop_db.fetch_customers(shop)
    assert [c["customer_id"] for c in customers] == list(range(1, 21))
    assert all("@" in c["email"] and c["tier"] in {"bronze", "silver", "gold"} for c in customers)


def test_create_shop_replaces_an_existing_file(shop):
    shop_db.simulate_step(shop, seed=1)
    shop_db.create_shop(shop, orders=120, customers=20, seed=7)
    assert shop_db.shop_state(shop)["steps"] == "0"
    assert len(_rows(shop_db.fetch_orders(shop))) == 120


def test_simulate_step_inserts_updates_soft_deletes_later_than_everything(shop):
    before = {o["id"]: o for o in _rows(shop_db.fetch_orders(shop))}
    customers_before = {c["customer_id"]: c for c in shop_db.fetch_customers(shop)}
    hwm = shop_db.high_water_mark(shop)

    result = shop_db.simulate_step(shop, seed=1, inserts=5, updates=4, deletes=2,
                                   customer_updates=2, customer_inserts=1, customer_deletes=1)

    after = {o["id"]: o for o in _rows(shop_db.fetch_orders(shop))}
    assert sorted(set(after) - set(before)) == result.inserted and len(result.inserted) == 5
    assert len(result.updated) == 4 and len(result.soft_deleted) == 2
    for oid in result.updated:
        assert (after[oid]["status"], after[oid]["amount"]) != (before[oid]["status"], before[oid]["amount"])
    assert all(after[oid]["is_deleted"] and not before[oid]["is_deleted"] for oid in result.soft_deleted)
    changed = [oid for oid in after if after[oid] != before.get(oid)]
    assert sorted(changed) == sorted(result.inserted + result.updated + result.soft_deleted)
    assert all(hwm < after[oid]["updated_at"] <= result.now for oid in changed)
    assert shop_db.high_water_mark(shop) <= result.now == shop_db.shop_state(shop)["clock"]

    customers = {c["customer_id"]: c for c in shop_db.fetch_customers(shop)}
    assert result.customers_deleted and not set(result.customers_deleted) & set(customers)
    for cid in result.customers_updated:
        assert customers[cid] != customers_before[cid]
        assert customers[cid]["updated_at"] > customers_before[cid]["updated_at"]
    assert result.customers_inserted == [21]


def test_steps_keep_the_clock_monotonic_and_a_customer_disappears(shop):
    """Default `now` (wall clock) and steps from fresh connections: the stored clock only grows."""
    clocks, deleted = [shop_db.shop_state(shop)["clock"]], []
    for seed in range(1, 9):
        result = shop_db.simulate_step(shop, seed=seed)
        clocks.append(result.now)
        deleted += result.customers_deleted
    assert clocks == sorted(clocks) and len(set(clocks)) == len(clocks)
    assert deleted, "eight default steps should erase at least one customer"
    assert not set(deleted) & {c["customer_id"] for c in shop_db.fetch_customers(shop)}
    assert shop_db.shop_state(shop)["steps"] == "8"


def test_simulate_step_refuses_to_go_back_in_time(shop):
    clock = shop_db.shop_state(shop)["clock"]
    with pytest.raises(ValueError, match="only move forward"):
        shop_db.simulate_step(shop, seed=1, now=clock)
    assert shop_db.shop_state(shop)["steps"] == "0"  # nothing was written


def test_simulate_step_is_deterministic(tmp_path):
    a = shop_db.create_shop(tmp_path / "a.db", seed=7)
    b = shop_db.create_shop(tmp_path / "b.db", seed=7)
    for step, now in enumerate(["2024-01-20T00:00:00Z", "2024-01-21T09:30:00+02:00"], start=1):
        ra = shop_db.simulate_step(a, seed=step, now=now)
        rb = shop_db.simulate_step(b, seed=step, now=now)
        assert ra == rb
    for table in ("orders", "customers", "meta"):
        assert _table(a, table) == _table(b, table)


def test_fetch_orders_windows_are_half_open_ordered_and_paged(shop):
    everything = _rows(shop_db.fetch_orders(shop))
    key = [(o["updated_at"], o["id"]) for o in everything]
    assert key == sorted(key)

    lo, mid, hi = everything[10]["updated_at"], everything[60]["updated_at"], everything[100]["updated_at"]
    left = _rows(shop_db.fetch_orders(shop, since=lo, until=mid))
    right = _rows(shop_db.fetch_orders(shop, since=mid, until=hi))
    whole = _rows(shop_db.fetch_orders(shop, since=lo, until=hi))
    assert left + right == whole
    assert all(lo <= o["updated_at"] < mid for o in left)
    assert any(o["updated_at"] == mid for o in right)  # the boundary row belongs to the later window
    assert whole == [o for o in everything if lo <= o["updated_at"] < hi]

    # Datetimes and other offsets mean the same instants; sub-second bounds stay exact.
    as_dt = _rows(shop_db.fetch_orders(shop, since=to_utc(lo).astimezone(timezone(timedelta(hours=5))),
                                       until=to_utc(mid)))
    assert as_dt == left
    just_after = to_utc(mid) + timedelta(microseconds=1)
    assert _rows(shop_db.fetch_orders(shop, until=just_after)) == [o for o in everything if o["updated_at"] <= mid]

    pages = list(shop_db.fetch_orders(shop, page_size=50))
    assert [len(p) for p in pages] == [50, 50, 20]
    assert _rows(shop_db.fetch_orders(shop, since=iso_utc(to_utc(everything[-1]["updated_at"]) + timedelta(seconds=1)))) == []


def test_high_water_mark_is_the_newest_updated_at(shop, tmp_path):
    assert shop_db.high_water_mark(shop) == max(o["updated_at"] for o in _rows(shop_db.fetch_orders(shop)))
    assert shop_db.high_water_mark(shop, "customers") == max(c["updated_at"] for c in shop_db.fetch_customers(shop))
    empty = shop_db.create_shop(tmp_path / "empty.db", orders=0, customers=1)
    assert shop_db.high_water_mark(empty) is None
    with pytest.raises(ValueError, match="unknown table"):
        shop_db.high_water_mark(shop, "orders; DROP TABLE orders")


def test_readers_never_create_a_missing_database(tmp_path):
    missing = tmp_path / "nope.db"
    with pytest.raises(FileNotFoundError, match="create_shop"):
        shop_db.fetch_orders(missing)
    with pytest.raises(FileNotFoundError):
        shop_db.high_water_mark(missing)
    assert not missing.exists()


# ------------------------------------------------------------------------------- events API


@pytest.fixture
def api():
    server, thread, base_url = events_api.serve("127.0.0.1", 0, seed=3, events=500)
    try:
        yield server, base_url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _get(url: str) -> dict:
    with _NO_PROXY.open(url, timeout=5) as response:
        return json.loads(response.read())


def _post(url: str) -> dict:
    with _NO_PROXY.open(urllib.request.Request(url, method="POST"), timeout=5) as response:
        return json.loads(response.read())


def test_api_pages_newest_first_until_the_last_page(api):
    server, url = api
    assert url.startswith("http://127.0.0.1:")
    assert _get(f"{url}/health")["events"] == 500

    pages = list(events_api.iter_event_pages(url, page_size=64))
    assert [len(p) for p in pages] == [64] * 7 + [52]
    items = _rows(pages)
    times = [i["created_at"] for i in items]
    assert times == sorted(times, reverse=True) and all(CANONICAL.match(t) for t in times)
    assert len({i["event_id"] for i in items}) == 500
    assert set(items[0]) == {"event_id", "user_id", "type", "created_at", "payload"}
    assert set(items[0]["payload"]) == {"path", "ms"}
    assert server.requests["/events"] == 8  # no request past the last page

    last = _get(f"{url}/events?page=8&page_size=64")
    assert len(last["items"]) == 52 and last["next_page"] is None
    assert _get(f"{url}/events?page=1&page_size=64")["next_page"] == 2
    assert _get(f"{url}/events?page=9&page_size=64") == {"items": [], "next_page": None}


def test_api_since_until_filter_half_open(api):
    _, url = api
    items = _rows(events_api.iter_event_pages(url, page_size=500))
    since, until = items[300]["created_at"], items[100]["created_at"]
    got = _rows(events_api.iter_event_pages(url, page_size=50, since=since))
    assert got == [i for i in items if i["created_at"] >= since]
    windowed = _get(f"{url}/events?page=1&page_size=1000&since={since}&until={until}")["items"]
    assert windowed == [i for i in items if since <= i["created_at"] < until]


def test_api_is_deterministic_per_seed():
    a = events_api.EventStore(seed=3, events=200).page(1, 200)
    b = events_api.EventStore(seed=3, events=200).page(1, 200)
    c = events_api.EventStore(seed=4, events=200).page(1, 200)
    assert a == b and a != c
    # Revealing events step by step gives the same events as generating them at once.
    grown = events_api.EventStore(seed=3, events=150)
    grown.advance(50)
    assert grown.page(1, 200) == a


def test_api_advance_appends_newer_events(api):
    server, url = api
    newest = events_api.latest_event_time(url)
    body = _post(f"{url}/advance?n=7")
    assert body["added"] == 7 and body["events"] == 507
    assert events_api.latest_event_time(url) == body["newest"] >= newest
    first = next(events_api.iter_event_pages(url, page_size=7))
    assert all(i["created_at"] >= newest for i in first)
    assert {i["event_id"] for i in first} == {f"evt_{n:08d}" for n in range(501, 508)}


def test_api_client_is_lazy_one_request_per_page(api):
    server, url = api
    pages = events_api.iter_event_pages(url, page_size=10)
    assert server.requests["/events"] == 0  # creating the generator requests nothing
    first = next(pages)
    assert len(first) == 10 and server.requests["/events"] == 1
    next(pages)
    assert server.requests["/events"] == 2
    pages.close()
    assert server.requests["/events"] == 2


def test_api_latest_event_time_is_one_small_request(api):
    server, url = api
    assert events_api.latest_event_time(url) == _get(f"{url}/health")["newest"]
    assert server.requests["/events"] == 1


def test_api_rejects_bad_requests_with_a_reason(api):
    _, url = api
    for query, reason in [("page=0", "page must be"), ("page_size=5000", "page_size must be"),
                          ("since=yesterday", "ISO-8601"), ("colour=red", "unknown query parameter")]:
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(f"{url}/events?{query}")
        assert err.value.code == 400 and reason in json.loads(err.value.read())["error"]
    with pytest.raises(events_api.EventsApiError, match="HTTP 404"):
        events_api.latest_event_time(f"{url}/nope")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "8.8.8.8", "example.com", ""])
def test_api_refuses_non_loopback_hosts(host):
    with pytest.raises(ValueError, match="loopback only"):
        events_api.serve(host, 0)


def test_api_client_refuses_non_loopback_urls():
    with pytest.raises(ValueError, match="loopback only"):
        events_api.iter_event_pages("http://example.com/api")
    with pytest.raises(ValueError, match="loopback only"):
        events_api.latest_event_time("http://10.0.0.1:8765")


# ------------------------------------------------------------------------------ event files


@pytest.fixture
def files(tmp_path):
    root = tmp_path / "events"
    event_files.write_event_days(root, "2024-03-01", 3, per_day=40, seed=11)
    return root


def test_write_event_days_layout_and_determinism(files, tmp_path):
    assert sorted(p.name for p in files.iterdir()) == ["dt=2024-03-01", "dt=2024-03-02", "dt=2024-03-03"]
    day2 = event_files.read_day_rows(files, "2024-03-02")
    assert len(day2) == 40 and len({r["event_id"] for r in day2}) == 40
    assert set(day2[0]) == {"event_id", "user_id", "kind", "value", "event_time"}
    assert all(r["event_time"].startswith("2024-03-02T") and CANONICAL.match(r["event_time"]) for r in day2)
    # A day's file does not depend on which range it was written with.
    alone = tmp_path / "alone"
    event_files.write_event_days(alone, date(2024, 3, 2), 1, per_day=40, seed=11)
    assert event_files.read_day_rows(alone, "2024-03-02") == day2
    event_files.write_event_days(alone, date(2024, 3, 2), 1, per_day=40, seed=12)
    assert event_files.read_day_rows(alone, "2024-03-02") != day2


def test_write_event_days_stops_at_now(tmp_path):
    root = tmp_path / "events"
    paths = event_files.write_event_days(root, "2024-03-01", 5, per_day=40, now="2024-03-02T12:00:00Z")
    assert [p.parent.name for p in paths] == ["dt=2024-03-01", "dt=2024-03-02"]
    assert all(r["event_time"] < "2024-03-02T12:00:00Z" for r in event_files.read_day_rows(root, "2024-03-02"))


def test_an_empty_day_file_reads_as_no_rows(tmp_path):
    root = tmp_path / "events"
    event_files.write_event_days(root, "2024-03-01", 1, per_day=40, now="2024-03-01T00:00:00.5Z")
    assert event_files.day_path(root, "2024-03-01").stat().st_size == 0
    assert event_files.read_events_arrow(root, "2024-03-01", "2024-03-02").num_rows == 0


def test_read_events_arrow_windows_are_half_open(files):
    everything = event_files.read_events_arrow(files, "2024-03-01", "2024-03-04")
    assert everything.num_rows == 120 and everything.schema == event_files.ARROW_SCHEMA
    day2 = event_files.read_events_arrow(files, date(2024, 3, 2), date(2024, 3, 3))
    assert day2["event_id"].to_pylist() == [r["event_id"] for r in event_files.read_day_rows(files, "2024-03-02")]

    cut = everything["event_time"][70].as_py()
    left = event_files.read_events_arrow(files, "2024-03-01", cut)
    right = event_files.read_events_arrow(files, cut, "2024-03-04")
    assert left.num_rows + right.num_rows == 120
    assert right["event_time"][0].as_py() == cut  # the boundary row goes to the later window
    assert not set(left["event_id"].to_pylist()) & set(right["event_id"].to_pylist())
    assert event_files.read_events_arrow(files, "2024-04-01", "2024-04-02").num_rows == 0


def test_mutate_day_removes_changes_and_adds_rows(files):
    before = {r["event_id"]: r for r in event_files.read_day_rows(files, "2024-03-02")}
    changes = event_files.mutate_day(files, "2024-03-02", seed=5, remove=0.1, change=0.1, add=3)
    after = {r["event_id"]: r for r in event_files.read_day_rows(files, "2024-03-02")}
    assert len(changes["removed"]) == 4 and len(changes["changed"]) == 4 and len(changes["added"]) == 3
    assert not set(changes["removed"]) & set(after)
    assert set(changes["added"]) == set(after) - set(before)
    assert all(after[i] != before[i] for i in changes["changed"])
    assert all(after[i] == before[i] for i in after.keys() & before.keys() if i not in changes["changed"])
    window = event_files.read_events_arrow(files, "2024-03-02", "2024-03-03")
    assert sorted(window["event_id"].to_pylist()) == sorted(after)
    assert all(r["event_time"].startswith("2024-03-02T") for r in after.values())
    # Other days are untouched.
    assert event_files.read_events_arrow(files, "2024-03-01", "2024-03-02").num_rows == 40


@pytest.mark.spark
def test_read_events_spark_matches_arrow_on_a_half_open_window(spark, files):
    from pyspark.sql.types import TimestampType

    event_files.mutate_day(files, "2024-03-02", seed=5)
    everything = event_files.read_events_arrow(files, "2024-03-01", "2024-03-04")
    start = everything["event_time"][30].as_py()
    end = everything["event_time"][90].as_py()
    df = event_files.read_events_spark(spark, files, start, end.isoformat())
    assert isinstance(df.schema["event_time"].dataType, TimestampType)
    expected = event_files.read_events_arrow(files, start, end)
    # Epoch seconds: collected Spark timestamps are naive local times, epochs are unambiguous.
    got = df.orderBy("event_time", "event_id").selectExpr(
        "event_id", "value", "CAST(event_time AS BIGINT) AS epoch").collect()
    assert [r.event_id for r in got] == expected["event_id"].to_pylist()
    assert [r.value for r in got] == expected["value"].to_pylist()
    assert [r.epoch for r in got] == [int(t.timestamp()) for t in expected["event_time"].to_pylist()]
    assert event_files.read_events_spark(spark, files, "2024-05-01", "2024-05-02").collect() == []


# ------------------------------------------------------------------------------------- CLI


def test_simulate_cli_init_then_step(tmp_path, capsys):
    from definitions import simulate

    before = datetime.now(timezone.utc).date()
    simulate.main(["init", "--data-dir", str(tmp_path), "--orders", "50", "--customers", "10",
                   "--per-day", "20"])
    db, root = tmp_path / "shop.db", tmp_path / "events"
    assert len(_rows(shop_db.fetch_orders(db))) == 50
    days = sorted(p.name for p in root.iterdir())
    assert len(days) == 14 and days[-1] in {f"dt={before}", f"dt={datetime.now(timezone.utc).date()}"}
    hwm = shop_db.high_water_mark(db)

    simulate.main(["step", "--data-dir", str(tmp_path), "--per-day", "20"])
    assert shop_db.high_water_mark(db) > hwm and shop_db.shop_state(db)["steps"] == "1"
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 4 and out[0].startswith("shop db ") and out[3].startswith("event file ")

    with pytest.raises(SystemExit, match="no shop database"):
        simulate.main(["step", "--data-dir", str(tmp_path / "missing")])
