"""The source's high-water mark as an observable source asset: an incremental asset downstream
of it with `AutomationCondition.eager()` is requested when the mark moves, and only then."""

from __future__ import annotations

import uuid

import dagster as dg
from dagster._core.definitions.observe import observe  # Dagster 1.13 exports no public observe()

from attack_support import io_manager_for, materialize, write_config
from dagster_incremental import Incremental, incremental, incremental_asset, source_observation


def test_eager_asset_runs_when_the_observed_mark_moves(tmp_path, spark_warehouse):
    namespace = "observed_" + uuid.uuid4().hex[:8]
    config = write_config(tmp_path / "config.toml", spark_warehouse, namespace)
    io = io_manager_for(spark_warehouse, namespace)
    source = {"rows": [{"id": 1, "updated_at": "2026-01-01T00:00:00Z"}]}
    mark = lambda: max(r["updated_at"] for r in source["rows"])  # noqa: E731 - the probe
    watched = source_observation(mark, ["orders_source"])

    @incremental_asset(primary_key="id", write_disposition="merge", config_path=config, deps=[watched.key],
                       automation_condition=dg.AutomationCondition.eager())
    def orders(updated_at: Incremental = incremental("updated_at", initial_value="2026-01-01T00:00:00Z")):
        return list(source["rows"])

    defs = dg.Definitions(assets=[watched, orders], resources={"io_manager": io})
    with dg.instance_for_test() as instance:
        def requested(cursor=None):
            result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
            return result.get_num_requested(orders.key), result.cursor

        count, cursor = requested()  # the first tick: nothing observed yet
        assert count == 0
        observe([watched], instance=instance)
        count, cursor = requested(cursor)
        assert count == 1  # a first mark
        assert materialize(orders, instance, io).success
        count, cursor = requested(cursor)
        assert count == 0
        observe([watched], instance=instance)  # the same mark: the source did not move
        count, cursor = requested(cursor)
        assert count == 0
        source["rows"].append({"id": 2, "updated_at": "2026-01-02T00:00:00Z"})
        observe([watched], instance=instance)
        count, cursor = requested(cursor)
        assert count == 1
