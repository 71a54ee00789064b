"""Bad input through the real asset layer: a clear error, nothing written, the next good run works.

Three families (issue 5):
- config: config.toml / environment mistakes fail when the asset is defined (the code location
  load), naming the file, the section and the key; the table and the cursor stay as they were,
  and the asset defined from the corrected config runs.
- rows: what the user's function yields is wrong (cursor missing/None/mixed types, NULL key,
  values that can't be stored, a column type that conflicts with the table, reserved names);
- functions: the function yields a non-row, raises midway.

For rows and functions each case runs: a good run (creates the table and the cursor), the bad
run (must fail with a message naming what and where; the Iceberg snapshots and the Dagster
cursor unchanged), then a good run with one new row, which must succeed and load exactly it.
"""

from __future__ import annotations

import textwrap
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import dagster as dg
import pytest

from dagster_incremental.errors import IncrementalConfigError
from attack_support import (
    committed_states,
    dagster_state,
    failure_text,
    io_manager_for,
    materialize,
    rows,
    snapshots,
    source_asset,
    table_id,
    write_config,
)
from instances import fresh_instance

pytestmark = pytest.mark.spark

GOOD = [{"id": 1, "amount": 10, "updated": 1}, {"id": 2, "amount": 20, "updated": 2}]
NEXT = {"id": 3, "amount": 30, "updated": 3}


@pytest.fixture
def namespace():
    return "bad_" + uuid.uuid4().hex[:8]


@pytest.fixture
def io(spark, spark_warehouse, namespace):
    return io_manager_for(spark_warehouse, namespace)


# -- rows and functions ----------------------------------------------------------------------------


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def _gen_then_raise():
    yield {"id": 9, "amount": 90, "updated": 1_000_009}
    raise ConnectionError("source went away after one row")


def _gen_then_not_a_row():
    yield {"id": 9, "amount": 90, "updated": 1_000_009}
    yield 42


@dataclass
class RowCase:
    id: str
    bad: Callable[[], Any]
    expect: tuple[str, ...]  # substrings the failure must contain (what and where)
    strategy: str = "append"



ROW_CASES = [
    # cursor problems
    RowCase("cursor-missing-raise", lambda: [{"id": 9, "amount": 1}], ("updated", "its columns: id, amount")),
    RowCase("cursor-none-raise", lambda: [{"id": 9, "amount": 1, "updated": None}], ("updated", "None", "primary key id=9")),
    RowCase("cursor-mixed-types", lambda: [{"id": 8, "amount": 1, "updated": 1_000_008}, {"id": 9, "amount": 1, "updated": "soon"}],
            ("updated", "soon")),
    RowCase("cursor-type-vs-stored-state", lambda: [{"id": 9, "amount": 1, "updated": "2024-01-01T00:00:00Z"}],
            ("updated", "2024-01-01")),
    RowCase("cursor-unhashable-list", lambda: [{"id": 9, "amount": 1, "updated": [1, 2]}], ("updated", "[1, 2]")),
    RowCase("cursor-nan", lambda: [{"id": 9, "amount": 1, "updated": float("nan")}], ("updated", "nan")),
    # keys
    RowCase("null-primary-key-upsert", lambda: [{"id": None, "amount": 1, "updated": 1_000_009}], ("id", "NULL"), "upsert"),
    RowCase("null-primary-key-delete-insert", lambda: [{"id": None, "amount": 1, "updated": 1_000_009}], ("id", "NULL"), "delete-insert"),
    RowCase("null-primary-key-scd2", lambda: [{"id": None, "amount": 1, "updated": 1_000_009}], ("id", "NULL"), "scd2"),
    RowCase("primary-key-column-missing-upsert", lambda: [{"amount": 1, "updated": 1_000_009}], ("id",), "upsert"),
    # values and columns
    RowCase("unstorable-value", lambda: [{"id": 9, "amount": _Opaque(), "updated": 1_000_009}], ("amount",)),
    RowCase("unhashable-set-value", lambda: [{"id": 9, "amount": {1, 2}, "updated": 1_000_009}], ("amount",)),
    RowCase("rows-disagree-on-column-type", lambda: [{"id": 8, "amount": 1, "updated": 1_000_008}, {"id": 9, "amount": "x", "updated": 1_000_009}],
            ("amount",)),
    RowCase("column-type-conflicts-with-table", lambda: [{"id": 9, "amount": "ninety", "updated": 1_000_009}], ("amount",)),
    RowCase("reserved-valid-from-scd2", lambda: [{"id": 9, "amount": 1, "updated": 1_000_009, "_valid_from": "x"}], ("_valid_from",), "scd2"),
    RowCase("reserved-row-hash-scd2", lambda: [{"id": 9, "amount": 1, "updated": 1_000_009, "_row_hash": "x"}], ("_row_hash",), "scd2"),
    RowCase("reserved-helper-prefix-append", lambda: [{"id": 9, "amount": 1, "updated": 1_000_009, "__di_survivor": True}], ("__di_survivor",)),
    RowCase("reserved-helper-prefix-upsert", lambda: [{"id": 9, "amount": 1, "updated": 1_000_009, "__di_deleted": True}], ("__di_deleted",), "upsert"),
    # functions
    RowCase("yields-a-string", lambda: iter([{"id": 9, "amount": 1, "updated": 1_000_009}, "oops"]), ("str", "oops")),
    RowCase("yields-an-int-after-rows", _gen_then_not_a_row, ("int", "42")),
    RowCase("page-holds-a-non-row", lambda: iter([[{"id": 9, "amount": 1, "updated": 1_000_009}, ("a", "tuple")]]), ("tuple",)),
    RowCase("returns-a-string", lambda: "id,amount,updated\n9,1,9", ("str",)),
    RowCase("raises-midstream", _gen_then_raise, ("source went away",)),
]


@pytest.fixture(scope="module")
def shared_tables(spark, spark_warehouse, tmp_path_factory):
    """One table per strategy for every row case (a first good run each), to keep CI fast.

    Each case appends one new good row after its bad run, so cases stay independent: they
    compare the table before and after themselves, never against a fixed expectation.
    """
    namespace = "badrows_" + uuid.uuid4().hex[:8]
    config = write_config(tmp_path_factory.mktemp("row_cases") / "config.toml", spark_warehouse, namespace)
    io = io_manager_for(spark_warehouse, namespace)
    with fresh_instance() as instance:
        tables = {}
        for strategy in ("append", "upsert", "delete-insert", "scd2"):
            name = "rows_" + strategy.replace("-", "_")
            feed: dict[str, Any] = {"source": lambda: list(GOOD), "next": 100}
            asset = source_asset(name, config, strategy, (lambda f: lambda: f["source"]())(feed))
            assert materialize(asset, instance, io).success
            tables[strategy] = (name, asset, feed)
        yield instance, io, tables


def _run_bad_case(case: RowCase, spark, shared_tables):
    instance, io, tables = shared_tables
    name, asset, feed = tables[case.strategy]
    before_rows = rows(spark, io, name, ["id", "amount", "updated"])
    before_snaps = snapshots(spark, io, name)
    before_state = dagster_state(instance, name)

    feed["source"] = case.bad
    result = materialize(asset, instance, io)
    message = failure_text(result)
    assert snapshots(spark, io, name) == before_snaps, "the failed run committed to the table"
    assert rows(spark, io, name, ["id", "amount", "updated"]) == before_rows
    assert dagster_state(instance, name) == before_state, "the failed run moved the Dagster cursor"

    # the next good run works: it loads exactly one new row and moves the cursor to it
    n = feed["next"] = feed["next"] + 1
    feed["source"] = lambda: [{"id": n, "amount": n, "updated": n}]
    good = materialize(asset, instance, io)
    assert good.success, failure_text(good)
    assert rows(spark, io, name, ["id", "amount", "updated"]) == sorted([*before_rows, (n, n, n)], key=repr)
    assert dagster_state(instance, name)["last_value"] == n
    assert committed_states(spark, io, name)[-1]["last_value"] == n

    # finally the message: it names the asset and what is wrong, where
    assert name in message, f"the error does not name the asset:\n{message}"
    for expected in case.expect:
        assert expected in message, f"{expected!r} missing from:\n{message}"


def _params(cases):
    return [
        pytest.param(c, id=c.id)
        for c in cases
    ]


@pytest.mark.parametrize("case", _params(ROW_CASES))
def test_bad_rows_fail_cleanly_and_next_run_works(case: RowCase, spark, shared_tables):
    _run_bad_case(case, spark, shared_tables)


@pytest.mark.parametrize("policy, expected_ids", [("include", [1, 2, 3, 9]), ("exclude", [1, 2, 3])])
def test_missing_cursor_under_include_and_exclude_is_not_an_error(policy, expected_ids, spark, instance, io, tmp_path,
                                                                  spark_warehouse, namespace):
    """on_cursor_value_missing="include" keeps the row, "exclude" drops it; the cursor ignores it."""
    config = write_config(tmp_path / "config.toml", spark_warehouse, namespace)
    name = f"missing_{policy}"
    feed = {"rows": list(GOOD)}
    asset = source_asset(name, config, "append", lambda: feed["rows"], on_cursor_value_missing=policy)
    assert materialize(asset, instance, io).success
    feed["rows"] = [*GOOD, {"id": 9, "amount": 1}, {"id": 9, "amount": 1, "updated": None}][: 3] + [NEXT]
    result = materialize(asset, instance, io)
    assert result.success, failure_text(result)
    assert sorted(r[0] for r in rows(spark, io, name, ["id"])) == expected_ids
    assert dagster_state(instance, name)["last_value"] == 3


def test_function_returning_nothing_is_a_no_op_that_keeps_table_and_cursor(spark, instance, io, tmp_path,
                                                                           spark_warehouse, namespace):
    """`return None` (or a bare generator with nothing in it) loads nothing and moves no cursor."""
    config = write_config(tmp_path / "config.toml", spark_warehouse, namespace)
    feed = {"source": lambda: list(GOOD)}
    asset = source_asset("returns_nothing", config, "upsert", lambda: feed["source"]())
    assert materialize(asset, instance, io).success
    before = rows(spark, io, "returns_nothing")
    feed["source"] = lambda: None
    result = materialize(asset, instance, io)
    assert result.success, failure_text(result)
    assert rows(spark, io, "returns_nothing") == before
    assert dagster_state(instance, "returns_nothing")["last_value"] == 2
    assert committed_states(spark, io, "returns_nothing")[-1]["last_value"] == 2
    feed["source"] = lambda: [*GOOD, NEXT]
    assert materialize(asset, instance, io).success
    assert dagster_state(instance, "returns_nothing")["last_value"] == 3


def _failure_event_texts(instance, run_id: str) -> str:
    """What the run's event log shows of its failure: each event's message and error, chained."""
    texts = []
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        texts.append(record.user_message or "")
        if event is not None and event.is_step_failure:
            texts.append(event.step_failure_data.error.to_string())
    return "\n".join(texts)


@pytest.mark.parametrize("strategy, bad, what", [
    ("append", {"id": 9, "amount": 1, "updated": "soon"}, ("'updated'", "'soon'", "primary key id=9")),
    ("upsert", {"id": None, "amount": 1, "updated": 1_000_009}, ("'id'", "NULL", "key {'id': None}")),
])
def test_a_bad_row_is_named_by_its_key_and_the_failure_says_it_once(strategy, bad, what, spark, instance, io, tmp_path,
                                                                     spark_warehouse, namespace):
    """Rows hold personal data and Dagster's logs travel: the error names the column, the row's
    key and the value, never the row's other values; and the event log holds the message once."""
    config = write_config(tmp_path / "config.toml", spark_warehouse, namespace)
    feed = {"rows": [{**r, "secret": "alice@example.com"} for r in GOOD]}
    name = f"row_privacy_{strategy}"
    asset = source_asset(name, config, strategy, lambda: feed["rows"])
    assert materialize(asset, instance, io).success
    feed["rows"] = [{"id": 8, "amount": 1, "updated": 1_000_008, "secret": "bob@example.com"},
                    {**bad, "secret": "carol@example.com"}]
    result = materialize(asset, instance, io)
    message = failure_text(result)
    for expected in (name, *what):
        assert expected in message, f"{expected!r} missing from:\n{message}"
    shown = _failure_event_texts(instance, result.run_id)
    assert "example.com" not in shown, shown
    first_line = message.splitlines()[0].split(f"asset {name}: ", 1)[1]
    assert shown.count(first_line) == 1, shown


# -- storage and catalog errors ------------------------------------------------------------------


def _storage_failure(spark, instance, tmp_path, catalog: str, warehouse: str, conf: dict[str, str]) -> str:
    """A first run of an asset on `catalog` (its keys set on the session, as a user's config does)."""
    from dagster_incremental import SparkTableIOManager

    for key, value in conf.items():
        spark.conf.set(key, value)
    namespace = "storage_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(f'[destination]\ncatalog = "{catalog}"\nnamespace = "{namespace}"\nwarehouse = "{warehouse}"\n')
    io = SparkTableIOManager(catalog=catalog, namespace=namespace, warehouse=warehouse, master="local[2]", spark_config=conf)
    asset = source_asset("stored_far", str(config), "append", lambda: list(GOOD))
    result = materialize(asset, instance, io)
    events = result.get_step_failure_events()
    assert events, "the run was expected to fail"
    error = events[0].step_failure_data.error
    assert error.cause is None, "the Java trace is chained to the message"
    return error.message


def test_an_s3_warehouse_on_the_hadoop_catalog_is_named_with_the_keys_that_fix_it(spark, instance, tmp_path):
    message = _storage_failure(spark, instance, tmp_path, "s3lake", "s3://bucket/warehouse", {})
    for expected in ("stored_far", "catalog 's3lake'", "type hadoop", "s3://bucket/warehouse", "no file system for s3://",
                     '"spark.sql.catalog.s3lake.type" = "rest"', "S3FileIO", 'No FileSystem for scheme "s3"'):
        assert expected in message, f"{expected!r} missing from:\n{message}"
    assert len(message.splitlines()) <= 3 and "\tat org.apache" not in message, message


def test_wrong_catalog_credentials_are_named_with_the_secret_to_set(spark, instance, tmp_path, rest_catalog):
    prefix = "spark.sql.catalog.restbad"
    conf = {key.replace("spark.sql.catalog.rest", prefix, 1): value
            for key, value in rest_catalog.spark_config.items() if key.startswith("spark.sql.catalog.rest")}
    conf[f"{prefix}.credential"] = "wrong-id:wrong-secret"
    message = _storage_failure(spark, instance, tmp_path, "restbad", rest_catalog.warehouse, conf)
    for expected in ("stored_far", "catalog 'restbad'", "type rest", "refused access", "credentials are missing or wrong",
                     f'"{prefix}.credential"', "secrets.toml"):
        assert expected in message, f"{expected!r} missing from:\n{message}"
    assert "wrong-secret" not in message
    assert len(message.splitlines()) <= 3 and "\tat org.apache" not in message, message


def test_wrong_s3_keys_for_the_table_files_are_named_with_the_keys_to_set(spark, instance, tmp_path, jdbc_catalog):
    """The catalog (JDBC) answers, S3 refuses the table's files: said when the write commits."""
    prefix = "spark.sql.catalog.pgbad"
    conf = {key.replace("spark.sql.catalog.pg", prefix, 1): value
            for key, value in jdbc_catalog.spark_config.items() if key.startswith("spark.sql.catalog.pg")}
    conf.update({f"{prefix}.s3.access-key-id": "wrong-key", f"{prefix}.s3.secret-access-key": "wrong-secret"})
    message = _storage_failure(spark, instance, tmp_path, "pgbad", jdbc_catalog.warehouse, conf)
    for expected in ("stored_far", "catalog 'pgbad'", "type jdbc", "refused access", f'"{prefix}.s3.access-key-id"'):
        assert expected in message, f"{expected!r} missing from:\n{message}"
    assert "wrong-secret" not in message
    assert len(message.splitlines()) <= 3 and "\tat org.apache" not in message, message


# -- nanosecond timestamps ----------------------------------------------------------------------


_T0 = "2024-01-01T00:00:00Z"


def _ns_source(kind: str, rows_ns: list[tuple[int, int]]):
    """Rows (id, nanoseconds after _T0) as `kind` gives them: pandas keeps nanoseconds, so do
    Arrow tables made from it and dict rows holding its Timestamps."""
    import pandas as pd
    import pyarrow as pa

    frame = pd.DataFrame({"id": [i for i, _ in rows_ns], "amount": [i * 10 for i, _ in rows_ns],
                          "updated": [pd.Timestamp(_T0) + pd.Timedelta(n, "ns") for _, n in rows_ns]})
    assert str(frame["updated"].dtype) == "datetime64[ns, UTC]"
    if kind == "arrow":
        return pa.Table.from_pandas(frame, preserve_index=False)
    return frame.to_dict("records") if kind == "dicts" else frame


@pytest.mark.parametrize("kind, catalog", [("pandas", "hadoop"), ("arrow", "hadoop"), ("dicts", "hadoop"),
                                           ("pandas", "delta")], indirect=["catalog"])
def test_nanosecond_timestamps_are_stored_and_kept_as_microseconds(kind, catalog, spark, instance, tmp_path, namespace):
    """Digits finer than a microsecond are dropped (the table holds microseconds): the table, the
    cursor and its boundary all hold the truncated instant, so the next run neither reloads the
    boundary row nor skips a new row in the boundary's microsecond."""
    config = tmp_path / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    io = catalog.io_manager(namespace)
    name = f"ns_{kind}_{catalog.kind}"
    feed = {"rows": [(1, 1_999), (2, 2_999)]}
    asset = source_asset(name, str(config), "append", lambda: _ns_source(kind, feed["rows"]), initial_value=_T0)
    first = materialize(asset, instance, io)
    assert first.success, failure_text(first)
    state = dagster_state(instance, name)
    assert state["last_value"] == "2024-01-01T00:00:00.000002Z"
    assert state["boundary"]["keys"] == [2]

    feed["rows"] = [(1, 1_999), (2, 2_999), (3, 2_500)]  # 3: new, in the boundary's microsecond
    second = materialize(asset, instance, io)
    assert second.success, failure_text(second)
    t0 = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()) * 1_000_000
    stored = spark.table(table_id(io, name)).selectExpr("id", f"unix_micros(updated) - {t0}").collect()
    assert sorted(tuple(r) for r in stored) == [(1, 1), (2, 2), (3, 2)]  # each row once, in microseconds
    assert dagster_state(instance, name)["boundary"]["keys"] == [2, 3]


# -- config ----------------------------------------------------------------------------------------


@dataclass
class ConfigCase:
    id: str
    text: str  # appended to a valid [destination] section; `@A@` is the asset name, `@AU@` upper-cased
    expect: tuple[str, ...]
    env: dict = field(default_factory=dict)
    replace_destination: bool = False  # text replaces the whole file (for [destination] cases)


CONFIG_CASES = [
    ConfigCase("malformed-toml", "[assets.@A@\nprimary_key = 'id'\n", ("line 5", "invalid TOML")),
    ConfigCase("unknown-section", "[sparkle]\nmaster = 'local'\n", ("sparkle",)),
    ConfigCase("unknown-asset-key", "[assets.@A@]\nprimary_kee = ['id']\n", ("[assets.@A@]", "primary_kee", "primary_key")),
    ConfigCase("unknown-cursor-key", "[assets.@A@.updated]\ncursor_pth = 'updated'\n", ("[assets.@A@.updated]", "cursor_pth")),
    ConfigCase("unknown-destination-key", "", ("[destination]", "catalgo"), replace_destination=True),
    ConfigCase("wrong-type-primary-key", "[assets.@A@]\nprimary_key = 5\n", ("[assets.@A@]", "primary_key", "5")),
    ConfigCase("wrong-type-lag", "[assets.@A@.updated]\nlag = 'ten'\n", ("[assets.@A@.updated]", "lag", "ten")),
    ConfigCase("bad-enum-disposition", "[assets.@A@]\nwrite_disposition = 'upsert'\n", ("[assets.@A@]", "write_disposition", "upsert")),
    ConfigCase("bad-enum-strategy", "[assets.@A@]\nwrite_disposition = {disposition = 'merge', strategy = 'merge-all'}\n",
               ("[assets.@A@]", "merge-all")),
    ConfigCase("bad-enum-on-missing", "[assets.@A@.updated]\non_cursor_value_missing = 'skip'\n",
               ("[assets.@A@.updated]", "on_cursor_value_missing", "skip")),
    ConfigCase("bad-enum-last-value-func", "[assets.@A@.updated]\nlast_value_func = 'median'\n",
               ("[assets.@A@.updated]", "last_value_func", "median")),
    ConfigCase("end-before-initial", "[assets.@A@.updated]\ninitial_value = 10\nend_value = 5\n",
               ("[assets.@A@.updated]", "end_value", "initial_value")),
    ConfigCase("env-end-before-initial", "[assets.@A@.updated]\ninitial_value = 10\n", ("[assets.@A@.updated]", "end_value"),
               env={"DAGSTER_INCREMENTAL__ASSETS__@AU@__UPDATED__END_VALUE": "20",
                    "DAGSTER_INCREMENTAL__ASSETS__@AU@__UPDATED__INITIAL_VALUE": "30"}),
    ConfigCase("cursor-section-for-unknown-parameter", "[assets.@A@.created]\ncursor_path = 'created'\n",
               ("[assets.@A@.created]", "created")),
    ConfigCase("upsert-without-primary-key", "[assets.@A@]\nprimary_key = []\nwrite_disposition = {disposition = 'merge', strategy = 'upsert'}\n",
               ("@A@", "primary_key")),
    ConfigCase("env-override-wrong-type", "", ("DAGSTER_INCREMENTAL__ASSETS__@AU@__UPDATED__LAG", "lag"),
               env={"DAGSTER_INCREMENTAL__ASSETS__@AU@__UPDATED__LAG": "a while"}),
    ConfigCase("env-override-bad-enum", "", ("DAGSTER_INCREMENTAL__ASSETS__@AU@__WRITE_DISPOSITION__STRATEGY", "sideways"),
               env={"DAGSTER_INCREMENTAL__ASSETS__@AU@__WRITE_DISPOSITION__STRATEGY": "sideways"}),
    ConfigCase("env-override-unknown-key", "", ("DAGSTER_INCREMENTAL__ASSETS__@AU@__PRIMARY_KEYS", "primary_keys"),
               env={"DAGSTER_INCREMENTAL__ASSETS__@AU@__PRIMARY_KEYS": "id"}),
]


def _case_config(case: ConfigCase, name: str, warehouse: str, namespace: str) -> str:
    if case.replace_destination:
        return (f'[destination]\ncatalgo = "lake"\nnamespace = "{namespace}"\nwarehouse = "{warehouse}"\n')
    return (f'[destination]\ncatalog = "lake"\nnamespace = "{namespace}"\nwarehouse = "{warehouse}"\n'
            + case.text.replace("@A@", name))


@pytest.fixture(scope="module")
def config_table(spark, spark_warehouse, tmp_path_factory):
    """One good table for every config case: (instance, io, name, good config path, feed)."""
    namespace = "badcfg_" + uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("config_cases")
    good = write_config(folder / "good.toml", spark_warehouse, namespace)
    name = "cfg_orders"
    feed = {"rows": list(GOOD)}
    with fresh_instance() as instance:
        io = io_manager_for(spark_warehouse, namespace)
        asset = source_asset(name, good, "upsert", lambda: feed["rows"])
        assert materialize(asset, instance, io).success
        yield instance, io, name, good, feed, folder


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c.id for c in CONFIG_CASES])
def test_bad_config_fails_at_definition_naming_file_section_key(case: ConfigCase, spark, config_table, monkeypatch,
                                                                spark_warehouse):
    instance, io, name, good, feed, folder = config_table
    before_snaps = snapshots(spark, io, name)
    before_state = dagster_state(instance, name)
    path = folder / f"{case.id}.toml"
    path.write_text(_case_config(case, name, spark_warehouse, io.namespace))
    for key, value in case.env.items():
        monkeypatch.setenv(key.replace("@AU@", name.upper()), value)

    with pytest.raises(IncrementalConfigError) as caught:
        source_asset(name, str(path), "upsert", lambda: feed["rows"])
    message = str(caught.value)
    assert f"{case.id}.toml" in message, f"the error does not name the file:\n{message}"
    for expected in case.expect:
        expected = expected.replace("@AU@", name.upper()).replace("@A@", name)
        assert expected in message, f"{expected!r} missing from:\n{message}"
    assert snapshots(spark, io, name) == before_snaps
    assert dagster_state(instance, name) == before_state

    # the corrected config defines the asset again and its next run continues from the cursor
    for key in case.env:
        monkeypatch.delenv(key.replace("@AU@", name.upper()))
    fixed = source_asset(name, good, "upsert", lambda: feed["rows"])
    assert fixed.key == dg.AssetKey(name)


def test_config_cases_leave_a_table_whose_next_good_run_works(spark, config_table):
    """After every config case above, the asset from the good config still loads new rows."""
    instance, io, name, good, feed, _ = config_table
    state = dagster_state(instance, name)["last_value"]
    feed["rows"] = [*GOOD, NEXT]
    asset = source_asset(name, good, "upsert", lambda: feed["rows"])
    result = materialize(asset, instance, io)
    assert result.success, failure_text(result)
    assert state == 2 and dagster_state(instance, name)["last_value"] == 3
    assert [r[0] for r in rows(spark, io, name, ["id"])] == [1, 2, 3]


def test_relative_warehouse_outside_the_project_is_rejected(tmp_path):
    project = tmp_path / "project" / "config"
    project.mkdir(parents=True)
    path = project / "config.toml"
    path.write_text('[destination]\nwarehouse = "../../elsewhere/warehouse"\n')
    from dagster_incremental import SparkTableIOManager

    with pytest.raises(IncrementalConfigError) as caught:
        SparkTableIOManager.from_config(str(path))
    message = str(caught.value)
    assert "config.toml" in message and "[destination]" in message and "warehouse" in message
    assert "outside the project" in message
    assert not (tmp_path / "elsewhere").exists()


def test_env_override_of_warehouse_outside_the_project_is_rejected(tmp_path, monkeypatch):
    project = tmp_path / "project" / "config"
    project.mkdir(parents=True)
    path = project / "config.toml"
    path.write_text('[destination]\nwarehouse = "../data/warehouse"\n')
    monkeypatch.setenv("DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE", "../../../escape")
    from dagster_incremental import SparkTableIOManager

    with pytest.raises(IncrementalConfigError) as caught:
        SparkTableIOManager.from_config(str(path))
    message = str(caught.value)
    assert "DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE" in message and "outside the project" in message


def test_a_row_of_another_shape_is_named_by_its_type_never_quoted():
    """A tuple or object yielded as a row is a source row: the error says what it is, not what it holds."""
    from dagster_incremental.errors import DataShapeError
    from dagster_incremental.spark.local.stage import iterate_output

    for output in (iter([("alice@example.com", 1)]), iter([[{"id": 1}, ("bob@example.com", 2)]])):
        with pytest.raises(DataShapeError) as raised:
            list(iterate_output(output, "rows"))
        assert "tuple (2 values)" in str(raised.value) and "example.com" not in str(raised.value), str(raised.value)
    with pytest.raises(DataShapeError, match=r"str \('oops'\)"):
        list(iterate_output(iter(["oops"]), "rows"))
