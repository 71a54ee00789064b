"""IncrementalAssetsComponent built in process, as `dg` builds it from defs.yaml: what it makes of
its attributes, and the errors a user's defs.yaml can cause (they name defs.yaml and the key).
tests/test_dg_project.py runs it through `dg` itself."""

from __future__ import annotations

import sys

import dagster as dg
import pytest
import yaml

from dagster_incremental import Incremental, IncrementalAssetsComponent
from dagster_incremental.errors import IncrementalConfigError

CONFIG = '''
[destination]
format = "delta"
warehouse = "{tmp}/warehouse"

[assets.orders]
primary_key = ["id"]
freshness = "PT2H"

[assets.orders.updated_at]
cursor_path = "updated_at"
initial_value = "2026-01-01T00:00:00Z"
'''
SOURCE = "tests_component_sources"


def orders(updated_at: Incremental):
    """Orders of a source."""
    return []


def orders_mark():
    """The newest updated_at of the orders."""
    return "2026-01-01T00:00:00Z"


def build(tmp_path, **attributes) -> dg.Definitions:
    (tmp_path / "config.toml").write_text(CONFIG.format(tmp=tmp_path))
    component = IncrementalAssetsComponent.resolve_from_yaml(yaml.safe_dump(attributes))
    context = dg.ComponentTree.for_test().load_context.for_path(tmp_path)
    return dg.component_defs(component=component, context=context)


@pytest.fixture(autouse=True)
def sources(monkeypatch):
    """This module importable as the sources' module."""
    monkeypatch.setitem(sys.modules, SOURCE, sys.modules[__name__])


def test_attributes_become_the_key_group_tags_kinds_condition_and_observed_source_of_the_asset(tmp_path):
    defs = build(tmp_path, assets=[{"function": f"{SOURCE}.orders", "observe": f"{SOURCE}.orders_mark",
                                    "tags": {"tier": "gold"}, "kinds": ["python"]}],
                 key_prefix=["shop"], group_name="ingest", io_manager={"master": "local[1]"})
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey(["shop", "orders"]))
    assert node.group_name == "ingest" and node.tags["tier"] == "gold"
    assert set(node.kinds) == {"spark", "delta", "python"}
    assert node.automation_condition is not None and "eager" in node.automation_condition.get_label().lower()
    assert dg.AssetKey(["shop", "orders_source"]) in node.parent_keys
    assert graph.get(dg.AssetKey(["shop", "orders_source"])).is_observable
    assert node.freshness_policy is not None
    assert {c.name for c in graph.get_check_keys_for_assets({node.key})} == {"primary_key_unique", "cursor_fresh"}
    assert defs.resources["io_manager"].master == "local[1]"


@pytest.mark.parametrize("attributes, expected", [
    ({"config_path": "missing.toml", "assets": [{"function": f"{SOURCE}.orders"}]},
     "config_path = 'missing.toml' names no file"),
    ({"io_manager": {"mastr": "local[1]"}, "assets": [{"function": f"{SOURCE}.orders"}]},
     "io_manager has unknown key(s) mastr; use "),
    ({"assets": [{"function": "orders"}]}, "function = 'orders' names no function; write it as module.function"),
    ({"assets": [{"function": "no_such_module.orders"}]}, "function = 'no_such_module.orders': no module 'no_such_module'"),
    ({"assets": [{"function": f"{SOURCE}.order"}]}, f"module '{SOURCE}' has no function 'order'; it has "),
])
def test_a_bad_defs_yaml_names_defs_yaml_and_the_key(tmp_path, attributes, expected):
    with pytest.raises(IncrementalConfigError) as caught:
        build(tmp_path, **attributes)
    assert "defs.yaml" in str(caught.value) and expected in str(caught.value)
