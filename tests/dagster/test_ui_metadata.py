"""What the Dagster UI shows a newcomer: the asset's description and the words beside the bare
figures of a materialization (issue #33, checked in the UI)."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from catalogs import HADOOP_ONLY
from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.dagster import metadata as md

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def description(asset: dg.AssetsDefinition) -> str:
    return asset.specs_by_key[asset.key].description


def test_the_description_names_the_merge_key_and_the_primary_key(tmp_path):
    """`merge/delete-insert on event_id` read as if event_id chose the rows a run replaces: the
    example's daily_events replaces by its merge_key event_date."""
    config_file = tmp_path / "config.toml"
    config_file.write_text('[destination]\nwarehouse = "warehouse"\n')

    @incremental_asset(primary_key="event_id", merge_key="event_date", config_path=config_file,
                       write_disposition={"disposition": "merge", "strategy": "delete-insert"})
    def events(event_time: Incremental = incremental("event_time")):
        yield []

    @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                       config_path=config_file)
    def orders(updated_at: Incremental = incremental("updated_at")):
        yield []

    @incremental_asset(config_path=config_file)
    def keyless(seq: Incremental = incremental("seq")):
        yield []

    assert description(events).endswith(
        "Incremental on `event_time` from the first row (no initial_value); merge/delete-insert "
        "(merge key event_date; primary key event_id) into lake.incremental.events."
    )
    assert "; merge/upsert (primary key id) into " in description(orders)
    assert "; append into " in description(keyless)
    assert " on event_id" not in description(events)


@pytest.mark.spark
@HADOOP_ONLY
def test_a_plain_asset_that_replaces_its_table_says_so(spark, instance, io_manager):
    """customer_revenue (a plain @dg.asset, replace) showed `+23 -23` on a run where nothing
    changed: the figures stay, and the materialization says in words that the table was replaced."""

    @dg.asset
    def revenue(context):
        return context.resources.io_manager.spark.createDataFrame([(1, 10.0), (2, 20.0), (3, 30.0)], "tier long, revenue double")

    def materialize() -> dict:
        result = dg.materialize([revenue], instance=instance, resources={"io_manager": io_manager}, run_config=QUIET)
        assert result.success
        return {k: v.value for k, v in result.asset_materializations_for_node("revenue")[0].metadata.items()}

    first, again = materialize(), materialize()
    assert (first["dagster_incremental/rows_inserted"], first["dagster_incremental/rows_deleted"]) == (3, 0)
    assert first["dagster_incremental/replaced"].startswith("replaced the whole table: 0 rows removed, 3 rows written")
    assert (again["dagster_incremental/rows_inserted"], again["dagster_incremental/rows_deleted"]) == (3, 3)
    assert again["dagster_incremental/replaced"] == (
        "replaced the whole table: 3 rows removed, 3 rows written (a replace rewrites every row, changed or "
        "not: rows_inserted and rows_deleted count the rows written and removed, not what changed)"
    )
    assert again["dagster/row_count"] == 3


@pytest.fixture
def where(tmp_path, spark_warehouse):
    """(config path, io manager) on a fresh namespace of the session's warehouse."""
    import uuid

    from attack_support import io_manager_for, write_config

    namespace = "ui_" + uuid.uuid4().hex[:8]
    return write_config(tmp_path / "config.toml", spark_warehouse, namespace), io_manager_for(spark_warehouse, namespace)


def materialized(asset, instance, io) -> dict:
    result = dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=QUIET)
    assert result.success
    return {k: v.value for k, v in result.asset_materializations_for_node(asset.key.path[-1])[0].metadata.items()}


@pytest.mark.spark
def test_the_cursor_last_value_is_its_own_entry_beside_the_state(spark, instance, where):
    """last_value was one line of the 25-line `dagster_incremental/state` JSON; it is also shown
    on its own, as text (the state stays as it was)."""
    config, io = where
    source = [{"id": 1, "updated_at": "2024-01-02T00:00:00Z"}, {"id": 2, "updated_at": "2024-01-03T10:00:00Z"}]

    @incremental_asset(config_path=config, primary_key="id")
    def orders(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")):
        return source

    meta = materialized(orders, instance, io)
    assert meta["dagster_incremental/last_value"] == "2024-01-03T10:00:00Z"
    assert meta["dagster_incremental/state"]["last_value"] == "2024-01-03T10:00:00Z"
    assert not [k for k in meta if k.startswith("dagster_incremental/last_value/")]


@pytest.mark.spark
def test_several_cursors_show_one_last_value_entry_each(spark, instance, where):
    config, io = where

    @incremental_asset(config_path=config, primary_key="id")
    def events(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z"),
               seq: Incremental = incremental("seq", initial_value=0)):
        return [{"id": 1, "updated_at": "2024-01-02T00:00:00Z", "seq": 7}, {"id": 2, "updated_at": "2024-01-01T12:00:00Z", "seq": 12}]

    meta = materialized(events, instance, io)
    assert meta["dagster_incremental/last_value/updated_at"] == "2024-01-02T00:00:00Z"
    assert meta["dagster_incremental/last_value/seq"] == "12"
    assert "dagster_incremental/last_value" not in meta
    assert meta["dagster_incremental/state"]["seq"]["last_value"] == 12


@pytest.mark.spark
def test_the_docstring_columns_show_once_in_the_column_schema_not_also_in_the_description(spark, instance, where):
    """The docstring's `Columns:` list was in the description AND in the column schema the asset
    page shows as its Columns table: the same text twice on one page."""
    config, io = where

    @incremental_asset(config_path=config, primary_key="id")
    def shop_orders(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")):
        """Orders of the shop.

        Columns:
            id: The order number.
            updated_at: When the order last changed,
                in UTC.

        Soft-deleted orders are removed.
        """
        return [{"id": 1, "updated_at": "2024-01-02T00:00:00Z"}]

    text = description(shop_orders)
    assert text.startswith("Orders of the shop.\n\nSoft-deleted orders are removed.\n\nIncremental on `updated_at`")
    definition = json.dumps({k: str(v) for k, v in shop_orders.specs_by_key[shop_orders.key].metadata.items()})
    schema = materialized(shop_orders, instance, io)["dagster/column_schema"]
    described = {c.name: c.description for c in schema.columns}
    assert described == {"id": "The order number.", "updated_at": "When the order last changed, in UTC."}
    for words in described.values():
        assert words not in text and words not in definition


def test_a_columns_list_the_column_schema_cannot_carry_stays_in_the_description(tmp_path):
    """A `description=` of its own whose Columns list the docstring lacks: the column schema
    has none of it, so the description keeps it."""
    config_file = tmp_path / "config.toml"
    config_file.write_text('[destination]\nwarehouse = "warehouse"\n')

    @incremental_asset(config_path=config_file, description="Orders.\n\nColumns:\n    id: The order number.\n")
    def orders(updated_at: Incremental = incremental("updated_at")):
        """No column list here."""
        yield []

    assert description(orders).startswith("Orders.\n\n**Columns**\n\n- `id`: The order number.\n\nIncremental on")
