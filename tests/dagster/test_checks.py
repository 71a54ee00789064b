"""The asset checks of incremental assets (primary_key_unique, cursor_fresh) as users see them:
in the run's events, after runs that write nothing (no JVM), on backfills, and through
Dagster's GraphQL API, which is what the UI's Checks tab reads."""

from __future__ import annotations

import json
import textwrap
import uuid
from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from attack_support import io_manager_for, materialize, source_asset, write_config
from catalogs import PYICEBERG_COMMITS
from dagster_incremental.dagster.decorator import incremental_settings
from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.dagster import checks
from dagster_incremental.errors import IncrementalConfigError

WARN, ERROR = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR


@pytest.fixture
def where(tmp_path, spark_warehouse):
    """(config path, io manager) on a fresh namespace of the session's warehouse."""
    namespace = "checks_" + uuid.uuid4().hex[:8]
    return write_config(tmp_path / "config.toml", spark_warehouse, namespace), io_manager_for(spark_warehouse, namespace)


def evaluations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    assert result.success
    found = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return {e.check_name: e for e in found}


def values(evaluation: dg.AssetCheckEvaluation) -> dict:
    return {k: v.value for k, v in evaluation.metadata.items()}


def ago(**delta) -> str:
    return (datetime.now(timezone.utc) - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def timed_asset(config: str, source: dict, *, strategy=None, **kwargs):
    """An asset on a timestamp cursor `updated_at` delivering source["rows"]."""
    default = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")

    def timed(updated_at: Incremental = default):
        return list(source["rows"])

    disposition = {"disposition": "merge", "strategy": strategy} if strategy else "append"
    return incremental_asset(config_path=config, write_disposition=disposition, **kwargs)(timed)


# -- primary_key_unique -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["upsert", "append", "scd2"])
def test_primary_key_unique_passes_after_normal_runs(spark, instance, where, strategy):
    config, io = where
    loads = [[{"id": 1, "v": "a", "updated": 1}, {"id": 2, "v": "a", "updated": 1}],
             [{"id": 1, "v": "b", "updated": 2}] if strategy != "append" else [{"id": 3, "v": "b", "updated": 2}]]
    source = {"rows": loads[0]}
    asset = source_asset("pk_" + strategy, config, strategy, lambda: source["rows"])
    for load in loads:
        source["rows"] = load
        found = evaluations(materialize(asset, instance, io))
        assert set(found) == {"primary_key_unique"}  # no freshness: no cursor_fresh
        check = found["primary_key_unique"]
        assert check.passed and check.severity == WARN and values(check)["duplicated_keys"] == 0
    if strategy == "scd2":  # two versions of key 1, one current
        assert spark.table(io.table_name(dg.AssetKey("pk_scd2")).sql).where("id = 1").count() == 2
        assert values(check)["scope"] == "current versions"


def test_primary_key_unique_fails_on_a_key_loaded_twice(instance, where):
    config, io = where
    source = {"rows": [{"id": 1, "updated": 1}, {"id": 2, "updated": 2}]}
    default = incremental("updated", initial_value=0)

    def twice(updated: Incremental = default):
        return source["rows"]

    asset = incremental_asset(primary_key="id", config_path=config, check_severity="ERROR")(twice)
    assert evaluations(materialize(asset, instance, io))["primary_key_unique"].passed
    source["rows"] = [{"id": 1, "updated": 3}]  # key 1 again, with a newer cursor: appended
    check = evaluations(materialize(asset, instance, io))["primary_key_unique"]
    assert not check.passed and check.severity == ERROR
    assert values(check)["duplicated_keys"] == 1 and values(check)["example_keys"] == [1]


def test_a_run_that_used_spark_has_its_keys_counted_in_the_process(spark, instance, where, monkeypatch):
    """A run whose batch is a Spark DataFrame (so Spark is running) still has its keys counted
    from the key columns in this process, not by a Spark job: the same duplicates are found."""
    config, io = where
    source = {"day": 1}
    default = incremental("updated", initial_value=0)

    def frame(updated: Incremental = default):
        return spark.createDataFrame([(1, source["day"]), (2, source["day"])], "id long, updated long")

    asset = incremental_asset(primary_key="id", config_path=config)(frame)
    monkeypatch.setattr(type(io.tables), "duplicate_keys", lambda *a, **k: pytest.fail("counted by a Spark job"))
    assert evaluations(materialize(asset, instance, io))["primary_key_unique"].passed
    source["day"] = 2  # keys 1 and 2 again, with a newer cursor: appended
    check = evaluations(materialize(asset, instance, io))["primary_key_unique"]
    assert not check.passed and values(check)["duplicated_keys"] == 2
    assert sorted(values(check)["example_keys"]) == [1, 2]


def test_an_upsert_keeps_keys_unique_without_a_count_until_another_writer_commits(spark, instance, where, monkeypatch):
    """A table this run created from its deduplicated batch, and after that a run whose only
    commits are its MERGE on the key, pass without a Spark aggregation; a commit by another writer (here a plain INSERT of a duplicate) makes the next
    run count again, and it finds the duplicate."""
    config, io = where
    source = {"rows": [{"id": 1, "v": "a", "updated": 1}, {"id": 2, "v": "a", "updated": 1}]}
    asset = source_asset("pk_kept", config, "upsert", lambda: source["rows"])
    counted = []
    for count in ("duplicate_keys", "duplicate_keys_without_jvm"):  # by Spark, or in the process
        original = getattr(type(io.tables), count)
        monkeypatch.setattr(type(io.tables), count, lambda self, *a, _o=original, **k: counted.append(1) or _o(self, *a, **k))
    first = evaluations(materialize(asset, instance, io))["primary_key_unique"]  # a new table from a deduplicated batch
    assert first.passed and "since the table's creation" in values(first)["unique_since_count"]
    for updated in (2, 3):
        source["rows"] = [{"id": 1, "v": f"v{updated}", "updated": updated}, {"id": 9, "v": "n", "updated": updated}]
        check = evaluations(materialize(asset, instance, io))["primary_key_unique"]
        assert check.passed and "kept by this run's MERGE" in values(check)["unique_since_count"]
    assert counted == [], "a MERGE on the key since the last count needs no count"

    spark.sql(f"INSERT INTO {io.table_name(dg.AssetKey('pk_kept')).sql} VALUES (2, 'dup', 3)")  # another writer
    source["rows"] = [{"id": 1, "v": "v4", "updated": 4}]
    check = evaluations(materialize(asset, instance, io))["primary_key_unique"]
    assert counted == [1] and not check.passed and values(check)["example_keys"] == [2]


@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_keys_counted_without_a_jvm_agree_with_spark(spark, spark_warehouse, tmp_path, table_format, monkeypatch):
    """The in-process count (pyiceberg / delta-rs, pyarrow) a run that started no JVM gets, and
    Spark's aggregation, on a table with a duplicated key, a NULL key twice and an scd2 history
    whose retired versions repeat a key (duplicates among current versions only: key 3). A table
    whose keys would not sit in memory is left to Spark."""
    from dagster_incremental import SparkTableIOManager

    namespace = "keys_" + uuid.uuid4().hex[:8]
    warehouse = spark_warehouse if table_format == "iceberg" else str(tmp_path / "delta")
    io = SparkTableIOManager(catalog="lake", namespace=namespace, warehouse=warehouse, table_format=table_format)
    table = io.table_name(dg.AssetKey("people"))
    rows = [(1, None), (1, "2024-01-01 00:00:00"), (2, None), (3, None), (3, None), (None, None), (None, "2024-01-01 00:00:00"),
            (None, None)]
    frame = spark.createDataFrame(rows, "ID long, _valid_to string").selectExpr("ID", "CAST(_valid_to AS timestamp) AS _valid_to")
    if table_format == "iceberg":
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{namespace}")
        frame.writeTo(table.sql).using("iceberg").create()
    else:
        frame.write.format("delta").save(table.location)
    snapshot = io.tables.snapshot(table)
    for current, count in ((None, 3), (("_valid_to", None), 2)):
        options = {"snapshot_id": snapshot, "current": current, "examples": 5}
        local = io.tables.duplicate_keys_without_jvm(table, ["id"], **options)  # the table spells it ID
        by_spark = io.tables.duplicate_keys(table, ["id"], **options)
        assert local is not None and local.count == by_spark.count == count
        assert sorted(local.examples, key=str) == sorted(by_spark.examples, key=str)
    monkeypatch.setattr("dagster_incremental.spark.local.key_check.MAX_ROWS", len(rows) - 1)
    assert io.tables.duplicate_keys_without_jvm(table, ["id"], snapshot_id=snapshot, current=None, examples=5) is None  # Spark's


def test_a_column_mapped_delta_table_has_its_keys_counted_by_spark(spark, tmp_path):
    """delta-rs's Arrow reader reads a column-mapped table's columns as NULLs, so the in-process
    count steps aside for it (None: Spark counts) instead of reporting every key as one NULL key."""
    from dagster_incremental import SparkTableIOManager

    io = SparkTableIOManager(catalog="lake", namespace="mapped", warehouse=str(tmp_path / "delta"), table_format="delta")
    table = io.table_name(dg.AssetKey("people"))
    spark.createDataFrame([(1, "a"), (2, "b")], "`order id` long, name string").write.format("delta").option(
        "delta.columnMapping.mode", "name").option("delta.minReaderVersion", "2").option(
        "delta.minWriterVersion", "5").save(table.location)
    snapshot = io.tables.snapshot(table)
    options = {"snapshot_id": snapshot, "current": None, "examples": 5}
    assert io.tables.duplicate_keys_without_jvm(table, ["order id"], **options) is None
    assert io.tables.duplicate_keys(table, ["order id"], **options).count == 0


# -- cursor_fresh ---------------------------------------------------------------------------------


def test_cursor_fresh_passes_then_fails_once_the_source_stops(instance, where, monkeypatch):
    config, io = where
    source = {"rows": [{"id": 1, "updated_at": ago(minutes=10)}]}
    asset = timed_asset(config, source, strategy="upsert", primary_key="id", freshness="PT2H", check_severity="error")
    fresh = evaluations(materialize(asset, instance, io))["cursor_fresh"]
    assert fresh.passed and fresh.severity == ERROR
    assert values(fresh)["last_value"] == source["rows"][0]["updated_at"]
    assert values(fresh)["freshness_seconds"] == 7200 and 500 < values(fresh)["age_seconds"] < 1200

    class ThreeHoursLater(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(hours=3)

    monkeypatch.setattr(checks, "datetime", ThreeHoursLater)
    source["rows"] = []  # the source stopped producing: the cursor stays where it was
    stale = evaluations(materialize(asset, instance, io))["cursor_fresh"]
    assert not stale.passed and stale.severity == ERROR
    assert values(stale)["last_value"] == values(fresh)["last_value"] and values(stale)["age_seconds"] > 7200


def test_a_cursor_without_value_is_not_fresh():
    settings = _Settings({"updated_at": None}, timedelta(hours=1))
    passed, meta, text = checks.cursor_fresh(settings, {"last_value": None})
    assert not passed and "no last_value" in text


def test_date_cursors_count_until_the_end_of_their_day_and_the_stalest_cursor_decides():
    now = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
    one = _Settings({"day": None}, timedelta(hours=13))
    # 2026-11-22 ends at 2026-11-23T00:00Z: 12 hours before now
    assert checks.cursor_fresh(one, {"last_value": "2026-11-22", "cursor_type": "date"}, now)[0]
    assert not checks.cursor_fresh(one, {"last_value": "2026-11-21", "cursor_type": "date"}, now)[0]
    two = _Settings({"a": None, "b": None}, timedelta(hours=1))
    state = {"a": {"last_value": "2026-11-23T11:30:00Z", "cursor_type": "timestamp"},
             "b": {"last_value": "2026-11-23T09:00:00Z", "cursor_type": "timestamp"}}
    passed, meta, _ = checks.cursor_fresh(two, state, now)
    assert not passed and meta["cursor"].value == "b" and meta["age_seconds"].value == 3 * 3600


class _Settings:
    def __init__(self, cursors, freshness):
        self.cursors, self.freshness = cursors, freshness


# -- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", [timedelta(hours=2), "PT2H", "P0DT1H60M", 7200, 7200.0])
def test_freshness_is_a_timedelta_an_iso_duration_or_seconds(tmp_path, given):
    config = write_config(tmp_path / "config.toml", str(tmp_path / "wh"), "x")
    asset = timed_asset(config, {"rows": []}, freshness=given)
    assert [s.name for s in asset.check_specs] == ["cursor_fresh"]


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"freshness": "2 hours"}, "freshness='2 hours' is not an ISO-8601 duration"),
        ({"freshness": "P1M"}, "freshness='P1M' is not an ISO-8601 duration"),  # months have no fixed length
        ({"freshness": -5}, "freshness=-5 is not allowed"),
        ({"check_severity": "FATAL"}, 'check_severity=\'FATAL\' is not allowed; use "WARN" or "ERROR"'),
    ],
)
def test_bad_check_settings_name_the_asset(tmp_path, kwargs, expected):
    config = write_config(tmp_path / "config.toml", str(tmp_path / "wh"), "x")
    with pytest.raises(IncrementalConfigError, match="asset 'timed'") as raised:
        timed_asset(config, {"rows": []}, **kwargs)
    assert expected in str(raised.value)


def test_check_settings_in_config_toml_win_and_errors_name_the_line(tmp_path):
    config = write_config(tmp_path / "config.toml", str(tmp_path / "wh"), "x",
                          '[assets.timed]\nfreshness = "PT3H"\ncheck_severity = "error"\n')
    asset = timed_asset(config, {"rows": []}, freshness="PT2H")
    settings = incremental_settings(asset)
    assert settings.freshness == timedelta(hours=3) and settings.check_severity == "ERROR"
    bad = write_config(tmp_path / "bad.toml", str(tmp_path / "wh"), "x", '[assets.timed]\ncheck_severity = "loud"\n')
    with pytest.raises(IncrementalConfigError) as raised:
        timed_asset(bad, {"rows": []})
    text = str(raised.value)
    assert "bad.toml" in text and "[assets.timed]" in text and "check_severity" in text and "line 6" in text


def test_freshness_on_number_cursors_is_refused_at_definition(tmp_path):
    config = write_config(tmp_path / "config.toml", str(tmp_path / "wh"), "x")
    with pytest.raises(IncrementalConfigError, match=r"asset 'numbered': freshness needs a cursor of dates") as raised:
        incremental_asset(name="numbered", config_path=config, freshness="PT1H")(_numbered)
    assert "updated (number)" in str(raised.value)


def _numbered(updated: Incremental = incremental("updated", initial_value=0)):
    return []


# -- runs without Spark, backfills ------------------------------------------------------------------


def test_a_run_with_nothing_to_write_starts_no_jvm_and_still_yields_both_checks(instance, where, monkeypatch):
    config, io = where
    source = {"rows": [{"id": 1, "updated_at": ago(minutes=5)}, {"id": 2, "updated_at": ago(minutes=1)}]}
    asset = timed_asset(config, source, strategy="upsert", primary_key="id", freshness=timedelta(hours=1))
    first = materialize(asset, instance, io)
    counted = evaluations(first)["primary_key_unique"]
    source["rows"] = []

    def refuse(conf):
        raise AssertionError("this run started Spark")

    monkeypatch.setattr("dagster_incremental.spark.session.build_spark_session", refuse)
    quiet = io_manager_for(io.warehouse, io.namespace)  # a new process's IO manager: no session yet
    found = evaluations(materialize(asset, instance, quiet))
    assert found["cursor_fresh"].passed
    reused = found["primary_key_unique"]
    assert reused.passed and values(reused)["evaluated_in_run"] == first.run_id
    assert values(reused)["snapshot_id"] == values(counted)["snapshot_id"]


def test_a_partition_backfill_checks_its_window_and_the_live_cursor(instance, where):
    config, io = where
    today = datetime.now(timezone.utc).date()
    days = dg.DailyPartitionsDefinition(start_date=(today - timedelta(days=5)).isoformat(), end_offset=1)
    source = {"rows": [{"id": "live", "event_time": max(ago(minutes=10), f"{today}T00:00:00Z")}]}
    default = incremental("event_time", initial_value=f"{today - timedelta(days=5)}T00:00:00Z")

    def events(event_time: Incremental = default):
        start = event_time.start_value
        return [r for r in source["rows"] if r["event_time"] >= start.strftime("%Y-%m-%dT%H:%M:%SZ")]

    asset = incremental_asset(primary_key="id", partitions_def=days, config_path=config, freshness="PT1H",
                              write_disposition={"disposition": "merge", "strategy": "delete-insert"})(events)
    assert evaluations(materialize(asset, instance, io, partition_key=today.isoformat()))["cursor_fresh"].passed
    past = [today - timedelta(days=3), today - timedelta(days=2)]
    source["rows"] = [{"id": f"old{i}", "event_time": f"{d}T08:00:00Z"} for i, d in enumerate(past)]
    key_range = dg.PartitionKeyRange(past[0].isoformat(), past[1].isoformat())
    found = evaluations(materialize(asset, instance, io, tags={
        "dagster/asset_partition_range_start": key_range.start, "dagster/asset_partition_range_end": key_range.end}))
    assert found["primary_key_unique"].passed
    assert values(found["primary_key_unique"])["scope"].startswith("rows with event_time in [")
    fresh = found["cursor_fresh"]  # the live cursor (today's), untouched by the backfill
    assert fresh.passed and values(fresh)["last_value"] == source_last(instance)


def test_checks_of_a_partitioned_asset_are_recorded_per_partition(instance, where):
    """A partition run records each check for its partition; a run over a range records the
    range's outcome for every partition of it, so the UI shows each partition's own."""
    config, io = where
    today = datetime.now(timezone.utc).date()
    days = dg.DailyPartitionsDefinition(start_date=(today - timedelta(days=5)).isoformat(), end_offset=1)
    past = [today - timedelta(days=3), today - timedelta(days=2)]
    source = {"rows": [{"id": "now", "event_time": f"{today}T00:00:00Z"}]}

    def events(event_time: Incremental = incremental("event_time", initial_value=f"{past[0]}T00:00:00Z")):
        return list(source["rows"])

    asset = incremental_asset(primary_key="id", partitions_def=days, config_path=config, freshness="PT48H",
                              write_disposition={"disposition": "merge", "strategy": "delete-insert"})(events)
    assert {spec.partitions_def for spec in asset.check_specs} == {days}
    one = materialize(asset, instance, io, partition_key=today.isoformat())
    assert {(e.check_name, e.partition) for e in all_evaluations(one)} == {
        ("primary_key_unique", today.isoformat()), ("cursor_fresh", today.isoformat())}
    source["rows"] = [{"id": f"old{i}", "event_time": f"{d}T08:00:00Z"} for i, d in enumerate(past)]
    ranged = materialize(asset, instance, io, tags={
        "dagster/asset_partition_range_start": past[0].isoformat(), "dagster/asset_partition_range_end": past[1].isoformat()})
    keys = [d.isoformat() for d in past]
    unique = {e.partition: e for e in all_evaluations(ranged) if e.check_name == "primary_key_unique"}
    assert set(unique) == set(keys)
    assert all(e.passed and e.metadata["scope"].value.startswith("rows with event_time in [") for e in unique.values())
    fresh = {e.partition for e in all_evaluations(ranged) if e.check_name == "cursor_fresh"}
    assert fresh == set(keys)
    history = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey("events"), "primary_key_unique"), limit=10)
    assert {(r.partition, r.status.value) for r in history} == {
        (today.isoformat(), "SUCCEEDED"), (keys[0], "SUCCEEDED"), (keys[1], "SUCCEEDED")}


def all_evaluations(result: dg.ExecuteInProcessResult) -> list[dg.AssetCheckEvaluation]:
    assert result.success
    return [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]


def source_last(instance) -> str:
    records = instance.fetch_materializations(dg.AssetKey("events"), limit=50).records
    states = [r.asset_materialization.metadata["dagster_incremental/state"].value for r in records
              if r.asset_materialization.metadata["dagster_incremental/mode"].value == "incremental"]
    return states[0]["last_value"]


# -- the UI's view ----------------------------------------------------------------------------------

LOCATION = '''
import json, pathlib
import dagster as dg
from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

ROWS = pathlib.Path(__file__).with_name("rows.json")

@incremental_asset(primary_key="id", write_disposition={{"disposition": "merge", "strategy": "upsert"}},
                   config_path={config!r}, freshness="PT2H")
def shown(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")):
    return json.loads(ROWS.read_text())

defs = dg.Definitions(assets=[shown], resources={{"io_manager": SparkTableIOManager(
    catalog="lake", namespace={namespace!r}, warehouse={warehouse!r}, master="local[2]")}})
'''

QUERY = """
query Checks($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks {
          checks { name executionForLatestMaterialization { status evaluation { success severity } } }
        }
      }
    }
  }
}
"""


def test_the_ui_reads_both_checks_through_graphql(spark, instance, where, tmp_path):
    import importlib.util

    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    config, io = where
    module = tmp_path / "location.py"
    module.write_text(textwrap.dedent(LOCATION.format(config=config, namespace=io.namespace, warehouse=io.warehouse)))
    (tmp_path / "rows.json").write_text(json.dumps([{"id": 1, "updated_at": ago(minutes=3)}]))
    spec = importlib.util.spec_from_file_location("checks_location", module)
    location = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(location)
    assert materialize(location.shown, instance, io).success
    with define_out_of_process_context(str(module), None, instance) as context:
        result = execute_dagster_graphql(context, QUERY, {"key": {"path": ["shown"]}})
    checks_seen = result.data["assetNodeOrError"]["assetChecksOrError"]["checks"]
    outcome = {c["name"]: c["executionForLatestMaterialization"] for c in checks_seen}
    assert set(outcome) == {"primary_key_unique", "cursor_fresh"}
    for execution in outcome.values():
        assert execution["status"] == "SUCCEEDED"
        assert execution["evaluation"] == {"success": True, "severity": "WARN"}


@PYICEBERG_COMMITS
def test_a_change_run_committed_by_pyiceberg_counts_its_keys_without_spark(spark, instance, tmp_path, catalog, monkeypatch):
    """On each catalog pyiceberg commits to (a Hadoop folder, JDBC, REST), an append with a
    primary key: the change runs start no Spark for primary_key_unique, which passes, then fails
    naming the key loaded twice."""
    namespace = "pkjvm_" + uuid.uuid4().hex[:6]
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    source = {"rows": [{"id": 1, "updated": 1}, {"id": 2, "updated": 2}]}

    @incremental_asset(primary_key="id", config_path=str(config))
    def keyed(updated: Incremental = incremental("updated", initial_value=0)):
        return source["rows"]

    assert evaluations(materialize(keyed, instance, catalog.io_manager(namespace)))["primary_key_unique"].passed

    def refuse(conf):
        raise AssertionError("this run started Spark")

    monkeypatch.setattr("dagster_incremental.spark.session.build_spark_session", refuse)
    source["rows"] = [{"id": 3, "updated": 3}]
    check = evaluations(materialize(keyed, instance, catalog.io_manager(namespace)))["primary_key_unique"]
    assert check.passed and values(check)["duplicated_keys"] == 0
    source["rows"] = [{"id": 1, "updated": 4}]
    check = evaluations(materialize(keyed, instance, catalog.io_manager(namespace)))["primary_key_unique"]
    assert not check.passed and values(check)["example_keys"] == [1] and "e.g. 1" in (check.description or "")
