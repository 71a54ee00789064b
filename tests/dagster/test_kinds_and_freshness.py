"""What the UI shows of an incremental asset's destination (its kinds) and its Dagster freshness
policy, both read from config.toml when the code location loads (no Spark, no run)."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest

from dagster_incremental import Incremental, incremental, incremental_asset

REST_S3 = '''
[spark.conf]
"spark.sql.catalog.lake.type" = "rest"
"spark.sql.catalog.lake.uri" = "http://catalog.example.com:8181"
"spark.sql.catalog.lake.io-impl" = "org.apache.iceberg.aws.s3.S3FileIO"
[destination]
warehouse = "s3://lake"
'''
JDBC = '''
[spark.conf]
"spark.sql.catalog.lake.type" = "jdbc"
"spark.sql.catalog.lake.uri" = "jdbc:postgresql://127.0.0.1:5432/catalog"
[destination]
warehouse = "{tmp}/warehouse"
'''


def orders(updated_at: Incremental = incremental("updated_at", initial_value="2026-01-01T00:00:00Z")):
    return []


def declared(tmp_path, config: str, **kwargs) -> dg.AssetsDefinition:
    path = tmp_path / "config.toml"
    path.write_text(config.format(tmp=tmp_path))
    return incremental_asset(config_path=str(path), **kwargs)(orders)


@pytest.mark.parametrize("config, kinds", [
    ('[destination]\nwarehouse = "{tmp}/w"\n', {"spark", "iceberg"}),
    ('[destination]\nformat = "delta"\nwarehouse = "{tmp}/w"\n', {"spark", "delta"}),
    ('[destination]\nformat = "delta"\nwarehouse = "s3a://bucket/lake"\n', {"spark", "delta", "s3"}),
    (REST_S3, {"spark", "iceberg", "rest", "s3"}),
    (JDBC, {"spark", "iceberg", "postgres"}),
])
def test_kinds_follow_the_format_and_the_catalog(tmp_path, config, kinds):
    asset = declared(tmp_path, config)
    assert set(asset.specs_by_key[dg.AssetKey("orders")].kinds) == kinds


def test_kinds_given_by_the_user_are_added_to_the_destinations(tmp_path):
    asset = declared(tmp_path, '[destination]\nformat = "delta"\nwarehouse = "{tmp}/w"\n', kinds={"python"})
    assert set(asset.specs_by_key[dg.AssetKey("orders")].kinds) == {"spark", "delta", "python"}


def test_freshness_in_config_toml_becomes_a_dagster_freshness_policy(tmp_path):
    asset = declared(tmp_path, '[destination]\nwarehouse = "{tmp}/w"\n[assets.orders]\nfreshness = "PT2H"\n')
    policy = asset.specs_by_key[dg.AssetKey("orders")].freshness_policy
    assert isinstance(policy, dg.FreshnessPolicy) and policy.fail_window.to_timedelta() == timedelta(hours=2)
    assert {spec.name for spec in asset.check_specs} == {"cursor_fresh"}


def test_a_freshness_under_a_minute_keeps_its_check_without_a_policy(tmp_path):
    asset = declared(tmp_path, '[destination]\nwarehouse = "{tmp}/w"\n[assets.orders]\nfreshness = 30\n')
    assert asset.specs_by_key[dg.AssetKey("orders")].freshness_policy is None
    assert {spec.name for spec in asset.check_specs} == {"cursor_fresh"}
