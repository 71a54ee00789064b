"""Runs cut into slices by `step`: one table commit per slice, the cursor committed with each, a
failed (or killed) run keeps the slices before the failure and the next run continues there."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster as dg
import pytest

import preloaded
from attack_support import committed_states, failure_text, materialize, rows, snapshots
from catalogs import HADOOP_ONLY, assert_other_readers_agree, to_env
from dagster_incremental import Incremental, incremental, incremental_asset

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
HOURS = 120  # five days of hourly rows


def first_hour() -> datetime:
    """The first row's time: five daily slices from it reach now (and hourly rows reach the hour)."""
    now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    return now - timedelta(hours=HOURS - 1)


def source_rows(start: datetime) -> list[dict]:
    return [{"id": i, "event_time": start + timedelta(hours=i), "value": i * 10} for i in range(HOURS)]


def sliced_asset(name: str, config: str, start: datetime, calls: list, fail_at: int | None = None, **spec):
    """An append asset over `source_rows(start)`; its source asks for the slice's window only,
    records each call's (start_value, end_value) and raises in call `fail_at`."""
    default = incremental("event_time", initial_value=start.isoformat(), step="P1D", **spec)
    data = source_rows(start)

    def body(context: dg.AssetExecutionContext, event_time: Incremental = default):
        calls.append((event_time.start_value, event_time.end_value))
        if fail_at is not None and len(calls) == fail_at:
            if os.environ.get("SLICE_KILL"):
                os.kill(os.getpid(), 9)
            raise RuntimeError(f"source down in call {fail_at}")
        low, high = event_time.start_value, event_time.end_value
        return [r for r in data if r["event_time"] >= low and (high is None or r["event_time"] < high)]

    body.__name__ = name
    return incremental_asset(name=name, primary_key="id", config_path=config)(body)


@pytest.fixture
def env(spark, catalog, tmp_path):
    """config.toml and IO manager of a fresh namespace on each catalog kind (tests/catalogs.py)."""
    namespace = "slices_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    return str(config), catalog.io_manager(namespace), namespace


def ids(spark, io, name: str) -> list[int]:
    """The table's ids in order (each loaded row once: a doubled row shows twice)."""
    return sorted(r[0] for r in rows(spark, io, name, ["id"]))


def slice_logs(instance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id) if e.user_message.startswith("slice ")]


def metadata(result: dg.ExecuteInProcessResult, name: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(name)[0].metadata.items()}


@HADOOP_ONLY
def test_a_long_run_commits_one_slice_at_a_time(spark, env, instance):
    config, io, _ = env
    start, calls = first_hour(), []
    asset = sliced_asset("five_days", config, start, calls)
    result = materialize(asset, instance, io)
    assert result.success, failure_text(result)

    assert len(calls) == 5  # the function was asked for each slice's window
    assert calls[0][0] == start and calls[1][0] == start + timedelta(days=1) and calls[-1][1] is None
    assert len(snapshots(spark, io, "five_days")) == 5
    states = committed_states(spark, io, "five_days")
    assert [s["last_value"][:13] for s in states] == [
        (start + timedelta(hours=24 * k + 23)).strftime("%Y-%m-%dT%H") for k in range(5)
    ]
    logs = slice_logs(instance, result.run_id)
    assert len(logs) == 5 and all(f"slice {k}/5 [" in line for k, line in enumerate(logs, 1))
    assert all(line.endswith(f"): 24 rows ({24 * k} so far)") for k, line in enumerate(logs, 1))
    meta = metadata(result, "five_days")
    assert meta["dagster_incremental/slices"] == [5, 5]
    assert meta["dagster_incremental/slices_committed"] == "5 of 5 slices"  # the same, labelled for the UI
    assert meta["dagster_incremental/rows_inserted"] == HOURS and meta["dagster/row_count"] == HOURS
    assert meta["dagster_incremental/state"]["last_value"] == states[-1]["last_value"]
    assert ids(spark, io, "five_days") == list(range(HOURS))

    again = materialize(asset, instance, io)  # nothing new: within one step, not sliced
    assert again.success and len(calls) == 6 and len(snapshots(spark, io, "five_days")) == 5

    # A full refresh rebuilds the table with the first slice and adds the others to it.
    refresh = materialize(asset, instance, io, run_config={"ops": {"five_days": {"config": {"full_refresh": True}}}})
    assert refresh.success, failure_text(refresh)
    assert metadata(refresh, "five_days")["dagster_incremental/slices"] == [5, 5]
    assert ids(spark, io, "five_days") == list(range(HOURS))


@HADOOP_ONLY
def test_a_failed_slice_keeps_the_slices_before_it_and_the_next_run_continues(spark, env, instance):
    config, io, _ = env
    start, calls = first_hour(), []
    # An older Dagster event (a seeded cursor at the start) must lose against the table's commits.
    instance.report_runless_asset_event(dg.AssetMaterialization(
        "fails_once", metadata={"dagster_incremental/state": dg.MetadataValue.json({"last_value": start.isoformat()})}
    ))
    failing = sliced_asset("fails_once", config, start, calls, fail_at=3)
    result = materialize(failing, instance, io)
    assert not result.success and "source down in call 3" in failure_text(result)
    assert ids(spark, io, "fails_once") == list(range(48))  # days one and two
    assert committed_states(spark, io, "fails_once")[-1]["last_value"][:13] == (
        start + timedelta(hours=47)).strftime("%Y-%m-%dT%H")
    assert any("slice 3/5 failed: slices 1-2 are committed" in e.user_message for e in instance.all_logs(result.run_id))

    fixed = sliced_asset("fails_once", config, start, calls)
    healed = materialize(fixed, instance, io)
    assert healed.success, failure_text(healed)
    assert calls[3][0] == start + timedelta(hours=47)  # continued from the table's cursor
    assert ids(spark, io, "fails_once") == list(range(HOURS))


def test_a_killed_slice_is_healed_by_the_next_run(spark, env, catalog, tmp_path):
    config, io, namespace = env
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    start = first_hour()
    child = f"""
import sys; sys.path[:0] = [{str(ROOT / 'tests')!r}, {str(ROOT / 'tests' / 'dagster')!r}]
from datetime import datetime
import dagster as dg
from attack_support import materialize
from catalogs import runner_spark_config, runner_table_format
from dagster_incremental import SparkTableIOManager
from test_slices import sliced_asset
name, conf = runner_spark_config({to_env(catalog)!r})
io = SparkTableIOManager(catalog=name, namespace={namespace!r}, warehouse={catalog.warehouse!r}, master="local[2]",
                         spark_config=conf, table_format=runner_table_format({to_env(catalog)!r}))
asset = sliced_asset("killed", {config!r}, datetime.fromisoformat({start.isoformat()!r}), [], fail_at=3)
with dg.DagsterInstance.get() as instance:
    materialize(asset, instance, io)
"""
    proc = preloaded.run(["-c", child], {**os.environ, "DAGSTER_HOME": str(home), "SLICE_KILL": "1",
                                         "PYTHONPATH": str(ROOT)}, ROOT, timeout=300)
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert ids(spark, io, "killed") == list(range(48))

    with dg.DagsterInstance.from_ref(dg._core.instance.InstanceRef.from_dir(str(home))) as instance:  # type: ignore[attr-defined]
        calls: list = []
        healed = materialize(sliced_asset("killed", config, start, calls), instance, io)
        assert healed.success, failure_text(healed)
    assert calls[0][0] == start + timedelta(hours=47)
    assert ids(spark, io, "killed") == list(range(HOURS))
    assert_other_readers_agree(catalog, spark, io.table_name(dg.AssetKey("killed")))


@HADOOP_ONLY
def test_a_window_backfill_replaces_one_sub_window_per_commit_and_is_idempotent(spark, env, instance):
    config, io, _ = env
    start, calls = first_hour(), []
    asset = sliced_asset("backfilled", config, start, calls)
    assert materialize(asset, instance, io).success
    before = rows(spark, io, "backfilled")
    commits = len(snapshots(spark, io, "backfilled"))
    window = {"initial_value": (start + timedelta(hours=12)).isoformat(),
              "end_value": (start + timedelta(days=3, hours=12)).isoformat()}
    run_config = {"ops": {"backfilled": {"config": window}}}
    for attempt in (1, 2):
        result = materialize(asset, instance, io, run_config=run_config)
        assert result.success, failure_text(result)
        assert metadata(result, "backfilled")["dagster_incremental/slices"] == [3, 3]
        assert metadata(result, "backfilled")["dagster_incremental/mode"] == "backfill"
        assert len(snapshots(spark, io, "backfilled")) == commits + 3 * attempt
        assert rows(spark, io, "backfilled") == before  # same rows, each once
    assert calls[-3:] == [
        (start + timedelta(hours=12), start + timedelta(days=1, hours=12)),
        (start + timedelta(days=1, hours=12), start + timedelta(days=2, hours=12)),
        (start + timedelta(days=2, hours=12), start + timedelta(days=3, hours=12)),
    ]
    # a backfill leaves the live cursor alone
    assert committed_states(spark, io, "backfilled")[-1]["last_value"][:13] == (
        start + timedelta(hours=HOURS - 1)).strftime("%Y-%m-%dT%H")


@HADOOP_ONLY
def test_a_partition_range_backfill_commits_one_day_per_slice(spark, env, instance):
    config, io, _ = env
    parts = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_date="2024-03-10")
    day0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    data = [{"id": i, "event_time": day0 + timedelta(hours=6 * i), "value": i} for i in range(4 * 8)]
    calls = []

    @incremental_asset(primary_key="id", partitions_def=parts, config_path=config,
                       write_disposition={"disposition": "merge", "strategy": "delete-insert"})
    def daily(context: dg.AssetExecutionContext, event_time: Incremental = incremental("event_time", step="P1D")):
        calls.append((event_time.start_value, event_time.end_value))
        return data

    tags = {"dagster/asset_partition_range_start": "2024-03-02", "dagster/asset_partition_range_end": "2024-03-04"}
    # the first load inserts each day's 4 rows; the re-run reloads identical rows: net change 0
    for attempt, per_day in ((1, 4), (2, 0)):
        result = materialize(daily, instance, io, tags=tags)
        assert result.success, failure_text(result)
        assert len(snapshots(spark, io, "daily")) == 3 * attempt
        assert ids(spark, io, "daily") == list(range(4, 16))  # days two to four, each row once
        events = result.asset_materializations_for_node("daily")
        assert sorted(e.partition for e in events) == ["2024-03-02", "2024-03-03", "2024-03-04"]
        meta = {k: v.value for k, v in events[0].metadata.items()}
        assert meta["dagster_incremental/slices"] == [3, 3] and meta["dagster_incremental/mode"] == "backfill"
        assert all(e.metadata["dagster_incremental/rows_inserted"].value == per_day for e in events)  # each day's own
        output = next(e.event_specific_data.metadata for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
        assert output["dagster_incremental/rows_inserted"].value == 3 * per_day  # the run's total
    assert [c[0].day for c in calls[-3:]] == [2, 3, 4] and [c[1].day for c in calls[-3:]] == [3, 4, 5]


def catch_up_asset(name: str, config: str, start: datetime, source: dict, step: str | None):
    """An append asset with freshness one day over source["rows"], from `start`, cut by `step`
    (None: unsliced); its source asks for the window it is given, as sliced_asset's does."""
    default = incremental("event_time", initial_value=start.isoformat(), step=step)

    def body(event_time: Incremental = default):
        low, high = event_time.start_value, event_time.end_value
        return [r for r in source["rows"] if r["event_time"] >= low and (high is None or r["event_time"] < high)]

    body.__name__ = name
    return incremental_asset(name=name, primary_key="id", config_path=config, freshness="P1D")(body)


def cursor_fresh(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    found = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return next(e for e in found if e.check_name == "cursor_fresh")


def resumable_state(spark, io, name: str) -> dict:
    """The table's newest cursor without start_value (which only reports where a run began)."""
    return {k: v for k, v in committed_states(spark, io, name)[-1].items() if k != "start_value"}


@HADOOP_ONLY
def test_slices_without_rows_leave_last_value_at_the_newest_row_as_an_unsliced_run_does(spark, env, instance):
    """A four-day catch-up whose data stops after day two: last_value is the newest row (not
    today's midnight), cursor_fresh says the source is stale, and rows that arrive late for day
    three are loaded by the next run. A sliced and an unsliced asset end alike."""
    config, io, _ = env
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=4)
    source = {"rows": [{"id": i, "event_time": start + timedelta(hours=i), "value": i} for i in range(48)]}
    newest = (start + timedelta(hours=47)).strftime("%Y-%m-%dT%H:%M:%S")
    sliced = catch_up_asset("catch_up", config, start, source, step="P1D")
    whole = catch_up_asset("catch_up_whole", config, start, source, step=None)

    result = materialize(sliced, instance, io)
    assert result.success, failure_text(result)
    assert metadata(result, "catch_up")["dagster_incremental/slices"][1] == 5
    assert committed_states(spark, io, "catch_up")[-1]["last_value"].startswith(newest)
    assert metadata(result, "catch_up")["dagster_incremental/state"]["last_value"].startswith(newest)
    stale = cursor_fresh(result)
    assert not stale.passed and stale.metadata["last_value"].value.startswith(newest)
    assert materialize(whole, instance, io).success

    late = {"id": 100, "event_time": start + timedelta(days=2, hours=10), "value": -1}  # day three
    source["rows"] = [*source["rows"], late]
    for asset in (sliced, whole):
        again = materialize(asset, instance, io)
        assert again.success, failure_text(again)
    assert ids(spark, io, "catch_up") == [*range(48), 100]
    assert rows(spark, io, "catch_up") == rows(spark, io, "catch_up_whole")
    assert resumable_state(spark, io, "catch_up") == resumable_state(spark, io, "catch_up_whole")
    assert committed_states(spark, io, "catch_up")[-1]["last_value"].startswith(
        (start + timedelta(days=2, hours=10)).strftime("%Y-%m-%dT%H:%M:%S"))


DAY0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
FIVE_DAYS = ["2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04", "2024-03-05"]


def day_rows(counts: list[int], changed: int | None = None) -> list[dict]:
    """`counts[d]` rows on day d (ids d*10+k); the row with id `changed` has another value."""
    return [
        {"id": d * 10 + k, "event_time": DAY0 + timedelta(days=d, hours=k), "value": 1 + (d * 10 + k == changed)}
        for d, n in enumerate(counts)
        for k in range(n)
    ]


def partition_metadata(result: dg.ExecuteInProcessResult, name: str) -> dict[str, dict]:
    return {
        e.partition: {k: v.value for k, v in e.metadata.items()} for e in result.asset_materializations_for_node(name)
    }


def figures(meta: dict) -> tuple[int, int, int]:
    return tuple(meta[f"dagster_incremental/rows_{kind}"] for kind in ("inserted", "updated", "deleted"))


# Every combination on the Hadoop catalog (what a partition's figures count does not depend on
# the catalog; unsliced ranges run on the JDBC catalog too in test_assets.py).
OWN_FIGURES = [("hadoop", d, s) for d in ("append", "delete-insert") for s in (None, "P1D", "P2D")]


@pytest.mark.parametrize("catalog, disposition, step", OWN_FIGURES, indirect=["catalog"],
                         ids=[f"{c}-{d}-{s}" for c, d, s in OWN_FIGURES])
def test_each_partition_of_a_ranged_backfill_shows_its_own_figures(spark, env, instance, disposition, step):
    """A 5-day backfill in one run (day four has no rows), then again after day one grew, day
    three emptied at the source and a day-five row changed: every partition's materialization
    carries its own counts and window, whether the run commits once, per day or per two days."""
    config, io, _ = env
    name = f"own_{disposition.replace('-', '_')}_{(step or 'whole').lower()}"
    parts = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_date="2024-03-10")
    source = {"rows": day_rows([3, 1, 2, 0, 4])}
    write = "append" if disposition == "append" else {"disposition": "merge", "strategy": disposition}

    def body(event_time: Incremental = incremental("event_time", step=step)):
        low, high = event_time.start_value, event_time.end_value
        return [r for r in source["rows"] if low <= r["event_time"] < high]

    body.__name__ = name
    asset = incremental_asset(name=name, primary_key="id", partitions_def=parts, config_path=config,
                              write_disposition=write)(body)
    tags = {"dagster/asset_partition_range_start": FIVE_DAYS[0], "dagster/asset_partition_range_end": FIVE_DAYS[-1]}

    first = materialize(asset, instance, io, tags=tags)
    assert first.success, failure_text(first)
    meta = partition_metadata(first, name)
    assert sorted(meta) == FIVE_DAYS
    assert [figures(meta[k]) for k in FIVE_DAYS] == [(3, 0, 0), (1, 0, 0), (2, 0, 0), (0, 0, 0), (4, 0, 0)]
    assert meta["2024-03-02"]["dagster_incremental/window"] == ["2024-03-02T00:00:00Z", "2024-03-03T00:00:00Z"]
    assert all("this partition's own" in m["dagster_incremental/counts_scope"] for m in meta.values())
    assert all(m["dagster_incremental/state"] == "null" for m in meta.values())  # no cursor: not a reset one
    assert all(m["dagster/row_count"] == 10 for m in meta.values())  # the whole table's, as said

    source["rows"] = day_rows([4, 1, 0, 0, 4], changed=41)
    second = materialize(asset, instance, io, tags=tags)
    assert second.success, failure_text(second)
    meta = partition_metadata(second, name)
    if disposition == "append":  # identical rows cancel out, as in the commit's own counts
        expected = [(1, 0, 0), (0, 0, 0), (0, 0, 2), (0, 0, 0), (1, 0, 1)]
    else:  # a keyed table counts the window's net change too: the changed row is an update
        expected = [(1, 0, 0), (0, 0, 0), (0, 0, 2), (0, 0, 0), (0, 1, 0)]
    assert [figures(meta[k]) for k in FIVE_DAYS] == expected
    output = next(e.event_specific_data.metadata for e in second.all_events if e.event_type_value == "STEP_OUTPUT")
    assert output["dagster_incremental/rows_inserted"].value == sum(f[0] for f in expected)  # the run's totals
    assert output["dagster_incremental/rows_deleted"].value == sum(f[2] for f in expected)
    assert sorted(ids(spark, io, name)) == [0, 1, 2, 3, 10, 40, 41, 42, 43]


@HADOOP_ONLY
def test_a_month_step_from_config_toml_cuts_at_calendar_months(spark, env, instance):
    """`step = "P1M"` cuts at calendar months (31, 29 and 31 days here), one commit each."""
    config, io, _ = env
    Path(config).write_text(Path(config).read_text() + (
        '[assets.monthly.event_time]\ncursor_path = "event_time"\ninitial_value = "2024-01-01T00:00:00Z"\n'
        'step = "P1M"\n'))
    day0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    data = [{"id": i, "event_time": day0 + timedelta(days=i)} for i in range(91)]  # Jan 1 .. Mar 31
    calls: list = []

    @incremental_asset(name="monthly", primary_key="id",
                       write_disposition={"disposition": "merge", "strategy": "upsert"}, config_path=config)
    def monthly(event_time: Incremental):
        calls.append((event_time.start_value, event_time.end_value))
        return [r for r in data if r["event_time"] >= event_time.start_value
                and (event_time.end_value is None or r["event_time"] < event_time.end_value)]

    window = {"ops": {"monthly": {"config": {"initial_value": "2024-01-01T00:00:00Z",
                                             "end_value": "2024-04-01T00:00:00Z"}}}}
    result = materialize(monthly, instance, io, run_config=window)
    assert result.success, failure_text(result)
    month = [datetime(2024, m, 1, tzinfo=timezone.utc) for m in (1, 2, 3, 4)]
    assert calls == list(zip(month, month[1:]))
    assert [line.split(": ")[-1] for line in slice_logs(instance, result.run_id)] == ["31 rows (31 so far)", "29 rows (60 so far)", "31 rows (91 so far)"]
    assert metadata(result, "monthly")["dagster_incremental/slices"] == [3, 3]
    assert ids(spark, io, "monthly") == list(range(91))

