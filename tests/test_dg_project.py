"""The library in a project scaffolded by `create-dagster project`, driven by `dg` as Dagster 1.13
asks: an incremental asset loads (`dg check defs`), a config.toml error fails the check naming
file, section and key, and `dg launch` materializes the asset. Then the component: `dg scaffold
defs dagster_incremental.IncrementalAssetsComponent` and `dg launch`, with no Python of the user's
but the source function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSET = '''
import dagster as dg
from dagster_incremental import Incremental, incremental_asset


@incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"})
def events(context: dg.AssetExecutionContext, updated_at: Incremental):
    """Events of a source: each run reads only those changed since the cursor."""
    return [{"id": i, "kind": "click", "updated_at": f"2026-01-0{i}T00:00:00Z"} for i in (1, 2, 3)]
'''
# Resources live in their own module: Dagster takes a module holding a `@dg.definitions`
# function as that function's Definitions only, so an asset beside it would not be loaded.
RESOURCES = '''
import dagster as dg
from dagster_incremental import SparkTableIOManager


@dg.definitions
def resources():
    return dg.Definitions(resources={"io_manager": SparkTableIOManager.from_config()})
'''
CONFIG = '''
[destination]
warehouse = "{warehouse}"

[assets.events.updated_at]
cursor_path = "updated_at"
initial_value = "2026-01-01T00:00:00Z"
'''


def _env(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_INCREMENTAL")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(project / "src")]),  # this checkout, the project
        DAGSTER_HOME=str(project.parent / "dagster_home"),
        DAGSTER_DG_UPDATE_CHECK_ENABLED="0",  # no look-up of newer releases on PyPI
        DAGSTER_DISABLE_TELEMETRY="1",
        NO_COLOR="1",
    )
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.fixture
def project(tmp_path) -> Path:
    """`create-dagster project shop`, plus an incremental asset, its IO manager and config.toml."""
    (tmp_path / "dagster_home").mkdir()
    (tmp_path / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    made = _run([_bin("create-dagster"), "project", "--no-uv-sync", "shop"], tmp_path, _env(tmp_path / "shop"))
    assert made.returncode == 0, made.stdout + made.stderr
    project = tmp_path / "shop"
    defs = project / "src" / "shop" / "defs"
    (defs / "events.py").write_text(ASSET)
    (defs / "resources.py").write_text(RESOURCES)
    (project / "config").mkdir()
    (project / "config" / "config.toml").write_text(CONFIG.format(warehouse=tmp_path / "warehouse"))
    return project


def test_dg_check_defs_loads_an_incremental_asset_and_reports_a_config_error(project):
    env = _env(project)
    ok = _run([_bin("dg"), "check", "defs"], project, env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "All definitions loaded successfully." in ok.stdout + ok.stderr

    config = project / "config" / "config.toml"
    config.write_text(config.read_text().replace('"2026-01-01T00:00:00Z"', '"last tuesday"'))
    bad = _run([_bin("dg"), "check", "defs"], project, env)
    assert bad.returncode != 0
    assert '[assets.events.updated_at] initial_value = "last tuesday" is not an ISO-8601 date or datetime' in bad.stdout + bad.stderr
    assert "config.toml" in bad.stdout + bad.stderr


@pytest.mark.spark
def test_dg_launch_materializes_the_asset_of_a_scaffolded_project(project):
    result = _run([_bin("dg"), "launch", "--assets", "events"], project, _env(project))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "RUN_SUCCESS" in out
    assert "updated_at: incremental run of updated_at from 2026-01-01T00:00:00Z" in out


# -- the component: a project with defs.yaml, config.toml and a source function, no other Python --

COMPONENT = "dagster_incremental.IncrementalAssetsComponent"
SOURCE = '''
import json
import pathlib

import dagster as dg

from dagster_incremental import Incremental

ROWS = pathlib.Path(__file__).with_name("rows.json")


def events(context: dg.AssetExecutionContext, updated_at: Incremental):
    """Events of a JSON file that changes between runs."""
    return json.loads(ROWS.read_text())
'''
COMPONENT_CONFIG = '''
[destination]
warehouse = "{warehouse}"

[assets.events]
write_disposition = {{ disposition = "merge", strategy = "upsert" }}
primary_key = ["id"]
{partitions}
[assets.events.updated_at]
cursor_path = "updated_at"
initial_value = "2026-01-01T00:00:00Z"
'''
FIRST = [{"id": i, "kind": "click", "updated_at": f"2026-01-0{i}T00:00:00Z"} for i in (1, 2, 3)]
CHANGED = [*FIRST[:1], {"id": 2, "kind": "view", "updated_at": "2026-01-04T00:00:00Z"}, FIRST[2],
           {"id": 4, "kind": "click", "updated_at": "2026-01-05T00:00:00Z"}]


def _scaffolded(tmp_path: Path, partitions: str = "") -> Path:
    """`create-dagster project shop` and `dg scaffold defs` of the component, its source function
    and config.toml then made this test's (a JSON file as the source, a temporary warehouse)."""
    (tmp_path / "dagster_home").mkdir()
    (tmp_path / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = _env(tmp_path / "shop")
    made = _run([_bin("create-dagster"), "project", "--no-uv-sync", "shop"], tmp_path, env)
    assert made.returncode == 0, made.stdout + made.stderr
    project = tmp_path / "shop"
    scaffold = _run([_bin("dg"), "scaffold", "defs", COMPONENT, "ingest"], project, env)
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    folder = project / "src" / "shop" / "defs" / "ingest"
    (folder / "sources.py").write_text(SOURCE)
    (folder / "config.toml").write_text(COMPONENT_CONFIG.format(warehouse=tmp_path / "warehouse", partitions=partitions))
    (folder / "rows.json").write_text(json.dumps(FIRST))
    return project


def _materializations(tmp_path: Path) -> list[dict]:
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        records = instance.fetch_materializations(dg.AssetKey("events"), limit=20, ascending=True).records
        return [{"partition": r.partition_key, **{k: v.value for k, v in r.asset_materialization.metadata.items()}}
                for r in records]


def _table_rows(tmp_path: Path) -> list[tuple]:
    from pyiceberg.table import StaticTable

    arrow = StaticTable.from_metadata(str(tmp_path / "warehouse" / "incremental" / "events")).scan().to_arrow()
    return sorted(zip(arrow["id"].to_pylist(), arrow["kind"].to_pylist()))


def test_scaffold_writes_a_component_folder_that_dg_loads(tmp_path):
    (tmp_path / "dagster_home").mkdir()
    project_env = _env(tmp_path / "shop")
    assert _run([_bin("create-dagster"), "project", "--no-uv-sync", "shop"], tmp_path, project_env).returncode == 0
    project = tmp_path / "shop"
    listed = _run([_bin("dg"), "list", "components"], project, project_env)
    assert COMPONENT in listed.stdout, listed.stdout + listed.stderr
    assert _run([_bin("dg"), "scaffold", "defs", COMPONENT, "ingest"], project, project_env).returncode == 0
    folder = project / "src" / "shop" / "defs" / "ingest"
    assert f"type: {COMPONENT}" in (folder / "defs.yaml").read_text()
    assert "function: sources.events" in (folder / "defs.yaml").read_text()
    config = (folder / "config.toml").read_text()
    assert "[assets.events.updated_at]" in config and "# freshness" in config
    assert "def events(" in (folder / "sources.py").read_text()
    # as scaffolded, with no other file of the user's: the asset, its check and the IO manager load
    listed = _run([_bin("dg"), "list", "defs", "--json"], project, project_env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    defs = json.loads(listed.stdout[listed.stdout.index("{"):])
    assets = {a["asset_key"]: a for a in defs["assets"]}
    assert set(assets) == {"events"} and set(assets["events"]["kinds"]) == {"spark", "iceberg"}
    assert [c["key"] for c in defs["asset_checks"]] == ["events:primary_key_unique"]


@pytest.mark.spark
def test_a_component_project_runs_an_upsert_twice_through_dg_launch(tmp_path):
    project = _scaffolded(tmp_path)
    env = _env(project)
    checked = _run([_bin("dg"), "check", "defs"], project, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    first = _run([_bin("dg"), "launch", "--assets", "events"], project, env)
    assert first.returncode == 0 and "RUN_SUCCESS" in first.stdout + first.stderr, (first.stdout + first.stderr)[-4000:]
    (project / "src" / "shop" / "defs" / "ingest" / "rows.json").write_text(json.dumps(CHANGED))
    second = _run([_bin("dg"), "launch", "--assets", "events"], project, env)
    out = second.stdout + second.stderr
    assert second.returncode == 0 and "RUN_SUCCESS" in out, out[-4000:]
    assert "updated_at: incremental run of updated_at from 2026-01-03T00:00:00Z" in out

    assert _table_rows(tmp_path) == [(1, "click"), (2, "view"), (3, "click"), (4, "click")]
    runs = _materializations(tmp_path)
    assert [r["dagster_incremental/mode"] for r in runs] == ["incremental", "incremental"]
    assert [r["dagster_incremental/state"]["last_value"] for r in runs] == ["2026-01-03T00:00:00Z", "2026-01-05T00:00:00Z"]
    # the second run loaded the change only: one row updated, one inserted, the rest untouched
    assert [(r["dagster_incremental/rows_inserted"], r["dagster_incremental/rows_updated"]) for r in runs] == [(3, 0), (1, 1)]
    assert runs[1]["dagster/row_count"] == 4
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey("events"), "primary_key_unique"), limit=10)
        assert [r.status.value for r in history] == ["SUCCEEDED", "SUCCEEDED"]  # one per run, as the decorator's


@pytest.mark.spark
def test_a_partitioned_component_asset_launches_a_range_with_checks_per_partition(tmp_path):
    project = _scaffolded(tmp_path, 'partitions = { schedule = "daily", start = 2026-01-01 }\n')
    env = _env(project)
    ranged = _run([_bin("dg"), "launch", "--assets", "events", "--partition-range", "2026-01-01...2026-01-03"], project, env)
    assert ranged.returncode == 0 and "RUN_SUCCESS" in ranged.stdout + ranged.stderr, (ranged.stdout + ranged.stderr)[-4000:]
    assert _table_rows(tmp_path) == [(1, "click"), (2, "click"), (3, "click")]
    runs = _materializations(tmp_path)
    assert sorted(r["partition"] for r in runs) == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert {r["dagster_incremental/mode"] for r in runs} == {"backfill"}
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey("events"), "primary_key_unique"), limit=10)
        assert sorted((r.partition, r.status.value) for r in history) == [
            ("2026-01-01", "SUCCEEDED"), ("2026-01-02", "SUCCEEDED"), ("2026-01-03", "SUCCEEDED")]
