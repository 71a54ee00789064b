"""A config.toml section that names no asset: a misspelt [assets.<name>] fails the code location
when Dagster loads it (file, line, section, "did you mean"); sections of assets defined in other
modules or other code locations do not. Code locations are real packages loaded by the dagster CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError, IncrementalSettingsWarning

ROOT = Path(__file__).resolve().parent.parent.parent

ORDERS_SECTIONS = """
[assets.orders.updated_at]
cursor_path = "updated_at"
initial_value = "2024-01-01T00:00:00Z"
"""
EVENTS_SECTIONS = """
[assets.api_events]
write_disposition = "append"
primary_key = ["event_id"]
"""
ORDERS_MODULE = """
import dagster as dg
from dagster_incremental import Incremental, incremental_asset
from {package}.paths import CONFIG

@incremental_asset(config_path=CONFIG)
def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
    return []
"""
EVENTS_MODULE = """
import dagster as dg
from dagster_incremental import Incremental, incremental, incremental_asset
from {package}.paths import CONFIG

@incremental_asset(config_path=CONFIG)
def api_events(context: dg.AssetExecutionContext, created_at: Incremental = incremental("created_at")):
    return []
"""
RESOURCES_MODULE = """
from dagster_incremental import SparkTableIOManager
from {package}.paths import CONFIG

io_manager = SparkTableIOManager.from_config(CONFIG)
"""


def code_location(tmp_path: Path, package: str, config: str, modules: dict[str, str], init: str) -> Path:
    """A package `package` under tmp_path: config/config.toml, its modules and __init__.py."""
    folder = tmp_path / package
    folder.mkdir()
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "config.toml").write_text(
        f'[destination]\nwarehouse = "{tmp_path / "warehouse"}"\n' + textwrap.dedent(config))
    (folder / "paths.py").write_text(f"CONFIG = {str(tmp_path / 'config' / 'config.toml')!r}\n")
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text.format(package=package))
    (folder / "__init__.py").write_text(textwrap.dedent(init).format(package=package))
    return tmp_path


def validate(folder: Path, module: str, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """`dagster definitions validate -m module`, as a user (or CI) runs it: exit code, output."""
    home = folder / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
           **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-m", module],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


# Resources first, assets in two modules imported after them: no decorator sees the whole set.
RESOURCES_FIRST = """
import dagster as dg
from {package}.resources import io_manager
from {package}.shop import orders
from {package}.web import api_events

defs = dg.Definitions(assets=[orders, api_events], resources={{"io_manager": io_manager}})
"""
ASSETS_FIRST = """
import dagster as dg
from {package}.web import api_events
from {package}.shop import orders
from {package}.resources import io_manager

defs = dg.Definitions(assets=[api_events, orders], resources={{"io_manager": io_manager}})
"""


@pytest.mark.parametrize("init", [RESOURCES_FIRST, ASSETS_FIRST], ids=["resources-first", "assets-first"])
def test_assets_in_several_modules_load_in_any_import_order(tmp_path, init):
    modules = {"shop": ORDERS_MODULE, "web": EVENTS_MODULE, "resources": RESOURCES_MODULE}
    folder = code_location(tmp_path, "twomodules", ORDERS_SECTIONS + EVENTS_SECTIONS, modules, init)
    code, output = validate(folder, "twomodules")
    assert code == 0, output[-5000:]
    assert "names no incremental asset" not in output


def test_a_misspelt_asset_section_fails_the_code_location_naming_file_line_and_the_asset(tmp_path):
    """[assets.order] for the asset orders: without the check, orders silently ran as append with
    no key, its settings ignored."""
    config = "[assets.order]\nprimary_key = [\"id\"]\n" + ORDERS_SECTIONS + EVENTS_SECTIONS
    modules = {"shop": ORDERS_MODULE, "web": EVENTS_MODULE, "resources": RESOURCES_MODULE}
    folder = code_location(tmp_path, "typo", config, modules, RESOURCES_FIRST)
    code, output = validate(folder, "typo")
    assert code != 0
    path = tmp_path / "config" / "config.toml"
    assert (f"IncrementalConfigError: {path}: [assets.order] names no incremental asset defined with this file; "
            "did you mean [assets.orders]? asset 'orders' sets no key of its own in this file") in output
    assert "(at line 3)" in output


def test_a_file_shared_with_another_code_location_loads_with_a_warning_for_its_sections(tmp_path, monkeypatch):
    """The shop location defines orders only; api_events is another location's asset."""
    init = """
    import dagster as dg
    from {package}.resources import io_manager
    from {package}.shop import orders

    defs = dg.Definitions(assets=[orders], resources={{"io_manager": io_manager}})
    """
    config = "[assets.orders]\nprimary_key = [\"id\"]\n" + ORDERS_SECTIONS + EVENTS_SECTIONS
    folder = code_location(tmp_path, "shoponly", config, {"shop": ORDERS_MODULE, "resources": RESOURCES_MODULE}, init)
    code, output = validate(folder, "shoponly")
    assert code == 0, output[-5000:]
    # the CLI loads the location in a code server whose warnings it does not print: build it here
    monkeypatch.syspath_prepend(str(folder))
    from shoponly import defs

    with pytest.warns(IncrementalSettingsWarning) as caught:
        defs.get_repository_def()
    assert [str(w.message) for w in caught] == [
        f"{folder / 'config' / 'config.toml'}: [assets.api_events] (at line 10) names no incremental asset defined "
        "with this file in this code location (orders); it is ignored here: rename it if it is meant for one of "
        "them (a section of another code location sharing this file needs nothing)"]


def test_the_example_with_a_misspelt_orders_section_fails_to_load(tmp_path):
    """The example code location itself, its [assets.orders] header mistyped."""
    (tmp_path / "config").mkdir()
    text = (ROOT / "config" / "config.toml").read_text()
    assert text.count("\n[assets.orders]\n") == 1
    config = tmp_path / "config" / "config.toml"
    config.write_text(text.replace("\n[assets.orders]\n", "\n[assets.order]\n"))
    code, output = validate(tmp_path, "definitions", {"DAGSTER_INCREMENTAL_CONFIG": str(config)})
    assert code != 0
    assert f"{config}: [assets.order] names no incremental asset defined with this file; did you mean " \
           "[assets.orders]?" in output


# -- without the CLI ----------------------------------------------------------------------------------


def test_a_misspelt_argument_table_is_named_as_written_with_the_argument_to_use(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[assets.orders]\nprimary_key = ["id"]\n\n'
                      '[assets.orders.updatedat]\ncursor_path = "updated_at"\n')
    with pytest.raises(IncrementalConfigError) as info:
        @incremental_asset(config_path=str(config))
        def orders(updated_at: Incremental):
            return []
    text = str(info.value)
    assert text.startswith(f"{config}: [assets.orders.updatedat] (at line 4): orders() has no parameter "
                           "'updatedat' annotated `Incremental`; did you mean [assets.orders.updated_at]?")
    assert "[assets.orders.updated_at]" not in text.split("did you mean", 1)[0]


def test_a_run_with_an_io_manager_built_without_the_config_fails_before_writing(instance, tmp_path, monkeypatch):
    """The last safety net: the IO manager never saw config.toml, the run does."""
    config = tmp_path / "config.toml"
    config.write_text(f'[destination]\nwarehouse = "{tmp_path / "wh"}"\n'
                      '[assets.sales]\nprimary_key = ["id"]\nwrite_disposition = "replace"\n')

    @incremental_asset(config_path=str(config))
    def sale(updated_at: Incremental = incremental("updated_at")):
        raise AssertionError("the function ran")

    monkeypatch.setattr("dagster_incremental.spark.session.build_spark_session",
                        lambda conf: (_ for _ in ()).throw(AssertionError("this run started Spark")))
    io = SparkTableIOManager(warehouse=str(tmp_path / "wh"))
    result = dg.materialize([sale], instance=instance, resources={"io_manager": io}, raise_on_error=False)
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    text = failure.message + "".join(c.message for c in ([failure.cause] if failure.cause else []))
    assert "[assets.sales] names no incremental asset defined with this file; did you mean [assets.sale]?" in text
    assert not (tmp_path / "wh").exists()


def test_a_project_without_config_toml_still_loads_and_runs(instance, tmp_path, monkeypatch):
    """The default config file may be missing (all defaults): there are no sections to check."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_INCREMENTAL_CONFIG", raising=False)

    @incremental_asset
    def plain(updated_at: Incremental = incremental("updated_at")):
        return []

    io = SparkTableIOManager.from_config()
    assert io.config_path == str(tmp_path / "config" / "config.toml")
    result = dg.materialize([plain], instance=instance, resources={"io_manager": io})
    assert result.success
