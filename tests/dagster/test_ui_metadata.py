"""What the Dagster UI shows a newcomer: the asset's description and the words beside the bare
figures of a materialization (issue #33, checked in the UI)."""

from __future__ import annotations

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
