"""The one settings schema: decorator arguments and config.toml checked alike, the new keys
(freshness, step), one ISO-8601 dialect shared with the cursor engine. No Spark, no Dagster run."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path
from typing import get_args

import pytest

from dagster_incremental.cursor import values as cv
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings import vocabulary
from dagster_incremental.settings.config import ProjectConfig, load_config

E = "DAGSTER_INCREMENTAL__"


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ProjectConfig:
    path = tmp_path / "config" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_config(path, environ=env or {})


def error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(IncrementalConfigError) as info:
        load(tmp_path, text, env)
    return str(info.value)


# --------------------------------------------------------------------------- decorator arguments


@pytest.mark.parametrize(("decorator", "expected"), [
    ({"write_disposition": {"disposition": "merge", "strategy": "cdc"}},
     "@incremental_asset of asset 'orders': write_disposition.strategy='cdc' is not allowed; use one of "
     '"delete-insert", "upsert", "insert-only", "scd2"'),
    ({"columns": {"seq": {"dedup_sort": "up"}}},
     "@incremental_asset of asset 'orders': columns.seq.dedup_sort='up' is not allowed; use one of \"asc\", \"desc\""),
    ({"primary_key": 5}, "@incremental_asset of asset 'orders': primary_key=5 is an integer; use a column name"),
    ({"write_disposition": "upsert"}, "@incremental_asset of asset 'orders': write_disposition='upsert' is not "
                                      'allowed; use "append", "replace" or "merge"'),
])
def test_decorator_arguments_are_checked_by_the_config_schema(tmp_path, decorator, expected):
    cfg = load(tmp_path, "")
    with pytest.raises(IncrementalConfigError) as info:
        cfg.resolve_asset("orders", decorator)
    assert str(info.value).startswith(expected), str(info.value)


def test_config_wins_over_the_decorator_and_upsert_needs_a_key_from_either(tmp_path):
    cfg = load(tmp_path, '[assets.orders]\nwrite_disposition = { disposition = "merge", strategy = "upsert" }\n')
    options = cfg.resolve_asset("orders", {"write_disposition": "append", "primary_key": "id", "group_name": None})
    assert (options.write_disposition.merge_strategy, options.primary_key) == ("upsert", ("id",))
    assert "group_name" not in options.model_fields_set  # None means: not given
    with pytest.raises(IncrementalConfigError) as info:
        cfg.resolve_asset("orders", {"write_disposition": "append"})
    message = str(info.value)
    assert message.startswith("asset 'orders': primary_key is not set; the upsert strategy needs a primary key")
    assert f"`primary_key = [...]` in {tmp_path / 'config' / 'config.toml'}: [assets.orders] (at line 1)" in message, message


def test_insert_only_is_a_strategy_and_needs_a_primary_key(tmp_path):
    cfg = load(tmp_path, '[assets.orders]\nwrite_disposition = { disposition = "merge", strategy = "insert-only" }\n')
    options = cfg.resolve_asset("orders", {"primary_key": "id"})
    assert options.write_disposition.merge_strategy == "insert-only"
    with pytest.raises(IncrementalConfigError, match="primary_key is not set; the insert-only strategy needs a primary key"):
        cfg.resolve_asset("orders", {})


def test_the_strategy_vocabulary_is_the_settings_one():
    from dagster_incremental.spark import write_spec
    from dagster_incremental.spark.merge import dedup

    assert write_spec.MergeStrategy is vocabulary.MergeStrategy
    assert get_args(write_spec.Disposition) == vocabulary.DISPOSITIONS == ("append", "replace", "merge")
    assert vocabulary.STRATEGIES == ("delete-insert", "upsert", "insert-only", "scd2")
    assert not hasattr(dedup, "STRATEGIES")


# --------------------------------------------------------------------------- one ISO-8601 dialect


@pytest.mark.parametrize("text", [
    "2024-01-01", "2024-01-01T10:00:00Z", "2024-01-01 10:00", "2024-01-01T10:00:00+02:00",
    "2024-W01-1", "2024-001", "20240101", "2024-13-01", "2024", "soon",
])
def test_config_and_cursor_engine_accept_the_same_iso_strings(tmp_path, text):
    engine_accepts = cv.parse_iso(text) is not None
    toml = f'[assets.a]\npartitions = {{ schedule = "daily", start = "{text}" }}\n[assets.a.ts]\nend_value = "{text}"\n'
    try:
        cfg = load(tmp_path, toml)
    except IncrementalConfigError as exc:
        assert not engine_accepts, str(exc)
        assert "is not an ISO-8601 date or datetime" in str(exc)
    else:
        assert engine_accepts
        assert cfg.asset("a").partitions.start is not None


def test_scd2_timestamps_use_the_same_dialect():
    pytest.importorskip("pyspark")
    from dagster_incremental.spark.merge.scd2 import as_utc

    assert as_utc("2024-01-01", "boundary_timestamp") == cv.parse_iso("2024-01-01")
    with pytest.raises(IncrementalConfigError, match="is not an ISO-8601 date or timestamp"):
        as_utc("2024-W01-1", "boundary_timestamp")


# --------------------------------------------------------------------------- freshness and step


def test_freshness_and_step_are_parsed_and_exposed(tmp_path):
    cfg = load(tmp_path, """
        [assets.orders]
        freshness = "PT2H"
        [assets.orders.updated_at]
        lag = 60
        step = "P30D"
        [assets.orders.seq]
        step = 1000
        [assets.daily]
        freshness = 90
    """)
    orders = cfg.asset("orders")
    assert orders.freshness == timedelta(hours=2) and orders.get("freshness") == timedelta(hours=2)
    assert dict(orders.incremental("updated_at")) == {"lag": 60, "step": "P30D"}  # as given, beside lag
    assert orders.incremental("seq")["step"] == 1000
    assert cfg.asset("daily").freshness == timedelta(seconds=90)
    assert cfg.asset("other").freshness is None


def test_calendar_steps_and_iso_lags_are_taken_as_given(tmp_path):
    """P1M / P1Y steps and ISO-8601 lags are valid in config.toml as in code (the engine cuts
    and lags them on the calendar)."""
    cfg = load(tmp_path, '[assets.orders.updated_at]\nstep = "P1M"\nlag = "P1D"\n'
                         '[assets.daily.day]\nstep = "P1Y"\nlag = 2\n')
    assert dict(cfg.asset("orders").incremental("updated_at")) == {"step": "P1M", "lag": "P1D"}
    assert dict(cfg.asset("daily").incremental("day")) == {"step": "P1Y", "lag": 2}


def test_freshness_and_step_from_the_environment(tmp_path):
    cfg = load(tmp_path, "[assets.orders.updated_at]\nlag = 1\n",
               {f"{E}ASSETS__ORDERS__FRESHNESS": "PT15M", f"{E}ASSETS__ORDERS__UPDATED_AT__STEP": "3600"})
    assert cfg.asset("orders").freshness == timedelta(minutes=15)
    assert cfg.asset("orders").incremental("updated_at")["step"] == 3600


@pytest.mark.parametrize(("toml", "expected"), [
    ('[assets.orders]\nfreshness = "2h"\n',
     '[assets.orders] freshness = "2h" is not an ISO-8601 duration; use an ISO-8601 duration such as "PT2H" '
     "or a number of seconds > 0 (at line 2)"),
    ("[assets.orders]\nfreshness = 0\n", "[assets.orders] freshness = 0 is not allowed; use an ISO-8601 duration"),
    ("[assets.orders]\nfreshness = true\n", "[assets.orders] freshness = true is a boolean"),
    ('[assets.orders.updated_at]\nstep = "1 month"\n',
     '[assets.orders.updated_at] step = "1 month" is not an ISO-8601 duration; use an ISO-8601 duration such as '
     "\"P30D\" or \"P1M\", or a number > 0 in lag's units (at line 2)"),
    ('[assets.orders.updated_at]\nstep = "P0M"\n', '[assets.orders.updated_at] step = "P0M" is not allowed'),
    ("[assets.orders.updated_at]\nstep = -1\n", "[assets.orders.updated_at] step = -1 is not allowed"),
    ("[assets.orders.updated_at]\nstep = [1]\n", "[assets.orders.updated_at] step = [1] is an array"),
])
def test_freshness_and_step_errors_are_located(tmp_path, toml, expected):
    message = error(tmp_path, toml)
    assert message.startswith(f"{tmp_path / 'config' / 'config.toml'}: {expected}"), message


def test_freshness_and_step_env_errors_name_the_variable(tmp_path):
    var = f"{E}ASSETS__ORDERS__UPDATED_AT__STEP"
    message = error(tmp_path, "[assets.orders.updated_at]\nlag = 1\n", {var: "soon"})
    assert f'[assets.orders.updated_at] step = "soon" (from environment variable {var}) is not an ISO-8601 ' \
           "duration" in message
    var = f"{E}ASSETS__ORDERS__FRESHNESS"
    message = error(tmp_path, "", {var: "-5"})
    assert f"[assets.orders] freshness = -5 (from environment variable {var}) is not allowed" in message


# --------------------------------------------------------------------------- bounds in code


@pytest.mark.parametrize(("key", "value", "toml"), [
    ("initial_value", "yesterday", '"yesterday"'),
    ("end_value", "tomorrow", '"tomorrow"'),
    ("initial_value", float("inf"), "inf"),
])
def test_a_bound_in_code_fails_at_definition_as_the_same_bound_in_config_does(tmp_path, key, value, toml):
    """`incremental(..., initial_value="yesterday")` fails when defined, naming the argument, with
    the problem and hint config.toml gives for the same value (not later, in a run)."""
    from dagster_incremental import incremental

    start = {"initial_value": "2024-01-01T00:00:00Z"} if key == "end_value" else {}
    with pytest.raises(IncrementalConfigError) as in_code:
        incremental("updated_at", **start, **{key: value})
    start_toml = 'initial_value = "2024-01-01T00:00:00Z"\n' if start else ""
    in_config = error(tmp_path, f"[assets.orders.updated_at]\n{start_toml}{key} = {toml}\n")
    code_text, config_text = str(in_code.value), in_config
    assert code_text.startswith(f"incremental('updated_at'): {key}={value!r} is not ")
    problem = code_text.split(f"{key}={value!r} ", 1)[1].split(";", 1)[0]
    assert f"{key} = {toml} {problem};" in config_text
    # the hint is the same, each saying how to declare a string cursor where it is written
    assert code_text.endswith('also set cursor_type="string".') == ("ISO-8601" in problem)
    assert ('cursor_type = "string"' in config_text) == ("ISO-8601" in problem)


@pytest.mark.parametrize("lag", [float("inf"), float("nan"), -1])
def test_a_lag_in_code_is_checked_as_in_config(lag):
    from dagster_incremental import incremental

    with pytest.raises(IncrementalConfigError, match=r"lag=.* is not valid: give a number >= 0"):
        incremental("updated_at", lag=lag)


def test_a_string_cursor_declared_in_code_keeps_working():
    from dagster_incremental import incremental

    assert incremental("code", initial_value="b", cursor_type="string").initial_value == "b"


# --------------------------------------------------------------------------- merge without a key


@pytest.mark.parametrize("disposition", ['"merge"', '{disposition = "merge", strategy = "delete-insert"}'])
def test_merge_without_a_key_fails_naming_the_config_line_that_set_the_disposition(tmp_path, disposition):
    cfg = load(tmp_path, f"[assets.events]\nwrite_disposition = {disposition}\n")
    with pytest.raises(IncrementalConfigError) as info:
        cfg.resolve_asset("events", {})
    text = str(info.value)
    assert text.startswith("asset 'events': primary_key is not set; merge/delete-insert needs primary_key or "
                           "merge_key to match rows on (without one it would append every row)")
    assert text.endswith("write_disposition is set in "
                         f"{tmp_path / 'config' / 'config.toml'}: [assets.events] write_disposition (at line 2)")


@pytest.mark.parametrize("decorator", [
    {"write_disposition": "merge", "merge_key": "day"},
    {"write_disposition": "merge", "primary_key": "id"},
    {"write_disposition": {"disposition": "merge", "strategy": "scd2"}},  # scd2 keeps its own rules
    {"write_disposition": "append"},
])
def test_merge_with_a_key_and_other_dispositions_still_resolve(tmp_path, decorator):
    assert load(tmp_path, "").resolve_asset("events", decorator).write_disposition is not None


def test_datetime_formats_in_config_make_a_timestamp_cursor_and_read_its_bounds(tmp_path):
    cfg = load(tmp_path, """
        [assets.orders.updated_at]
        initial_value = "01/01/2024"
        datetime_format = "%d/%m/%Y"
        cursor_datetime_formats = ["%d/%m/%Y %H:%M"]
    """)
    assert dict(cfg.asset("orders").incremental("updated_at")) == {
        "initial_value": "01/01/2024", "datetime_format": "%d/%m/%Y", "cursor_datetime_formats": ("%d/%m/%Y %H:%M",)}


@pytest.mark.parametrize(("toml", "expected"), [
    ('[assets.orders.updated_at]\ncursor_datetime_formats = ["%d/%m/%Y", "dd/MM/yyyy"]\n',
     '[assets.orders.updated_at] cursor_datetime_formats = ["%d/%m/%Y", "dd/MM/yyyy"] has "dd/MM/yyyy", which is '
     'not a strptime format; use a strptime format such as "%d/%m/%Y %H:%M", or a list of them'),
    ('[assets.orders.updated_at]\ndatetime_format = "%d/%m/%Y"\ninitial_value = "2024/01/31"\n',
     '[assets.orders.updated_at] initial_value = "2024/01/31" is not a valid timestamp (it matches none of the '
     "cursor_datetime_formats ['%d/%m/%Y'] and is not ISO-8601)"),
    ('[assets.orders.updated_at]\ndatetime_format = "%d/%m/%Y"\ncursor_type = "number"\n',
     '[assets.orders.updated_at] cursor_type is "number"; datetime formats make a timestamp (or date) cursor'),
])
def test_datetime_format_errors_are_located(tmp_path, toml, expected):
    message = error(tmp_path, toml)
    assert message.startswith(f"{tmp_path / 'config' / 'config.toml'}: {expected}"), message
