"""A `Changes` parameter at definition time: the dependency it adds, automation, what it refuses."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_incremental import Changes, Incremental, changes_of, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[destination]\ncatalog = "lake"\nnamespace = "ns"\nwarehouse = "warehouse"\n')
    return str(path)


def test_the_upstream_is_a_dependency_under_its_own_or_the_given_key(config_file):
    @incremental_asset(config_path=config_file)
    def enriched(orders: Changes, shop: Changes = changes_of("raw/shop")):
        return orders.upserts()

    assert set(enriched.asset_deps[enriched.key]) == {dg.AssetKey("orders"), dg.AssetKey(["raw", "shop"])}


def test_eager_automation_requests_the_downstream_once_the_upstream_materializes(config_file):
    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return []

    @incremental_asset(config_path=config_file, automation_condition=dg.AutomationCondition.eager())
    def orders_enriched(orders: Changes):
        return orders.upserts()

    defs = dg.Definitions(assets=[orders, orders_enriched])
    instance = dg.DagsterInstance.ephemeral()
    before = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert before.get_num_requested(orders_enriched.key) == 0  # its upstream was never materialized
    instance.report_runless_asset_event(dg.AssetMaterialization(orders.key))
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=before.cursor)
    assert after.get_num_requested(orders_enriched.key) == 1


def test_a_changes_parameter_needs_time_windows_and_a_window_column(config_file):
    with pytest.raises(IncrementalConfigError, match=r"'orders_by_shop'.*Changes parameters \(orders\).*time-window"):
        @incremental_asset(partitions_def=dg.StaticPartitionsDefinition(["a", "b"]), partition_column="shop",
                           config_path=config_file)
        def orders_by_shop(orders: Changes):
            return orders.upserts()
    with pytest.raises(IncrementalConfigError, match=r"'orders_daily'.*Changes \(orders\) needs window_column"):
        @incremental_asset(partitions_def=dg.DailyPartitionsDefinition("2024-01-01"), config_path=config_file)
        def orders_daily(orders: Changes):
            return orders.upserts()


def test_a_changes_parameter_refuses_step_naming_the_argument(config_file):
    with pytest.raises(IncrementalConfigError, match=r"step on argument 'seq'.*Changes \(orders\)"):
        @incremental_asset(config_path=config_file)
        def sliced(orders: Changes, seq: Incremental = incremental("seq", initial_value=0, end_value=10, step=5)):
            return orders.upserts()


def test_secrets_toml_may_not_feed_a_changes_parameter(config_file):
    from dagster_incremental.dagster.asset_settings import reserved_params

    def f(context, orders: Changes, token: str | None = None):
        return None

    assert "orders" in reserved_params(f) and "token" not in reserved_params(f)
