"""The library in a project scaffolded by `create-dagster project`, driven by `dg` as Dagster 1.13
asks: an incremental asset loads (`dg check defs`), a config.toml error fails the check naming
file, section and key, and `dg launch` materializes the asset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
