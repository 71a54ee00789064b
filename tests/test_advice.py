"""What a new user's mistakes say: the real cause (file, section, key and line, or asset, column and
value) and one change that works and loses nothing. Each case also applies the change the message
recommends and shows the next definition (or run) succeeds.

Cases raised before Spark starts run without it; the runs that must succeed share the session's
Spark (one JVM) and a fresh namespace each.
"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import dagster as dg
import pytest

from attack_support import failure_text, io_manager_for, materialize, rows
from dagster_incremental import Incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError

ISO_ROWS = [{"id": 1, "updated_at": "2024-03-01T10:00:00Z"}, {"id": 2, "updated_at": "2024-03-02T10:00:00Z"}]


def write(path: Path, warehouse: str, namespace: str, body: str) -> str:
    """A config.toml: the destination, then `body` (dedented) from line 5 on."""
    head = f'[destination]\ncatalog = "lake"\nnamespace = "{namespace}"\nwarehouse = "{warehouse}"\n'
    path.write_text(head + textwrap.dedent(body))
    return str(path)


def line_of(path: str, text: str) -> int:
    """The 1-based line of the file that holds `text`."""
    return next(n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line)


def spark_of(io):
    """The Spark session the IO manager writes with (the session's, on the shared JVM)."""
    return io.spark


def products_asset(config: str, source, name: str = "products"):
    """An asset whose `updated_at` cursor comes from config.toml alone; it returns `source()`."""

    def body(updated_at: Incremental):
        return source()

    body.__name__ = name
    return incremental_asset(config_path=config)(body)


PRODUCTS = """
[assets.products]
write_disposition = "append"
{freshness}
[assets.products.updated_at]
cursor_path = "updated_at"
initial_value = {initial}
"""


# -- initial_value is a number, the column holds ISO timestamps ---------------------------------------


def test_freshness_with_a_number_initial_value_blames_initial_value_where_it_is_set(tmp_path):
    config = write(tmp_path / "config.toml", str(tmp_path / "wh"), "x",
                   PRODUCTS.format(freshness='freshness = "P1D"', initial="20240101"))
    with pytest.raises(IncrementalConfigError) as raised:
        products_asset(config, lambda: ISO_ROWS)
    text = str(raised.value)
    line = line_of(config, "initial_value = 20240101")
    assert f"{config}: [assets.products.updated_at] initial_value (at line {line})" in text, text
    assert "initial_value = 20240101" in text and "is a number" in text
    assert 'initial_value = "2024-01-01T00:00:00Z"' in text  # the change, as the user writes it

    # the change the message recommends: the asset is defined, freshness and all
    Path(config).write_text(Path(config).read_text().replace("20240101", '"2024-01-01T00:00:00Z"'))
    asset = products_asset(config, lambda: ISO_ROWS)
    assert "cursor_fresh" in {spec.name for spec in asset.check_specs}


# -- a run whose rows fail the cursor: the message, then the recommended change in a run --------------


@pytest.fixture
def where(spark, spark_warehouse, tmp_path):
    """(a fresh namespace's config writer, its IO manager) on the session's warehouse."""
    namespace = "advice_" + uuid.uuid4().hex[:8]

    def config(body: str) -> str:
        return write(tmp_path / f"config_{uuid.uuid4().hex[:6]}.toml", spark_warehouse, namespace, body)

    return config, io_manager_for(spark_warehouse, namespace)


def test_a_number_initial_value_over_timestamp_rows_names_initial_value_and_the_column(where, instance):
    config_of, io = where
    config = config_of(PRODUCTS.format(freshness="", initial="20240101"))
    text = failure_text(materialize(products_asset(config, lambda: ISO_ROWS), instance, io))
    line = line_of(config, "initial_value = 20240101")
    assert "'2024-03-01T10:00:00Z'" in text and "an ISO-8601 timestamp string" in text  # the column's values
    assert "because initial_value = 20240101 is a number" in text
    assert f"{config}: [assets.products.updated_at] initial_value (at line {line})" in text, text
    assert 'initial_value = "2024-01-01T00:00:00Z"' in text
    assert "cursor_type=" not in text  # a string cursor would compare the timestamps as text

    Path(config).write_text(Path(config).read_text().replace("20240101", '"2024-01-01T00:00:00Z"'))
    assert materialize(products_asset(config, lambda: ISO_ROWS), instance, io).success
    assert rows(spark_of(io), io, "products", ["id"]) == [(1,), (2,)]


def test_a_misspelt_cursor_path_says_did_you_mean_and_where_cursor_path_is_set(where, instance):
    config_of, io = where
    config = config_of(PRODUCTS.format(freshness="", initial='"2024-01-01T00:00:00Z"').replace(
        'cursor_path = "updated_at"', 'cursor_path = "modified_at"'))
    text = failure_text(materialize(products_asset(config, lambda: ISO_ROWS), instance, io))
    assert "the batch has no column 'modified_at'" in text and "Did you mean 'updated_at'?" in text
    line = line_of(config, 'cursor_path = "modified_at"')
    assert f"{config}: [assets.products.updated_at] cursor_path (at line {line})" in text, text
    assert "'include'" not in text  # it would load every row in every run

    Path(config).write_text(Path(config).read_text().replace('"modified_at"', '"updated_at"'))
    assert materialize(products_asset(config, lambda: ISO_ROWS), instance, io).success
    assert rows(spark_of(io), io, "products", ["id"]) == [(1,), (2,)]


UPSERT = """
[assets.orders]
write_disposition = { disposition = "merge", strategy = "upsert" }
primary_key = ["id"]

[assets.orders.updated_at]
cursor_path = "updated_at"
initial_value = "2024-01-01T00:00:00Z"
"""


def test_an_upsert_batch_without_its_primary_key_asks_for_the_key_not_for_no_dedup(where, instance):
    config_of, io = where
    config = config_of(UPSERT)
    batch = [{"order_id": 1, "updated_at": "2024-01-01T00:00:00Z"}, {"order_id": 2, "updated_at": "2024-03-02T10:00:00Z"}]
    text = failure_text(materialize(products_asset(config, lambda: batch, "orders"), instance, io))
    assert "primary_key ['id']" in text and "has no column 'id'" in text
    assert "its columns: order_id, updated_at" in text and "'order_id': " not in text  # names, never a row
    line = line_of(config, 'primary_key = ["id"]')
    assert f"{config}: [assets.orders] primary_key (at line {line})" in text, text
    assert "Add 'id' to every row" in text
    for jargon in ("primary_key=()", "dedup key", "boundary dedup"):
        assert jargon not in text

    fixed = [{"id": r["order_id"], **r} for r in batch]  # the change: every row carries its key
    assert materialize(products_asset(config, lambda: fixed, "orders"), instance, io).success
    assert rows(spark_of(io), io, "orders", ["id"]) == [(1,), (2,)]


def test_a_day_first_cursor_value_suggests_cursor_datetime_formats(where, instance):
    config_of, io = where
    config = config_of(PRODUCTS.format(freshness="", initial='"2024-01-01"'))
    batch = [{"id": 1, "updated_at": "04/03/2024 11:00"}, {"id": 2, "updated_at": "05/03/2024 09:30"}]
    text = failure_text(materialize(products_asset(config, lambda: batch), instance, io))
    assert "'04/03/2024 11:00'" in text
    assert 'cursor_datetime_formats = ["%d/%m/%Y %H:%M"]' in text and '["%m/%d/%Y %H:%M"]' in text
    assert "cursor_type=" not in text and "cursor_type =" not in text

    Path(config).write_text(Path(config).read_text() + 'cursor_datetime_formats = ["%d/%m/%Y %H:%M"]\n')
    result = materialize(products_asset(config, lambda: batch), instance, io)
    assert result.success
    state = result.get_asset_materialization_events()[-1].materialization.metadata["dagster_incremental/state"].value
    assert state["last_value"] == "2024-03-05T09:30:00Z"  # read as instants, day first


# -- definition time: a misspelt asset section, a config file that is not where it is looked for -------


MISSPELT = """
[assets.products]
write_disposition = "append"

[assets.product.updated_at]
cursor_path = "updated_at"
initial_value = "2024-01-01T00:00:00Z"
"""


def test_a_misspelt_asset_section_is_named_with_its_line_and_did_you_mean(tmp_path):
    config = write(tmp_path / "config.toml", str(tmp_path / "wh"), "x", MISSPELT)
    with pytest.raises(IncrementalConfigError) as raised:
        products_asset(config, lambda: ISO_ROWS)
    text = str(raised.value)
    line = line_of(config, "[assets.product.updated_at]")
    assert f"{config}: [assets.product.updated_at] (at line {line})" in text, text
    assert "did you mean [assets.products.updated_at]?" in text
    assert f"(at line {line_of(config, '[assets.products]')})" not in text  # another section's line

    Path(config).write_text(Path(config).read_text().replace("[assets.product.updated_at]", "[assets.products.updated_at]"))
    asset = products_asset(config, lambda: ISO_ROWS)
    from dagster_incremental.dagster.decorator import incremental_settings

    assert incremental_settings(asset).cursors["updated_at"].cursor_path == "updated_at"


def test_a_missing_section_names_the_nearest_section_line_not_as_its_own(tmp_path):
    config = write(tmp_path / "config.toml", str(tmp_path / "wh"), "x", '\n[assets.products]\nwrite_disposition = "append"\n')
    with pytest.raises(IncrementalConfigError) as raised:
        products_asset(config, lambda: ISO_ROWS)
    text = str(raised.value)
    line = line_of(config, "[assets.products]")
    assert f"{config}: [assets.products.updated_at] (a new section; [assets.products] is at line {line})" in text, text


@pytest.mark.parametrize("needs", ["cursor_path", "primary_key"])
def test_a_default_config_file_that_does_not_exist_is_named_with_how_it_is_chosen(tmp_path, monkeypatch, needs):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "config").mkdir(parents=True)
    elsewhere.mkdir()
    config = write(project / "config" / "config.toml", str(project / "wh"), "x", UPSERT)
    monkeypatch.delenv("DAGSTER_INCREMENTAL_CONFIG", raising=False)
    monkeypatch.chdir(elsewhere)

    def define():
        if needs == "cursor_path":
            return incremental_asset(name="orders", primary_key="id")(_orders_with_cursor)
        return incremental_asset(name="orders", write_disposition={"disposition": "merge", "strategy": "upsert"})(
            _orders_with_cursor)

    with pytest.raises(IncrementalConfigError) as raised:
        define()
    text = str(raised.value)
    assert f"[assets.orders{'.updated_at' if needs == 'cursor_path' else ''}] of config/config.toml" in text, text
    assert f"which does not exist (looked for at {elsewhere / 'config' / 'config.toml'})" in text
    assert "config_path argument, else $DAGSTER_INCREMENTAL_CONFIG, else ./config/config.toml" in text
    assert str(elsewhere) in text

    monkeypatch.setenv("DAGSTER_INCREMENTAL_CONFIG", config)  # the change: point at the file
    from dagster_incremental.dagster.decorator import incremental_settings

    assert incremental_settings(define()).primary_key == ("id",)


def test_a_missing_default_config_file_is_fine_when_the_decorator_gives_everything(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_INCREMENTAL_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    asset = incremental_asset(name="orders", primary_key="id",
                              write_disposition={"disposition": "merge", "strategy": "upsert"})(_orders)
    assert asset.key == dg.AssetKey("orders")


def test_from_config_without_a_config_file_warns_where_it_looked_and_what_it_uses(tmp_path, monkeypatch):
    """SparkTableIOManager.from_config() from another folder: the user's [destination] is not
    read, so the tables would go elsewhere: say so before anything is written."""
    from dagster_incremental import SparkTableIOManager
    from dagster_incremental.errors import IncrementalSettingsWarning

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "config").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "config" / "config.toml").write_text('[destination]\nnamespace = "shop"\n')
    monkeypatch.delenv("DAGSTER_INCREMENTAL_CONFIG", raising=False)
    monkeypatch.chdir(elsewhere)
    with pytest.warns(IncrementalSettingsWarning) as warned:
        SparkTableIOManager.from_config()
    text = str(warned[0].message)
    assert f"looked for at {elsewhere / 'config' / 'config.toml'}" in text and "does not exist" in text
    assert "Using the defaults" in text and str(elsewhere / "config" / "data" / "warehouse") in text

    monkeypatch.chdir(project)  # the advice: run from the folder that holds config/
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", IncrementalSettingsWarning)
        assert SparkTableIOManager.from_config().namespace == "shop"


def _orders_with_cursor(updated_at: Incremental):
    return []


def _orders():
    return []


# -- the cursor engine alone (no asset): the same advice, applied -----------------------------------


def test_unix_time_rows_under_an_iso_initial_value_suggest_epoch_seconds():
    from dagster_incremental import incremental
    from dagster_incremental.errors import CursorTypeError

    rows = [{"id": 1, "ts": 1_710_000_000}]
    with pytest.raises(CursorTypeError) as raised:
        incremental("ts", initial_value="2024-01-01T00:00:00Z").bind().filter(rows)
    text = str(raised.value)
    assert "1710000000" in text and "initial_value = '2024-01-01T00:00:00Z'" in text
    assert 'cursor_type = "epoch_seconds"' in text and raised.value.setting == "initial_value"
    kept = incremental("ts", initial_value="2024-01-01T00:00:00Z", cursor_type="epoch_seconds").bind().filter(rows)
    assert kept == rows  # March 2024: past the initial_value, kept


def test_a_cursor_column_no_row_has_is_named_with_did_you_mean_in_every_input_kind():
    import pyarrow as pa

    from dagster_incremental import incremental
    from dagster_incremental.errors import CursorPathMissing

    batch = [{"id": 1, "updated_at": "2024-03-01T10:00:00Z"}]
    for given in (batch, pa.Table.from_pylist(batch), pa.Table.from_pylist(batch).to_pandas()):
        with pytest.raises(CursorPathMissing) as raised:
            incremental("modified_at").bind().filter(given)
        assert "the batch has no column 'modified_at'" in str(raised.value)
        assert "Did you mean 'updated_at'?" in str(raised.value) and raised.value.setting == "cursor_path"
    assert incremental("updated_at").bind().filter(batch) == batch
